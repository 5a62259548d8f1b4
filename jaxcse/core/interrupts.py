"""Ctrl-C (SIGINT) as a long-running command needs it: acted on only at safe points, or at once with one line.

Python's own handler raises ``KeyboardInterrupt`` at the next bytecode the main thread runs. Two places make that
unsafe. Inside jax's tracing and lowering (Python code that XLA's C++ calls back while it compiles) or orbax's
save (whose threads go on writing), unwinding leaves native state half built, and the process then crashed as it
exited ("Fatal Python error: Segmentation fault"). Inside a garbage-collector callback (jax registers one, run at
every collection, and imports and tracing collect often), the interpreter reports the exception as "ignored" and
drops it: the Ctrl-C is lost and the command runs on to its end. So a command installs one of these two handlers,
neither of which raises from wherever the main thread happens to be:

- ``ExitAtOnce`` while nothing is half written (the command starts: imports, flags, config): one line, exit 130.
- ``DeferredCtrlC`` while training: the request is noted and the loop stops at its next safe point; a second
  Ctrl-C ends the process at once, as ``ExitAtOnce`` does.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading

INTERRUPTED = 130  # errors.INTERRUPTED (the shell's status for SIGINT), without importing more while a command starts.


def stop_at_once(message: str) -> None:
  """Writes ``message`` as one line on stderr and ends the process with status 130, running nothing else.

  No ``finally`` block, ``atexit`` function or thread runs on: for the files this leaves, it is SIGKILL (a
  checkpoint being written is left without its record, so it is no checkpoint; see docs/reliability.md).
  """
  for stream in (sys.stdout, sys.stderr):  # What was printed before stays printed.
    with contextlib.suppress(Exception):
      stream.flush()
  with contextlib.suppress(OSError):
    os.write(2, (message + "\n").encode())
  os._exit(INTERRUPTED)


_QUIET_AT_THE_END = []


def quiet_at_the_end() -> None:
  """Ctrl-C ignored once the process's exit handlers (``atexit``) have run, so that it ends with its own status.

  Call it before JAX and the other libraries register theirs: they run in reverse order, so this runs last. After
  them Python's finalization sets SIGINT's default action again, and a Ctrl-C then (tearing down modules and JAX's
  native objects takes a second or more) killed the process by the signal, with no line. Before them Ctrl-C is the
  command's own handler's.
  """
  if not _QUIET_AT_THE_END:
    _QUIET_AT_THE_END.append(True)
    atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)


def _ours(handler) -> bool:
  """Whether ``handler`` is Python's default one or one of this module's (which may replace each other)."""
  return handler is signal.default_int_handler or isinstance(getattr(handler, "__self__", None), _Handler)


def python_default() -> None:
  """Python's own handler back (Ctrl-C raises ``KeyboardInterrupt``) where one of this module's is installed."""
  if threading.current_thread() is threading.main_thread() and _ours(signal.getsignal(signal.SIGINT)):
    signal.signal(signal.SIGINT, signal.default_int_handler)


class _Handler:
  """A SIGINT handler installed over Python's default one (or another of ours) in the main thread, restored after.

  Another handler, e.g. a notebook's, or SIGINT ignored (a job started in the background of a non-interactive
  shell), is left as it is, and Ctrl-C then behaves as it decides.
  """

  def __init__(self):
    self._previous = None
    self._installed = False

  def install(self):
    """Installs the handler if the rules above allow; returns ``self``."""
    if threading.current_thread() is threading.main_thread() and _ours(signal.getsignal(signal.SIGINT)):
      self._previous = signal.signal(signal.SIGINT, self._handle)
      self._installed = True
    return self

  def restore(self) -> None:
    """Puts the handler found at ``install`` back (nothing if none was installed)."""
    if self._installed:
      signal.signal(signal.SIGINT, self._previous)
      self._installed = False

  def __enter__(self):
    return self.install()

  def __exit__(self, *exc) -> None:
    self.restore()

  def _handle(self, signum, frame) -> None:
    raise NotImplementedError


class ExitAtOnce(_Handler):
  """Ctrl-C ends the process at once with the one line ``message`` (changeable as the command goes on), exit 130.

  Only for where nothing is half written, or where what is left is what SIGKILL would leave and the command is
  made to resume from that.
  """

  def __init__(self, message: str):
    super().__init__()
    self.message = message

  def _handle(self, signum, frame) -> None:
    del signum, frame
    stop_at_once(self.message)


class DeferredCtrlC(_Handler):
  """Ctrl-C (SIGINT) while training, acted on only where the run can stop cleanly (``check``).

  The handler only notes the request; the loop stops at its next safe point (before a step, after an evaluation or
  a save), which during a compile or an evaluation is when it finishes. A second Ctrl-C means the user will not
  wait: ``stop_at_once(again)``, one line and exit 130 (raising there could crash the process, see the module's
  docstring).
  """

  def __init__(self, again: str = "interrupted again: stopped at once"):
    super().__init__()
    self.requested = False
    self.again = again

  def _handle(self, signum, frame) -> None:
    del signum, frame
    if self.requested:
      stop_at_once(self.again)
    self.requested = True

  def check(self) -> None:
    """Raises ``KeyboardInterrupt`` if Ctrl-C was pressed: call it only where stopping leaves nothing half done."""
    if self.requested:
      raise KeyboardInterrupt

  def restore(self) -> None:
    """As ``_Handler.restore``; once Ctrl-C was pressed, an ``ExitAtOnce`` put back says ``again`` from then on: a
    further Ctrl-C while the command stops is the second."""
    previous = getattr(self._previous, "__self__", None) if self._installed else None
    super().restore()
    if self.requested and isinstance(previous, ExitAtOnce):
      previous.message = self.again
