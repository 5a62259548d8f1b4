"""Training runs read back for figures and reports: a workdir's ``metrics.jsonl`` (train and evaluation records,
sorted by step, each line checked) and the ``jaxcse.evaluate`` results JSON that belongs to it.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import sys
from collections.abc import Sequence

import numpy as np

from jaxcse.core.errors import JaxcseError

# Keys of the train records (one per logged step) and of the evaluation records (one per evaluation).
LOSS_KEYS = ("loss", "contrastive_loss", "mlm_loss")
SCORE_KEYS = ("pos_score", "neg_score", "mix_score")
STSB_DEV, SICKR_DEV, EVAL_METRIC = "eval/stsb_dev", "eval/sickr_dev", "eval/metric"
OMEGA, ALIGNMENT, UNIFORMITY = "eval/omega_deg", "eval/alignment", "eval/uniformity"
# Files of a workdir that are never evaluation results.
_NOT_RESULTS = {"config.json", "summary.json"}


class MetricsError(JaxcseError, ValueError):
  """A metrics or results file is missing, empty or malformed; the message names the file (and line)."""


@dataclasses.dataclass
class Run:
  """One training run: its records sorted by step, and its evaluation results when known."""

  workdir: str
  name: str
  train: list[dict]  # Records with a loss, one per logged step.
  evals: list[dict]  # Records with eval/... keys, one per evaluation.
  results: dict | None = None  # A jaxcse.evaluate results JSON.
  results_path: str | None = None

  def series(self, records: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the records that have ``key``; NaN stays NaN (a gap in the curve)."""
    rows = [(r["step"], r[key]) for r in records if key in r]
    steps = np.array([s for s, _ in rows], dtype=np.float64)
    values = np.array([v for _, v in rows], dtype=np.float64)
    return steps, values

  def best_eval(self) -> dict | None:
    """The evaluation record of the best checkpoint: highest ``eval/metric``, the earliest on ties (as training)."""
    scored = [r for r in self.evals if EVAL_METRIC in r and not math.isnan(r[EVAL_METRIC])]
    if not scored:
      return None
    return max(scored, key=lambda r: (r[EVAL_METRIC], -r["step"]))

  def sts_avg(self) -> float | None:
    summary = (self.results or {}).get("summary", {})
    return summary.get("Avg")


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_metrics(path: str) -> tuple[list[dict], list[dict]]:
  """Reads a ``metrics.jsonl``; returns (train records, evaluation records), each sorted by step.

  Blank lines are skipped (the trainer never writes them). Raises
  ``MetricsError`` naming the file, and the line, for a missing or empty file,
  a line that is not a JSON object, a record without an integer ``step``, or
  a non-numeric value of a key this module plots.
  """
  plotted = {*LOSS_KEYS, *SCORE_KEYS, STSB_DEV, SICKR_DEV, EVAL_METRIC, OMEGA, ALIGNMENT, UNIFORMITY}
  train, evals = [], []
  try:
    with open(path, encoding="utf-8") as f:
      lines = f.read().splitlines()
  except FileNotFoundError:
    raise MetricsError(f"{path}: no such file (is this a jaxcse training workdir?)") from None
  except (OSError, UnicodeDecodeError) as e:
    raise MetricsError(f"{path}: cannot read: {e}") from None
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise MetricsError(f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict):
      raise MetricsError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
    if not isinstance(record.get("step"), int) or isinstance(record.get("step"), bool):
      raise MetricsError(f"{path}:{number}: the record has no integer 'step'")
    for key in plotted & record.keys():
      if not _is_number(record[key]):
        raise MetricsError(f"{path}:{number}: {key!r} is {record[key]!r}, not a number")
    if any(key.startswith("eval/") for key in record):
      evals.append(record)
    elif "loss" in record:
      train.append(record)
    else:
      raise MetricsError(f"{path}:{number}: neither a train record (no 'loss') nor an evaluation (no 'eval/' key)")
  if not train and not evals:
    raise MetricsError(f"{path}: empty: no train or evaluation records")
  # sorted() is stable: records of one step keep the file's order.
  return sorted(train, key=lambda r: r["step"]), sorted(evals, key=lambda r: r["step"])


