"""Every command as a new user meets it: ``--help`` from outside the repository, and mistakes that change nothing.

A command checks its config, data, model and output location before it creates or changes anything on disk; so a
bad input leaves the workdir or output path exactly as it was (absent stays absent), and the same command with the
mistake fixed then runs (never "holds another run").
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from jaxcse import encode, evaluate, export_hf, plot, report, train, wordpiece
from jaxcse.core.errors import JaxcseError
from tests import helpers


def snapshot(path: str) -> dict[str, bytes | None] | None:
  """Every folder (None) and file (its bytes) under ``path``, by relative path; None if ``path`` does not exist."""
  if not os.path.lexists(path):
    return None
  if not os.path.isdir(path):
    return {".": open(path, "rb").read()}
  found: dict[str, bytes | None] = {}
  for folder, _, files in os.walk(path):
    found[os.path.relpath(folder, path)] = None
    for name in files:
      found[os.path.relpath(os.path.join(folder, name), path)] = open(os.path.join(folder, name), "rb").read()
  return found


def one_error_line(capsys) -> str:
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: "), err
  return err[0]


# --------------------------------------------------------------------------
# --help of every installed console script.


def _console_scripts() -> list[str]:
  try:
    entry_points = importlib.metadata.distribution("jaxcse").entry_points
  except importlib.metadata.PackageNotFoundError:
    return []
  return sorted(ep.name for ep in entry_points if ep.group == "console_scripts")


def _run_script(script: str, *args: str, cwd: str) -> subprocess.CompletedProcess:
  path = shutil.which(script, path=os.path.dirname(sys.executable))
  if path is None:
    pytest.skip(f"{script} is not installed beside {sys.executable} (pip install -e .)")
  return subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_every_command_is_a_console_script():
  if not _console_scripts():
    pytest.skip("jaxcse is not installed (pip install -e .)")
  assert {
    "jaxcse-train",
    "jaxcse-evaluate",
    "jaxcse-encode",
    "jaxcse-export",
    "jaxcse-data",
    "jaxcse-report",
    "jaxcse-plot",
    "jaxcse-wordpiece",
    "jaxcse-compile",
    "jaxcse-mine",
    "jaxcse-soup",
  } <= set(_console_scripts())


@pytest.mark.parametrize("script", _console_scripts() or ["jaxcse-train"])
def test_help_says_what_the_command_does_and_its_own_flags(script, tmp_path):
  result = _run_script(script, "--help", cwd=str(tmp_path))  # Outside the repository: no configs/, no data/.
  assert result.returncode == 0, result.stdout + result.stderr
  assert "Traceback" not in result.stderr, result.stderr
  text = result.stdout
  usage, description, *_ = text.split("\n\n")
  assert usage.startswith(f"usage: {script} "), usage
  assert len(description.split()) >= 5, description  # A sentence on what the command does.
  # Every flag of the usage line is described below it (argparse: "  -h, --help ..."), and absl's are not listed.
  for flag in set(re.findall(r"--(\w+)", usage)):
    assert re.search(rf"(?m)^\s+(\S+, ?)?--{flag}\b", text), (flag, text)
  for absl_flag in ("logtostderr", "verbosity", "only_check_args", "pdb_post_mortem"):  # "--[no]logtostderr".
    assert absl_flag not in text
  assert not os.listdir(tmp_path)  # Nothing written.


@pytest.mark.parametrize("script", _console_scripts() or ["jaxcse-train"])
def test_an_unknown_flag_is_the_same_line_on_every_command(script, tmp_path):
  """One CLI framework: every command, train and compile included, says a flag mistake the same way (argparse's
  first: a missing required argument, else the unknown flag)."""
  result = _run_script(script, "--no_such_flag", cwd=str(tmp_path))
  assert result.returncode == 1, result.stdout + result.stderr
  [line] = result.stderr.splitlines()
  assert line.startswith("error: ") and line.endswith(f" ({script} --help lists the flags)"), line
  if script in ("jaxcse-train", "jaxcse-compile"):  # Their required flags are checked after argparse's own.
    assert line == f"error: unrecognized arguments: --no_such_flag ({script} --help lists the flags)", line
  assert not os.listdir(tmp_path)


# --------------------------------------------------------------------------
# Train.


@pytest.fixture
def bad_root(small_data_dir, tmp_path):
  """A copy of the small data root, to spoil."""
  root = tmp_path / "data"
  shutil.copytree(small_data_dir, root)
  return root


def _spoil(root, mistake: str, config) -> None:
  """Makes the run's input wrong in one way."""
  corpus = root / "corpora" / "small.txt"
  if mistake == "missing data folder":
    config.data.data_dir = str(root / "nowhere")
  elif mistake == "undecodable byte":
    corpus.write_bytes(b"a fine first line\nthen \xff a bad one\n")
  elif mistake == "empty file":
    corpus.write_bytes(b"")
  elif mistake == "blank file":
    corpus.write_bytes(b"  \n\n\t\n")
  elif mistake == "too few sentences":
    corpus.write_bytes(b"one\ntwo\nthree\n")
  elif mistake == "bad csv header":
    helpers.write_text(str(root / "corpora" / "bad.csv"), "sent0,oops\na,b\n")
    config.data.train = "corpora/bad.csv"
  elif mistake == "missing corpus":  # (A missing dev set is no mistake: STS-B and SICK-R dev ship with jaxcse.)
    config.data.train = "corpora/absent.txt"
  elif mistake == "missing model":
    config.model.name = str(root / "no_model")
  else:
    raise AssertionError(mistake)


