"""The base of every error that is the user's input or the machine's state, not a defect in jaxcse.

Every command catches ``JaxcseError`` (and ``OSError``: a full disk, a missing permission) and prints its message
as one line with a non-zero exit, never a traceback. Each module keeps its own subclass next to the code that
raises it (``data.DataError``, ``configuration.ConfigError``, ``checkpoints.CheckpointError``, ...).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
from collections.abc import Callable

from jaxcse.core import interrupts


class JaxcseError(Exception):
  """A problem with the input or the machine, described in the message (which names the file, field or value)."""


USER_ERRORS = (JaxcseError, OSError)


def print_error(error: BaseException) -> int:
  """Prints ``error`` as one line on stderr; returns the exit status 1."""
  lines = str(error).strip().splitlines() or [type(error).__name__]
  message = " ".join(line.strip() for line in lines)
  if isinstance(error, OSError) and not isinstance(error, JaxcseError) and error.filename:
    message = f"{error.filename}: {error.strerror or message}"
  print(f"error: {message}", file=sys.stderr)
  return 1


INTERRUPTED = 130  # The exit status of a command stopped by Ctrl-C (SIGINT): the shell's own for it.


class _JaxcseLines(logging.Handler):
  """jaxcse's own log lines as plain lines, as the command's other output: its notes (INFO: evaluations, the
  resume point) on stdout beside the progress line, its warnings on stderr beside its errors."""

  def emit(self, record: logging.LogRecord) -> None:
    try:
      stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
      print(record.getMessage(), file=stream, flush=True)
    except Exception:
      self.handleError(record)


def _not_jaxcses(record: logging.LogRecord) -> bool:
  return not record.name.startswith("jaxcse")


def console_logging(notes: bool) -> Callable[[], None] | None:
  """A command's log lines: jaxcse's own as plain lines (``_JaxcseLines``: its warnings, and with ``notes`` its
  INFO notes too, as the trainer prints them), the libraries' (orbax logs every save) from WARNING in absl's format
  (``W1128 12:00:00.000000 ...``), as absl's ``app.run`` sets them. Without it, the first absl record (orbax logs
  one on import) makes absl call ``logging.basicConfig()``, and jaxcse's warnings print as ``WARNING:jaxcse:...``.

  Returns what undoes the plain lines (a command run in-process, from a notebook or a test, leaves the caller's
  logging as it found it), or None where they were set already.
  """
  from absl import flags, logging as absl_logging

  if not flags.FLAGS.is_parsed():  # absl's handler reads its own flags (--logtostderr, ...): their defaults.
    flags.FLAGS.mark_as_parsed()
  absl_logging.use_absl_handler()
  absl_logging.set_verbosity(absl_logging.WARNING)
  log = logging.getLogger("jaxcse")
  if notes:
    log.setLevel(logging.INFO)
  if any(isinstance(h, _JaxcseLines) for h in log.handlers):  # Once, however often a process calls this.
    return None
  lines, absl_handler = _JaxcseLines(), absl_logging.get_absl_handler()
  log.addHandler(lines)
  # jaxcse's records still reach the root logger (where a caller's own handlers see them), but not absl's handler
  # there: each line is printed once.
  absl_handler.addFilter(_not_jaxcses)

  def undo() -> None:
    log.removeHandler(lines)
    absl_handler.removeFilter(_not_jaxcses)

  return undo


def cli(main: Callable[..., int]) -> Callable[..., int]:
  """Wraps a command's ``main`` so that a user error is one line and exit status 1, and Ctrl-C one line and 130.

  A ``KeyboardInterrupt`` with a message (say, where the same command resumes) prints it; else ``interrupted``.
  While ``main`` runs, Ctrl-C raises only where unwinding is safe (``interrupts.RaiseWhereSafe``: not inside
  JAX's garbage-collector callback, where Python dropped it, nor inside jax's tracing or an import); a second
  Ctrl-C stops at once. Every command but train comes through here, from either entry (``jaxcse.entry``,
  ``python -m``), so this is the one place that decides it for all of them.
  """

  def wrapped(*args, **kwargs) -> int:
    undo_lines = console_logging(notes=False)  # A command's stdout may be its result: only its warnings, on stderr.
    with interrupts.RaiseWhereSafe() as ctrl_c:
      try:
        status = main(*args, **kwargs)
        ctrl_c.check("interrupted as the command finished")  # Pressed where it was never safe to raise.
      except USER_ERRORS as e:
        status = print_error(e)
      except KeyboardInterrupt as e:
        print(str(e) or "interrupted", file=sys.stderr)
        status = INTERRUPTED
      finally:
        if undo_lines is not None:
          undo_lines()
    starting = interrupts.starting_handler()
    if starting is not None:  # The command's own process: Ctrl-C as it exits is one more line, 130.
      starting.message = interrupts.AGAIN if status == INTERRUPTED else interrupts.EXITING
    return status

  wrapped.__doc__, wrapped.__name__, wrapped.__wrapped__ = main.__doc__, main.__name__, main
  return wrapped


MISTAKES = "A mistake is one line on stderr (error: ...) and exit status 1, before anything is written."


class ArgumentParser(argparse.ArgumentParser):
  """The commands' argparse: a usage mistake is one line and exit status 1, like every other user error.

  argparse's own is two lines (usage, then the error) and exit status 2; the commands document one line and 1 for
  every mistake, flags included, and their ``--help`` says so (the epilog).
  """

  def __init__(self, *args, **kwargs):
    epilog = kwargs.get("epilog")
    # A blank line between: kept by a raw epilog (train's, compile's), one space once argparse refills the text.
    kwargs["epilog"] = f"{epilog.rstrip()}\n\n{MISTAKES}" if epilog else MISTAKES
    super().__init__(*args, **kwargs)

  def error(self, message: str):
    self.exit(1, f"error: {message}{self._did_you_mean(message)} ({self.prog} --help lists the flags)\n")

  def _did_you_mean(self, message: str) -> str:
    """For an unknown flag, the command's flag closest to it (``--modle``: ``--model``), as absl suggests."""
    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
      return ""
    known = [option for option in self._option_string_actions if option.startswith("--")]
    for word in message[len(prefix) :].split():
      close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1) if word.startswith("--") else []
      if close:
        return f"; did you mean {close[0]}?"
    return ""


def command_name(module: str) -> str:
  """How the user ran a command, for its usage line: its console script (``jaxcse-evaluate``) or ``python -m``."""
  script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
  return script if script.startswith("jaxcse-") else f"python -m {module}"


class OutputError(JaxcseError, ValueError):
  """An output path that cannot be written, found before anything is computed or written."""


def check_output(path: str, *, folder: bool) -> None:
  """Checks, before a command computes or writes anything, that it can write ``path`` (a folder or a file).

  Raises ``OutputError`` if ``path`` exists as the other kind, or if neither it nor its nearest existing parent
  is a writable folder (the command creates the missing folders on the way only when it writes).
  """
  if os.path.exists(path):
    if folder and not os.path.isdir(path):
      raise OutputError(f"{path}: exists and is not a folder")
    if not folder and os.path.isdir(path):
      raise OutputError(f"{path}: is a folder; give a file path")
  existing = os.path.abspath(path) if folder else os.path.dirname(os.path.abspath(path))
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
    raise OutputError(f"{path}: cannot be written ({existing} is not a writable folder)")
