"""Checkpoints that never lie and runs that survive: stale best checkpoints, non-finite parameters, corrupt or
incomplete checkpoints, kills during saves, a second process on the workdir, a full disk, a resumed encode."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from jaxcse.storage import checkpoints, description, loading, workdir as workdir_lib
from jaxcse import encode, train
from jaxcse.core import errors
from tests import helpers
from tests.helpers import (
  SCHEDULE,
  Interrupted,
  assert_same_params,
  checkpoint_steps,
  damage,
  largest_file,
  metrics_records,
  saved_params,
  train_cli_args,
  train_interrupted,
)

REPO = helpers.REPO


def test_resume_never_serves_a_stale_best_checkpoint(reference, tiny_model_dir, small_data_dir, tmp_path):
  ref_dir, ref_summary = reference
  workdir = str(tmp_path / "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  train_interrupted(config, workdir, 7)  # After the evaluation at step 6 (a best checkpoint) and the latest one at 4.
  assert checkpoint_steps(workdir, workdir_lib.LATEST_DIR) == [4]
  assert max(checkpoint_steps(workdir, workdir_lib.BEST_DIR)) > 4
  summary = train.train_and_evaluate(config, workdir)
  # The resumed run recomputed the evaluations after step 4: the best checkpoint it reports is the one it serves,
  # and equals the uninterrupted run's.
  assert {**summary, "workdir": None} == {**ref_summary, "workdir": None}
  assert max(checkpoint_steps(workdir, workdir_lib.BEST_DIR)) == summary["best_step"]
  assert loading.load_model(workdir).step == summary["best_step"]
  assert_same_params(saved_params(workdir, "best"), saved_params(ref_dir, "best"))
  assert_same_params(saved_params(workdir), saved_params(ref_dir))


def test_a_workdir_from_before_the_per_element_mask_resumes_with_its_own_shared_mask_bit_for_bit(
  reference, tiny_model_dir, small_data_dir, tmp_path
):
  """A config.json without ``model.attention_dropout_per_element`` was written by a jaxcse whose BERT shared its
  attention-dropout mask across the batch: the default config (per element) is refused with the flag that resumes
  it, and that flag resumes it exactly as the run it began would have gone on."""
  shared = helpers.tiny_config(
    tiny_model_dir, small_data_dir, **{**SCHEDULE, "model.attention_dropout_per_element": False}
  )
  ref_dir = str(tmp_path / "uninterrupted")
  ref_summary = train.train_and_evaluate(shared, ref_dir)
  # The two masks train different models here, so an equality below tells which one a run used.
  with pytest.raises(AssertionError):
    assert_same_params(saved_params(ref_dir), saved_params(reference[0]))

  workdir = str(tmp_path / "older")
  train_interrupted(shared, workdir, 5)  # Killed after the latest checkpoint at step 4.
  assert checkpoint_steps(workdir, workdir_lib.LATEST_DIR) == [4]
  config_path = os.path.join(workdir, "config.json")
  saved = json.load(open(config_path))
  del saved["model"]["attention_dropout_per_element"]  # As a jaxcse from before the field wrote it.
  with open(config_path, "w") as f:
    json.dump(saved, f)

  default = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  assert default.model.attention_dropout_per_element
  with pytest.raises(
    train.WorkdirError,
    match=r"attention_dropout_per_element \(False there, True here\).*\(--config\.model\.attention_dropout_per_element=False\)",
  ):
    train.train_and_evaluate(default, workdir)
  assert checkpoint_steps(workdir, workdir_lib.LATEST_DIR) == [4]  # The refusal wrote nothing.

  summary = train.train_and_evaluate(shared, workdir)
  assert {**summary, "workdir": None} == {**ref_summary, "workdir": None}
  assert_same_params(saved_params(workdir), saved_params(ref_dir))
  assert_same_params(saved_params(workdir, "best"), saved_params(ref_dir, "best"))


def test_a_fresh_start_on_another_runs_workdir_is_refused_unless_restarted(tiny_model_dir, small_data_dir, tmp_path):
  workdir = str(tmp_path / "w")
  # Killed before any latest checkpoint: only best ones exist.
  train_interrupted(helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE), workdir, 3)
  assert checkpoint_steps(workdir, workdir_lib.BEST_DIR) and not checkpoint_steps(workdir, workdir_lib.LATEST_DIR)
  other = helpers.tiny_config(
    tiny_model_dir, small_data_dir, **{**SCHEDULE, "train.learning_rate": 1e-3, "train.max_steps": 6}
  )
  with pytest.raises(train.WorkdirError, match="holds another run .* --restart"):
    train.train_and_evaluate(other, workdir)
  summary = train.train_and_evaluate(other, workdir, restart=True)
  assert max(checkpoint_steps(workdir, workdir_lib.BEST_DIR)) == summary["best_step"]
  assert json.load(open(os.path.join(workdir, "config.json")))["train"]["learning_rate"] == 1e-3
  records = metrics_records(workdir)
  assert [r["step"] for r in records if "loss" in r] == list(range(1, 7))  # Nothing of the first run is left.


def test_the_same_run_restarted_before_its_first_checkpoint_starts_clean(
  reference, tiny_model_dir, small_data_dir, tmp_path
):
  ref_dir, ref_summary = reference
  workdir = str(tmp_path / "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  train_interrupted(config, workdir, 3)
  summary = train.train_and_evaluate(config, workdir)  # Same config: no refusal; the stale best is recomputed.
  assert {**summary, "workdir": None} == {**ref_summary, "workdir": None}
  records = metrics_records(workdir)
  assert [r["step"] for r in records if "loss" in r] == list(range(1, 10))
  assert_same_params(saved_params(workdir, "best"), saved_params(ref_dir, "best"))


# The overflow is the point: numpy's cast of the infinite update warns, and that warning is expected here.
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_non_finite_parameters_are_never_saved_or_served(tiny_model_dir, small_data_dir, fresh_workdir, tmp_path):
  # lr 1e39: Adam's first update (lr x sign(g)) overflows float32, so the parameters after step 1 are infinite.
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    **{
      "train.learning_rate": 1e39,
      "train.max_grad_norm": 0.0,
      "checkpoint.every": 1,
      "eval.every": 10_000,
      "eval.at_end": False,
    },
  )
  with pytest.raises(
    train.NonFiniteLossError, match="non-finite parameters after step 1; stopped. The last good checkpoint is none"
  ):
    train.train_and_evaluate(config, fresh_workdir)
  assert not checkpoint_steps(fresh_workdir, workdir_lib.LATEST_DIR)
  # A checkpoint that does hold non-finite parameters (written by hand) is refused by every reader.

  nan_dir = str(tmp_path / "nan")
  shutil.copytree(os.path.join(fresh_workdir, workdir_lib.MODEL_DIR), os.path.join(nan_dir, workdir_lib.MODEL_DIR))
  spec = description.from_description(os.path.join(nan_dir, workdir_lib.MODEL_DIR))
  abstract = checkpoints.abstract_params(spec, jax.sharding.SingleDeviceSharding(jax.devices()[0]))
  mngr = checkpoints.manager(os.path.join(nan_dir, workdir_lib.BEST_DIR))
  checkpoints.save(
    mngr, 1, meta={}, run_id=None, params=jax.tree.map(lambda x: np.full(x.shape, np.nan, x.dtype), abstract)
  )
  mngr.close()
  with pytest.raises(checkpoints.CheckpointError, match="not finite"):
    loading.load_model(nan_dir)
  out = str(tmp_path / "x.npy")
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\n")
  assert encode.main(["--model", nan_dir, "--input", str(lines), "--output", out]) == 1
  assert not os.path.exists(out)


@pytest.mark.parametrize("how", ["truncate", "flip", "metadata"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(
  reference, tiny_model_dir, small_data_dir, tmp_path, caplog, how
):
  ref_dir, _ = reference
  workdir = str(tmp_path / "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  train_interrupted(config, workdir, 8)  # Latest checkpoints 4 and 8 exist.
  assert checkpoint_steps(workdir, workdir_lib.LATEST_DIR) == [4, 8]
  step8 = os.path.join(workdir, workdir_lib.LATEST_DIR, "8")
  if how == "metadata":
    damage(os.path.join(step8, "_CHECKPOINT_METADATA"), "delete")
  else:
    damage(largest_file(step8, "params"), how)
  train.train_and_evaluate(config, workdir)
  assert any("checkpoints/latest/8 is not usable" in r.getMessage() for r in caplog.records)
  # latest/8 as damaged; best/6, intact, because the run resumed from 4 evaluates step 6 again (never deleted).
  set_aside = os.listdir(os.path.join(workdir, workdir_lib.SET_ASIDE_DIR))
  assert sorted("-".join(name.split("-")[:2]) for name in set_aside) == ["best-6", "latest-8"]
  assert_same_params(saved_params(workdir), saved_params(ref_dir))


def test_a_damaged_best_checkpoint_falls_back_with_a_warning_then_errors(reference, tmp_path, caplog):
  ref_dir, ref_summary = reference
  workdir = str(tmp_path / "w")
  shutil.copytree(ref_dir, workdir)
  best = checkpoint_steps(workdir, workdir_lib.BEST_DIR)
  assert len(best) == 2
  damage(largest_file(os.path.join(workdir, workdir_lib.BEST_DIR, str(best[-1])), "params"), "truncate")
  loaded = loading.load_model(workdir)
  assert loaded.step == best[0]
  assert any(
    f"best/{best[-1]}" in r.getMessage() and "does not match its sha256" in r.getMessage() for r in caplog.records
  )
  damage(largest_file(os.path.join(workdir, workdir_lib.BEST_DIR, str(best[0])), "params"), "flip")
  with pytest.raises(checkpoints.CheckpointError, match="does not match its sha256"):
    loading.load_model(workdir)


def test_a_second_process_on_the_workdir_is_refused(tiny_model_dir, small_data_dir, fresh_workdir):
  import filelock

  os.makedirs(fresh_workdir)
  with filelock.FileLock(os.path.join(fresh_workdir, workdir_lib.LOCK_FILE)):
    with pytest.raises(train.WorkdirError, match="another process is training in this workdir"):
      train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir), fresh_workdir)
  assert os.listdir(fresh_workdir) == [workdir_lib.LOCK_FILE]  # Nothing written.


def test_a_full_disk_is_one_clear_error_and_resume_works_after(
  reference, tiny_model_dir, small_data_dir, small_disk, monkeypatch
):
  ref_dir, _ = reference
  disk = small_disk("64m")
  workdir = os.path.join(disk, "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  filler = os.path.join(disk, "filler")
  save = checkpoints.save

  def fill_then_save(mngr, step, **kwargs):
    if step == 8 and "latest" in str(mngr.directory):  # The disk fills up just before the second latest save.
      with open(filler, "wb", buffering=0) as f:  # Unbuffered: a partial last write leaves nothing for close to flush.
        try:
          while True:
            f.write(b"\0" * (1 << 20))
        except OSError:
          pass
    return save(mngr, step, **kwargs)

  monkeypatch.setattr(checkpoints, "save", fill_then_save)
  with pytest.raises(checkpoints.CheckpointError) as info:
    train.train_and_evaluate(config, workdir)
  message = str(info.value)
  assert "could not write checkpoint" in message and "latest/8" in message
  assert "No space left" in message or "RESOURCE_EXHAUSTED" in message or "ENOSPC" in message, message
  assert "\n" not in message
  assert checkpoint_steps(workdir, workdir_lib.LATEST_DIR) == [4]  # Nothing under the final name of step 8.
  monkeypatch.undo()
  os.remove(filler)
  train.train_and_evaluate(config, workdir)
  assert_same_params(saved_params(workdir), saved_params(ref_dir))


def test_kill_during_saves_resumes_to_the_same_parameters(reference, tiny_model_dir, small_data_dir, tmp_path):
  """kill -9 at random moments of a run that saves at every step: each resume ends where the reference does."""
  ref_dir, _ = reference
  workdir = str(tmp_path / "killed")
  cmd = [
    sys.executable,
    "-m",
    "jaxcse.train",
    *train_cli_args(workdir, tiny_model_dir, small_data_dir, **{**SCHEDULE, "checkpoint.every": 1}),
  ]
  rng = random.Random(0)
  for kill in range(3):
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:  # Wait for training to start saving, then a bit more.
      if os.path.exists(os.path.join(workdir, workdir_lib.LATEST_DIR)) and os.listdir(
        os.path.join(workdir, workdir_lib.LATEST_DIR)
      ):
        break
      time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 1.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
  assert subprocess.run(cmd, cwd=REPO, capture_output=True).returncode == 0
  assert_same_params(saved_params(workdir), saved_params(ref_dir))
  records = metrics_records(workdir)
  assert [r["step"] for r in records if "loss" in r] == list(range(1, 10))  # Nothing lost, nothing twice.


def test_a_resumed_encode_never_mixes_two_models(reference, tmp_path, monkeypatch):
  ref_dir, _ = reference
  lines = tmp_path / "in.txt"
  lines.write_text("".join(f"sentence number {i}\n" for i in range(40)))
  out = str(tmp_path / "x.npy")
  best = encode.Encoder.load(ref_dir, checkpoint="8", batch_size=8)  # Two checkpoints of the same run.
  latest = encode.Encoder.load(ref_dir, checkpoint="9", batch_size=8)
  assert (best.step, latest.step) == (8, 9) and best.fingerprint != latest.fingerprint
  real = best.encode
  calls = []

  def crash_after_one_chunk(chunk, **kw):
    if calls:
      raise Interrupted("killed")
    calls.append(1)
    return real(chunk, **kw)

  monkeypatch.setattr(best, "encode", crash_after_one_chunk)
  with pytest.raises(Interrupted):
    encode.encode_file(best, str(lines), out, chunk_size=10, progress=False, model_name=ref_dir)
  with pytest.raises(encode.EncodeError, match="another job .* checkpoint_step, params_sha256"):
    encode.encode_file(latest, str(lines), out, chunk_size=10, progress=False, model_name=ref_dir)
  assert not os.path.exists(out)
  monkeypatch.undo()
  sidecar = encode.encode_file(best, str(lines), out, chunk_size=10, progress=False, model_name=ref_dir)  # Resumes.
  assert sidecar["checkpoint_step"] == best.step and sidecar["params_sha256"] == best.fingerprint
  np.testing.assert_array_equal(np.load(out), best.encode([f"sentence number {i}" for i in range(40)]))


def test_command_line_mistakes_are_one_line(reference, tiny_model_dir, tmp_path, capsys):
  from jaxcse import evaluate, export_hf

  ref_dir, _ = reference
  empty = tmp_path / "empty.txt"
  empty.write_text("")
  cases = [
    (evaluate.main, ["--model", ref_dir, "--tasks", "nonsense"], "unknown task 'nonsense'"),
    (evaluate.main, ["--model", str(tmp_path / "nope"), "--tasks", "sts"], "nope: no such folder"),
    (evaluate.main, ["--model", ref_dir, "--checkpoint", "5"], "no checkpoint at step 5"),
    (
      encode.main,
      ["--model", ref_dir, "--input", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "a.npy")],
      "missing.txt",
    ),
    (
      export_hf.main,
      [ref_dir, str(tmp_path / "e"), "--pooler", "cls", "--checkpoint", "latest", "--masked_lm"],
      "no masked-LM head",
    ),
  ]
  for main, argv, expected in cases:
    capsys.readouterr()
    assert main(argv) == 1, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], (argv, err)
  # A workdir whose model description is missing: a clear error, not "Unrecognized model".
  broken = str(tmp_path / "broken")
  shutil.copytree(ref_dir, broken)
  os.remove(os.path.join(broken, workdir_lib.MODEL_DIR, "jaxcse.json"))
  capsys.readouterr()
  assert evaluate.main(["--model", broken]) == 1
  assert "not a jaxcse model description" in capsys.readouterr().err
  # An empty input is a mistake: one line, and nothing written.
  assert encode.main(["--model", ref_dir, "--input", str(empty), "--output", str(tmp_path / "e.npy")]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "empty.txt: no " in err[0] and "nothing to encode" in err[0], err
  assert not os.path.exists(tmp_path / "e.npy") and not os.path.exists(tmp_path / "e.npy.progress.json")
  assert errors.print_error(OSError(28, "No space left on device", "/x/y")) == 1
  assert capsys.readouterr().err == "error: /x/y: No space left on device\n"