TRAIN_MISTAKES = {
  "missing data folder": "does not exist",
  "undecodable byte": "small.txt:2: not valid UTF-8",
  "empty file": "small.txt: no sentences",
  "blank file": "small.txt: no sentences",
  "too few sentences": "fewer than one batch",
  "bad csv header": "bad.csv:1: header sent0,oops",
  "missing corpus": "corpora/absent.txt: no such file",
  "missing model": "no_model: no such folder",
}


def _tiny(tiny_model_dir: str, root) -> object:
  return helpers.tiny_config(
    tiny_model_dir, str(root), **{"train.max_steps": 2, "eval.every": 2, "checkpoint.every": 2}
  )


@pytest.mark.parametrize("existing", [False, True], ids=["absent", "existing"])
@pytest.mark.parametrize("mistake", sorted(TRAIN_MISTAKES))
def test_train_mistake_leaves_the_workdir_as_it_was(tiny_model_dir, bad_root, tmp_path, mistake, existing):
  config = _tiny(tiny_model_dir, bad_root)
  _spoil(bad_root, mistake, config)
  workdir = tmp_path / "workdir"
  if existing:  # A folder the user made, with something in it.
    helpers.write_text(str(workdir / "notes.txt"), "mine\n")
  before = snapshot(str(workdir))
  with pytest.raises((JaxcseError, OSError), match=re.escape(TRAIN_MISTAKES[mistake])):
    train.train_and_evaluate(config, str(workdir))
  assert snapshot(str(workdir)) == before


def test_train_runs_once_the_mistake_is_fixed(tiny_model_dir, bad_root, tmp_path):
  workdir = str(tmp_path / "workdir")
  config = _tiny(tiny_model_dir, bad_root)
  good = (bad_root / "corpora" / "small.txt").read_bytes()
  for mistake in ("bad csv header", "undecodable byte", "missing model"):
    spoiled = _tiny(tiny_model_dir, bad_root)
    _spoil(bad_root, mistake, spoiled)
    with pytest.raises((JaxcseError, OSError)):
      train.train_and_evaluate(spoiled, workdir)
    (bad_root / "corpora" / "small.txt").write_bytes(good)
  summary = train.train_and_evaluate(config, workdir)  # The fixed command: no "holds another run".
  assert summary["steps"] == 2 and summary["best_step"] == 2
  assert json.load(open(os.path.join(workdir, "config.json")))["data"]["train"] == "corpora/small.txt"


