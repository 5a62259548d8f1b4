"""Runs that never need a hand edit: a full disk mid-log, a kill before the checksum record, a changed
config on resume, a finite-but-exploded checkpoint, a damaged best checkpoint, and one line instead of a wall."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from jaxcse.storage import checkpoints, loading, workdir as workdir_lib
from jaxcse.inference import embedder
from jaxcse.training import run_log, start as start_lib
from jaxcse import encode, evaluate, export_hf, train
from jaxcse.core import files
from tests import helpers
from tests.helpers import (
  SCHEDULE,
  assert_same_params,
  checkpoint_steps,
  damage,
  exploded_params,
  largest_file,
  lines_said,
  metrics_records,
  saved_params,
  train_cli_args,
  train_interrupted,
  warnings_naming,
)

REPO = helpers.REPO

# A script that runs the train command with a fault injected where an environment variable says.
INJECTED_TRAIN = """
import os, signal, sys
from jaxcse.storage import checkpoints
from jaxcse import data as data_lib, train

kill = os.environ.get("KILL_BEFORE_RECORD_OF")  # e.g. latest/8: after orbax committed it, before its sha256 record.
if kill:
  digests = checkpoints._file_digests
  def killing(folder):
    if folder.rstrip("/").endswith(kill):
      os.kill(os.getpid(), signal.SIGKILL)
    return digests(folder)
  checkpoints._file_digests = killing
fill = os.environ.get("FILL_DISK_BEFORE_SAVE_OF")  # e.g. latest/8: the disk fills up as that save starts.
if fill:
  save = checkpoints.save
  def fill_then_save(mngr, step, **kwargs):
    if os.path.join(str(mngr.directory), str(step)).endswith(fill):
      filler = os.environ["FILLER"]
      free = os.statvfs(os.path.dirname(filler))
      with open(filler, "wb") as f:  # Leaves LEAVE bytes: the save starts, then fails partway.
        f.write(b"\\0" * (free.f_bavail * free.f_frsize - int(os.environ["LEAVE"])))
    return save(mngr, step, **kwargs)
  checkpoints.save = fill_then_save
sigint = os.environ.get("SIGINT_AT_STEP_INDEX")  # Ctrl-C when the batch of this step index is asked for.
if sigint:
  # Python's Ctrl-C handler, even when this test runs in the background of a non-interactive shell, which starts
  # its jobs with SIGINT ignored (inherited through exec: Python then installs no handler and the signal is lost).
  signal.signal(signal.SIGINT, signal.default_int_handler)
  iterate = data_lib.Batches.iterate
  def interrupted(self, start, end, *rest, **kwargs):
    for step, batch in enumerate(iterate(self, start, end, *rest, **kwargs), start=start):
      if step == int(sigint):
        os.kill(os.getpid(), signal.SIGINT)
      yield batch
  data_lib.Batches.iterate = interrupted
save_after = os.environ.get("INTERRUPT_SAVE_AFTER_S")  # Ctrl-C saves the state it stops at after this much work.
if save_after:
  train.INTERRUPT_SAVE_AFTER_S = float(save_after)
