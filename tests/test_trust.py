"""Trust nothing unverified, delete nothing that is not ours: --restart only on a jaxcse workdir, checksum records
that vouch for every file, readers that serve exactly the checkpoint named, no non-finite or collapsed best, the
corpus record required on resume, the lock taken before the start point is read, set-aside copies deduplicated
and prunable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxcse.storage import checkpoints, description, loading, workdir as workdir_lib
from jaxcse import encode, export_hf, models, train
from jaxcse.core import files
from jaxcse.evaluation import sts_data, validation
from tests import helpers
from tests.helpers import SCHEDULE, lines_said, warnings_naming


@pytest.fixture
def config(tiny_model_dir, small_data_dir):
  """The ``reference`` run's config."""
  return helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)


def _copy(ref_dir: str, tmp_path, name: str = "w") -> str:
  workdir = str(tmp_path / name)
  shutil.copytree(ref_dir, workdir)
  return workdir


def _tree(folder: str) -> dict[str, bytes]:
  """Every file under ``folder`` and its bytes: what "untouched" compares."""
  return {
    os.path.relpath(os.path.join(root, name), folder): open(os.path.join(root, name), "rb").read()
    for root, _, names in os.walk(folder)
    for name in names
  }


def _write_record(folder: str, record: dict) -> None:
  with open(os.path.join(folder, checkpoints.CHECKSUMS), "w") as f:
    json.dump(record, f)


def _read_record(folder: str) -> dict:
  with open(os.path.join(folder, checkpoints.CHECKSUMS)) as f:
    return json.load(f)


# --------------------------------------------------------------------------
# --restart touches only a folder that holds a jaxcse run, and no advice says to delete what is not ours.


@pytest.fixture
def model_folder(tiny_model_dir, tmp_path) -> str:
  """A user's folder that is not a jaxcse workdir: a Hugging Face model with the names a run would write."""
  folder = str(tmp_path / "my_model")
  shutil.copytree(tiny_model_dir, folder)
  for name in (
    "metrics.jsonl",
    "summary.json",
    os.path.join("model", "weights.bin"),
    os.path.join("tensorboard", "events.out.tfevents.1"),
  ):
    os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
    with open(os.path.join(folder, name), "w") as f:
      f.write("the user's\n")
  assert os.path.isfile(os.path.join(folder, "config.json"))
  return folder


@pytest.mark.parametrize("restart", [True, False])
def test_a_folder_that_is_not_a_jaxcse_workdir_is_never_touched(
  model_folder, tiny_model_dir, small_data_dir, restart, capsys
):
  before = _tree(model_folder)
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **SCHEDULE)
  with pytest.raises(train.WorkdirError, match=f"^{model_folder} is not a jaxcse workdir") as raised:
    train.train_and_evaluate(config, model_folder, restart=restart)
  assert "pass --restart" not in str(raised.value) and "\n" not in str(raised.value)
  assert _tree(model_folder) == before  # Before: --restart deleted config.json, model/, metrics.jsonl, ...
  # The command: one line, exit 1, nothing touched.
  args = helpers.train_cli_args(model_folder, tiny_model_dir, small_data_dir, **SCHEDULE) + ["--restart"] * restart
  run = subprocess.run(
    [sys.executable, "-m", "jaxcse.train", *args], cwd=helpers.REPO, capture_output=True, text=True, timeout=600
  )
  said = lines_said(run.stderr)
  assert run.returncode == 1 and len(said) == 1 and said[0].startswith(f"error: {model_folder} is not a jaxcse"), said
  assert _tree(model_folder) == before


def test_clear_removes_nothing_from_a_folder_without_a_run(model_folder):
  before = _tree(model_folder)
  workdir_lib.Workdir(model_folder).clear()
  assert _tree(model_folder) == before


# --------------------------------------------------------------------------
# A checksum record lists every file it vouches for and matches them all.


def test_an_empty_or_partial_record_vouches_for_nothing(tmp_path):
  folder = str(tmp_path / "f")
  os.makedirs(os.path.join(folder, "sub"))
  for name in ("a", os.path.join("sub", "b")):
    with open(os.path.join(folder, name), "w") as f:
      f.write(name)
  files.record_digests(folder, "sha256.json")
  assert files.digest_mismatch(folder, "sha256.json") is None
  full = _read_record(folder)
  _write_record(folder, {})
  assert files.digest_mismatch(folder, "sha256.json") == "sha256.json is unreadable (it lists no file)"
  _write_record(folder, {"a": full["a"]})
  assert files.digest_mismatch(folder, "sha256.json").startswith(f"{os.path.join('sub', 'b')} is not in sha256.json")
  _write_record(folder, {**full, "c": full["a"]})
  assert files.digest_mismatch(folder, "sha256.json") == "c is missing"
  _write_record(folder, {"a": 3})
  assert files.digest_mismatch(folder, "sha256.json").startswith("sha256.json is unreadable")


