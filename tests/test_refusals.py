"""Refusals that name what to type (issue 69 item 3): the resume refusal's flags, and a mining run that finds
nothing; and datasets' progress bars never print in a jaxcse command."""

from __future__ import annotations

import json
import os

import pytest

from jaxcse import mining
from jaxcse.storage import workdir as workdir_lib
from tests import helpers

datasets = pytest.importorskip("datasets")


def test_the_resume_refusal_gives_a_flag_for_every_changed_field_an_empty_one_too():
  """A field whose value there was "" (gist.guide_model, data.train from Python) gets ``--config.NAME=''``, and a
  value with a space is quoted (before: both left out of the suggested flags)."""
  there = {"gist": {"guide_model": ""}, "data": {"train": "my data.jsonl"}, "train": {"batch_size": 8}}
  here = {"gist": {"guide_model": "guide"}, "data": {"train": "other.jsonl"}, "train": {"batch_size": 16}}
  assert workdir_lib.resume_flags(here, there) == [
    "--config.data.train='my data.jsonl'",
    "--config.gist.guide_model=''",
    "--config.train.batch_size=8",
  ]


def _pairs(path: str, n: int = 12) -> str:
  helpers.write_jsonl(path, [{"anchor": f"anchor text {i}", "positive": f"positive text {i}"} for i in range(n)])
  return path


def test_mining_that_finds_no_negative_says_so_and_writes_nothing(tiny_model_dir, tmp_path, capsys):
  """Before: "wrote ...: 0 rows", an empty file and exit 0 (training on it then fails)."""
  out = str(tmp_path / "mined.jsonl")
  argv = ["--model", tiny_model_dir, "--input", _pairs(str(tmp_path / "pairs.jsonl")), "--output", out]
  assert mining.main(argv + ["--max_score", "-0.5", "--pooler", "cls"]) == 1  # The pooler named: no warning of it.
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: no anchor got a negative: nothing written to "), err
  assert not os.path.exists(out)


def test_no_datasets_progress_bar_prints_in_a_command(tiny_model_dir, tmp_path, capfd):
  """Reading the input ("Generating train split") and writing a .jsonl ("Creating json from Arrow format")."""
  out = str(tmp_path / "mined.jsonl")
  argv = ["--model", tiny_model_dir, "--input", _pairs(str(tmp_path / "pairs.jsonl")), "--output", out]
  assert mining.main(argv + ["--num_negatives", "1"]) == 0
  printed = "".join(capfd.readouterr())
  assert "Generating" not in printed and "Creating json" not in printed and "examples/s" not in printed, printed
  with open(out, encoding="utf-8") as f:
    assert len([json.loads(line) for line in f]) > 0


@pytest.mark.parametrize(
  "name,content,message",
  [
    (
      "ragged.csv",
      b"anchor,positive\nx,y\nx,y,z\n",
      "ragged.csv:3: row 1: 3 fields, the header has 2 (anchor,positive)",
    ),
    ("bytes.jsonl", b'{"a": "x", "b": "y"}\n{"a": "x\xff", "b": "y"}\n', "bytes.jsonl:2: row 1, column 'a': not valid"),
  ],
)
def test_bad_data_is_the_train_commands_only_line(tmp_path, name, content, message):
  """Before: datasets' "Failed to read file" twice (once as an absl line) and a progress bar before the error:
  line (ragged); a traceback at step 4 on every resume (invalid UTF-8)."""
  import subprocess
  import sys

  (tmp_path / name).write_bytes(content)
  run = subprocess.run(
    [sys.executable, "-m", "jaxcse.train", "--config", "pairs", "--workdir", str(tmp_path / "w"),
     f"--config.data.train={tmp_path / name}", "--config.model.name=jaxcse/bert-mini-wiki-uncased"],
    cwd=tmp_path, capture_output=True, text=True, timeout=300,
    env={**os.environ, "PYTHONPATH": helpers.REPO, "HF_DATASETS_CACHE": str(tmp_path / "cache")},
  )  # fmt: skip
  lines = (run.stdout + run.stderr).strip().splitlines()
  assert run.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"error: {tmp_path}/{message}"), lines
  assert not (tmp_path / "w").exists()
