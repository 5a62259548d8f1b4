"""A user's mistake on any command is one line on stderr and exit status 1, with a suggestion where there is one.

Each case is what a new user typed (rough edges of the first day, mistakes in config files), run as the command runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jaxcse.training import cli
from jaxcse import encode, evaluate, export_hf
from jaxcse.storage import hub, loading, workdir as workdir_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG_FILES = {
  "raises_name_error.py": "def get_config():\n  return undefined_name\n",
  "divides_by_zero.py": "import ml_collections\n\n\ndef get_config():\n  steps = 10\n  return steps / 0\n",
  "no_get_config.py": "import ml_collections\nCONFIG = ml_collections.ConfigDict()\n",
  "returns_a_dict.py": "def get_config():\n  return {'train': {'max_steps': 10}}\n",
  "does_not_parse.py": "def get_config(:\n",
}


def _train(args: list[str], cwd: str) -> tuple[int, list[str]]:
  run = subprocess.run(
    [sys.executable, "-m", "jaxcse.train", *args, "--workdir", os.path.join(cwd, "w")],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "PYTHONPATH": REPO},
  )
  assert not os.path.exists(os.path.join(cwd, "w")), args  # Nothing written.
  return run.returncode, run.stderr.strip().splitlines()


@pytest.mark.parametrize(
  "args, expected",
  [
    (
      ["--config", "quickstrat"],
      "error: --config quickstrat: no such file, and no config of that name ships with "
      "jaxcse; did you mean quickstart? (shipped: base, ",
    ),
    (
      ["--config", "quickstart", "--config.train.max_step=10"],
      "error: unknown config field 'max_step' in config.train.max_step; did you mean config.train.max_steps? (the "
      "config file lists every field)",
    ),
    (
      ["--config", "raises_name_error.py"],
      "error: raises_name_error.py:2: loading the config raised NameError: name 'undefined_name' is not defined",
    ),
    (
      ["--config", "divides_by_zero.py"],
      "error: divides_by_zero.py:6: loading the config raised ZeroDivisionError: division by zero",
    ),
    (["--config", "no_get_config.py"], "error: no_get_config.py: defines no get_config() "),
    (
      ["--config", "returns_a_dict.py"],
      "error: returns_a_dict.py: get_config() returned dict, not an ml_collections.ConfigDict",
    ),
    (["--config", "does_not_parse.py"], "error: does_not_parse.py:1: invalid syntax"),
    (
      ["--config", "quickstart", "--workdr=x"],
      "error: unrecognized arguments: --workdr=x; did you mean --workdir? (python -m jaxcse.train --help lists the "
      "flags)",
    ),
    (
      ["--config.train.max_steps=5"],
      "error: --config.train.max_steps overrides a field of --config, which is not given",
    ),
    (
      ["--config", "quickstart", "--config.train.max_steps=many"],
      "error: flag --config.train.max_steps=many: ",
    ),
    (
      ["--config", "quickstart", "--config.eval.at_end", "word"],
      "error: unexpected argument 'word' after a --config.FIELD override (a boolean field takes none; ",
    ),
    (
      ["--config", "quickstart", "--config.train.max_steps=-5"],
      "error: train.max_steps must be a positive integer, or -1 to train train.num_epochs epochs, not -5",
    ),
    (
      ["--config", "quickstart", "--config.train.learning_rate=nan"],
      "error: train.learning_rate must be a finite number >= 0, not nan",
    ),
  ],
)
def test_train_mistakes_are_one_line_and_exit_1(tmp_path, args, expected):
  for name, text in CONFIG_FILES.items():
    (tmp_path / name).write_text(text)
  code, err = _train(args, str(tmp_path))
  assert code == 1 and len(err) == 1 and err[0].startswith(expected), (code, err)
  assert "\\n" not in err[0] and "Traceback" not in err[0]


def test_overrides_are_set_aside_in_order_and_applied_with_the_fields_types():
  argv = ["--config", "quickstart", "--workdir", "w", "--config.train.max_steps", "5", "--config.eval.at_end"]
  args = cli.parse_train_arguments([*argv, "--restart", "--config.train.learning_rate=1e-4"])
  assert args.restart and args.workdir == "w"
  assert args.overrides == [
    "--config.train.max_steps",
    "5",
    "--config.eval.at_end",
    "--config.train.learning_rate=1e-4",
  ]
  config = cli.load_config(args.config, args.overrides)
  assert (config.train.max_steps, config.eval.at_end, config.train.learning_rate) == (5, True, 1e-4)
  assert cli.load_config("quickstart", ["--config.eval.at_end=False"]).eval.at_end is False


def _command(module: str, args: list[str], cwd: str, **env) -> tuple[int, list[str]]:
  """A command run as a user runs it, with no data root: its exit status and its stderr's lines."""
  environment = {k: v for k, v in os.environ.items() if k != "JAXCSE_DATA_DIR"}
  run = subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=600,
    env={**environment, "PYTHONPATH": REPO, **env},
  )
  return run.returncode, run.stderr.strip().splitlines()


