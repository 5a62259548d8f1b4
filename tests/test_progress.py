"""What users see while commands run: progress lines off a terminal, provenance in every results file."""

from __future__ import annotations

import io
import json
import os

from jaxcse.core import files, progress
from jaxcse import train
from tests import helpers


def test_progress_prints_plain_lines_off_a_terminal(monkeypatch):
  out = io.StringIO()
  now = [0.0]
  monkeypatch.setattr(progress.time, "time", lambda: now[0])
  bar = progress.Progress(10, unit="step", desc="train", interval=30.0, stream=out)  # pytest's stderr: no tty.
  assert bar.bar is None
  bar.set(loss="6.5000")
  now[0] = 10.0
  bar.update(2)  # Before the interval: silent.
  now[0] = 40.0
  bar.update(2)  # A line.
  now[0] = 41.0
  bar.update(1)  # Silent again.
  bar.close()  # The last line.
  lines = out.getvalue().strip().splitlines()
  # The rate from the first update on (2 steps in the 30 s after it): 1/15 step/s, 6 steps left.
  assert lines[0] == "train: 4/10 step (40.0%), 0.0667 step/s, elapsed 0m40s, ETA 1m30s, loss 6.5000"
  assert lines[1].startswith("train: 5/10 step (50.0%)") and len(lines) == 2


def test_the_eta_leaves_out_the_first_units_compile_time(monkeypatch):
  """evaluate's first line said ETA 2h51m for a job that ended 10 s later: the first batch's time is compiling."""
  out = io.StringIO()
  now = [0.0]
  monkeypatch.setattr(progress.time, "time", lambda: now[0])
  bar = progress.Progress(10_000, unit="sent", desc="embedding", interval=30.0, stream=out)
  now[0] = 35.0
  bar.update(128)  # The first batch, after 35 s of compiling: no rate yet to tell.
  assert bar.line() == "embedding: 128/10000 sent (1.3%), elapsed 0m35s"
  for _ in range(10):
    now[0] += 0.1
    bar.update(128)
  # 1280 sentences in the 1 s after the first batch: 1280 sent/s, 8592 left: 6.7 s.
  assert bar.line() == "embedding: 1408/10000 sent (14.1%), 1.28e+03 sent/s, elapsed 0m36s, ETA 0m06s"


def test_training_records_provenance_learning_rate_and_tensorboard(tiny_model_dir, small_data_dir, fresh_workdir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **{"log.tensorboard": True, "train.max_steps": 4})
  train.train_and_evaluate(config, fresh_workdir)
  summary = json.load(open(os.path.join(fresh_workdir, "summary.json")))
  record = summary["provenance"]
  assert record["config"]["train"]["max_steps"] == 4 and record["libraries"]["jax"] and record["devices"]["count"]
  assert record["data_sha256"] == {
    os.path.join(small_data_dir, "corpora", "small.txt"): files.file_sha256(
      os.path.join(small_data_dir, "corpora", "small.txt")
    )
  }
  lrs = [r["learning_rate"] for r in helpers.metrics_records(fresh_workdir) if "loss" in r]
  assert lrs == sorted(lrs, reverse=True) and lrs[0] <= config.train.learning_rate  # Linear decay.
  events = os.listdir(os.path.join(fresh_workdir, "tensorboard"))
  assert events and events[0].startswith("events.out.tfevents")
