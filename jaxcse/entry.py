"""The console scripts' entry points: Ctrl-C while a command starts is one line and exit status 130.

A command's module imports JAX, flax, orbax and transformers (seconds on a loaded machine) before its own code
runs; Ctrl-C then raised ``KeyboardInterrupt`` inside an import, and Python printed a traceback, or inside JAX's
garbage-collector callback, where Python drops it and the command ran on (``core.interrupts``). The start-up
handler (``interrupts.command_starts``, installed by ``jaxcse/__init__.py`` for a console script as for
``python -m jaxcse.X``) covers the import (one line, exit 130: nothing was written yet) and stays installed: the
command's ``main`` puts its own over it while it runs (``errors.cli``; train its own, ``train.run``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from jaxcse.core import interrupts

STARTING = interrupts.STARTING


def _entry(module: str, function: str) -> Callable[[], Any]:
  def run() -> Any:
    # Installed already where jaxcse/__init__.py saw the console script's name; called from Python (a test, a
    # renamed script), here, and then left for the command (it is the process's).
    interrupts.command_starts(force=True)
    try:
      command = getattr(importlib.import_module(module), function)
    except KeyboardInterrupt:  # Where ExitAtOnce could not be installed (another handler) and Python's raised.
      interrupts.release_starting()
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
soup = _entry("jaxcse.soup", "main")
export = _entry("jaxcse.export_hf", "main")
data = _entry("jaxcse.data.downloads", "main")
report = _entry("jaxcse.report", "main")
plot = _entry("jaxcse.plot", "main")
wordpiece = _entry("jaxcse.wordpiece", "main")
compile = _entry("jaxcse.compile", "run")  # noqa: A001 -- the console script's name.