def test_a_refusal_after_the_shipped_data_is_found_is_the_only_line(tmp_path):
  """Without a data root, the note that shipped data is read came before evaluate's and train's refusals: two
  lines where one is promised. The note follows the checks, and only when they pass."""
  code, err = _command("jaxcse.evaluate", ["--model", "no_model", "--tasks", "STSBenchmark"], str(tmp_path))
  assert code == 1 and len(err) == 1 and err[0].startswith("error: no_model: "), err
  code, err = _command(
    "jaxcse.train", ["--config", "quickstart", "--workdir", "w", "--config.data.max_seq_len=600"], str(tmp_path)
  )
  assert code == 1 and err == [
    "error: data.max_seq_len=600 is longer than the 128 positions jaxcse/bert-mini-wiki-"
    "uncased embeds; set data.max_seq_len <= 128"
  ], err
  assert not os.path.exists(tmp_path / "w")


def test_a_locked_workdir_is_refused_before_anything_is_loaded(tiny_model_dir, small_data_dir, tmp_path, monkeypatch):
  """The lock refusal came after the model, corpus and dev sets were read (35 s for the quickstart)."""
  import filelock

  from jaxcse.training import configured
  from jaxcse import train
  from tests import helpers

  workdir = tmp_path / "w"
  workdir.mkdir()
  lock = filelock.FileLock(str(workdir / workdir_lib.LOCK_FILE))
  lock.acquire()
  try:
    monkeypatch.setattr(configured, "model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(train.WorkdirError, match="another process is training in this workdir"):
      train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir), str(workdir))
  finally:
    lock.release()
  assert os.listdir(workdir) == [workdir_lib.LOCK_FILE]


def test_a_mistyped_config_path_suggests_its_sibling(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "mixcse_large.py").write_text("")
  with pytest.raises(
    cli.FlagError,
    match=r"^--config configs/mixcse_lrge.py: no such file; did you mean "
    r"configs/mixcse_large.py\?$",
  ):
    cli.check_config_file("configs/mixcse_lrge.py")
  with pytest.raises(cli.FlagError, match=r"no such file \(nowhere is not a folder\)"):
    cli.check_config_file("nowhere/base.py")
  assert cli.check_config_file("quickstart") == os.path.join(cli.CONFIGS_DIR, "quickstart.py")
  assert cli.check_config_file("configs/mixcse_large.py") == "configs/mixcse_large.py"


@pytest.fixture
def no_model_loading(monkeypatch):
  """Fails the test if a command gets as far as loading a model, or as asking the hub for one."""

  def never(*args, **kwargs):
    raise AssertionError("the model was loaded (or looked up on the hub) before the mistake was found")

  monkeypatch.setattr(loading, "load_model", never)
  monkeypatch.setattr(encode.Encoder, "load", never)
  monkeypatch.setattr("huggingface_hub.snapshot_download", never)


def _one_line(capsys) -> str:
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1, err
  return err[0]


def test_a_mistyped_local_model_folder_is_named_not_looked_up_on_the_hub(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "workdirs" / "quickstart").mkdir(parents=True)
  (tmp_path / "in.txt").write_text("a sentence\n")
  monkeypatch.setattr("huggingface_hub.snapshot_download", lambda *a, **k: pytest.fail("asked the hub"))
  assert encode.main(["--model", "workdirs/quickstrat", "--input", "in.txt", "--output", "o.npy"]) == 1
  assert _one_line(capsys) == "error: workdirs/quickstrat: no such folder; did you mean workdirs/quickstart?"
  for model, expected in [
    ("./gone", "error: ./gone: no such folder"),
    ("runs/a/b", "error: runs/a/b: no such folder (runs/a does not exist either)"),
    (
      "jaxcse/bert-mni-wiki-uncased",
      "error: jaxcse/bert-mni-wiki-uncased: no model of that "
      "name ships with jaxcse; did you mean "
      "jaxcse/bert-mini-wiki-uncased?",
    ),
  ]:
    assert evaluate.main(["--model", model, "--tasks", "STSBenchmark"]) == 1
    assert _one_line(capsys).startswith(expected), model
  assert sorted(os.listdir(tmp_path)) == ["in.txt", "workdirs"]
  # A hub id (name or owner/name whose owner is no folder here) is still a hub id.
  assert hub.missing_local_folder("princeton-nlp/sup-simcse-bert-base-uncased") is None
  assert hub.missing_local_folder("bert-base-uncased") is None


def test_an_empty_input_is_an_error_before_the_model_loads(tmp_path, monkeypatch, capsys, no_model_loading):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "empty.txt").write_text("")
  assert encode.main(["--model", "any", "--input", "empty.txt", "--output", "o.npy"]) == 1
  assert _one_line(capsys) == (
    "error: empty.txt: no lines, so there is nothing to encode (an empty line is encoded, an empty file is not)"
  )
  (tmp_path / "empty.csv").write_text("text,label\n")
  with pytest.raises(encode.EncodeError, match="empty.csv: no rows with a 'text' field"):
    encode.encode_file(None, "empty.csv", "o.npy", column="text")  # The library too, before it needs the encoder.
  assert sorted(os.listdir(tmp_path)) == ["empty.csv", "empty.txt"]