def test_train_still_refuses_another_runs_workdir_before_writing(tiny_model_dir, small_data_dir, tmp_path):
  workdir = tmp_path / "workdir"
  helpers.write_text(str(workdir / "config.json"), json.dumps({"another": "run"}))
  # A jaxcse run's marker (a folder without one is not refused as another run but as no run: test_trust.py), and
  # the lock file every run leaves (the start point is read under the lock).
  helpers.write_text(str(workdir / "model" / "jaxcse.json"), json.dumps({"format_version": 2}))
  helpers.write_text(str(workdir / ".lock"), "")
  before = snapshot(str(workdir))
  with pytest.raises(train.WorkdirError, match="holds another run"):
    train.train_and_evaluate(_tiny(tiny_model_dir, small_data_dir), str(workdir))
  assert snapshot(str(workdir)) == before


def test_train_workdir_that_is_a_file(tiny_model_dir, small_data_dir, tmp_path):
  helpers.write_text(str(tmp_path / "w"), "a file\n")
  with pytest.raises(JaxcseError, match="exists and is not a folder"):
    train.train_and_evaluate(_tiny(tiny_model_dir, small_data_dir), str(tmp_path / "w"))
  assert (tmp_path / "w").read_text() == "a file\n"


# --------------------------------------------------------------------------
# Evaluate, encode, export.


def test_evaluate_mistakes_write_nothing_then_it_runs(tiny_model_dir, small_data_dir, tmp_path, capsys, monkeypatch):
  out = tmp_path / "results" / "r.json"
  common = ["--pooler", "avg", "--tasks", "STSBenchmark", "--output", str(out)]
  monkeypatch.delenv("JAXCSE_DATA_DIR", raising=False)
  for argv, message in [
    (
      ["--model", tiny_model_dir, *common[:2], "--tasks", "MR", "--output", str(out)],
      "no data root is given",
    ),  # The transfer tasks do not ship with jaxcse (the STS tasks do).
    (["--model", tiny_model_dir, "--data_dir", str(tmp_path / "nowhere"), *common], "does not exist"),
    (
      ["--model", tiny_model_dir, "--data_dir", small_data_dir, *common[:2], "--tasks", "MR", "--output", str(out)],
      "MR: missing (MR's data); `jaxcse-data download senteval",
    ),
    (["--model", str(tmp_path / "no_model"), "--data_dir", small_data_dir, *common], "no_model: no such folder"),
    (["--model", tiny_model_dir, "--data_dir", small_data_dir, *common[:4], "--output", str(tmp_path)], "is a folder"),
  ]:
    before = snapshot(str(tmp_path))
    assert evaluate.main(argv) == 1
    assert message in one_error_line(capsys)
    assert snapshot(str(tmp_path)) == before
  assert evaluate.main(["--model", tiny_model_dir, "--data_dir", small_data_dir, *common]) == 0
  assert json.load(open(out))["tasks"]["STSBenchmark"]["test"]["nsamples"] == 60


def test_encode_mistakes_write_nothing_then_it_runs(tiny_model_dir, tmp_path, capsys):
  out = tmp_path / "out" / "emb.npy"
  (tmp_path / "out").mkdir()
  good, bad = tmp_path / "in.txt", tmp_path / "bad.txt"
  good.write_text("a sentence\nanother one\n")
  bad.write_bytes(b"a sentence\n\xff\n")
  helpers.write_text(str(tmp_path / "in.csv"), "id,text\n1,a sentence\n")
  for argv, message in [
    (["--model", tiny_model_dir, "--input", str(bad)], "bad.txt:2: not valid UTF-8"),
    (["--model", tiny_model_dir, "--input", str(tmp_path / "none.txt")], "none.txt: no such file"),
    (["--model", tiny_model_dir, "--input", str(tmp_path / "in.csv")], "needs --column"),
    (["--model", tiny_model_dir, "--input", str(tmp_path / "in.csv"), "--column", "sentence"], "no column 'sentence'"),
    (["--model", str(tmp_path / "no_model"), "--input", str(good)], "no_model: no such folder"),
  ]:
    before = snapshot(str(tmp_path))
    assert encode.main([*argv, "--pooler", "avg", "--output", str(out)]) == 1
    assert message in one_error_line(capsys)
    assert snapshot(str(tmp_path)) == before
  (tmp_path / "out" / "dir.npy").mkdir()
  assert (
    encode.main(["--model", tiny_model_dir, "--input", str(good), "--output", str(tmp_path / "out" / "dir.npy")]) == 1
  )
  assert "is a folder" in one_error_line(capsys)
  assert encode.main(["--model", tiny_model_dir, "--input", str(good), "--pooler", "avg", "--output", str(out)]) == 0
  assert sorted(os.listdir(tmp_path / "out")) == ["dir.npy", "emb.json", "emb.npy"]


