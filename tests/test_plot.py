"""``python -m jaxcse.plot``: PNGs from a tiny real run and from synthetic metrics with every key; clear errors."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from jaxcse import plot
from tests import helpers


def assert_png(path: str, min_size: tuple[int, int] = (300, 200)) -> np.ndarray:
  """``path`` is a decodable PNG of at least ``min_size`` pixels that is not one flat colour; returns its pixels."""
  assert os.path.getsize(path) > 0, path
  with Image.open(path) as image:
    assert image.format == "PNG", path
    image.verify()
  with Image.open(path) as image:
    pixels = np.asarray(image.convert("L"), dtype=np.float32)
  assert pixels.shape[1] >= min_size[0] and pixels.shape[0] >= min_size[1], (path, pixels.shape)
  assert pixels.std() > 5, f"{path} is blank"
  return pixels


def write_results(path: str, model: str, avg: float, alignment: float, uniformity: float) -> None:
  helpers.write_text(
    path,
    json.dumps(
      {
        "model": model,
        "pooler": "cls",
        "tasks": {},
        "summary": {"Avg": avg, "alignment": alignment, "uniformity": uniformity},
      }
    ),
  )


def test_synthetic_runs_with_every_key(tmp_path, capsys):
  """Every panel is drawn (no note on stderr), the map uses the trajectories and the given results files."""
  runs = [str(tmp_path / "simcse"), str(tmp_path / "mixcse")]
  helpers.write_synthetic_run(runs[0], 0.0, mixcse=False)
  helpers.write_synthetic_run(runs[1], 0.02)
  results = [str(tmp_path / "simcse.json"), str(tmp_path / "mixcse.json")]
  write_results(results[0], runs[0], 74.1, 0.25, -2.5)
  write_results(results[1], runs[1], 75.3, 0.27, -2.7)
  out = tmp_path / "plots"

  assert plot.main([*runs, "--out", str(out), "--results", *results[::-1]]) == 0
  captured = capsys.readouterr()
  assert "left out" not in captured.err and "skipping" not in captured.err, captured.err
  written = captured.out.split()
  assert sorted(os.path.basename(p) for p in written) == [
    "align_uniform.png",
    "compare_training.png",
    "mixcse_training.png",
    "simcse_training.png",
  ]
  six_panels = assert_png(str(out / "mixcse_training.png"))
  assert six_panels.shape[0] > 700  # Two rows of three panels.
  for path in written:
    assert_png(path)

  loaded = plot.load_runs(runs, results[::-1])  # Matched by the 'model' field, not by order.
  assert [run.sts_avg() for run in loaded] == [74.1, 75.3]
  assert loaded[1].best_eval()["step"] == 40


def test_results_found_in_workdir_and_test_split_map(tmp_path, capsys):
  """Without eval/alignment, the map takes STS-B test points from the results JSON found in each workdir."""
  runs = [str(tmp_path / "a"), str(tmp_path / "b")]
  for i, run in enumerate(runs):
    helpers.write_synthetic_run(run, 0.01 * i)
    records = helpers.metrics_records(run)
    for r in records:
      r.pop("eval/alignment", None)
      r.pop("eval/uniformity", None)
    helpers.write_jsonl(os.path.join(run, "metrics.jsonl"), records)
    write_results(os.path.join(run, "sts.json"), run, 75.0 + i, 0.2 + 0.01 * i, -2.4 - 0.1 * i)
  written = plot.plot_runs(runs, str(tmp_path / "out"))
  err = capsys.readouterr().err
  assert "left out: alignment (needs eval/alignment); uniformity (needs eval/uniformity)" in err
  assert "align_uniform.png" in [os.path.basename(p) for p in written]
  for path in written:
    assert_png(path)


def test_best_eval_is_the_kept_checkpoint():
  """Highest eval/metric, earliest step on ties (training keeps the first of equal scores)."""
  run = plot.Run(
    "w",
    "w",
    train=[],
    evals=[
      {"step": 0, "eval/metric": 0.5},
      {"step": 3, "eval/metric": 0.7},
      {"step": 6, "eval/metric": 0.7},
      {"step": 9, "eval/metric": float("nan")},
    ],
  )
  assert run.best_eval()["step"] == 3


def test_tiny_real_run(tiny_model_dir, small_data_dir, tmp_path, capsys):
  """A real MixCSE run of a few steps on the tiny model: its workdir plots to valid PNGs."""
  from jaxcse import train

  workdir = str(tmp_path / "mixcse_tiny")
  config = helpers.tiny_config(
    tiny_model_dir, small_data_dir, "mixcse", **{"train.max_steps": 2, "eval.every": 1, "checkpoint.every": 2}
  )
  train.train_and_evaluate(config, workdir)
  capsys.readouterr()
  assert plot.main([workdir]) == 0  # Default output: WORKDIR/plots.
  captured = capsys.readouterr()
  written = captured.out.split()
  assert os.path.join(workdir, "plots", "mixcse_tiny_training.png") in written
  for path in written:
    assert_png(path)
  train_records, evals = plot.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in evals] == [1, 2] and [r["step"] for r in train_records] == [1, 2]
  # The map is drawn exactly when the run logged alignment and uniformity during training.
  has_map = any("eval/alignment" in r for r in evals)
  assert (os.path.join(workdir, "plots", "align_uniform.png") in written) == has_map, captured.err


@pytest.mark.parametrize(
  "content, message",
  [
    ("", "metrics.jsonl: empty"),
    ('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4\n', "metrics.jsonl:2: not valid JSON"),
    ('{"step": 1, "loss": 0.5}\n\n[1, 2]\n', "metrics.jsonl:3: expected a JSON object"),
    ('{"loss": 0.5}\n', "metrics.jsonl:1: the record has no integer 'step'"),
    ('{"step": 1, "loss": "0.5"}\n', "metrics.jsonl:1: 'loss' is '0.5', not a number"),
    ('{"step": 1, "steps_per_sec": 2}\n', "metrics.jsonl:1: neither a train record"),
  ],
)
def test_broken_metrics_file(tmp_path, capsys, content, message):
  workdir = tmp_path / "run"
  helpers.write_text(str(workdir / "metrics.jsonl"), content)
  assert plot.main([str(workdir), "--out", str(tmp_path / "out")]) == 1
  err = capsys.readouterr().err
  assert f"error: {workdir / message}" in err or f"error: {workdir}{os.sep}{message}" in err, err
  assert not os.path.exists(tmp_path / "out" / "run_training.png")


def test_missing_metrics_and_unmatched_results(tmp_path, capsys):
  assert plot.main([str(tmp_path)]) == 1
  assert f"{tmp_path / 'metrics.jsonl'}: no such file" in capsys.readouterr().err
  helpers.write_synthetic_run(str(tmp_path / "run"), 0.0)
  stray = str(tmp_path / "stray.json")
  write_results(stray, str(tmp_path / "elsewhere"), 70.0, 0.2, -2.0)
  assert plot.main([str(tmp_path / "run"), "--results", stray]) == 1
  assert f"{stray}: its model" in capsys.readouterr().err
  helpers.write_text(stray, "{not json")
  assert plot.main([str(tmp_path / "run"), "--results", stray]) == 1
  assert f"{stray}:1: not valid JSON" in capsys.readouterr().err