sys.argv[0] = "jaxcse.train"
train.run()
"""


def _train_cli(
  workdir: str, tiny_model_dir: str, small_data_dir: str, env: dict | None = None, **overrides
) -> subprocess.CompletedProcess:
  """The train command on SCHEDULE (+ overrides), with the faults of ``env`` injected."""
  args = train_cli_args(workdir, tiny_model_dir, small_data_dir, **{**SCHEDULE, **overrides})
  return subprocess.run(
    [sys.executable, "-c", INJECTED_TRAIN, *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    env={**os.environ, **(env or {})},
    timeout=600,
  )


# --------------------------------------------------------------------------
# 1. A full disk while appending to metrics.jsonl.


def test_a_torn_last_metrics_line_is_dropped_with_a_warning_on_resume(
  reference, tiny_model_dir, small_data_dir, tmp_path, caplog
):
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  shutil.copytree(ref_dir, workdir)  # A finished run; as if killed while appending after its checkpoint at 8.
  shutil.rmtree(os.path.join(workdir, workdir_lib.LATEST_DIR, "9"))
  os.remove(os.path.join(workdir, "summary.json"))
  with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
    f.write('{"step": 9, "loss": 2.0')
  train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE), workdir)
  assert len(warnings_naming(caplog, "metrics.jsonl:")) == 1
  assert [r["step"] for r in metrics_records(workdir)] == [r["step"] for r in metrics_records(ref_dir)]
  assert_same_params(saved_params(workdir), saved_params(ref_dir))


def test_a_metrics_line_that_does_not_fit_is_not_written_and_the_error_names_the_file(
  reference, tiny_model_dir, small_data_dir, tmp_path, monkeypatch
):
  """The file-size limit (RLIMIT_FSIZE) stands for a full disk: a write crossing it is cut short, then fails."""
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  metrics = os.path.join(workdir, "metrics.jsonl")
  write = run_log.MetricsWriter.write

  def disk_full_at_step_6(self, record):
    if record["step"] != 6 or "loss" not in record:
      return write(self, record)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # Then a write past the limit fails with EFBIG.
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(metrics) + 40, limits[1]))  # 40 bytes fit.
    try:
      return write(self, record)
    finally:
      resource.setrlimit(resource.RLIMIT_FSIZE, limits)
      signal.signal(signal.SIGXFSZ, handler)

  monkeypatch.setattr(run_log.MetricsWriter, "write", disk_full_at_step_6)
  with pytest.raises(OSError) as info:
    train.train_and_evaluate(config, workdir)
  assert info.value.errno == errno.EFBIG and info.value.filename == metrics
  assert open(metrics).read().endswith("}\n")  # The append is absent, not torn.
  assert [r["step"] for r in metrics_records(workdir)][-1] == 5
  monkeypatch.undo()
  train.train_and_evaluate(config, workdir)
  assert [r["step"] for r in metrics_records(workdir)] == [r["step"] for r in metrics_records(ref_dir)]
  assert_same_params(saved_params(workdir), saved_params(ref_dir))


def test_a_disk_that_fills_while_logging_needs_no_hand_edit(
  tiny_model_dir, small_data_dir, small_disk, tmp_path, monkeypatch
):
  """A real file system that fills (a tmpfs): whichever write fails, the run stops in one error naming the file,
  every line of metrics.jsonl is whole, and once there is space again the same command finishes the run."""
  disk = small_disk("32m")
  # Checkpoints only at 20 and 40: after the disk fills at 20, nineteen ~300-byte lines cannot all fit in what is
  # left of metrics.jsonl's last 4 KiB page, so a line is cut short before the save at 40.
  overrides = {**SCHEDULE, "train.max_steps": 40, "checkpoint.every": 20, "eval.every": 10_000, "eval.at_end": False}
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **overrides)
  reference = str(tmp_path / "reference")
  train.train_and_evaluate(config, reference)
  workdir = os.path.join(disk, "w")
  filler = os.path.join(disk, "filler")
  save = checkpoints.save

  def save_then_fill(mngr, step, **kwargs):
    save(mngr, step, **kwargs)
    if step == 20:
      with open(filler, "wb", buffering=0) as f:  # Unbuffered: nothing left to flush when it is full.
        try:
          while True:
            f.write(b"\0" * 4096)
        except OSError:
          pass

  monkeypatch.setattr(checkpoints, "save", save_then_fill)
  with pytest.raises(OSError) as info:
    train.train_and_evaluate(config, workdir)
  assert info.value.errno == errno.ENOSPC and info.value.filename == os.path.join(workdir, "metrics.jsonl")
  steps = [r["step"] for r in metrics_records(workdir)]  # Every line parses: nothing torn.
  assert 20 < steps[-1] < 40
  monkeypatch.undo()
  os.remove(filler)
  train.train_and_evaluate(config, workdir)
  assert [r["step"] for r in metrics_records(workdir)] == list(range(1, 41))
  assert_same_params(saved_params(workdir), saved_params(reference))


def test_append_line_is_whole_or_absent(tmp_path, monkeypatch):
  path = str(tmp_path / "log.jsonl")
  files.append_line(path, '{"step": 1}')
  real_write = os.write
  calls = []

  def half_then_full(fd, data):  # A disk that takes half a line, then is full.
    calls.append(len(data))
    if len(calls) == 1:
      return real_write(fd, bytes(data[: len(data) // 2]))
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(os, "write", half_then_full)
  with pytest.raises(OSError) as info:
    files.append_line(path, '{"step": 2, "loss": 1.5}')
  monkeypatch.undo()
  assert len(calls) == 2 and info.value.filename == path and info.value.errno == errno.ENOSPC
  assert open(path).read() == '{"step": 1}\n'


def test_a_damaged_line_inside_metrics_is_an_error_naming_the_line(tmp_path):
  path = str(tmp_path / "metrics.jsonl")
  with open(path, "w") as f:
    f.write('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
  with pytest.raises(checkpoints.JaxcseError, match=r"metrics.jsonl:2: not a JSON object"):
    files.read_jsonl(path)


# --------------------------------------------------------------------------
# 2. A kill between orbax's write and the checksum record; damaged files without and with the record.


def test_a_kill_before_the_checksum_record_leaves_an_incomplete_checkpoint(
  reference, tiny_model_dir, small_data_dir, tmp_path
):
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  killed = _train_cli(workdir, tiny_model_dir, small_data_dir, {"KILL_BEFORE_RECORD_OF": "latest/8"})
  assert killed.returncode == -signal.SIGKILL
  step8 = os.path.join(workdir, workdir_lib.LATEST_DIR, "8")
  assert os.path.isdir(step8) and not os.path.exists(os.path.join(step8, checkpoints.CHECKSUMS))
  # Nothing vouches for its files: flipped bits in them must never be served. Readers skip it with one warning.
  damage(largest_file(step8, "params"), "flip")
  resumed = _train_cli(workdir, tiny_model_dir, small_data_dir)
  assert resumed.returncode == 0, resumed.stderr
  warnings = [line for line in lines_said(resumed.stderr) if "latest/8" in line]
  assert len(warnings) == 1 and f"no {checkpoints.CHECKSUMS}: the save did not finish" in warnings[0], warnings
  assert not any("Traceback" in line for line in lines_said(resumed.stderr))
  assert_same_params(saved_params(workdir), saved_params(ref_dir))  # Resumed from 4, exactly as the uninterrupted run.


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_every_reader_falls_back_past_a_checkpoint_without_its_record(reference, tmp_path, caplog, capsys, how):
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  shutil.copytree(ref_dir, workdir)
  for sub in (workdir_lib.LATEST_DIR, workdir_lib.BEST_DIR):
    newest = os.path.join(workdir, sub, str(max(checkpoint_steps(workdir, sub))))
    damage(largest_file(newest, "params"), how)
    os.remove(os.path.join(newest, checkpoints.CHECKSUMS))
  best = checkpoint_steps(workdir, workdir_lib.BEST_DIR)
  assert loading.load_model(workdir).step == best[0]
  assert loading.load_model(workdir, checkpoint="latest").step == 8
  # The commands: one warning line each, then the older checkpoint.
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\n")
  out = str(tmp_path / "x.npy")
  for main, argv in [
    (encode.main, ["--model", workdir, "--input", str(lines), "--output", out]),
    (export_hf.main, [workdir, str(tmp_path / "export")]),
  ]:
    caplog.clear()
    assert main(argv) == 0
    assert len(warnings_naming(caplog, f"best/{best[-1]}")) == 1
    assert "Traceback" not in capsys.readouterr().err
  np.testing.assert_array_equal(
    np.load(out), encode.Encoder.load(ref_dir, checkpoint=str(best[0])).embed(["a sentence"])
  )


def test_the_trainer_falls_back_in_the_same_run_past_an_unreadable_verified_checkpoint(
  reference, tiny_model_dir, small_data_dir, tmp_path, caplog
):
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  train_interrupted(config, workdir, 8)
  # Damage that the record vouches for (a record written over the damaged files): only orbax can tell.
  step8 = os.path.join(workdir, workdir_lib.LATEST_DIR, "8")
  damage(largest_file(step8, "params"), "truncate")
  files.write_json(os.path.join(step8, checkpoints.CHECKSUMS), checkpoints._file_digests(step8))
  train.train_and_evaluate(config, workdir)  # One run: no "run the same command again".
  assert len(warnings_naming(caplog, "checkpoints/latest/8 is not usable (cannot be read")) == 1
  assert_same_params(saved_params(workdir), saved_params(ref_dir))


# --------------------------------------------------------------------------
# 3. Resuming with a changed config.


def test_a_resume_that_would_change_the_result_is_refused_before_anything_changes(
  reference, tiny_model_dir, small_data_dir, tmp_path, monkeypatch, caplog
):
  caplog.set_level(logging.INFO, logger="jaxcse")
  ref_dir, ref_summary = reference
  workdir = str(tmp_path / "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  train_interrupted(config, workdir, 7)  # Latest 4; best 6 (after it: stale).
  before = {sub: checkpoint_steps(workdir, sub) for sub in (workdir_lib.LATEST_DIR, workdir_lib.BEST_DIR)}
  metrics_before = open(os.path.join(workdir, "metrics.jsonl")).read()
  changed = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    **{
      **SCHEDULE,
      "train.max_steps": 5,
      "train.learning_rate": 1e-4,
      "checkpoint.every": 100,
      "eval.batch_size": 7,
    },
  )
  made = []
  manager = checkpoints.manager
  monkeypatch.setattr(checkpoints, "manager", lambda *a, **k: made.append(manager(*a, **k)) or made[-1])
  with pytest.raises(train.WorkdirError) as info:
    train.train_and_evaluate(changed, workdir)
  monkeypatch.undo()
  assert not made  # Refused before orbax touched the workdir (it creates folders, removes temporary ones).
  message = str(info.value)
  assert "train.learning_rate (0.003 there, 0.0001 here)" in message and "train.max_steps (9 there, 5 here)" in message
  # The evaluation's padded shapes follow its batch size, and with them the logged scores' last bits.
  assert "eval.batch_size (32 there, 7 here)" in message
  assert "checkpoint.every" not in message and "--restart" in message and "\n" not in message
  # Refused before anything changed: the stale best checkpoint is still there, metrics.jsonl is as it was.
  assert {sub: checkpoint_steps(workdir, sub) for sub in before} == before
  assert open(os.path.join(workdir, "metrics.jsonl")).read() == metrics_before
  assert not any("recomputes" in r.getMessage() or "evaluates that step" in r.getMessage() for r in caplog.records)
  # What cannot change the result may change: the same run finishes exactly as the uninterrupted one.
  harmless = helpers.tiny_config(
    tiny_model_dir, small_data_dir, **{**SCHEDULE, "train.log_every": 2, "checkpoint.every": 3}
  )
  summary = train.train_and_evaluate(harmless, workdir)
  assert any(
    "best/6 is intact but was saved after the resume point, step 4: the resumed run evaluates that step "
    "again; moved to" in r.getMessage()
    for r in caplog.records
  )
  assert summary["best_step"] == ref_summary["best_step"]
  assert_same_params(saved_params(workdir), saved_params(ref_dir))
  assert_same_params(saved_params(workdir, "best"), saved_params(ref_dir, "best"))
  # --restart starts the changed run clean.
  summary = train.train_and_evaluate(changed, workdir, restart=True)
  assert summary["steps"] == 5
  assert json.load(open(os.path.join(workdir, "config.json")))["train"]["learning_rate"] == 1e-4
  provenance = json.load(open(os.path.join(workdir, "summary.json")))["provenance"]["config"]
  assert provenance["train"]["learning_rate"] == 1e-4 and provenance["train"]["max_steps"] == 5


def test_config_fields_of_another_jaxcse_version_are_a_warning_not_a_refusal(tiny_model_dir, small_data_dir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  saved = json.loads(json.dumps(config.to_dict()))
  del saved["log"]["tensorboard"]  # Resumable anyway.
  del saved["data"]["pack"]  # An older config.json: no such field.
  saved["train"]["retired_field"] = 1  # A field this jaxcse no longer has.
  saved["seed"] = 7
  changed, unknown = workdir_lib.result_changes(config, saved)
  assert changed == ["seed (7 there, 42 here)"] and unknown == ["data.pack", "train.retired_field"]


# --------------------------------------------------------------------------
# 4. A finite-but-exploded checkpoint.


def test_the_trainer_never_saves_a_checkpoint_whose_outputs_overflow(tiny_model_dir, small_data_dir, fresh_workdir):
  # As in the issue: lr 1e30 with clipping; after step 1 every weight is ~1e30, finite, and the forward overflows.
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    **{"train.learning_rate": 1e30, "checkpoint.every": 1, "eval.every": 10_000, "eval.at_end": False},
  )
  with pytest.raises(
    train.NonFiniteLossError,
    match=r"after step 1 the model's outputs \(.*\) are not finite on a "
    r"probe batch .* The last good checkpoint is none",
  ):
    train.train_and_evaluate(config, fresh_workdir)
  assert not checkpoint_steps(fresh_workdir, workdir_lib.LATEST_DIR)


def test_every_reader_refuses_or_falls_back_past_an_exploded_checkpoint(reference, tmp_path, caplog, capsys):
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  shutil.copytree(ref_dir, workdir)
  good = loading.load_model(workdir)
  exploded = exploded_params(good.params)
  assert checkpoints.all_finite(exploded)
  mngr = checkpoints.manager(os.path.join(workdir, workdir_lib.BEST_DIR))
  checkpoints.save(
    mngr, 10, meta={"step": 10, "metric": 1.0}, run_id=workdir_lib.Workdir(workdir).run_id(), params=exploded
  )
  mngr.close()
  assert loading.load_model(workdir).step == good.step
  assert len(warnings_naming(caplog, "best/10: its outputs (pooler cls, pooler cls_before_pooler) are not finite")) == 1
  out_dir = str(tmp_path / "export")
  assert export_hf.main([workdir, out_dir, "--checkpoint", "10"]) == 1  # Refused: nothing written.
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "are not finite on a probe batch" in err[0] and not os.path.exists(out_dir)
  assert export_hf.main([workdir, out_dir]) == 0  # Falls back to the good best checkpoint.
  from safetensors.numpy import load_file

  weights = load_file(os.path.join(out_dir, "model.safetensors"))
  assert all(np.isfinite(w).all() and np.abs(w).max() < 1e3 for w in weights.values())


def test_encode_refusing_a_model_leaves_no_partial_output(reference, tmp_path):
  ref_dir, _ = reference
  loaded = loading.load_model(ref_dir)
  encoder = encode.Encoder(loaded.spec, exploded_params(loaded.params))  # Built directly: no probe on the way.
  lines = tmp_path / "in.txt"
  lines.write_text("".join(f"sentence {i}\n" for i in range(20)))
  out = str(tmp_path / "x.npy")
  with pytest.raises(embedder.EmbeddingError, match="non-finite embeddings"):
    encode.encode_file(encoder, str(lines), out, chunk_size=8, progress=False)
  assert sorted(os.listdir(tmp_path)) == ["in.txt"]  # No x.npy, x.npy.partial or x.npy.progress.json.


# --------------------------------------------------------------------------
# 5. A damaged best checkpoint when training resumes.


def test_resume_verifies_the_best_checkpoint_and_falls_back_or_re_evaluates(
  reference, tiny_model_dir, small_data_dir, tmp_path, caplog
):
  ref_dir, ref_summary = reference
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  best = checkpoint_steps(ref_dir, workdir_lib.BEST_DIR)
  assert ref_summary["best_step"] == best[-1] == 9 and len(best) == 2
  # The newest best damaged: set aside, the older one is the best again, and the resume point (9) is evaluated
  # again, which is this run's best (its score is ref_summary's).
  workdir = str(tmp_path / "newest")
  shutil.copytree(ref_dir, workdir)
  damage(largest_file(os.path.join(workdir, workdir_lib.BEST_DIR, "9"), "params"), "flip")
  summary = train.train_and_evaluate(config, workdir)
  assert len(warnings_naming(caplog, "checkpoints/best/9 is not usable")) == 1
  assert len(warnings_naming(caplog, f"step 9, is gone (set aside or deleted); the best is now step {best[0]}")) == 1
  assert summary["best_step"] == 9 and summary["best_metric"] == ref_summary["best_metric"]
  assert loading.load_model(workdir).step == 9
  assert_same_params(saved_params(workdir, "best"), saved_params(ref_dir, "best"))
  # No line twice.
  assert [r["step"] for r in metrics_records(workdir)] == [r["step"] for r in metrics_records(ref_dir)]
  # Every best checkpoint damaged: none to fall back to; the resume point is evaluated and becomes the best.
  workdir = str(tmp_path / "all")
  shutil.copytree(ref_dir, workdir)
  for step in best:
    damage(largest_file(os.path.join(workdir, workdir_lib.BEST_DIR, str(step)), "params"), "truncate")
  summary = train.train_and_evaluate(config, workdir)
  assert summary["best_step"] == 9 and loading.load_model(workdir).step == 9


# --------------------------------------------------------------------------
# 6. One line, not a wall.


def test_a_full_disk_during_a_save_is_one_line(tiny_model_dir, small_data_dir, small_disk):
  disk = small_disk("32m")
  workdir = os.path.join(disk, "w")
  # 1 MB left when the save of latest/8 starts: orbax's write threads fail partway (each logged a traceback).
  run = _train_cli(
    workdir,
    tiny_model_dir,
    small_data_dir,
    {"FILL_DISK_BEFORE_SAVE_OF": "latest/8", "FILLER": os.path.join(disk, "filler"), "LEAVE": str(1 << 20)},
  )
  said = lines_said(run.stderr)
  assert run.returncode == 1 and len(said) == 1, said[:20]
  assert said[0].startswith("error: could not write checkpoint") and "latest/8" in said[0]
  assert "No space left" in said[0] or "RESOURCE_EXHAUSTED" in said[0]


def test_after_a_failed_save_orbax_s_unawaited_writes_are_not_warned_of(tmp_path):
  """The full-disk save above said three lines in one of eight runs: the error, then Python's warning for a write
  coroutine orbax created and never ran, collected after the error (``coroutine '...write_fragment' was never
  awaited`` and its tracemalloc hint). Here the failed save is certain and the coroutine is collected at once."""
  import gc
  import warnings

  class FailingManager:  # What CheckpointManager.save does on a full disk: raise partway.
    directory = str(tmp_path / "latest")

    def save(self, *args, **kwargs):
      raise OSError(28, "No space left on device")

  async def write_fragment():
    pass

  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    write_fragment()  # Before a failed save: warned of, as Python always does.
    gc.collect()
    assert [str(w.message) for w in caught] == [
      "coroutine 'test_after_a_failed_save_orbax_s_unawaited_writes_are_not_warned_of.<locals>.write_fragment' "
      "was never awaited"
    ]
    with pytest.raises(checkpoints.CheckpointError, match="could not write checkpoint .*No space left"):
      checkpoints.save(FailingManager(), 8, meta={}, run_id=None, params={"w": np.zeros(2)})
    write_fragment()  # After it: dropped.
    gc.collect()
    assert len(caught) == 1, [str(w.message) for w in caught]


def test_ctrl_c_is_one_line_and_the_same_command_resumes(reference, tiny_model_dir, small_data_dir, tmp_path):
  """Ctrl-C soon after a checkpoint (here: any time after it, as if younger than INTERRUPT_SAVE_AFTER_S) saves
  nothing more: the run resumes from that checkpoint."""
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  run = _train_cli(
    workdir, tiny_model_dir, small_data_dir, {"SIGINT_AT_STEP_INDEX": "6", "INTERRUPT_SAVE_AFTER_S": "1e9"}
  )
  assert run.returncode == 130
  assert lines_said(run.stderr) == [
    "interrupted at step 6; rerun the same command to resume (from its checkpoint at step 4)"
  ]
  assert _train_cli(workdir, tiny_model_dir, small_data_dir).returncode == 0
  assert_same_params(saved_params(workdir), saved_params(ref_dir))


def test_ctrl_c_saves_the_state_it_stops_at_and_the_resumed_run_is_the_same(
  reference, tiny_model_dir, small_data_dir, tmp_path
):
  """Ctrl-C lost up to checkpoint.every steps of work; now the state it stops at is saved (when the newest
  checkpoint is older than INTERRUPT_SAVE_AFTER_S, here 0) and the same command resumes from there, to the
  uninterrupted run's parameters and metrics steps."""
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  run = _train_cli(
    workdir, tiny_model_dir, small_data_dir, {"SIGINT_AT_STEP_INDEX": "7", "INTERRUPT_SAVE_AFTER_S": "0"}
  )
  assert run.returncode == 130
  assert lines_said(run.stderr) == [
    "interrupted at step 7; rerun the same command to resume (from its checkpoint at step 7)"
  ]
  latest = checkpoints.manager(os.path.join(workdir, workdir_lib.LATEST_DIR))
  assert 7 in latest.all_steps() and checkpoints.verify(latest, 7) is None
  latest.close()
  assert _train_cli(workdir, tiny_model_dir, small_data_dir).returncode == 0
  assert_same_params(saved_params(workdir), saved_params(ref_dir))
  assert [r["step"] for r in metrics_records(workdir)] == [r["step"] for r in metrics_records(ref_dir)]
  assert (
    json.load(open(os.path.join(workdir, "summary.json")))["best_step"]
    == json.load(open(os.path.join(ref_dir, "summary.json")))["best_step"]
  )