def test_export_mistakes_write_nothing_then_it_runs(tiny_model_dir, tmp_path, capsys):
  helpers.write_text(str(tmp_path / "a_file"), "x\n")
  helpers.write_text(str(tmp_path / "full" / "keep.txt"), "x\n")
  for argv, message in [
    ([str(tmp_path / "no_model"), str(tmp_path / "out")], "no_model: no such folder"),
    ([tiny_model_dir, str(tmp_path / "a_file")], "exists and is not a folder"),
    ([tiny_model_dir, str(tmp_path / "full")], "exists and is not empty"),
  ]:
    before = snapshot(str(tmp_path))
    assert export_hf.main([*argv, "--pooler", "avg"]) == 1
    assert message in one_error_line(capsys)
    assert snapshot(str(tmp_path)) == before
  assert export_hf.main([tiny_model_dir, str(tmp_path / "out"), "--pooler", "avg"]) == 0
  assert os.path.isfile(tmp_path / "out" / "model.safetensors")


def test_the_output_writing_commands_refuse_an_existing_output_and_create_missing_folders(
  tiny_model_dir, small_data_dir, tmp_path, capsys, monkeypatch
):
  """evaluate, encode and export alike: an existing output is refused before the model loads (evaluate and encode
  replace it with --overwrite; export takes an empty folder only), and missing folders on the way are created."""
  from jaxcse.storage import loading

  sentences = tmp_path / "in.txt"
  sentences.write_text("a sentence\nanother one\n")
  results = tmp_path / "results.json"
  results.write_text('{"tasks": "seven of them"}\n')
  helpers.write_text(str(tmp_path / "emb.npy"), "an earlier output\n")
  helpers.write_text(str(tmp_path / "export" / "keep.txt"), "x\n")
  evaluate_args = [
    "--model",
    tiny_model_dir,
    "--data_dir",
    small_data_dir,
    "--pooler",
    "avg",
    "--tasks",
    "STSBenchmark",
  ]
  encode_args = ["--model", tiny_model_dir, "--input", str(sentences), "--pooler", "avg"]
  load_model = loading.load_model

  def never(*args, **kwargs):
    raise AssertionError("the model was loaded before the existing output was refused")

  monkeypatch.setattr(loading, "load_model", never)
  for run, argv, message in [
    (
      evaluate.main,
      [*evaluate_args, "--output", str(results)],
      "results.json exists (the results of an earlier evaluation); pass --overwrite to replace it",
    ),
    (
      encode.main,
      [*encode_args, "--output", str(tmp_path / "emb.npy")],
      "emb.npy exists (the output); pass --overwrite to replace it",
    ),
    (export_hf.main, [tiny_model_dir, str(tmp_path / "export"), "--pooler", "avg"], "exists and is not empty"),
  ]:
    before = snapshot(str(tmp_path))
    assert run(argv) == 1
    assert message in one_error_line(capsys)
    assert snapshot(str(tmp_path)) == before
  monkeypatch.setattr(loading, "load_model", load_model)

  assert evaluate.main([*evaluate_args, "--output", str(results), "--overwrite"]) == 0
  assert "STSBenchmark" in json.load(open(results))["tasks"]
  assert evaluate.main([*evaluate_args, "--output", str(tmp_path / "new" / "dir" / "r.json")]) == 0
  assert encode.main([*encode_args, "--output", str(tmp_path / "nodir" / "x.npy")]) == 0
  assert os.path.isfile(tmp_path / "nodir" / "x.npy") and os.path.isfile(tmp_path / "nodir" / "x.json")
  assert export_hf.main([tiny_model_dir, str(tmp_path / "a" / "b" / "export"), "--pooler", "avg"]) == 0
  assert os.path.isfile(tmp_path / "a" / "b" / "export" / "model.safetensors")