def read_results(path: str) -> dict:
  """A ``jaxcse.evaluate --output`` JSON; ``MetricsError`` when unreadable or without its ``summary``."""
  try:
    with open(path, encoding="utf-8") as f:
      results = json.load(f)
  except FileNotFoundError:
    raise MetricsError(f"{path}: no such file") from None
  except json.JSONDecodeError as e:
    raise MetricsError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
  if not isinstance(results, dict) or not isinstance(results.get("summary"), dict):
    raise MetricsError(f"{path}: not a jaxcse.evaluate results file (no 'summary' object)")
  return results


def _results_in_workdir(workdir: str) -> str | None:
  """The newest results JSON (a JSON object with a ``summary``) at the top of ``workdir``, if any."""
  found = []
  for path in glob.glob(os.path.join(workdir, "*.json")):
    if os.path.basename(path) in _NOT_RESULTS:
      continue
    try:
      read_results(path)
    except MetricsError:
      continue  # Other JSON files may live in a workdir; only results files are candidates.
    found.append(path)
  if not found:
    return None
  found.sort(key=os.path.getmtime)
  if len(found) > 1:
    print(f"note: {workdir} has {len(found)} results files; using the newest, {found[-1]}", file=sys.stderr)
  return found[-1]


def _match_results(path: str, results: dict, runs: list[Run]) -> Run:
  """The run whose workdir is the results' ``model``: same real path, else the only run with that folder name."""
  model = results.get("model")
  if not isinstance(model, str):
    raise MetricsError(f"{path}: no 'model' field to tell which workdir it belongs to")
  target = os.path.realpath(os.path.normpath(model.rstrip("/")))
  for run in runs:
    if os.path.realpath(run.workdir) == target:
      return run
  # Results are often made from another directory: fall back to the folder name when it is unambiguous.
  same_name = [r for r in runs if os.path.basename(os.path.normpath(r.workdir)) == os.path.basename(target)]
  if len(same_name) == 1:
    return same_name[0]
  if same_name:
    raise MetricsError(
      f"{path}: its model {model!r} matches several workdirs by name; run from the directory "
      "jaxcse.evaluate ran in, so the paths match"
    )
  raise MetricsError(
    f"{path}: its model {model!r} is none of the workdirs given ({', '.join(r.workdir for r in runs)})"
  )


def _run_names(workdirs: Sequence[str]) -> list[str]:
  """Folder names, with the parent folder added where two runs share a name."""
  parts = [os.path.normpath(os.path.abspath(w)).split(os.sep) for w in workdirs]
  names = [p[-1] for p in parts]
  if len(set(names)) < len(names):
    names = ["/".join(p[-2:]) for p in parts]
  return names


def load_runs(workdirs: Sequence[str], results_paths: Sequence[str] = ()) -> list[Run]:
  """Reads every workdir's metrics and attaches each results JSON to its run."""
  runs = []
  for workdir, name in zip(workdirs, _run_names(workdirs)):
    if not os.path.isdir(workdir):
      raise MetricsError(f"{workdir}: not a directory")
    train, evals = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    runs.append(Run(workdir=workdir, name=name, train=train, evals=evals))
  for path in results_paths:
    results = read_results(path)
    run = _match_results(path, results, runs)
    if run.results is not None:
      raise MetricsError(f"{path}: {run.workdir} already has results from {run.results_path}")
    run.results, run.results_path = results, path
  for run in runs:
    if run.results is None and not results_paths:
      path = _results_in_workdir(run.workdir)
      if path is not None:
        run.results, run.results_path = read_results(path), path
  return runs
