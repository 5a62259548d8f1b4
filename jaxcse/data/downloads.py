"""Downloads of the standard data (SimCSE's training text, SentEval), verified by sha256 and resumable.

``python -m jaxcse.data download senteval|wiki1m|nli [--data_dir DIR]``
fetches SimCSE's files into the data root's layout. What is fetched and its
digests are in ``downloads.json`` beside this module.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence

import tqdm

from jaxcse.data.root import DATA_DIR_ENV
from jaxcse import errors
from jaxcse.errors import JaxcseError


# What can be downloaded, from where, with which sha256: a data file beside this module (see its _comment).
MANIFEST_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "downloads.json")
with open(MANIFEST_PATH) as _f:
  _MANIFEST = json.load(_f)
SIMCSE_HF_REVISION = _MANIFEST["revision"]
DEFAULT_BASE_URL = f"https://huggingface.co/datasets/{_MANIFEST['repository']}/resolve/{SIMCSE_HF_REVISION}"
BASE_URL_ENV = "JAXCSE_DOWNLOAD_BASE_URL"  # Overrides DEFAULT_BASE_URL (a mirror, or a local server in tests).
_CHUNK_BYTES = 1 << 20
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class DownloadError(JaxcseError, RuntimeError):
  """A download that failed or did not verify; the message names the URL and what to do."""


@dataclasses.dataclass(frozen=True)
class RemoteFile:
  """One file of a download: ``filename`` under the base URL, saved as ``target`` under the data root.

  ``sha256`` is the pinned digest of the file, or ``None`` where none is known
  offline: then the digest the server announces for the file (Hugging Face's
  LFS sha256 in ``X-Linked-Etag``) is checked, and ``verified_members`` (paths
  inside ``extract_to``) carry the pinned digests instead. ``extract_to``: a
  tar archive to unpack under the data root, then delete.
  """

  filename: str
  target: str
  sha256: str | None
  extract_to: str | None = None
  verified_members: tuple[tuple[str, str], ...] = ()


DOWNLOADS: dict[str, tuple[RemoteFile, ...]] = {
    name: tuple(RemoteFile(f["filename"], f["target"], f["sha256"], extract_to=f.get("extract_to"),
                           verified_members=tuple(f.get("verified_members", {}).items()))
                for f in files)
    for name, files in _MANIFEST["downloads"].items()
}


def file_sha256(path: str) -> str:
  """Hex sha256 of a file, read in chunks."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_CHUNK_BYTES), b""):
      digest.update(chunk)
  return digest.hexdigest()


class _RecordRedirects(urllib.request.HTTPRedirectHandler):
  """Keeps the headers of every redirect hop: Hugging Face announces an LFS file's sha256 on the first one."""

  def __init__(self):
    self.hop_headers = []

  def redirect_request(self, req, fp, code, msg, headers, newurl):
    self.hop_headers.append(headers)
    return super().redirect_request(req, fp, code, msg, headers, newurl)


def _announced_sha256(all_headers) -> str | None:
  """The sha256 a server announces for the file: ``X-Linked-Etag`` (HF LFS) or a 64-hex ``ETag``."""
  for key in ("X-Linked-Etag", "ETag"):
    for headers in all_headers:
      value = (headers.get(key) or "").removeprefix("W/").strip('"').lower()
      if _SHA256_HEX.fullmatch(value):
        return value
  return None


def _offline_error(url: str, dest: str, sha256: str | None, cause: object) -> DownloadError:
  check = f" (sha256 {sha256})" if sha256 else ""
  return DownloadError(
      f"cannot download {url}: {cause}. If this machine has no network access, download the file elsewhere and "
      f"copy it by hand to {dest}{check}; running the command again then verifies it and goes on.")


def _write_part(response, part: str, url: str, *, offset: int) -> str:
  """Writes the response body into ``part`` after its first ``offset`` bytes; returns the whole file's sha256."""
  length = response.headers.get("Content-Length")
  expected_size = offset + int(length) if length is not None else None
  digest = hashlib.sha256()
  with open(part, "r+b" if offset else "wb") as f:
    for chunk in iter(lambda: f.read(_CHUNK_BYTES), b"") if offset else ():  # The kept bytes count in the digest.
      digest.update(chunk)
    with tqdm.tqdm(total=expected_size, initial=offset, unit="B", unit_scale=True, desc=os.path.basename(part),
                   disable=None) as progress:  # disable=None: shown on a terminal only.
      try:
        for chunk in iter(lambda: response.read(_CHUNK_BYTES), b""):
          f.write(chunk)
          digest.update(chunk)
          progress.update(len(chunk))
      except (OSError, http.client.HTTPException) as e:  # Reset connection, timeout, short read.
        raise DownloadError(f"download of {url} broke off after {f.tell()} bytes ({e}); {part} is kept and running "
                            "the command again resumes it") from None
    size = f.tell()
  if expected_size is not None and size != expected_size:
    raise DownloadError(f"download of {url} broke off at {size} of {expected_size} bytes; {part} is kept and "
                        "running the command again resumes it")
  return digest.hexdigest()


