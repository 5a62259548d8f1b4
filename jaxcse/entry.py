"""The console scripts' entry points: Ctrl-C while a command starts is one line and exit status 130.

A command's module imports JAX, flax, orbax and transformers (seconds on a loaded machine) before its own code
runs; Ctrl-C then raised ``KeyboardInterrupt`` inside an import, and Python printed a traceback. Each entry point
here imports its command's module inside the handling that turns Ctrl-C into one line (nothing was written yet),
then runs the command, which handles Ctrl-C itself from there on.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

INTERRUPTED = 130  # errors.INTERRUPTED, without importing anything more while the command starts.


def _entry(module: str, function: str) -> Callable[[], Any]:
  def run() -> Any:
    try:
      command = getattr(importlib.import_module(module), function)
    except KeyboardInterrupt:
      print("interrupted as the command started; nothing was written", file=sys.stderr)
      sys.exit(INTERRUPTED)
    return command()

  run.__name__ = run.__qualname__ = f"{module.rsplit('.', 1)[-1]}_{function}"
  run.__doc__ = f"``{module}.{function}``, imported so that Ctrl-C while it imports is one line."
  return run


train = _entry("jaxcse.train", "run")
evaluate = _entry("jaxcse.evaluate", "main")
encode = _entry("jaxcse.encode", "main")
mine = _entry("jaxcse.mining", "main")
export = _entry("jaxcse.export_hf", "main")
data = _entry("jaxcse.data.downloads", "main")
report = _entry("jaxcse.report", "main")
plot = _entry("jaxcse.plot", "main")
wordpiece = _entry("jaxcse.wordpiece", "main")
compile = _entry("jaxcse.compile", "run")  # noqa: A001 -- the console script's name.
