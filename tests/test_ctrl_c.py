"""Ctrl-C in every command, from both entries (the console script ``jaxcse-X`` and ``python -m jaxcse.X``): one
line on stderr, exit status 130, no traceback, nothing half written (issue 69, item 4).

Each run is the real command in a fresh process; a ``sitecustomize`` put on its ``PYTHONPATH`` sends it SIGINT at
one point (``CTRL_C_AT``), so that the signal lands where a keypress did in the probes: during the start-up imports,
inside a garbage-collector callback (where Python drops a ``KeyboardInterrupt``: JAX registers one), inside jax's
tracing, and as the output is written. The trainer's own points are in test_nothing_lost.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from jaxcse.core import files
from tests import helpers
from tests.helpers import lines_said

# Sends SIGINT at the point CTRL_C_AT names, once. Standard library only: it runs before anything else.
SITECUSTOMIZE = r"""
import gc, os, signal, sys, threading

at, output = os.environ.get("CTRL_C_AT"), os.environ.get("CTRL_C_OUTPUT", "")
if at:
  # Python's handler, as in a terminal (a background job of a non-interactive shell starts with SIGINT ignored).
  signal.signal(signal.SIGINT, signal.default_int_handler)
  sent, armed = [], []

  def in_gc_callback(phase, info):  # The main thread's next collection sends it, and runs bytecodes in here.
    if armed and phase == "start" and threading.current_thread() is threading.main_thread():
      armed.clear()
      os.kill(os.getpid(), signal.SIGINT)
      for _ in range(1000):
        pass

  gc.callbacks.insert(0, in_gc_callback)

  def in_tracing(frame, event, arg):  # At the first call into jax's tracing (Python that XLA's C++ calls back).
    if event == "call" and frame.f_globals.get("__name__") == "jax._src.interpreters.partial_eval":
      sys.setprofile(None)
      os.kill(os.getpid(), signal.SIGINT)

  def send():
    sent.append(1)
    if at.endswith("_gc"):
      armed.append(1)
    elif at == "tracing":
      sys.setprofile(in_tracing)
    else:
      os.kill(os.getpid(), signal.SIGINT)

  def writes(args):
    path, mode, flags = args
    return (mode and mode[0] in "wax" or "+" in (mode or "")) or (mode is None and flags & (os.O_WRONLY | os.O_RDWR))

  def hook(event, args):
    if sent:
      return
    if at.startswith("start") and event == "import" and args[0] in ("numpy", "jax", "huggingface_hub"):
      send()  # As the command starts: its first heavy import.
    elif event == "open" and isinstance(args[0], str):
      if at in ("run_gc", "tracing") and os.path.basename(args[0]) == "tokenizer.json":
        send()  # Mid-run: the model is loading, its first compile is next.
      elif at == "output" and output and output in os.path.abspath(args[0]) and writes(args):
        send()  # As the output is written.

  sys.addaudithook(hook)
"""

# Each console script (pyproject.toml's [project.scripts]) and the module ``python -m`` runs.
MODULES = {
  "jaxcse-encode": "jaxcse.encode",
  "jaxcse-evaluate": "jaxcse.evaluate",
  "jaxcse-export": "jaxcse.export_hf",
  "jaxcse-mine": "jaxcse.mining",
  "jaxcse-soup": "jaxcse.soup",
  "jaxcse-train": "jaxcse.train",
  "jaxcse-data": "jaxcse.data",
  "jaxcse-report": "jaxcse.report",
  "jaxcse-plot": "jaxcse.plot",
  "jaxcse-wordpiece": "jaxcse.wordpiece",
  "jaxcse-compile": "jaxcse.compile",
}
# What pip writes as a console script (.venv/bin/jaxcse-X): run as a file of that name, not an installed one.
SCRIPT = """import sys
from jaxcse.entry import {function}
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit({function}())
"""


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory):
  """The site folder, the console scripts, and a small input for each model command."""
  import tomllib

  root = tmp_path_factory.mktemp("ctrl_c")
  (root / "site").mkdir()
  (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
  with open(os.path.join(helpers.REPO, "pyproject.toml"), "rb") as f:
    scripts = tomllib.load(f)["project"]["scripts"]
  assert set(scripts) == set(MODULES)  # A new command is added here too.
  for name, target in scripts.items():
    (root / name).write_text(SCRIPT.format(function=target.split(":")[1]))
  (root / "in.txt").write_text("".join(f"sentence number {i} about a thing\n" for i in range(40)))
  with open(root / "pairs.jsonl", "w") as f:
    for i in range(40):
      f.write(json.dumps({"anchor": f"query {i} about cats", "positive": f"answer {i} on cats and dogs"}) + "\n")
  with open(root / "dev.jsonl", "w") as f:
    for i in range(40):
      f.write(json.dumps({"sentence1": f"query {i} about cats", "sentence2": f"answer {i}", "score": i % 5}) + "\n")
  return str(root), tiny_model_dir


def _args(command: str, root: str, model: str, out: str) -> list[str]:
  return {
    "jaxcse-encode": ["--model", model, "--pooler", "cls", "--input", f"{root}/in.txt", "--output", f"{out}/x.npy"],
    "jaxcse-evaluate": [
      "--model",
      model,
      "--pooler",
      "cls",
      "--tasks",
      f"pairs={root}/dev.jsonl",
      "--output",
      f"{out}/eval.json",
    ],
    "jaxcse-export": [model, f"{out}/export", "--pooler", "cls"],
    "jaxcse-soup": [model, model, "--pooler", "cls", "--metric", "none", "--output", f"{out}/soup"],
    "jaxcse-mine": [
      "--model",
      model,
      "--pooler",
      "cls",
      "--input",
      f"{root}/pairs.jsonl",
      "--output",
      f"{out}/mined.jsonl",
    ],
  }.get(command, [])


def _ctrl_c(inputs, command: str, entry: str, at: str, out: str) -> subprocess.CompletedProcess:
  root, model = inputs
  os.makedirs(out)
  argv = [sys.executable, *(["-m", MODULES[command]] if entry == "-m" else [os.path.join(root, command)])]
  env = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([os.path.join(root, "site"), helpers.REPO, os.environ.get("PYTHONPATH", "")]),
    "CTRL_C_AT": at,
    "CTRL_C_OUTPUT": os.path.abspath(out),
  }
  return subprocess.run(
    [*argv, *_args(command, root, model, out)], cwd=root, env=env, capture_output=True, text=True, timeout=300
  )


def _half_written(out: str, line: str) -> list[str]:
  """What in ``out`` is not whole: a temporary file or folder, or an output that does not read back complete.

  encode's partial output is whole by its own record (what rerunning it resumes) when its line says so."""
  bad = []
  for folder, dirs, names in os.walk(out):
    for name in dirs + names:
      path = os.path.join(folder, name)
      resumable = name.startswith("x.npy.") and re.search(r"\d+ of \d+ rows are in .*x\.npy\.partial", line)
      if (".tmp" in name or ".partial" in name or ".progress" in name) and not resumable:
        bad.append(os.path.relpath(path, out))
  try:
    if os.path.exists(f"{out}/x.npy"):
      assert np.load(f"{out}/x.npy").shape == (40, 32) and os.path.exists(f"{out}/x.json")
    if os.path.exists(f"{out}/eval.json"):
      json.load(open(f"{out}/eval.json"))
    if os.path.exists(f"{out}/mined.jsonl"):
      assert len(files.read_jsonl(f"{out}/mined.jsonl")) > 0
    for folder in ("export", "soup"):
      if os.path.exists(f"{out}/{folder}"):
        assert os.path.exists(f"{out}/{folder}/model.safetensors")
        assert os.path.exists(f"{out}/{folder}/jaxcse_export.json")
  except Exception as e:  # noqa: BLE001 -- any failure to read it back is the finding.
    bad.append(f"an output that does not read back: {e!r}")
  return bad