def test_a_finished_run_run_again_keeps_its_record(reference, tiny_model_dir, small_data_dir, tmp_path):
  """The same command on a finished run trains nothing and rewrites nothing: summary.json's provenance (the wall
  time the run took, when it was made) is the run's, not the rerun's."""
  ref_dir, ref_summary = reference
  workdir = str(tmp_path / "w")
  shutil.copytree(ref_dir, workdir)
  kept = {name: open(os.path.join(workdir, name), "rb").read() for name in ("summary.json", "metrics.jsonl")}
  summary = train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE), workdir)
  assert {k: summary[k] for k in ("steps", "best_step", "best_metric")} == {
    k: ref_summary[k] for k in ("steps", "best_step", "best_metric")
  }
  assert {name: open(os.path.join(workdir, name), "rb").read() for name in kept} == kept


def test_a_run_that_stops_closes_its_checkpoint_managers(tiny_model_dir, small_data_dir, tmp_path, monkeypatch):
  """An orbax manager left open at interpreter shutdown printed "cannot schedule new futures after interpreter
  shutdown" tracebacks after a run ended in an error."""
  import orbax.checkpoint as ocp

  made, closed = [], []
  manager, close = checkpoints.manager, ocp.CheckpointManager.close
  monkeypatch.setattr(checkpoints, "manager", lambda *a, **k: made.append(manager(*a, **k)) or made[-1])
  monkeypatch.setattr(ocp.CheckpointManager, "close", lambda self: (closed.append(self), close(self))[1])

  def fail(*args, **kwargs):
    raise train.WorkdirError("stopped after the managers were made")

  monkeypatch.setattr(start_lib, "build", fail)
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  with pytest.raises(train.WorkdirError, match="after the managers"):
    train.train_and_evaluate(config, str(tmp_path / "w"))
  assert len(made) == 2 and all(any(m is c for c in closed) for m in made)


