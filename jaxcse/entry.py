"""The console scripts' entry points: Ctrl-C while a command starts is one line and exit status 130.

A command's module imports JAX, flax, orbax and transformers (seconds on a loaded machine) before its own code
runs; Ctrl-C then raised ``KeyboardInterrupt`` inside an import, and Python printed a traceback, or inside JAX's
garbage-collector callback, where Python drops it and the command ran on (``core.interrupts``). Each entry point
here imports its command's module under ``interrupts.ExitAtOnce`` (one line, exit 130: nothing was written yet),
then runs the command with Python's own handler back, which the command handles from there on.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from jaxcse.core import interrupts

STARTING = "interrupted as the command started; nothing was written"


def _entry(module: str, function: str) -> Callable[[], Any]:
  def run() -> Any:
    interrupts.quiet_at_the_end()
    try:
      with interrupts.ExitAtOnce(STARTING):
        command = getattr(importlib.import_module(module), function)
    except KeyboardInterrupt:  # Where ExitAtOnce could not be installed (another handler) and Python's raised.
      print(STARTING, file=sys.stderr)
      sys.exit(interrupts.INTERRUPTED)
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