def test_a_checkpoint_whose_record_is_empty_is_not_served(reference, config, tmp_path, caplog):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  best9 = os.path.join(workdir, workdir_lib.BEST_DIR, "9")
  _write_record(best9, {})  # Before: verified, and served (with any byte of it flipped, 5 of 7 times).
  loaded = loading.load_model(workdir)
  assert loaded.step == 6
  assert len(warnings_naming(caplog, "best/9: sha256.json is unreadable (it lists no file)")) == 1
  # The trainer's resume sets it aside as damaged, and evaluates step 9 again.
  caplog.clear()
  summary = train.train_and_evaluate(config, workdir)
  assert summary["best_step"] == 9
  assert len(warnings_naming(caplog, "best/9 is not usable (sha256.json is unreadable")) == 1


def test_a_partial_record_of_a_latest_checkpoint_is_refused_on_resume(reference, config, tmp_path, caplog):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  latest9 = os.path.join(workdir, workdir_lib.LATEST_DIR, "9")
  record = _read_record(latest9)
  params_file = helpers.largest_file(latest9, "params")
  dropped = os.path.relpath(params_file, latest9)
  _write_record(latest9, {k: v for k, v in record.items() if k != dropped})
  helpers.damage(params_file, "flip")  # What the record no longer vouches for is damaged.
  os.remove(os.path.join(workdir, "summary.json"))
  train.train_and_evaluate(config, workdir)
  said = warnings_naming(caplog, f"latest/9 is not usable ({dropped} is not in sha256.json")
  assert len(said) == 1  # Before: resumed from the damaged step 9 (the flipped bytes read as weights).
  helpers.assert_same_params(helpers.saved_params(workdir), helpers.saved_params(ref_dir))