def test_inference_settings_that_cannot_work_are_one_line(reference, tmp_path, capsys):
  ref_dir, _ = reference
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\n")
  out = str(tmp_path / "x.npy")
  cases = [
    (
      encode.main,
      ["--model", ref_dir, "--input", str(lines), "--output", out, "--batch_size", "0"],
      "batch_size must be >= 1, not 0",
    ),
    (
      evaluate.main,
      ["--model", ref_dir, "--tasks", "STSBenchmark", "--batch_size", "0"],
      "batch_size must be >= 1, not 0",
    ),
    (
      encode.main,
      ["--model", ref_dir, "--input", str(lines), "--output", out, "--max_seq_len", "1"],
      "max_seq_len must be at least 3",
    ),
    (
      encode.main,
      ["--model", ref_dir, "--input", str(lines), "--output", out, "--max_seq_len", "0"],
      "max_seq_len must be at least 3",
    ),  # Not silently the model's 128.
  ]
  for main, argv, expected in cases:
    capsys.readouterr()
    assert main(argv) == 1, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {expected}"), (argv, err)
    assert sorted(os.listdir(tmp_path)) == ["in.txt"], argv  # No .partial, nothing half-written.


def test_an_unknown_config_field_names_only_that_field(tmp_path):
  run = subprocess.run(
    [
      sys.executable,
      "-m",
      "jaxcse.train",
      "--config",
      os.path.join(REPO, "configs", "base.py"),
      "--workdir",
      str(tmp_path / "w"),
      "--config.model.name=x",
      "--config.train.batch_size=8",
      "--config.train.bogus=1",
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert run.returncode == 1
  assert run.stderr.strip().splitlines() == [
    "error: unknown config field 'bogus' in config.train.bogus (the config file lists every field)"
  ]