def fetch_file(url: str, dest: str, *, sha256: str | None = None, timeout: float = 60.0) -> str:
  """Downloads ``url`` to ``dest``, verified, resumable, atomically; returns the file's sha256.

  Bytes go to ``dest + ".part"``; a ``.part`` left by an interrupted run is
  resumed with an HTTP ``Range`` request (from scratch if the server ignores
  it). The finished file must match ``sha256``, else the digest the server
  announces (``X-Linked-Etag``/``ETag``); with neither, it is kept unverified
  with a warning. A file that does not verify is deleted, never renamed into
  place; a verified one is renamed to ``dest`` in one step.

  Raises:
    DownloadError: the server cannot be reached (offline), answers an HTTP
      error, the transfer breaks off (the ``.part`` is kept for a resume), or
      the digest differs (the ``.part`` is deleted).
  """
  os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
  part = dest + ".part"
  offset = os.path.getsize(part) if os.path.exists(part) else 0
  redirects = _RecordRedirects()
  opener = urllib.request.build_opener(redirects)
  request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
  response = None
  try:
    response = opener.open(request, timeout=timeout)
  except urllib.error.HTTPError as e:
    if not (e.code == 416 and offset):  # 416 on a resume: the .part already holds every byte; verify it below.
      raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    announced = _announced_sha256([*redirects.hop_headers, e.headers])
  except (urllib.error.URLError, OSError) as e:
    raise _offline_error(url, dest, sha256, getattr(e, "reason", e)) from None
  if response is not None:
    with response:
      announced = _announced_sha256([*redirects.hop_headers, response.headers])
      if sha256 and announced and announced != sha256:  # Fail before fetching bytes that cannot verify.
        raise DownloadError(f"{url}: the server announces sha256 {announced}, not the expected {sha256}; the remote "
                            "file has changed, so it is not downloaded")
      resumed = response.status == 206 and (response.headers.get("Content-Range") or "").startswith(f"bytes {offset}-")
      actual = _write_part(response, part, url, offset=offset if resumed else 0)  # A 200 (Range ignored): start over.
  else:
    actual = file_sha256(part)
  expected = sha256 or announced
  if expected is None:
    logging.warning("%s: no sha256 known or announced by the server; kept unverified (sha256 %s)", url, actual)
  elif actual != expected:
    os.remove(part)
    source = "pinned" if sha256 else "announced by the server"
    raise DownloadError(f"{url}: downloaded sha256 {actual} differs from the expected {expected} ({source}); the "
                        "corrupted file was deleted, run the command again to retry")
  os.replace(part, dest)
  return actual


def _verify_members(root: str, members: Sequence[tuple[str, str]], origin: str) -> None:
  for relpath, digest in members:
    path = os.path.join(root, relpath)
    if not os.path.isfile(path):
      raise DownloadError(f"{origin}: {relpath} is missing")
    actual = file_sha256(path)
    if actual != digest:
      raise DownloadError(f"{origin}: {relpath} has sha256 {actual}, expected {digest}")


def _members_ok(root: str, members: Sequence[tuple[str, str]]) -> bool:
  try:
    _verify_members(root, members, root)
  except DownloadError:
    return False
  return True