@pytest.mark.parametrize("fault", ["empty", "partial", "deleted"])
def test_a_description_record_that_does_not_vouch_for_every_file_is_refused(reference, config, tmp_path, fault, capsys):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  model_dir = os.path.join(workdir, workdir_lib.MODEL_DIR)
  record_path = os.path.join(model_dir, description.DESCRIPTION_RECORD)
  record = _read_record(model_dir)
  # As the probe: a changed activation, which the record no longer vouches for.
  with open(os.path.join(model_dir, "config.json")) as f:
    hf_config = json.load(f)
  hf_config["hidden_act"] = "relu"
  with open(os.path.join(model_dir, "config.json"), "w") as f:
    json.dump(hf_config, f)
  if fault == "empty":
    _write_record(model_dir, {})
    expected = f"{record_path} is unreadable (it lists no file)"
  elif fault == "partial":
    _write_record(model_dir, {k: v for k, v in record.items() if k != "config.json"})
    expected = f"{os.path.join(model_dir, 'config.json')} is not in sha256.json"
  else:
    os.remove(record_path)
    expected = f"{record_path} is missing"
  before = _tree(workdir)
  with pytest.raises(description.DescriptionError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
    loading.load_model(workdir)
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\n")
  capsys.readouterr()
  assert encode.main(["--model", workdir, "--input", str(lines), "--output", str(tmp_path / "x.npy")]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: " + expected), err
  # The trainer refuses too, and writes no fresh record over the changed description (before: it did, when deleted).
  with pytest.raises(description.DescriptionError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
    train.train_and_evaluate(config, workdir)
  assert _tree(workdir) == before


# --------------------------------------------------------------------------
# A reader serves exactly the checkpoint named, or refuses.


def test_a_reader_serves_the_checkpoint_folder_named(reference, tmp_path):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  shutil.rmtree(os.path.join(workdir, workdir_lib.LATEST_DIR, "9"))  # So the newest latest (8) is not the best (9).
  latest = loading.load_model(os.path.join(workdir, workdir_lib.LATEST_DIR))
  assert (latest.step, latest.checkpoints) == (8, "latest")  # Before: the workdir's best, step 9.
  best = loading.load_model(os.path.join(workdir, workdir_lib.BEST_DIR))
  assert (best.step, best.checkpoints) == (9, "best")
  assert loading.load_model(os.path.join(workdir, workdir_lib.BEST_DIR, "6")).step == 6
  assert loading.load_model(os.path.join(workdir, workdir_lib.BEST_DIR), checkpoint="6").step == 6
  with pytest.raises(checkpoints.CheckpointError, match="names the best checkpoints; --checkpoint latest"):
    loading.load_model(os.path.join(workdir, workdir_lib.BEST_DIR), checkpoint="latest")


def test_a_set_aside_checkpoint_or_another_folder_is_refused(reference, tmp_path, capsys):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  aside = os.path.join(workdir, workdir_lib.SET_ASIDE_DIR, "best-6-20260101T000000")
  shutil.copytree(os.path.join(workdir, workdir_lib.BEST_DIR, "6"), aside)
  for path, expected in [
    (aside, "a set-aside checkpoint"),
    (os.path.join(workdir, workdir_lib.MODEL_DIR), "not a checkpoint of the workdir"),
    (os.path.join(workdir, "checkpoints"), "not a checkpoint of the workdir"),
  ]:
    with pytest.raises(checkpoints.CheckpointError, match=f"^{path}: {expected}"):  # Before: served best/9.
      loading.load_model(path)
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\n")
  capsys.readouterr()
  assert encode.main(["--model", aside, "--input", str(lines), "--output", str(tmp_path / "x.npy")]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"error: {aside}: a set-aside checkpoint"), err
  assert not os.path.exists(tmp_path / "x.npy")


# --------------------------------------------------------------------------
# A non-finite or degenerate evaluation never becomes best; a collapsed encoder is refused by readers.


def test_a_non_finite_metric_never_becomes_best_and_never_blocks_a_finite_one():
  none = validation.BestSoFar()
  assert not none.improved_by(float("nan")) and not none.improved_by(float("inf"))
  assert none.after(3, float("nan"), {"stsb_dev": float("nan")}).step is None
  kept_nan = validation.BestSoFar(step=3, metric=float("nan"))  # As an older jaxcse kept it.
  assert kept_nan.improved_by(-0.5)
  assert validation.BestSoFar(step=3, metric=0.2).improved_by(0.3)
  assert not validation.BestSoFar(step=3, metric=0.2).improved_by(0.1)


def collapsed_params(params):
  """Params whose every LayerNorm scale is 0: each token's output is the last LayerNorm's bias, for any sentence."""

  def collapse(path, x):
    x = np.asarray(x)
    return np.zeros_like(x) if jax.tree_util.keystr(path).endswith("['scale']") else x

  return jax.tree_util.tree_map_with_path(collapse, jax.device_get(params))


def test_a_collapsed_evaluation_is_not_saved_as_best(reference, config, small_data_dir, tmp_path, caplog):
  ref_dir, _ = reference
  loaded = loading.load_model(ref_dir)
  mngr = checkpoints.manager(str(tmp_path / "best"))
  written = []
  evaluator = validation.Evaluator(
    config,
    loaded.spec,
    attend_padding=False,
    heldout=None,
    dev_sets=sts_data.load_dev_sets(small_data_dir, sickr=config.eval.sickr_dev),
    best_manager=mngr,
    run_id=None,
    write=written.append,
  )
  after = evaluator(3, collapsed_params(loaded.params), validation.BestSoFar())
  assert np.isnan(written[0]["eval/metric"])
  assert after.step is None and after.metric is None and mngr.all_steps() == []  # Before: best/3 with NaN.
  assert len(warnings_naming(caplog, "step 3: the dev evaluation's eval/metric is nan")) == 1
  after = evaluator(6, loaded.params, after)  # A finite evaluation then becomes the best.
  assert after.step == 6 and mngr.all_steps() == [6]
  mngr.close()


def _export_and_encode_refuse(named: str, tmp_path, capsys, says: str) -> None:
  """``export_hf`` and ``encode`` of checkpoint folder ``named``: each exit 1, one ``error:`` line saying ``says``,
  nothing written."""
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\nanother one\n")
  for main, argv in [
    (export_hf.main, [named, str(tmp_path / "export")]),
    (encode.main, ["--model", named, "--input", str(lines), "--output", str(tmp_path / "x.npy")]),
  ]:
    capsys.readouterr()
    assert main(argv) == 1, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and err[0].startswith("error: "), err
  assert not os.path.exists(tmp_path / "export") and not os.path.exists(tmp_path / "x.npy")


def test_a_collapsed_encoder_is_refused_at_export_and_encode(reference, tmp_path, capsys):
  ref_dir, ref_summary = reference
  workdir = _copy(ref_dir, tmp_path)
  best_dir = os.path.join(workdir, workdir_lib.BEST_DIR)
  good = loading.load_model(workdir)
  shutil.rmtree(os.path.join(best_dir, "9"))
  mngr = checkpoints.manager(best_dir)
  checkpoints.save(
    mngr,
    9,
    meta={"step": 9, "metric": ref_summary["best_metric"]},
    run_id=workdir_lib.Workdir(workdir).run_id(),
    params=collapsed_params(good.params),
  )
  mngr.close()
  # Before: exit 0, every sentence the same vector.
  _export_and_encode_refuse(os.path.join(best_dir, "9"), tmp_path, capsys, "as the same vector")
  assert loading.load_model(workdir).step == 6  # The workdir's best falls back to the newest good one.


def test_a_model_that_tells_sentences_apart_passes_the_collapse_probe(reference):
  ref_dir, _ = reference
  loaded = loading.load_model(ref_dir)
  assert checkpoints.output_probe(loaded.spec)(loaded.params, distinct=True) is None


# --------------------------------------------------------------------------
# A checkpoint folder copied in from another run, or renamed to another step: whole, but not this run's.

OTHER_RUN = "f" * 32  # A run id no run here has.


def _plant(workdir: str, folder: str, step: int, *, saved_as: int, run_id: str | None, params, meta: dict) -> str:
  """Replaces ``folder/step`` with a checkpoint saved elsewhere as step ``saved_as`` of run ``run_id``: whole (its
  own ``sha256.json`` matches), moved in as another run's folder would be. Returns its path."""
  elsewhere = checkpoints.manager(os.path.join(workdir, "..", "elsewhere", os.path.basename(folder)))
  checkpoints.save(elsewhere, saved_as, meta=meta, run_id=run_id, params=params[0], **params[1])
  elsewhere.close()
  dest = os.path.join(workdir, folder, str(step))
  shutil.rmtree(dest)
  shutil.move(os.path.join(str(elsewhere.directory), str(saved_as)), dest)
  assert checkpoints.verify_folder(dest) is None  # Whole: only its metadata tells it is not this run's step.
  return dest


@pytest.mark.parametrize("whose", ["another run", "another step", "an older jaxcse's run"])
def test_a_checkpoint_copied_from_another_run_or_step_is_never_served_as_this_runs(
  reference, tmp_path, capsys, caplog, whose
):
  ref_dir, ref_summary = reference
  workdir = _copy(ref_dir, tmp_path)
  good = loading.load_model(workdir)
  assert good.step == 9
  other = jax.tree.map(lambda x: x * 1.5, good.params)  # Another model: what would be served in its place.
  run_id = {
    "another run": OTHER_RUN,
    "another step": workdir_lib.Workdir(workdir).run_id(),
    "an older jaxcse's run": None,
  }
  saved_as = 7 if whose == "another step" else 9
  named = _plant(
    workdir,
    workdir_lib.BEST_DIR,
    9,
    saved_as=saved_as,
    run_id=run_id[whose],
    params=(other, {}),
    meta={"step": saved_as, "metric": ref_summary["best_metric"] + 0.1},
  )
  why = "saved as step 7, not 9" if whose == "another step" else "belongs to another run"
  # Before: exit 0, the other run's model served (and carded) as this run's step 9.
  _export_and_encode_refuse(named, tmp_path, capsys, why)
  caplog.clear()
  assert loading.load_model(workdir).step == 6  # The workdir's best falls back to this run's newest one.
  assert len(warnings_naming(caplog, f"best/9: {'its metadata says it was' if whose == 'another step' else 'it'}")) == 1


def test_a_latest_checkpoint_from_another_run_is_set_aside_and_the_resume_is_this_runs(
  reference, config, tmp_path, caplog
):
  ref_dir, ref_summary = reference
  workdir = _copy(ref_dir, tmp_path)
  latest_9 = os.path.join(workdir, workdir_lib.LATEST_DIR, "9")
  meta_file = os.path.join(latest_9, "meta", "metadata")
  with open(meta_file) as f:
    meta = json.load(f)
  assert meta[checkpoints.RUN_KEY] == workdir_lib.Workdir(workdir).run_id() and meta[checkpoints.SAVED_STEP_KEY] == 9
  files.write_json(meta_file, {**meta, checkpoints.RUN_KEY: OTHER_RUN})  # Another run's step 9, its record redone:
  files.write_json(os.path.join(latest_9, checkpoints.CHECKSUMS), checkpoints._file_digests(latest_9))
  assert checkpoints.verify_folder(latest_9) is None  # whole, as a folder copied from that run's workdir is.
  summary = train.train_and_evaluate(config, workdir)  # Before: resumed from the other run's state at step 9.
  set_aside = warnings_naming(caplog, "latest/9 is not usable (it belongs to another run")
  assert len(set_aside) == 1, set_aside
  assert summary["best_metric"] == ref_summary["best_metric"] and summary["best_step"] == ref_summary["best_step"]


# --------------------------------------------------------------------------
# inputs.json: deleted, or null for a corpus of files, on resume.


@pytest.mark.parametrize("fault", ["deleted", "null"])
def test_a_resume_without_the_corpus_record_is_refused(reference, config, tmp_path, fault):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  path = os.path.join(workdir, workdir_lib.INPUTS_FILE)
  if fault == "deleted":
    os.remove(path)
  else:
    with open(path, "w") as f:
      json.dump({"corpus_sha256": None}, f)
  os.remove(os.path.join(workdir, "summary.json"))
  before = _tree(workdir)
  expected = f"{path} is missing" if fault == "deleted" else f"{path} records no sha256 for the training corpus"
  with pytest.raises(train.WorkdirError, match="^" + expected):  # Before: resumed, on whatever corpus is there.
    train.train_and_evaluate(config, workdir)
  assert _tree(workdir) == before


# --------------------------------------------------------------------------
# The start point is read under the workdir's lock.


def test_the_start_point_is_read_under_the_lock(reference, config, tmp_path, monkeypatch):
  import filelock

  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  held = []
  start_point = workdir_lib.Workdir.start_point

  def probing(self, restart):
    try:
      filelock.FileLock(self.join(workdir_lib.LOCK_FILE)).acquire(timeout=0).lock.release()
      held.append(False)
    except filelock.Timeout:
      held.append(True)
    return start_point(self, restart)

  monkeypatch.setattr(workdir_lib.Workdir, "start_point", probing)
  train.train_and_evaluate(config, workdir)
  assert held and all(held), held  # Before: read before the lock was taken.


# --------------------------------------------------------------------------
# Set-aside copies: the same content is kept once; --prune_set_aside removes them and nothing else.


def test_the_same_checkpoint_set_aside_twice_is_kept_once(reference, tmp_path, caplog):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  params = loading.load_model(workdir).params
  best_dir = os.path.join(workdir, workdir_lib.BEST_DIR)
  mngr = checkpoints.manager(best_dir)
  original = checkpoints.set_aside(mngr, 9, "a test", intact=True)  # The run's own best/9.
  run_id = workdir_lib.Workdir(workdir).run_id()
  copies = []
  for _ in range(2):  # The same arrays and metadata saved twice: other files (orbax's names and times) each time.
    checkpoints.save(mngr, 9, meta={"step": 9, "metric": 0.5}, run_id=run_id, params=params)
    copies.append(_tree(os.path.join(best_dir, "9")))
    checkpoints.set_aside(mngr, 9, "a test", intact=True)
  checkpoints.save(
    mngr, 9, meta={"step": 9, "metric": 0.5}, run_id=run_id, params=jax.tree.map(lambda x: x + 1, params)
  )
  checkpoints.set_aside(mngr, 9, "a test", intact=True)  # Other arrays: kept.
  mngr.close()
  assert copies[0] != copies[1]
  set_aside = sorted(os.listdir(os.path.join(workdir, workdir_lib.SET_ASIDE_DIR)))
  assert len(set_aside) == 3 and os.path.basename(original) in set_aside  # Before: 4.
  said = warnings_naming(caplog, "the same arrays and metadata are already set aside in")
  assert len(said) == 1 and "best/9 is intact but a test" in said[0]
  for name in set_aside:
    assert files.digest_mismatch(os.path.join(workdir, workdir_lib.SET_ASIDE_DIR, name), checkpoints.CHECKSUMS) is None


def test_a_damaged_checkpoint_is_never_taken_for_a_copy(reference, tmp_path):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  best_dir = os.path.join(workdir, workdir_lib.BEST_DIR)
  saved = os.path.join(tmp_path, "best9")
  shutil.copytree(os.path.join(best_dir, "9"), saved)
  mngr = checkpoints.manager(best_dir)
  checkpoints.set_aside(mngr, 9, "a test", intact=True)
  shutil.copytree(saved, os.path.join(best_dir, "9"))
  helpers.damage(helpers.largest_file(os.path.join(best_dir, "9"), "params"), "flip")
  mngr.reload()
  checkpoints.set_aside(mngr, 9, "damaged")
  mngr.close()
  assert len(os.listdir(os.path.join(workdir, workdir_lib.SET_ASIDE_DIR))) == 2


def test_prune_set_aside_removes_them_and_nothing_else(reference, tmp_path):
  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  aside = os.path.join(workdir, workdir_lib.SET_ASIDE_DIR)
  for n in range(3):
    shutil.copytree(os.path.join(workdir, workdir_lib.BEST_DIR, "6"), os.path.join(aside, f"best-6-2026010{n}"))
  run_files = {k: v for k, v in _tree(workdir).items() if not k.startswith(workdir_lib.SET_ASIDE_DIR)}
  size = sum(len(v) for k, v in _tree(workdir).items() if k.startswith(workdir_lib.SET_ASIDE_DIR))
  run = subprocess.run(
    [sys.executable, "-m", "jaxcse.train", "--workdir", workdir, "--prune_set_aside"],
    cwd=helpers.REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert run.returncode == 0, run.stderr
  assert run.stdout.strip() == (
    f"removed 3 set-aside checkpoints ({size / 1e6:.1f} MB) from {aside}; the run's "
    "checkpoints, description and logs are untouched"
  )
  assert _tree(workdir) == run_files and not os.path.exists(aside)
  assert workdir_lib.Workdir(workdir).prune_set_aside() == f"{aside}: no set-aside checkpoint; nothing removed"
  # Not a workdir: one line, nothing removed.
  other = str(tmp_path / "other")
  os.makedirs(os.path.join(other, workdir_lib.SET_ASIDE_DIR.replace("set_aside", "x")))
  run = subprocess.run(
    [sys.executable, "-m", "jaxcse.train", "--workdir", other, "--prune_set_aside"],
    cwd=helpers.REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  said = lines_said(run.stderr)
  assert run.returncode == 1 and len(said) == 1 and said[0].startswith(f"error: {other}: not a jaxcse workdir"), said
  assert os.path.isdir(os.path.join(other, "checkpoints", "x"))


# --------------------------------------------------------------------------
# Damaged inputs and full disks: one line, before anything is written, and nothing half-written left.


def test_evaluate_with_a_damaged_workdir_config_is_one_line_before_it_evaluates(
  reference, tmp_path, capsys, monkeypatch
):
  from jaxcse import evaluate

  ref_dir, _ = reference
  workdir = _copy(ref_dir, tmp_path)
  config_path = os.path.join(workdir, "config.json")
  with open(config_path, "w") as f:
    f.write('{"train": ')

  def must_not_run(*args, **kwargs):
    raise AssertionError("evaluated before the damaged config.json was found")

  monkeypatch.setattr(evaluate, "evaluate_sts", must_not_run)
  out = tmp_path / "results.json"
  capsys.readouterr()
  assert evaluate.main(["--model", workdir, "--tasks", "STSBenchmark", "--output", str(out)]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  # Before: the evaluation ran, then a JSONDecodeError traceback, and no results.
  assert len(err) == 1 and err[0].startswith(f"error: {config_path}: unreadable (JSONDecodeError"), err
  assert not out.exists()


def test_a_truncated_base_model_is_one_line_in_train_and_encode(tiny_model_dir, small_data_dir, tmp_path, capsys):
  base = str(tmp_path / "base")
  shutil.copytree(tiny_model_dir, base)
  helpers.damage(os.path.join(base, "model.safetensors"), "truncate")
  workdir = str(tmp_path / "w")
  with pytest.raises(
    models.weights.WeightsError,
    match=f"^{os.path.join(base, 'model.safetensors')}: unreadable "
    r"weights \(SafetensorError",
  ):
    train.train_and_evaluate(helpers.tiny_config(base, small_data_dir, **SCHEDULE), workdir)
  assert not os.path.exists(workdir)
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\n")
  capsys.readouterr()
  assert encode.main(["--model", base, "--input", str(lines), "--output", str(tmp_path / "x.npy")]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and "model.safetensors" in err[0], err  # Before: traceback.


@pytest.mark.parametrize("writer", ["safetensors", "tokenizer"])
def test_export_to_a_full_disk_is_one_line_and_leaves_nothing(reference, tmp_path, capsys, monkeypatch, writer):
  from safetensors import SafetensorError
  from transformers import PreTrainedTokenizerBase

  ref_dir, _ = reference
  if writer == "safetensors":  # What each writer raises when the disk is full.

    def full_disk(*args, **kwargs):
      raise SafetensorError(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
      )

    monkeypatch.setattr(export_hf, "save_file", full_disk)
  else:

    def full_disk(self, *args, **kwargs):
      raise Exception("No space left on device (os error 28)")

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", full_disk)
  out = tmp_path / "export"
  capsys.readouterr()
  assert export_hf.main([ref_dir, str(out)]) == 1  # Before: a traceback.
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"error: {out}: could not write the export ("), err
  assert "No space left on device" in err[0]
  assert os.listdir(tmp_path) == []  # No export, no temporary folder.


def test_encode_to_a_full_disk_is_one_line_not_sigbus(reference, tmp_path, capsys, monkeypatch):
  import errno

  ref_dir, _ = reference
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\nanother\n")
  out = tmp_path / "out" / "x.npy"
  os.makedirs(out.parent)

  def full_disk(fd, offset, length):  # What posix_fallocate says on a disk without room for the output.
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(os, "posix_fallocate", full_disk)
  capsys.readouterr()
  assert encode.main(["--model", ref_dir, "--input", str(lines), "--output", str(out)]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"error: {out}.partial: No space left on device"), err
  assert os.listdir(out.parent) == []
  monkeypatch.undo()  # Room again: the same command writes it.
  assert encode.main(["--model", ref_dir, "--input", str(lines), "--output", str(out)]) == 0
  assert np.load(out).shape == (2, 32) and np.isfinite(np.load(out)).all()


# 32 KB left: the reservation of the 51 KB output fails (before: SIGBUS, rc 135). 4 KB left, one page: the memory
# map's own first write fails (before: "error: [Errno 28] No space left on device", naming no file).
@pytest.mark.parametrize("filler_kb", [32, 60])
def test_encode_to_a_full_tmpfs_is_one_line(reference, tmp_path, small_disk, capsys, filler_kb):
  ref_dir, _ = reference
  disk = small_disk("64k")
  lines = tmp_path / "in.txt"
  lines.write_text("a sentence\n" * 400)  # 400 x 32 float32: 51 KB, more than is left.
  with open(os.path.join(disk, "filler"), "wb") as f:
    f.write(b"\0" * filler_kb * 1024)
  out = os.path.join(disk, "x.npy")
  capsys.readouterr()
  assert encode.main(["--model", ref_dir, "--input", str(lines), "--output", out]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and f"{out}.partial" in err[0] and "No space left on device" in err[0], err
  assert sorted(os.listdir(disk)) == ["filler"]


def test_a_config_file_missing_a_field_is_one_line_before_anything_is_written(tiny_model_dir, small_data_dir, tmp_path):
  config_file = tmp_path / "lacking.py"
  config_file.write_text(
    "from jaxcse.configs import base\n\n\ndef get_config():\n  config = base.get_config()\n"
    "  del config.eval['sickr_dev']\n  return config\n"
  )
  workdir = str(tmp_path / "w")
  args = helpers.train_cli_args(workdir, tiny_model_dir, small_data_dir, **SCHEDULE)
  args[args.index("--config") + 1] = str(config_file)
  run = subprocess.run(
    [sys.executable, "-m", "jaxcse.train", *args], cwd=helpers.REPO, capture_output=True, text=True, timeout=600
  )
  said = lines_said(run.stderr)
  # Before: a traceback (AttributeError), after the workdir was written.
  assert run.returncode == 1 and said == [
    f"error: {config_file}: the config lacks eval.sickr_dev (every config has "
    "the fields of configs/base.py: start from base.get_config(), as the "
    "shipped configs do)"
  ], said
  assert not os.path.exists(workdir)


def test_every_shipped_config_has_every_field():
  from jaxcse.training import cli

  for name in cli.shipped_configs():
    config = __import__(f"jaxcse.configs.{name}", fromlist=["get_config"]).get_config()
    cli.check_fields(config, name)


def test_ctrl_c_on_encode_is_one_line_and_resumable(reference, tmp_path, capsys, monkeypatch):
  ref_dir, _ = reference
  lines = tmp_path / "in.txt"
  sentences = [f"sentence number {i}" for i in range(6)]
  lines.write_text("".join(s + "\n" for s in sentences))
  out = str(tmp_path / "x.npy")
  argv = ["--model", ref_dir, "--input", str(lines), "--output", out, "--chunk_size", "2"]
  encode_chunk = encode.Encoder.encode
  calls = []

  def ctrl_c_at_the_second_chunk(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise KeyboardInterrupt
    return encode_chunk(self, *args, **kwargs)

  monkeypatch.setattr(encode.Encoder, "encode", ctrl_c_at_the_second_chunk)
  capsys.readouterr()
  assert encode.main(argv) == 130  # Before: a KeyboardInterrupt traceback.
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [f"interrupted; 2 of 6 rows are in {out}.partial: rerun the same command to resume"], err
  monkeypatch.undo()
  assert encode.main(argv) == 0
  whole = str(tmp_path / "whole.npy")  # The same command, never interrupted: the same bytes.
  assert encode.main([*argv[:5], whole, *argv[6:]]) == 0
  np.testing.assert_array_equal(np.load(out), np.load(whole))


def test_ctrl_c_while_a_command_starts_is_one_line(tmp_path, monkeypatch, capsys):
  import importlib
  import tomllib

  from jaxcse import entry

  def interrupted(name):  # Ctrl-C while Python imports the command's module (JAX and the libraries).
    raise KeyboardInterrupt

  monkeypatch.setattr(importlib, "import_module", interrupted)
  with pytest.raises(SystemExit) as exited:
    entry.train()
  assert exited.value.code == 130  # Before: a KeyboardInterrupt traceback from the import.
  assert capsys.readouterr().err.strip().splitlines() == ["interrupted as the command started; nothing was written"]
  monkeypatch.undo()
  # Every console script goes through such an entry point, to its command's own function.
  with open(os.path.join(helpers.REPO, "pyproject.toml"), "rb") as f:
    scripts = tomllib.load(f)["project"]["scripts"]
  for name, target in scripts.items():
    module, function = target.split(":")
    assert module == "jaxcse.entry" and callable(getattr(entry, function)), name


def test_ctrl_c_while_the_flags_load_is_one_line(tmp_path):
  script = (
    "import sys\nfrom jaxcse import train\nfrom jaxcse.training import cli\n\ndef ctrl_c(*args):\n  raise KeyboardInterrupt\n\n"
    "cli.train_flags = ctrl_c\nsys.argv[0] = 'jaxcse.train'\ntrain.run()\n"
  )
  workdir = str(tmp_path / "w")
  run = subprocess.run(
    [sys.executable, "-c", script, "--config", "quickstart", "--workdir", workdir],
    cwd=helpers.REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  said = lines_said(run.stderr)
  assert run.returncode == 130 and said == ["interrupted before the run started; nothing was written"], said
  assert not os.path.exists(workdir)


def test_a_batch_of_one_row_without_a_negative_is_refused_before_anything_is_written(
  tiny_model_dir, small_data_dir, tmp_path
):
  from jaxcse import data as data_lib
  from jaxcse.training import configuration, inputs

  workdir = str(tmp_path / "w")
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, **{**SCHEDULE, "train.batch_size": 1})
  # Before: trained to the end (exit 0) with the loss and gradient identically 0.
  with pytest.raises(configuration.ConfigError, match="train.batch_size 1 leaves method simcse no negative"):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(workdir)
  # Triplets give a row a negative of its own: MNRL with one row is a loss; pairs alone are not.
  path = str(tmp_path / "triplets.jsonl")
  helpers.write_jsonl(path, helpers.small_triplets(small_data_dir, 8))
  triplets = data_lib.load_corpus(path)
  mnrl = helpers.tiny_config(tiny_model_dir, small_data_dir, "pairs", **{"train.batch_size": 1, "data.train": path})
  inputs.check_one_row_batch(mnrl, triplets)
  pairs_path = str(tmp_path / "pairs.jsonl")
  helpers.write_jsonl(
    pairs_path, [{"anchor": r["anchor"], "positive": r["positive"]} for r in helpers.small_triplets(small_data_dir, 8)]
  )
  with pytest.raises(configuration.ConfigError, match="leaves method mnrl no negative"):
    inputs.check_one_row_batch(mnrl, data_lib.load_corpus(pairs_path))
  dclr = helpers.tiny_config(tiny_model_dir, small_data_dir, "dclr", **{"train.batch_size": 1})
  inputs.check_one_row_batch(dclr, data_lib.load_corpus(dclr.data.train, root=small_data_dir))
