"""A run's log: ``metrics.jsonl`` (and TensorBoard) line by line, the step metrics averaged between lines and read
one step late (the host never waits for the device), and a non-finite loss caught there."""

from __future__ import annotations

import json
import math
import os
import time

import jax
import numpy as np

from jaxcse.core import files
from jaxcse.core.errors import JaxcseError
from jaxcse.storage import checkpoints
from jaxcse.storage.workdir import LATEST_DIR


class NonFiniteLossError(JaxcseError, RuntimeError):
  """The loss or the parameters became NaN or infinite; the run stopped without saving past its last good checkpoint."""


class MetricsWriter:
  """Appends one JSON object per line to ``metrics.jsonl`` (and, if asked, TensorBoard scalars).

  A resumed run drops the lines past its checkpoint (and TensorBoard's events past it: ``purge_step``), so
  nothing is logged twice. Only process 0 writes (``enabled``); the others compute the same records. Every line
  is appended whole or not at all (``files.append_line``); a torn last line (a write cut short) is dropped
  with a warning on resume.
  """

  def __init__(self, path: str, resume_step: int | None, enabled: bool = True, tensorboard_dir: str | None = None):
    self.path = path
    self.enabled = enabled
    if enabled and os.path.exists(path):  # Lines written after the checkpoint we resume from would be written again.
      kept = []
      if resume_step is not None:  # A fresh start keeps nothing.
        kept = [r for r in files.read_jsonl(path) if r.get("step", 0) <= resume_step]
      files.write_text_atomically(path, "".join(json.dumps(r) + "\n" for r in kept))
    self.tensorboard = None
    if enabled and tensorboard_dir:
      from tensorboardX import SummaryWriter

      self.tensorboard = SummaryWriter(tensorboard_dir, purge_step=None if resume_step is None else resume_step + 1)

  def write(self, record: dict) -> None:
    if not self.enabled:
      return
    files.append_line(self.path, json.dumps(record))
    if self.tensorboard is not None:
      for key, value in record.items():
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
          self.tensorboard.add_scalar(key if "/" in key else f"train/{key}", value, record["step"])
      self.tensorboard.flush()

  def close(self) -> None:
    if self.tensorboard is not None:
      self.tensorboard.close()


class StepLog:
  """Averages the step metrics between log lines and writes them; reads a step's metrics one step late.

  ``add(step, metrics)`` keeps the device arrays of the step just dispatched and checks the previous one, so the
  host never waits for the device; ``flush`` writes one record (mean over the steps since the last line).
  """

  def __init__(
    self, metrics_log: MetricsWriter, latest, workdir: str, steps_per_epoch: int, start_step: int, schedule=None
  ):
    self.metrics_log, self.latest, self.workdir = metrics_log, latest, workdir
    self.steps_per_epoch = steps_per_epoch
    self.schedule = schedule
    self.values, self.pending = [], None
    self.t_last, self.last_step = time.time(), start_step

  def add(self, step: int, metrics: dict) -> None:
    if self.pending is not None:
      self.values.append(check_finite(*self.pending, self.latest, self.workdir))
    self.pending = (step, metrics)

  def settle(self) -> None:
    """Checks the last dispatched step (waits for it)."""
    if self.pending is not None:
      self.values.append(check_finite(*self.pending, self.latest, self.workdir))
      self.pending = None

  def flush(self, step: int) -> dict:
    self.settle()
    record = {
      "step": step,
      **{k: float(np.mean([m[k] for m in self.values])) for k in self.values[0]},
      "steps_per_sec": round((step - self.last_step) / (time.time() - self.t_last), 4),
      "epoch": round(step / self.steps_per_epoch, 4),
    }  # Nominal with no_duplicates or packing.
    if self.schedule is not None:  # The rate of the last update of the interval (step - 1: counts start at 0).
      record["learning_rate"] = float(self.schedule(step - 1))
    self.metrics_log.write(record)
    self.values, self.t_last, self.last_step = [], time.time(), step
    return record


def check_finite(step: int, metrics: dict, latest, workdir: str) -> dict[str, float]:
  """The step's metrics as floats; ``NonFiniteLossError`` if its loss or gradient norm is NaN or infinite."""
  values = {k: float(v) for k, v in jax.device_get(metrics).items()}
  if not math.isfinite(values["loss"]) or not math.isfinite(values["grad_norm"]):
    raise NonFiniteLossError(f"non-finite loss ({values['loss']}) at step {step}; {stopped(latest, workdir)}")
  return values


def last_good(latest) -> int | None:
  """The step of the newest good latest checkpoint, for a message (nothing is set aside); None if there is none."""
  try:
    return checkpoints.newest_good(latest, set_aside_bad=False)[0]
  except checkpoints.CheckpointError:
    return None


def stopped(latest, workdir: str) -> str:
  """The end of the message of a run stopped by a non-finite loss or model: where it can be resumed from."""
  good = last_good(latest)
  return (
    f"stopped. The last good checkpoint is {'none' if good is None else f'step {good}'} in "
    f"{os.path.join(workdir, LATEST_DIR)}"
  )