@pytest.mark.parametrize(
  "main, args, expected",
  [
    (encode.main, ["--batch_size", "0"], "error: batch_size must be >= 1, not 0"),
    (encode.main, ["--chunk_size", "-1"], "error: chunk_size must be >= 1, not -1"),
    (encode.main, ["--max_seq_len", "2"], "error: max_seq_len must be at least 3"),
    (evaluate.main, ["--batch_size", "0"], "error: batch_size must be >= 1, not 0"),
  ],
)
def test_settings_that_cannot_work_are_refused_before_the_model_loads(
  main, args, expected, tmp_path, monkeypatch, capsys, no_model_loading
):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "in.txt").write_text("a sentence\n")
  files = ["--input", "in.txt", "--output", "o.npy"] if main is encode.main else []
  assert main(["--model", "m", *files, *args]) == 1
  assert _one_line(capsys).startswith(expected)
  assert sorted(os.listdir(tmp_path)) == ["in.txt"]


@pytest.mark.parametrize(
  "main, args",
  [
    (encode.main, ["--modle", "m", "--input", "in.txt", "--output", "o.npy"]),  # A typo in a flag.
    (encode.main, ["--model", "m", "--input", "in.txt", "--output", "o.txt"]),  # Not a .npy.
    (evaluate.main, ["--model", "m", "--pooler", "mean"]),  # Not a pooler's name.
    (evaluate.main, ["--model", "m", "--batch_size", "many"]),  # Not a number.
    (export_hf.main, ["m"]),  # A missing argument.
  ],
)
def test_flag_mistakes_exit_1_in_one_line(main, args, tmp_path, monkeypatch, capsys, no_model_loading):
  # argparse's own is a usage line, the error and exit status 2; every command documents one line and 1.
  monkeypatch.chdir(tmp_path)
  (tmp_path / "in.txt").write_text("a sentence\n")
  with pytest.raises(SystemExit) as exit_:
    main(args)
  assert exit_.value.code == 1
  line = _one_line(capsys)
  assert line.startswith("error: ") and line.endswith("--help lists the flags)"), line
  assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_help_documents_the_exit_status(capsys):
  for main in (encode.main, evaluate.main, export_hf.main):
    with pytest.raises(SystemExit) as exit_:
      main(["--help"])
    assert exit_.value.code == 0
    assert "exit status 1" in " ".join(capsys.readouterr().out.split())
  assert "exit status 1" in " ".join(cli.train_parser().format_help().split())


def test_the_quickstarts_last_line_is_an_evaluate_command_that_works(capsys, monkeypatch):
  monkeypatch.delenv("JAXCSE_DATA_DIR", raising=False)
  config = json.loads('{"data": {"data_dir": ""}, "eval": {"metric": "stsb_dev", "every": 125, "at_end": true}}')
  import ml_collections

  cli.print_train_summary(
    ml_collections.ConfigDict(config),
    "workdirs/quickstart",
    {"first_eval": None, "best_metric": 0.5, "best_step": 10, "steps": 300},
  )
  last = capsys.readouterr().out.strip().splitlines()[-1]
  assert last.endswith("evaluate --model workdirs/quickstart --tasks sts"), last  # No data root needed any more.
  assert "download" not in last


def test_a_run_whose_last_steps_were_not_evaluated_says_so(capsys):
  """With eval.at_end=False the model served is the best evaluated one, which predates the last steps."""
  import ml_collections

  config = ml_collections.ConfigDict(
    {"data": {"data_dir": ""}, "eval": {"metric": "stsb_dev", "every": 125, "at_end": False}}
  )
  for steps, said in ((250, False), (300, True)):
    cli.print_train_summary(config, "w", {"first_eval": None, "best_metric": 0.5, "best_step": 250, "steps": steps})
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == (
      [
        "note: steps 251-300 were not evaluated (eval.at_end=False, eval.every=125): the best "
        "checkpoint, which evaluate, encode and export serve, predates them"
      ]
      if said
      else []
    )


def test_a_shortened_quickstart_evaluates_its_last_step(tiny_model_dir, small_data_dir, tmp_path):
  """--config.train.max_steps=20 on the quickstart served step 0, the untrained model: its config turned the final
  evaluation off, and 20 is no multiple of eval.every."""
  from jaxcse import train
  from tests import helpers

  config = helpers.tiny_config(
    tiny_model_dir, small_data_dir, "quickstart", **{"train.max_steps": 4, "eval.every": 125}
  )
  workdir = str(tmp_path / "w")
  train.train_and_evaluate(config, workdir)
  assert [r["step"] for r in helpers.metrics_records(workdir) if "eval/metric" in r] == [0, 4]
