"""Files written whole or not at all, and read back with a torn write recognised: one helper per job.

Every file jaxcse writes for a user (config.json, summary.json, results, sidecars, the checkpoint checksum record,
metrics.jsonl) goes through here, so a kill or a full disk never leaves a half-written file, and an error names
the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from jaxcse.core.errors import JaxcseError

log = logging.getLogger("jaxcse")

_CHUNK_BYTES = 1 << 20


def file_sha256(path: str) -> str:
  """Hex sha256 of a file, read in chunks."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_CHUNK_BYTES), b""):
      digest.update(chunk)
  return digest.hexdigest()


def folder_digests(folder: str, *, record: str) -> dict[str, str]:
  """sha256 of every file under ``folder`` but ``record`` (the file that keeps them), by relative path."""
  digests = {}
  for root, _, names in os.walk(folder):
    for name in sorted(names):
      path = os.path.join(root, name)
      rel = os.path.relpath(path, folder)
      if rel != record:
        digests[rel] = file_sha256(path)
  return digests


def record_digests(folder: str, record: str, digests: dict[str, str] | None = None) -> None:
  """Writes ``folder/record``: the sha256 of every other file in ``folder`` (``folder_digests``), atomically.

  The record is what vouches for the folder's files: ``digest_mismatch`` compares them against it.
  """
  write_json(os.path.join(folder, record), folder_digests(folder, record=record) if digests is None else digests)


def digest_mismatch(folder: str, record: str, actual: dict[str, str] | None = None) -> str | None:
  """Why the files of ``folder`` do not match ``folder/record`` (``record_digests``), or None if they all do.

  The reason starts with the path, relative to ``folder``, of the file at fault.

  The record must list every file of the folder (but itself), each with its sha256, and every file it lists must
  be there: an empty or partial record vouches for nothing, and a file it does not list is one nothing vouches
  for. ``actual``: the folder's digests (``folder_digests``) if the caller already computed them.
  """
  try:
    with open(os.path.join(folder, record)) as f:
      expected = json.load(f)
    if not isinstance(expected, dict) or not all(isinstance(v, str) for v in expected.values()):
      raise ValueError("not a JSON object of sha256 digests")
    if not expected:
      raise ValueError("it lists no file")
  except (OSError, ValueError) as e:
    return f"{record} is unreadable ({e})"
  if actual is None:
    actual = folder_digests(folder, record=record)
  for rel, digest in sorted(expected.items()):
    if rel not in actual:
      return f"{rel} is missing"
    if actual[rel] != digest:
      return f"{rel} does not match its sha256 (truncated, corrupted or changed)"
  unlisted = sorted(set(actual) - set(expected))
  if unlisted:
    return f"{unlisted[0]} is not in {record} (nothing vouches for it: the record is partial, or the file was added)"
  return None


def write_json(path: str, obj: Any) -> None:
  """Writes JSON atomically (a temporary file renamed over ``path``): never a half-written file.

  Raises:
    OSError: naming ``path`` (a full disk, a missing permission); ``path`` is then as it was.
  """
  text = json.dumps(obj, indent=2, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
  write_text_atomically(path, text)


def apply_umask(folder: str) -> None:
  """Gives ``folder`` and everything under it the modes a plain ``mkdir`` and ``open`` would have: 0777 for folders
  and 0666 for files, less the process's umask (readable by others under the usual umask 022).

  For output written through ``tempfile.mkdtemp`` (always 0700) or by writers that create 0600 files (safetensors).
  """
  umask = os.umask(0)
  os.umask(umask)  # Reading the umask sets it: put it back at once.
  for parent, folders, names in os.walk(folder):
    os.chmod(parent, 0o777 & ~umask)
    for name in names:
      path = os.path.join(parent, name)
      if not os.path.islink(path):
        os.chmod(path, 0o666 & ~umask)
    del folders  # os.walk visits each of them as a parent.


def write_text_atomically(path: str, text: str) -> None:
  """Writes ``text`` to a temporary file renamed over ``path``: ``path`` is the whole new text or as it was.

  Raises:
    OSError: naming ``path`` (a full disk, a missing permission).
  """
  tmp = path + ".tmp"
  try:
    with open(tmp, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException as e:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    if isinstance(e, OSError) and e.filename is None:  # A write's error names no file: say which.
      raise OSError(e.errno, e.strerror or str(e), path) from None
    raise


def write_atomically(path: str, write: Callable[[str], object]) -> None:
  """Calls ``write(tmp)`` to write a temporary file beside ``path``, then renames it over ``path``: ``path`` is the
  whole new file or as it was (for writers of other libraries, e.g. ``datasets.Dataset.to_parquet``).

  Raises:
    OSError: naming ``path`` (a full disk, a missing permission); what ``write`` raises, with ``path`` as it was.
  """
  tmp = path + ".tmp"
  try:
    write(tmp)
    os.replace(tmp, path)
  except BaseException as e:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    if isinstance(e, OSError) and e.filename is None:  # A write's error names no file: say which.
      raise OSError(e.errno, e.strerror or str(e), path) from None
    raise


def append_line(path: str, line: str) -> None:
  """Appends ``line`` (one line, no newline) and a newline to ``path``: the whole line or, on an error, nothing.

  A failed write (a full disk) may leave part of the line; the file is cut back to its length before the call.

  Raises:
    OSError: naming ``path``.
  """
  data = (line + "\n").encode()
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
      view = memoryview(data)
      while view:
        view = view[os.write(fd, view) :]
    except OSError as e:
      os.ftruncate(fd, start)
      raise OSError(e.errno, e.strerror, path) from None
  finally:
    os.close(fd)


def read_jsonl(path: str) -> list[dict]:
  """The records of a JSON-lines file that ``append_line`` wrote; a torn last line is dropped with a warning.

  A last line that is not a whole JSON object is what a write cut short leaves (a kill, a full disk with an
  older jaxcse); any other line that does not parse is damage that jaxcse did not make.

  Raises:
    JaxcseError: a line other than the last is not a JSON object (the message names the file and line).
  """
  with open(path, "rb") as f:
    lines = f.read().split(b"\n")
  last = max((i for i, raw in enumerate(lines) if raw.strip()), default=-1)  # The last line with anything on it.
  records = []
  for i, raw in enumerate(lines):
    if not raw.strip():
      continue
    try:
      record = json.loads(raw)
      if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
      if i == last:
        text = raw.decode("utf-8", "replace")
        log.warning(
          "%s:%d: dropped a torn last line (a write was cut short): %s",
          path,
          i + 1,
          text if len(text) <= 80 else text[:77] + "...",
        )
        continue
      raise JaxcseError(
        f"{path}:{i + 1}: not a JSON object ({e}); jaxcse writes whole lines only, so this file "
        "was changed by something else"
      ) from None
    records.append(record)
  return records
