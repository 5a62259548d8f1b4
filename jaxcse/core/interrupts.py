"""Ctrl-C (SIGINT) acted on only at safe points: where a long-running command can stop with nothing half done."""

from __future__ import annotations

import signal
import threading


class DeferredCtrlC:
  """Ctrl-C (SIGINT) while training, acted on only where the run can stop cleanly (``check``).

  Python raises ``KeyboardInterrupt`` wherever the main thread is when the signal arrives: inside jax's tracing and
  lowering (Python code that XLA's C++ calls back while it compiles), inside orbax's save or restore (whose threads
  go on writing). Unwinding through them leaves their native state half built, and the process then crashed as it
  exited ("Fatal Python error: Segmentation fault" after the interrupted line). So the handler only
  notes the request; the loop stops at its next safe point (before a step, after an evaluation or a save). A
  second Ctrl-C raises at once: the user insists, and gets Python's own behaviour.

  Installed only in the main thread over Python's default handler (another handler, e.g. a notebook's, is left
  alone, and then Ctrl-C behaves as that handler decides).
  """

  def __init__(self):
    self.requested = False
    self._previous = None

  def __enter__(self) -> "DeferredCtrlC":
    if (
      threading.current_thread() is threading.main_thread()
      and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
      self._previous = signal.signal(signal.SIGINT, self._note)
    return self

  def _note(self, signum, frame) -> None:
    del signum, frame
    if self.requested:
      raise KeyboardInterrupt
    self.requested = True

  def check(self) -> None:
    """Raises ``KeyboardInterrupt`` if Ctrl-C was pressed: call it only where stopping leaves nothing half done."""
    if self.requested:
      raise KeyboardInterrupt

  def __exit__(self, *exc) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGINT, self._previous)
