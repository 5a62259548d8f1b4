"""The data root: where relative data paths resolve, and the error every bad input raises.

Relative paths are looked up under the data directory, which is
``--data_dir``/``config.data.data_dir`` or else ``$JAXCSE_DATA_DIR``, laid out
like SentEval's and SimCSE's: ``senteval/downstream/...``, ``corpora/...``.

Under every data root lies the quickstart data shipped inside the package
(``manifest.EMBEDDED_ROOT``: a 20,000-sentence Wikipedia corpus, STS-B dev and the
STS test sets that jaxcse-evaluate scores: STS12-16, STS-B and SICK-R):
a file that the given root lacks, or any file when no root is given, is read
from there if it is one of the embedded files (after checking its pinned
sha256), with one line saying so. The embedded files are never shadowed
silently and never replace a file the root has. Anything else missing is an
error naming the ``jaxcse-data download`` command that fetches it.
"""

from __future__ import annotations

import contextlib
import logging
import os

from jaxcse.core import files
from jaxcse.core.errors import JaxcseError
from jaxcse.data import manifest

DATA_DIR_ENV = "JAXCSE_DATA_DIR"
EMBEDDED_ROOT = manifest.EMBEDDED_ROOT

log = logging.getLogger("jaxcse")


class DataError(JaxcseError, ValueError):
  """Bad or missing input data; the message names the file and line."""


_NO_ROOT = f"no data root is given (--data_dir DIR, config.data.data_dir or ${DATA_DIR_ENV})"


def given_root(explicit: str | None = None) -> str | None:
  """The data root the user gave: ``explicit`` if given, else ``$JAXCSE_DATA_DIR``, else None. It must exist."""
  root = explicit or os.environ.get(DATA_DIR_ENV)
  if root and not os.path.isdir(root):
    raise DataError(f"data directory {root!r} does not exist")
  return root or None


def data_dir(explicit: str | None = None) -> str:
  """The data root: ``explicit`` if given, else ``$JAXCSE_DATA_DIR``; for commands that need the whole benchmark."""
  root = given_root(explicit)
  if root is None:
    raise DataError(
      f"{_NO_ROOT}: fetch the benchmarks with `jaxcse-data download senteval --data_dir DIR`, then pass "
      f"--data_dir DIR or set ${DATA_DIR_ENV}=DIR (a folder laid out as senteval/downstream/... and corpora/...)"
    )
  return root


_embedded_checked: set[str] = set()


def embedded_file(relpath: str) -> str | None:
  """The embedded copy of ``relpath`` (relative to a data root), its sha256 checked; None if none is embedded."""
  key = os.path.normpath(relpath).replace(os.sep, "/")
  if key not in manifest.EMBEDDED_SHA256:
    return None
  path = os.path.join(EMBEDDED_ROOT, *key.split("/"))
  if key not in _embedded_checked:
    if not os.path.isfile(path):
      raise DataError(f"{path}: missing from jaxcse's installed quickstart data; reinstall jaxcse")
    actual, expected = files.file_sha256(path), manifest.EMBEDDED_SHA256[key]
    if actual != expected:
      raise DataError(
        f"{path}: sha256 {actual}, not the {expected} pinned in {manifest.MANIFEST_PATH}; jaxcse's "
        "installed quickstart data is damaged: reinstall jaxcse"
      )
    _embedded_checked.add(key)
  return path


_announced: set[str | None] = set()
_held: list[tuple[str | None, tuple]] | None = None  # The lines ``notes_held`` holds back: (key, log arguments).


def _announce(relpath: str, given: str | None) -> None:
  """One line when the embedded data is first used: per process without a data root, per file with one."""
  key = relpath if given else None
  if key in _announced:
    return
  _announced.add(key)
  if given:  # The root the user gave lacks a file: a warning.
    line = (
      logging.WARNING,
      "%s: not in the data root %s, so it is read from the quickstart data shipped with jaxcse (%s)",
      relpath,
      given,
      EMBEDDED_ROOT,
    )
  else:  # Nothing is missing: the shipped data is where a command without a data root reads. A note, not a warning.
    line = (
      logging.INFO,
      "reading the data shipped with jaxcse (a 20,000-sentence corpus, STS-B dev, the STS test sets; --data_dir "
      "DIR or $%s reads another data root)",
      DATA_DIR_ENV,
    )
  if _held is None:
    log.log(*line)
  else:
    _held.append((key, line))


@contextlib.contextmanager
def notes_held():
  """Holds back the lines saying that shipped data is read while a command checks its inputs: if a check refuses,
  its error is the command's only line (and the lines are dropped); once the block ends without one, they are
  logged. Nested blocks hold for the outermost."""
  global _held
  if _held is not None:
    yield
    return
  _held = []
  try:
    yield
  except BaseException:
    _announced.difference_update(key for key, _ in _held)  # Not said: a later command in this process says it.
    raise
  else:
    for _, line in _held:
      log.log(*line)
  finally:
    _held = None


def embedded_root_for(relpaths: list[str], root: str | None = None, *, what: str) -> str:
  """``EMBEDDED_ROOT`` if every one of ``relpaths`` is shipped there (each sha256 checked), announced in one line.

  For data read as a whole from one root (an evaluation task's files): ``root`` is the data root the user gave
  (None: none) that lacks them, named in the line. ``what`` names the data in the messages.

  Raises:
    DataError: one of them is not shipped (the message names the ``jaxcse-data download`` that fetches it), or a
      shipped copy fails its sha256 check.
  """
  for relpath in relpaths:
    if embedded_file(relpath) is None:
      data_file(relpath, root)  # Raises the error that names where it looked and the download.
  _announce(what, root)
  return EMBEDDED_ROOT


def data_file(relpath: str, root: str | None = None, *, looked_in_cwd: bool = False) -> str:
  """The file ``relpath`` of the data root (``root``, else ``$JAXCSE_DATA_DIR``), else its embedded copy.

  Raises:
    DataError: the given root does not exist, or neither it nor the embedded data has the file (the message
      names where it looked and the ``jaxcse-data download`` that fetches the file, if one does), or the
      embedded copy fails its sha256 check.
  """
  given = given_root(root)
  candidate = os.path.join(given, relpath) if given else None
  if candidate and os.path.exists(candidate):
    return candidate
  embedded = embedded_file(relpath)
  if embedded is not None:
    _announce(relpath, given)
    return embedded
  download = manifest.download_providing(relpath)
  cwd = "the current directory" if looked_in_cwd else ""
  if given:
    looked = f"{cwd} and in {candidate}" if cwd else candidate
    fetch = f"; `jaxcse-data download {download} --data_dir {given}` fetches it" if download else ""
    raise DataError(f"{relpath}: no such file (looked in {looked}){fetch}")
  looked = f" (looked in {cwd})" if cwd else ""
  fetch = (
    f"`jaxcse-data download {download} --data_dir DIR` fetches it; then pass --data_dir DIR or set ${DATA_DIR_ENV}=DIR"
    if download
    else f"no jaxcse-data download provides it, so put it under a folder DIR and pass --data_dir DIR or set "
    f"${DATA_DIR_ENV}=DIR"
  )
  raise DataError(
    f"{relpath}: no such file{looked}, {_NO_ROOT}, and the quickstart data shipped with jaxcse does "
    f"not have it: {fetch}"
  )


def resolve(path: str, root: str | None = None) -> str:
  """``path`` as given if it is absolute or exists, else ``data_file(path, root)`` (the root, then the embedded data)."""
  if os.path.isabs(path) or os.path.exists(path):
    return path
  return data_file(path, root, looked_in_cwd=True)
