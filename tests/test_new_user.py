"""What a new user meets in a run's output and its records (issue 69 item 5): the end-of-run lines compare one
metric, a run whose trained model never beat the starting model says so, the progress line's loss is of the step
it names, jaxcse's own lines carry no absl prefix, CoSENT's batches are plain, the export states the length the
model was trained at and the width it serves, and ``train_and_evaluate`` gives a notebook what it needs."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import datasets
import ml_collections
import pytest

from jaxcse import data as data_lib, export_hf, train
from jaxcse.core import progress as progress_lib
from jaxcse.training import cli, inputs, objectives
from tests import helpers


def _summary_config(metric: str = "stsb_dev") -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({"data": {"data_dir": ""}, "eval": {"metric": metric, "every": 3, "at_end": True}})


def test_the_before_line_is_the_selected_metrics(capsys):
  """A CoSENT run selected on its own dev set printed STS-B dev's value before training beside its own set's best."""
  first = {"step": 0, "stsb_dev": 0.8, "pairs_spearman": 0.3}
  summary = {"first_eval": first, "best_metric": 0.5, "best_step": 6, "steps": 6}
  cli.print_train_summary(_summary_config("pairs_spearman"), "w", summary)
  lines = capsys.readouterr().out.splitlines()
  assert lines[:2] == ["pairs_spearman x100 before training: 30.00", "best pairs_spearman x100: 50.00 at step 6"]
  # STS-B dev's selection keeps the line the README shows.
  cli.print_train_summary(_summary_config(), "w", {**summary, "best_metric": 0.9})
  assert capsys.readouterr().out.splitlines()[:2] == [
    "STS-B dev Spearman before training: 80.00",
    "best stsb_dev x100: 90.00 at step 6",
  ]


def test_the_last_lines_say_when_no_trained_step_beat_step_0(capsys):
  first = {"step": 0, "stsb_dev": 0.5317}
  cli.print_train_summary(
    _summary_config(), "w", {"first_eval": first, "best_metric": 0.5317, "best_step": 0, "steps": 4}
  )
  lines = capsys.readouterr().out.splitlines()
  assert lines[1] == "best stsb_dev x100: 53.17 at step 0"
  assert lines[2] == (
    "note: no trained step beat step 0 on stsb_dev: the best checkpoint, which evaluate, encode and export serve, "
    "is the starting model, untrained (--checkpoint latest serves the last step's)"
  )
  assert lines[-1].startswith("evaluate it on STS12-16")
  cli.print_train_summary(_summary_config(), "w", {"first_eval": first, "best_metric": 0.6, "best_step": 4, "steps": 4})
  assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]


@pytest.fixture(scope="module")
def untrained_run(tiny_model_dir, small_data_dir, tmp_path_factory):
  """A tiny run at learning rate 0 (nothing trained beats step 0), with a per-evaluation callback."""
  workdir = str(tmp_path_factory.mktemp("untrained") / "w")
  config = helpers.tiny_config(
    tiny_model_dir, small_data_dir, **{"eval.at_start": True, "train.learning_rate": 0.0, "train.max_steps": 3}
  )
  seen = []
  summary = train.train_and_evaluate(config, workdir, on_evaluation=seen.append)
  return config, workdir, summary, seen


def test_a_run_that_never_beat_step_0_says_so_in_its_summary(untrained_run):
  _, workdir, summary, _ = untrained_run
  assert summary["best_step"] == 0 and summary["best_is_untrained"] is True
  with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
    assert json.load(f)["best_is_untrained"] is True


def test_train_and_evaluate_returns_the_best_steps_metrics_and_calls_back_each_evaluation(untrained_run):
  config, workdir, summary, seen = untrained_run
  evaluations = [r for r in helpers.metrics_records(workdir) if "eval/metric" in r]
  assert [r["step"] for r in seen] == [r["step"] for r in evaluations] == [0, 3]
  assert seen == evaluations  # The records metrics.jsonl holds, as each evaluation was made.
  assert summary["workdir"] == workdir
  best = evaluations[0]
  assert summary["best_eval"]["step"] == 0 and summary["best_eval"]["stsb_dev"] == best["eval/stsb_dev"]
  assert summary["first_metric"] == best["eval/metric"] == summary["best_metric"]
  # A finished run called again trains nothing: the best evaluation's scores come from metrics.jsonl.
  assert train.train_and_evaluate(config, workdir)["best_eval"] == summary["best_eval"]


def test_the_progress_line_shows_the_step_it_names(tiny_model_dir, small_data_dir, tmp_path, monkeypatch):
  """A progress line showed the loss and learning rate of the line before: they were set after the count moved."""
  out = io.StringIO()
  monkeypatch.setattr(
    train, "Progress", lambda *a, **k: progress_lib.Progress(*a, **{**k, "interval": 0.0, "stream": out})
  )
  # Logged at steps 3 (an evaluation), 4 and 6; step 5's line shows step 4's values, and says so.
  overrides = {"train.log_every": 4, "train.max_steps": 6, "eval.every": 3, "checkpoint.every": 3}
  workdir = str(tmp_path / "w")
  train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **overrides), workdir)
  logged = {r["step"]: r for r in helpers.metrics_records(workdir) if "loss" in r}
  assert sorted(logged) == [3, 4, 6]
  shown = re.findall(r"^train: (\d+)/6 step .*, loss (\S+), lr (\S+?)(?: \(at step (\d+)\))?$", out.getvalue(), re.M)
  assert [(int(done), int(at) if at else None) for done, _, _, at in shown] == [
    (3, None),
    (4, None),
    (5, 4),
    (6, None),
    (6, None),  # The closing line.
  ], out.getvalue()
  for done, loss, lr, at in shown:
    record = logged[int(at or done)]
    assert (loss, lr) == (f"{record['loss']:.4g}", f"{record['learning_rate']:.3g}"), (done, out.getvalue())


def test_progress_names_the_step_its_values_are_of():
  out = io.StringIO()
  bar = progress_lib.Progress(10, unit="step", desc="train", interval=1e9, stream=out)
  bar.update(4)
  bar.set(loss="1.5", at=4)
  assert bar.line().endswith(", loss 1.5")
  bar.update(2)
  assert bar.line().endswith(", loss 1.5 (at step 4)")


def test_jaxcse_lines_have_no_absl_prefix_and_the_shipped_data_is_no_warning(tmp_path):
  """The quickstart without a data root: no "no data root is given" warning (nothing is missing), and jaxcse's own
  lines (the note, the evaluations) are plain, not ``I1202 07:59:09.925102 140155967052672 validation.py:157]``."""
  environment = {k: v for k, v in os.environ.items() if k != "JAXCSE_DATA_DIR"}
  run = subprocess.run(
    [
      sys.executable,
      "-m",
      "jaxcse.train",
      "--config",
      "quickstart",
      "--workdir",
      str(tmp_path / "w"),
      "--config.train.max_steps=1",
      "--config.eval.at_start=False",
      "--config.eval.every=1",
      "--config.checkpoint.every=1",
      "--config.eval.batch_size=256",
    ],
    cwd=str(tmp_path),
    capture_output=True,
    text=True,
    timeout=600,
    env={**environment, "PYTHONPATH": helpers.REPO},
  )
  assert run.returncode == 0, run.stderr[-3000:]
  said = run.stdout + run.stderr
  assert "no data root is given" not in said
  assert not re.search(r"^[IWE]\d{4} ", said, re.M), said
  assert "reading the data shipped with jaxcse" in run.stdout
  assert re.search(r"^step 1: \{'stsb_dev': ", run.stdout, re.M), run.stdout
  assert not run.stderr.strip(), run.stderr


def test_every_commands_warnings_are_plain_lines_once_absl_has_logged():
  """encode, evaluate, export, mine (every command through ``errors.cli``): jaxcse's warnings are plain lines on
  stderr, as the trainer's, and its INFO notes stay out of stdout (a command's result may be there). Before, the
  first absl record (orbax logs one as it is imported) made absl call ``logging.basicConfig()``, and a reader's
  warning that it set a checkpoint aside printed as ``WARNING:jaxcse:checkpoint ...``."""
  script = (
    "import logging, sys\n"
    "from absl import logging as absl_logging\n"
    "from jaxcse.core import errors\n"
    "@errors.cli\n"
    "def main():\n"
    "  absl_logging.vlog(1, 'as orbax logs on import')\n"
    "  logging.getLogger('jaxcse.encode').warning('checkpoint best/15: from another run; trying an older one')\n"
    "  logging.getLogger('jaxcse.encode').info('a note')\n"
    "  return 0\n"
    "sys.exit(main())\n"
  )
  run = subprocess.run(
    [sys.executable, "-c", script],
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "PYTHONPATH": helpers.REPO},
  )
  assert run.returncode == 0, run.stderr
  assert run.stderr == "checkpoint best/15: from another run; trying an older one\n", run.stderr
  assert run.stdout == ""


def test_a_command_run_in_process_leaves_the_callers_logging_as_it_found_it(capsys):
  """A notebook or a test that calls a command's ``main`` gets its warning lines while it runs, and its own logging
  back afterwards (no jaxcse handler left behind to print the next Python call's warnings)."""
  import logging

  from jaxcse.core import errors

  log = logging.getLogger("jaxcse")
  before = list(log.handlers)

  @errors.cli
  def main():
    logging.getLogger("jaxcse.encode").warning("a warning while the command runs")
    return 0

  assert main() == 0
  assert "a warning while the command runs" in capsys.readouterr().err
  assert log.handlers == before


def test_cosent_batches_are_not_made_duplicate_free(tiny_model_dir, small_data_dir):
  """--config pairs leaves data.no_duplicates on; CoSENT has no in-batch negatives, so nothing is deferred."""
  rows = {
    "sentence1": [f"shared text {i % 12}" for i in range(48)],  # Each text 4 times.
    "sentence2": [f"other text {i}" for i in range(48)],
    "score": [float(i % 5) / 4 for i in range(48)],
  }
  corpus = data_lib.load_corpus(datasets.Dataset.from_dict(rows))
  spec_config = helpers.tiny_config(tiny_model_dir, small_data_dir, "pairs", method="cosent")
  assert spec_config.data.no_duplicates and not objectives.get("cosent").in_batch_negatives
  from jaxcse.training import configured

  spec = configured.model(spec_config, abstract=True).spec
  batches, _ = inputs.make_batches(spec_config, spec, corpus)
  assert batches.epoch_report(0).deferred == 0 and not batches.no_duplicates
  mnrl = helpers.tiny_config(tiny_model_dir, small_data_dir, "pairs")
  pairs = data_lib.load_corpus(datasets.Dataset.from_dict({k: v for k, v in rows.items() if k != "score"}))
  mnrl_batches = inputs.make_batches(mnrl, spec, pairs)[0]  # In-batch negatives: the repeats wait.
  assert mnrl_batches.no_duplicates and mnrl_batches.epoch_report(0).deferred > 0


def _export_of(workdir: str, out: str, **kwargs) -> dict:
  assert export_hf.main([workdir, out, *[f"--{k}={v}" for k, v in kwargs.items()]]) == 0
  return {
    "card": open(os.path.join(out, "README.md"), encoding="utf-8").read(),
    "st": json.load(open(os.path.join(out, "sentence_bert_config.json"))),
    "record": json.load(open(os.path.join(out, "jaxcse_export.json"))),
  }


def test_the_export_states_the_trained_length_and_the_served_width(untrained_run, tmp_path):
  """A model trained at 32 tokens exported "Maximum sequence length: 128"; a 64-dim export said 384 dims, and
  jaxcse_export.json did not record truncate_dim. Here: trained at 16 on a 128-position model, served at 8 dims;
  and its best checkpoint is step 0, which the card says is the untrained model."""
  _, workdir, _, _ = untrained_run
  full = _export_of(workdir, str(tmp_path / "full"))
  assert "- Output dimensionality: 32\n" in full["card"]
  assert "- Maximum sequence length: 128 tokens (trained at 16: longer inputs are embedded up to 128" in full["card"]
  assert "Step 0 is the model before training" in full["card"]
  assert full["record"]["trained_max_seq_len"] == 16 and full["record"]["truncate_dim"] is None
  small = _export_of(workdir, str(tmp_path / "small"), truncate_dim=8)
  assert "- Output dimensionality: 8 (the first 8 of the backbone's 32 dims: truncate_dim)" in small["card"]
  assert small["record"]["truncate_dim"] == 8


@pytest.mark.parametrize("extra", ["torch", "minilm"])
def test_the_extras_with_sentence_transformers_can_run_its_trainer(extra):
  """sentence-transformers' SentenceTransformerTrainer needs its own "train" extra (accelerate, datasets), which
  the benchmarks and parity studies run: every one of those requirements is in ours, at no lower a floor."""
  import importlib.metadata

  tomllib = pytest.importorskip("tomllib")  # Python 3.11 on.

  from packaging.requirements import Requirement
  from packaging.version import Version

  with open(os.path.join(helpers.REPO, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)["project"]
  ours = {
    r.name.lower(): r for r in map(Requirement, project["optional-dependencies"][extra] + project["dependencies"])
  }
  theirs = [
    r
    for r in map(Requirement, importlib.metadata.requires("sentence-transformers"))
    if r.marker is not None and r.marker.evaluate({"extra": "train"})
  ]
  assert theirs
  for needed in theirs:
    assert needed.name.lower() in ours, f"the {extra} extra lacks {needed}"
    floors = [Version(s.version) for s in needed.specifier if s.operator == ">="]
    own = [Version(s.version) for s in ours[needed.name.lower()].specifier if s.operator == ">="]
    assert all(own and max(own) >= floor for floor in floors), (extra, str(ours[needed.name.lower()]), str(needed))


def test_the_readmes_install_and_test_commands_are_what_ci_runs():
  """The README's two set-up commands for working on jaxcse are the ones .ci/run runs (it adds only quieter output,
  timings and a compiler flag), so the page cannot drift from what CI checks."""
  from tests import test_docs_examples

  [block] = [b for b in test_docs_examples.parse("README.md") if b.no_ci and ".ci/run" in b.no_ci]
  commands = [line.split("#")[0].split() for line in block.code.splitlines() if line.strip()]
  assert [c[:3] for c in commands] == [["pip", "install", "-e"], ["python", "-m", "pytest"]], commands
  with open(os.path.join(helpers.REPO, ".ci", "run"), encoding="utf-8") as f:
    ci = [line.split() for line in f if line.strip() and not line.lstrip().startswith("#")]
  extra = {"-q", "--durations=30"}
  for command in commands:
    runs = [
      line
      for line in ci
      if command[0] in line
      and [w for w in line[line.index(command[0]) :] if w not in extra and not w.startswith("XLA_FLAGS=")] == command
    ]
    assert runs, f"the README's {' '.join(command)!r} is not what .ci/run runs"
