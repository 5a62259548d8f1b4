"""The base of every error that is the user's input or the machine's state, not a defect in jaxcse.

Every command catches ``JaxcseError`` (and ``OSError``: a full disk, a missing permission) and prints its message
as one line with a non-zero exit, never a traceback. Each module keeps its own subclass next to the code that
raises it (``data.DataError``, ``configuration.ConfigError``, ``checkpoints.CheckpointError``, ...).
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class JaxcseError(Exception):
  """A problem with the input or the machine, described in the message (which names the file, field or value)."""


USER_ERRORS = (JaxcseError, OSError)


def report(error: BaseException) -> int:
  """Prints ``error`` as one line on stderr; returns the exit status 1."""
  lines = str(error).strip().splitlines() or [type(error).__name__]
  message = " ".join(line.strip() for line in lines)
  if isinstance(error, OSError) and not isinstance(error, JaxcseError) and error.filename:
    message = f"{error.filename}: {error.strerror or message}"
  print(f"error: {message}", file=sys.stderr)
  return 1


def cli(main: Callable[..., int]) -> Callable[..., int]:
  """Wraps a command's ``main`` so that a user error is one line and exit status 1."""

  def wrapped(*args, **kwargs) -> int:
    try:
      return main(*args, **kwargs)
    except USER_ERRORS as e:
      return report(e)

  wrapped.__doc__, wrapped.__name__, wrapped.__wrapped__ = main.__doc__, main.__name__, main
  return wrapped