# --------------------------------------------------------------------------
# Wordpiece, plot, report (data download: tests/test_downloads.py).


def test_wordpiece_mistakes_write_nothing_then_it_runs(small_data_dir, tmp_path, capsys):
  helpers.write_text(str(tmp_path / "full" / "keep.txt"), "x\n")
  helpers.write_text(str(tmp_path / "a_file"), "x\n")
  (tmp_path / "bad.txt").write_bytes(b"fine\n\xfe\n")
  (tmp_path / "empty.txt").write_bytes(b"\n \n")
  small = os.path.join(small_data_dir, "corpora", "small.txt")
  for corpus, out, message in [
    (str(tmp_path / "bad.txt"), "wp", "bad.txt:2: not valid UTF-8"),
    (str(tmp_path / "empty.txt"), "wp", "empty.txt: no sentences"),
    (small, "full", "exists and is not empty"),
    (small, "a_file", "exists and is not a folder"),
  ]:
    before = snapshot(str(tmp_path))
    assert wordpiece.main(["--corpus", corpus, "--out", str(tmp_path / out), "--vocab_size", "300"]) == 1
    assert message in one_error_line(capsys)
    assert snapshot(str(tmp_path)) == before
  assert wordpiece.main(["--corpus", small, "--out", str(tmp_path / "wp"), "--vocab_size", "300"]) == 0
  assert sorted(os.listdir(tmp_path)) == ["a_file", "bad.txt", "empty.txt", "full", "wp"]  # No temporary folder.


def test_plot_mistakes_write_nothing_then_it_runs(tmp_path, capsys):
  pytest.importorskip("matplotlib")
  run = tmp_path / "run"
  helpers.write_text(str(run / "metrics.jsonl"), '{"step": 1, "loss": 0.5}\n{"step": 2, "loss": nope}\n')
  helpers.write_text(str(tmp_path / "a_file"), "x\n")
  for argv, message in [
    ([str(run)], "metrics.jsonl:2"),
    ([str(run), "--out", str(tmp_path / "figs")], "metrics.jsonl:2"),
    ([str(tmp_path / "none")], "none: not a directory"),
    ([str(run), "--out", str(tmp_path / "a_file")], "exists and is not a folder"),
  ]:
    before = snapshot(str(tmp_path))
    assert plot.main(argv) == 1
    assert message in one_error_line(capsys)
    assert snapshot(str(tmp_path)) == before
  helpers.write_synthetic_run(str(run), 0.0)
  assert plot.main([str(run)]) == 0
  assert os.path.isfile(run / "plots" / "run_training.png")


def test_report_mistakes_are_one_line_then_it_runs(tmp_path, capsys):
  helpers.write_text(str(tmp_path / "a.json"), "{not json")
  helpers.write_text(str(tmp_path / "b.json"), json.dumps({"no": "summary"}))
  (tmp_path / "c.json").write_bytes(b"\xff\xfe")
  for name, message in [
    ("a.json", "a.json: not a JSON file"),
    ("b.json", "b: no 'summary'"),
    ("c.json", "c.json: not a JSON file"),
    ("none.json", "none.json: No such file"),
  ]:
    before = snapshot(str(tmp_path))
    assert report.main([str(tmp_path / name)]) == 1
    assert message in one_error_line(capsys)
    assert snapshot(str(tmp_path)) == before
  helpers.write_text(str(tmp_path / "a.json"), json.dumps({"summary": {"STSBenchmark": 80.0, "Avg": 80.0}}))
  assert report.main([str(tmp_path / "a.json")]) == 0
  assert "| a |" in capsys.readouterr().out