MODEL_COMMANDS = ("jaxcse-encode", "jaxcse-evaluate", "jaxcse-export", "jaxcse-mine")
# (command, entry, point). Both entries where they differ (the start-up imports, which ``python -m`` ran under
# Python's handler) or where the probes lost a Ctrl-C in both (jax's gc callback); ``python -m`` alone mid-run,
# where both entries are the same code (``errors.cli``); inside tracing for two commands (the same model code).
CASES = [
  *[(c, e, "start") for c in MODEL_COMMANDS for e in ("script", "-m")],
  *[(c, "-m", "start_gc") for c in MODEL_COMMANDS],
  *[(c, e, "run_gc") for c in MODEL_COMMANDS for e in ("script", "-m")],
  *[(c, "-m", "output") for c in MODEL_COMMANDS],
  *[(c, "-m", "tracing") for c in ("jaxcse-encode", "jaxcse-mine")],
  # The soup loads and writes as export does (its start is the other commands' test's): once the model loads, and
  # as it writes.
  *[("jaxcse-soup", "-m", at) for at in ("run_gc", "output")],
]


def test_ctrl_c_in_every_model_command_is_one_line_and_130(inputs, tmp_path):
  """Main before: ``python -m`` during the imports printed a 30-40 line traceback (rc 1 or -2, once a C++
  ``terminate``, rc -6); in the gc callback the Ctrl-C was dropped and the command wrote its output, rc 0 (both
  entries); raised inside tracing, a crash at exit (rc -11) after its line."""
  bad = {}  # Every case's problem, so that one run of the test shows them all.
  for i, (command, entry, at) in enumerate(CASES):
    out = str(tmp_path / f"o{i}")
    run = _ctrl_c(inputs, command, entry, at, out)
    said = lines_said(run.stderr)
    if run.returncode != 130 or len(said) != 1 or not said[0].startswith("interrupted") or "Traceback" in run.stderr:
      bad[(command, entry, at)] = (run.returncode, said[-3:])
    elif at.startswith("start") and os.listdir(out):
      bad[(command, entry, at)] = f"wrote {os.listdir(out)} while starting"
    elif half := _half_written(out, said[0]):
      bad[(command, entry, at)] = f"half written: {half}"
  assert not bad, "\n".join(f"{case}: {problem}" for case, problem in bad.items())


def test_ctrl_c_while_every_other_command_starts_is_one_line_and_130(inputs, tmp_path):
  """The other commands, as they start, from both entries (they are ``errors.cli``'s too once running)."""
  bad = {}
  for command in MODULES:
    if command in MODEL_COMMANDS:
      continue
    for entry in ("script", "-m"):
      run = _ctrl_c(inputs, command, entry, "start", str(tmp_path / f"{command}{entry}"))
      said = lines_said(run.stderr)
      if run.returncode != 130 or said != ["interrupted as the command started; nothing was written"]:
        bad[(command, entry)] = (run.returncode, said[-3:])
  assert not bad, "\n".join(f"{case}: {problem}" for case, problem in bad.items())
