"""Fingerprints of short training runs of every step variant and of killed-and-resumed runs (issue 41).

The proof that a refactor of the start-or-resume logic, the step's loss or the method registry changes nothing:
run this on the code before and after, and compare the two files (``cmp``): equal means the same runs, bit for bit.

  JAX_PLATFORMS=cpu python experiments/reliability/step_fingerprints.py OUT.json [--devices N] [--only NAME,...]

``JAXCSE_DATA_DIR`` must hold SentEval and ``corpora/wiki_offline.txt`` (as the tests' fixtures). ``CODE=/path``
imports jaxcse from another checkout (the script itself and tests/helpers.py stay this one's). Per run it records:
the sha256 of the final latest and best checkpoints' parameters (every leaf's name, dtype, shape and bytes), the
metrics.jsonl lines without their timings, the summary, and the jaxcse log (workdir and set-aside times replaced by
placeholders). The kill/resume scenarios also assert that the resumed run's parameters, metrics and best checkpoint
equal the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every variant of the step the trainer runs: (config file, overrides), on tests.helpers.tiny_config. Each runs 4
# steps, evaluating, logging and saving every 2 (resume points, best checkpoints) or every step (metrics).
VARIANTS = {
  "simcse": ("base", {}),
  "simcse_sup": ("simcse_sup", {"loss.hard_negative_weight": 1.0}),  # Hard negatives; official_world_size 4.
  "mixcse": ("mixcse", {}),
  "dclr": ("dclr", {}),
  "dclr_as_released": ("dclr_as_released", {}),  # Attends padding; complementary model with dropout.
  "simcse_gradcache": ("base", {"train.grad_cache_chunk": 4}),
  "dclr_gradcache": ("dclr", {"train.grad_cache_chunk": 4}),  # The complementary model embeds chunk by chunk.
  "simcse_mlm": ("base", {"mlm.enabled": True}),
  "simcse_mlm_gradcache": ("base", {"mlm.enabled": True, "train.grad_cache_chunk": 2}),
  "mlm_pretraining": ("base", {"method": "mlm", "mlm.max_predictions": 4}),
  "simcse_crop": ("base", {"augment.crop": 0.1}),
  "simcse_mlm_augment": ("base", {"augment.mlm": 0.15, "augment.mlm_model": "TINY_MLM"}),
  "simcse_same_dropout": ("base", {"augment.same_dropout_mask": True}),
  "simcse_crop_before_truncation": ("base", {"augment.crop": 0.1, "augment.crop_before_truncation": 48}),
}
# The shared attention-dropout mask (the default before it became per element): fingerprints taken before and
# after that change compare.
COMMON = {
  "train.max_steps": 4,
  "train.log_every": 1,
  "eval.every": 2,
  "checkpoint.every": 2,
  "model.attention_dropout_per_element": False,
}
TIMINGS = ("steps_per_sec", "eval/seconds")  # metrics.jsonl fields that measure time, not the run.


class Kill(RuntimeError):
  """Stands for the process dying (SIGKILL) right after metrics.jsonl got the line of ``KILL_AFTER``."""


def params_digest(params) -> str:
  import flax
  import jax
  import numpy as np

  digest = hashlib.sha256()
  for name, leaf in sorted(flax.traverse_util.flatten_dict(jax.device_get(params), sep="/").items()):
    leaf = np.ascontiguousarray(leaf)
    digest.update(f"{name}:{leaf.dtype}:{leaf.shape}:".encode())
    digest.update(leaf.tobytes())
  return digest.hexdigest()


def fingerprint(workdir: str, summary: dict | None, log_lines: list[str]) -> dict:
  from jaxcse.storage import loading

  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    metrics = [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in f if line.strip()]
  summary = {k: v for k, v in (summary or {}).items() if k != "workdir"}
  return {
    "latest_params": params_digest(loading.load_model(workdir, checkpoint="latest").params),
    "best_params": params_digest(loading.load_model(workdir).params),
    "metrics": metrics,
    "summary": summary,
    "log": log_lines,
  }


class LogLines(logging.Handler):
  """The jaxcse log's lines, with what differs from run to run replaced: the workdir, the temporary folder the
  inputs are in, set-aside timestamps, and the byte offsets in orbax's error for a truncated file (orbax lays out
  its files in another order each save)."""

  def __init__(self, work: str):
    super().__init__(logging.INFO)
    self.lines, self.work, self.workdir = [], work, None

  def emit(self, record):
    text = record.getMessage()
    if self.workdir:
      text = text.replace(self.workdir, "<workdir>")
    text = text.replace(self.work, "<work>")
    text = re.sub(r"-[0-9]{8}T[0-9]{6}", "-<time>", text)
    text = re.sub(r"byte range \[[0-9]+, [0-9]+\) is not valid for value of size [0-9]+", "byte range <range>", text)
    self.lines.append(f"{record.levelname}: {text}")

  def take(self) -> list[str]:
    lines, self.lines = self.lines, []
    return lines


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("out")
  parser.add_argument("--devices", type=int, default=1)
  parser.add_argument("--only", default="", help="comma-separated variant or scenario names")
  args = parser.parse_args()
  os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  sys.path.insert(0, os.environ.get("CODE", REPO))  # Whose jaxcse.
  sys.path.insert(1, REPO)  # tests.helpers and tests.conftest: this checkout's.
  import jax

  from jaxcse.core import files
  from jaxcse import train
  from tests import conftest, helpers

  assert jax.device_count() == args.devices, jax.devices()
  only = set(filter(None, args.only.split(",")))
  work = tempfile.mkdtemp(prefix="step-fingerprints-")

  class Folders:  # conftest's session fixtures want a tmp_path_factory.
    @staticmethod
    def mktemp(name):
      os.makedirs(os.path.join(work, name))
      return os.path.join(work, name)

  model_dir = conftest.tiny_model_dir.__wrapped__(Folders)
  data_dir = conftest.small_data_dir.__wrapped__(Folders)
  mlm_dir = helpers.make_tiny_mlm_dir(model_dir, os.path.join(work, "tiny_mlm"))
  log = LogLines(work)
  logging.getLogger("jaxcse").addHandler(log)
  logging.getLogger("jaxcse").setLevel(logging.INFO)

  def config(name):
    config_name, overrides = VARIANTS[name]
    overrides = {k: mlm_dir if v == "TINY_MLM" else v for k, v in {**COMMON, **overrides}.items()}
    return helpers.tiny_config(model_dir, data_dir, config_name, **overrides)

  def run(cfg, workdir, kill_after=None):
    """train_and_evaluate, killed (``Kill``) after metrics.jsonl gets step ``kill_after``'s line if given."""
    log.workdir = workdir
    append_line = files.append_line

    def append_then_die(path, line):
      append_line(path, line)
      if kill_after is not None and path.endswith("metrics.jsonl") and json.loads(line)["step"] == kill_after:
        raise Kill(kill_after)

    files.append_line = append_then_die
    try:
      return train.train_and_evaluate(cfg, workdir)
    except Kill:
      return None
    finally:
      files.append_line = append_line

  results = {"devices": args.devices}
  for name in VARIANTS:
    if only and name not in only:
      continue
    workdir = os.path.join(work, name)
    summary = run(config(name), workdir)
    results[name] = fingerprint(workdir, summary, log.take())
    print(name, results[name]["latest_params"][:16], flush=True)

  # Kill and resume: each scenario kills a run after step 3's metrics line (its latest and best checkpoints at step
  # 2), changes the workdir as a crash or a user might, and resumes it to step 4.
  def remove_best(workdir):  # The best checkpoint is gone: the resume point is evaluated again.
    shutil.rmtree(os.path.join(workdir, "checkpoints", "best", "2"))

  def damage_latest(workdir):  # No latest checkpoint is good (a file differs from its record): the run starts over.
    record = os.path.join(workdir, "checkpoints", "latest", "2", "sha256.json")
    with open(record) as f:
      digests = json.load(f)
    name = sorted(digests)[0]
    files.write_json(record, {**digests, name: "0" * 64})

  def damage_latest_data(workdir):  # Its record matches but orbax cannot read it: set aside after a load.
    from jaxcse.storage import checkpoints

    step_dir = os.path.join(workdir, "checkpoints", "latest", "2")
    params = [os.path.join(d, name) for d, _, names in os.walk(os.path.join(step_dir, "params")) for name in names]
    largest = max(params, key=os.path.getsize)  # The arrays' data: cut in half.
    with open(largest, "r+b") as f:
      f.truncate(os.path.getsize(largest) // 2)
    files.write_json(os.path.join(step_dir, checkpoints.CHECKSUMS), checkpoints._file_digests(step_dir))

  scenarios = {
    "resume_simcse": ("simcse", None),
    "resume_dclr_gradcache": ("dclr_gradcache", None),
    "resume_simcse_mlm": ("simcse_mlm", None),
    "resume_best_gone": ("simcse", remove_best),
    "resume_latest_damaged": ("simcse", damage_latest),
    "resume_latest_unreadable": ("simcse", damage_latest_data),
  }
  for scenario, (name, change) in scenarios.items():
    if only and scenario not in only:
      continue
    workdir = os.path.join(work, scenario)
    assert run(config(name), workdir, kill_after=3) is None
    killed_log = log.take()
    if change is not None:
      change(workdir)
    refused = None
    try:
      summary = run(config(name), workdir)
    except train.WorkdirError as e:  # No latest checkpoint could be read: the same command again starts over.
      refused = str(e).replace(workdir, "<workdir>")
      summary = run(config(name), workdir)
    results[scenario] = {**fingerprint(workdir, summary, log.take()), "killed_log": killed_log, "refused": refused}
    reference = results.get(name)
    if reference is not None and change is not remove_best:  # Uninterrupted: the same run.
      for key in ("latest_params", "best_params", "metrics", "summary"):
        assert results[scenario][key] == reference[key], (scenario, key, results[scenario][key], reference[key])
    print(scenario, results[scenario]["latest_params"][:16], flush=True)

  with open(args.out, "w") as f:
    json.dump(results, f, indent=1, sort_keys=True)
  shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  main()
