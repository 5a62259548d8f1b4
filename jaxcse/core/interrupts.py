"""Ctrl-C (SIGINT) as a long-running command needs it: acted on only at safe points, or at once with one line.

Python's own handler raises ``KeyboardInterrupt`` at the next bytecode the main thread runs. Two places make that
unsafe. Inside jax's tracing and lowering (Python code that XLA's C++ calls back while it compiles) or orbax's
save (whose threads go on writing), unwinding leaves native state half built, and the process then crashed as it
exited ("Fatal Python error: Segmentation fault"). Inside a garbage-collector callback (jax registers one, run at
every collection, and imports and tracing collect often), the interpreter reports the exception as "ignored" and
drops it: the Ctrl-C is lost and the command runs on to its end. So a command installs one of these handlers,
none of which raises from wherever the main thread happens to be:

- ``ExitAtOnce`` while nothing is half written (the command starts: imports, flags, config): one line, exit 130.
  Every command has it from the first line of ``jaxcse/__init__.py`` (``command_starts``), whichever way it was
  started: a console script or ``python -m jaxcse.X``.
- ``DeferredCtrlC`` while training: the request is noted and the loop stops at its next safe point; a second
  Ctrl-C ends the process at once, as ``ExitAtOnce`` does.
- ``RaiseWhereSafe`` while any other command runs (``errors.cli``): ``KeyboardInterrupt``, which the command's
  own code turns into its one line (its outputs are written whole or not at all), raised only once the main
  thread is out of a garbage-collector callback, an import, and JAX's, flax's and orbax's code; a second Ctrl-C
  ends the process at once.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import gc
import os
import signal
import sys
import threading
import time

INTERRUPTED = 130  # errors.INTERRUPTED (the shell's status for SIGINT), without importing more while a command starts.
STARTING = "interrupted as the command started; nothing was written"
AGAIN = "interrupted again: stopped at once"
EXITING = "interrupted as the command exited"


def stop_at_once(message: str) -> None:
  """Writes ``message`` as one line on stderr and ends the process with status 130, running nothing else.

  No ``finally`` block, ``atexit`` function or thread runs on: for the files this leaves, it is SIGKILL (a
  checkpoint being written is left without its record, so it is no checkpoint; see docs/reliability.md).
  """
  for stream in (sys.stdout, sys.stderr):  # What was printed before stays printed.
    with contextlib.suppress(Exception):
      stream.flush()
  with contextlib.suppress(OSError):
    os.write(STDERR[-1], (message + "\n").encode())
  os._exit(INTERRUPTED)


# Where stderr really goes: the last entry is where the line is written. While file descriptor 2 is a pipe to a
# filtering thread (``compat.harmless_native_lines_dropped``: compile's imports), a line written there was lost
# with the thread at ``os._exit`` (rc 130 and no line).
STDERR = [2]


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


class RaiseWhereSafe(_Handler):
  """Ctrl-C as Python's ``KeyboardInterrupt``, raised only where unwinding is safe; a second Ctrl-C stops at once.

  A command other than train has no loop of its own to check a request at (encode, evaluate, mine, export: a
  few calls into the model), and its own code already turns ``KeyboardInterrupt`` into one line with every output
  whole or absent (``errors.cli``, encode's partial output, export's temporary folder). What it lacked is where
  Python raised it: inside JAX's garbage-collector callback (dropped, and the command ran on to exit 0), inside
  jax's tracing under XLA's compiler (a crash at exit, rc -11), inside an import (a half-imported module). So
  the handler raises only when no frame of the main thread's stack is one of those (``safe_to_raise``); else the
  request waits and is delivered again every ``RETRY_S`` (``_thread.interrupt_main``: this handler runs again at
  the main thread's next bytecode) until it lands in plain code: during a compile, when the compile is done.
  ``again`` is the second Ctrl-C's line (``stop_at_once``: what is left is what kill -9 leaves).
  """

  RETRY_S = 0.02

  def __init__(self, again: str = AGAIN):
    super().__init__()
    self.again = again
    self.pending = False  # Pressed, not raised yet.
    self.raised = False
    self._redelivered = False  # The next call of the handler is the retry thread's, not a keypress.
    self._retrying: threading.Thread | None = None

  def _handle(self, signum, frame) -> None:
    del signum
    ours, self._redelivered = self._redelivered, False
    if ours and not self.pending:  # A retry sent as the request was being raised: nothing to do.
      return
    if not ours and (self.pending or self.raised):
      stop_at_once(self.again)
    self.pending = True
    if safe_to_raise(frame or sys._getframe(1)):
      self.pending, self.raised = False, True
      raise KeyboardInterrupt
    if self._retrying is None:
      self._retrying = threading.Thread(target=self._retry, name="jaxcse-ctrl-c", daemon=True)
      self._retrying.start()

  def check(self, message: str = "") -> None:
    """Raises ``KeyboardInterrupt(message)`` if Ctrl-C was pressed and not raised yet: call it in plain code."""
    if self.pending:
      self.pending, self.raised = False, True  # Before a retry can raise it a second time.
      raise KeyboardInterrupt(message)

  def _retry(self) -> None:
    while self.pending and self._installed:
      time.sleep(self.RETRY_S)
      if self.pending and self._installed:
        self._redelivered = True
        _thread.interrupt_main(signal.SIGINT)
    self._retrying = None

  def restore(self) -> None:
    """As ``_Handler.restore``, once no retry can reach the handler put back (it would take it for a keypress)."""
    self.pending = False
    retrying = self._retrying
    if retrying is not None and retrying is not threading.current_thread():
      retrying.join()
      _handlers_run()  # A retry sent just before it stopped reaches this handler, not the one put back.
    super().restore()


def _handlers_run() -> None:
  """Nothing: calling a Python function runs the signal handlers pending for the main thread (at its entry)."""


# Top-level packages whose Python code runs under native code that called it (jax's tracing and lowering under
# XLA's compiler, orbax's and tensorstore's callbacks, pyarrow's file writes) or whose half-run state outlives the
# exception (an import leaves a half-initialised module that exit handlers then use).
_NOT_HERE = frozenset({"jax", "jaxlib", "flax", "orbax", "optax", "chex", "tensorstore", "pyarrow", "importlib"})


_HELD = []  # One entry per ``uninterrupted`` block the main thread is in.


@contextlib.contextmanager
def uninterrupted():
  """Ctrl-C under ``RaiseWhereSafe`` waits until the block is done: for steps that must all happen or none (an
  output renamed into place and its sidecar written)."""
  _HELD.append(1)
  try:
    yield
  finally:
    _HELD.pop()


def safe_to_raise(frame) -> bool:
  """Whether a ``KeyboardInterrupt`` raised in ``frame`` unwinds through plain Python code only (see above), outside
  an ``uninterrupted`` block."""
  if _HELD:
    return False
  callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
  while frame is not None:
    code = frame.f_code
    if code in callbacks or code.co_name == "__del__":  # Python drops an exception raised in these.
      return False
    if str(frame.f_globals.get("__name__", "")).partition(".")[0] in _NOT_HERE:
      return False
    frame = frame.f_back
  return True


def _command_in_argv() -> bool:
  """Whether this process is a jaxcse command starting: ``python -m jaxcse.X`` (while runpy imports the package,
  ``sys.argv[0]`` is ``-m``: the module follows in ``sys.orig_argv``) or a console script ``jaxcse-X``."""
  argv0 = sys.argv[0] if sys.argv else ""
  if os.path.basename(argv0).startswith("jaxcse-"):
    return True
  if argv0 != "-m":
    return False
  orig = list(getattr(sys, "orig_argv", []))
  for before, arg in zip(orig, orig[1:]):
    module = arg if before.startswith("-") and not before.startswith("--") and before.endswith("m") else None
    if before.startswith("-m") and len(before) > 2:
      module = before[2:]
    if module is not None:
      return module.partition(".")[0] == "jaxcse"
  return False


_STARTING: list[ExitAtOnce] = []


def command_starts(force: bool = False) -> ExitAtOnce | None:
  """``ExitAtOnce(STARTING)`` installed for the rest of the process, if it is a jaxcse command (or ``force``).

  Called by the first line of ``jaxcse/__init__.py``, so that Ctrl-C is one line from the first moment jaxcse's
  code runs: a console script and ``python -m jaxcse.X`` then start alike (before, ``-m`` had Python's handler
  while JAX imported: tracebacks, once a C++ ``terminate``, rc -6). It stays installed as the process exits
  (JAX's exit handlers take seconds, and Python's handler raised in them); ``errors.cli`` puts
  ``RaiseWhereSafe`` over it while the command runs and tells it what to say afterwards. A plain ``import
  jaxcse`` (a notebook, a test) installs nothing.
  """
  if not _STARTING and (force or _command_in_argv()):
    quiet_at_the_end()
    at_once = ExitAtOnce(STARTING).install()
    if at_once._installed:
      _STARTING.append(at_once)
  return _STARTING[0] if _STARTING else None


def starting_handler() -> ExitAtOnce | None:
  """The ``ExitAtOnce`` that ``command_starts`` installed, or None (not a command's process, or another handler)."""
  return _STARTING[0] if _STARTING else None


def release_starting() -> None:
  """Puts back the handler ``command_starts`` found (the process goes on as Python code: a test's)."""
  if _STARTING:
    _STARTING.pop().restore()