def extract_tar(archive: str, dest: str, *, verified_members: Sequence[tuple[str, str]] = ()) -> list[str]:
  """Unpacks a tar archive into ``dest`` safely; returns the files written (paths relative to ``dest``).

  Extraction uses tarfile's ``data`` filter, which refuses absolute paths,
  ``..``, links pointing outside and special files. Everything is unpacked
  into a temporary folder beside ``dest`` and checked against
  ``verified_members`` first; only then are the files moved into ``dest``
  (existing files of the same name are replaced, others left alone).
  """
  parent = os.path.dirname(os.path.abspath(dest))
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(prefix=".extract-", dir=parent)
  try:
    try:
      with tarfile.open(archive) as tar:
        tar.extractall(staging, filter="data")
    except (tarfile.TarError, OSError) as e:
      raise DownloadError(f"{archive}: cannot extract safely ({type(e).__name__}: {e}); nothing was written to {dest}")
    _verify_members(staging, verified_members, f"{archive} (nothing was written to {dest})")
    written = []
    for folder, _, files in os.walk(staging):
      for name in files:
        relpath = os.path.relpath(os.path.join(folder, name), staging)
        os.makedirs(os.path.dirname(os.path.join(dest, relpath)), exist_ok=True)
        os.replace(os.path.join(folder, name), os.path.join(dest, relpath))
        written.append(relpath)
    return sorted(written)
  finally:
    shutil.rmtree(staging, ignore_errors=True)


def download(name: str, root: str, *, base_url: str | None = None) -> list[str]:
  """Fetches one of ``DOWNLOADS`` (``senteval``, ``wiki1m``, ``nli``) into the data root ``root``.

  ``base_url`` (else ``$JAXCSE_DOWNLOAD_BASE_URL``, else SimCSE's Hugging Face
  dataset at a pinned revision) is where the files are, by name. Files already
  present and verified are not fetched again; a present file with the wrong
  digest is an error (it is not overwritten). Returns the paths it checked or
  wrote.
  """
  if name not in DOWNLOADS:
    raise DownloadError(f"unknown download {name!r}; choose from {', '.join(DOWNLOADS)}")
  base = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
  done = []
  for remote in DOWNLOADS[name]:
    url = f"{base}/{remote.filename}"
    target = os.path.join(root, remote.target)
    if remote.extract_to:
      extract_dir = os.path.join(root, remote.extract_to)
      if remote.verified_members and _members_ok(extract_dir, remote.verified_members):
        logging.info("%s: already there, %d files verified", extract_dir, len(remote.verified_members))
        done.append(extract_dir)
        continue
      fetched = not os.path.exists(target)
      if fetched:
        fetch_file(url, target, sha256=remote.sha256)
      else:
        logging.info("%s: using the archive already there (its files are verified after extraction)", target)
      try:
        written = extract_tar(target, extract_dir, verified_members=remote.verified_members)
      except DownloadError as e:
        if not fetched:
          raise DownloadError(f"{e}; {target} was there before this run: remove it to download it again") from None
        os.remove(target)  # Else every later run would reuse the bad archive.
        raise DownloadError(f"{e}; the downloaded archive was deleted") from None
      os.remove(target)  # Its content is in place and verified; the archive would only double the disk use.
      logging.info("%s: extracted %d files (%d verified by sha256)", extract_dir, len(written),
                   len(remote.verified_members))
      done.append(extract_dir)
      continue
    if os.path.exists(target):
      actual = file_sha256(target)
      if remote.sha256 and actual != remote.sha256:
        raise DownloadError(f"{target} exists but its sha256 is {actual}, not {remote.sha256}; remove it to "
                            "download it again")
      logging.info("%s: already there%s", target, ", sha256 verified" if remote.sha256 else "")
    else:
      fetch_file(url, target, sha256=remote.sha256)
      logging.info("%s: downloaded and verified", target)
    done.append(target)
  return done


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m jaxcse.data", description="Fetch SimCSE's training and evaluation data, verified by sha256.")
  commands = parser.add_subparsers(dest="command", required=True)
  fetch = commands.add_parser("download", help="fetch SimCSE's training and evaluation data, verified by sha256")
  fetch.add_argument("names", nargs="+", choices=sorted(DOWNLOADS), metavar="NAME",
                     help=f"what to fetch: {', '.join(DOWNLOADS)}")
  fetch.add_argument("--data_dir", default=None, help=f"data root (default ${DATA_DIR_ENV}); created if missing")
  fetch.add_argument("--base_url", default=None,
                     help=f"where the files are (default ${BASE_URL_ENV}, else {DEFAULT_BASE_URL})")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  root = args.data_dir or os.environ.get(DATA_DIR_ENV)
  if not root:
    parser.error(f"no data directory: pass --data_dir or set ${DATA_DIR_ENV}")
  os.makedirs(root, exist_ok=True)
  for name in args.names:
    for path in download(name, root, base_url=args.base_url):
      print(path)
  return 0
