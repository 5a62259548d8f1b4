"""Downloads of the standard data (SimCSE's training text, SentEval), verified by sha256 and resumable.

``python -m jaxcse.data download senteval|wiki1m|nli [--data_dir DIR]``
fetches SimCSE's files into the data root's layout. What is fetched and its
digests are in ``downloads.json`` beside this module. The files live in a
Hugging Face dataset repository, so ``huggingface_hub`` moves the bytes; this
module adds the pinned digests, the data root's layout and safe extraction.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Sequence

import huggingface_hub
import huggingface_hub.constants
import huggingface_hub.errors
import huggingface_hub.utils

from jaxcse.core import compat, errors
from jaxcse.core.errors import JaxcseError
from jaxcse.core.files import file_sha256
from jaxcse.data.manifest import MANIFEST as _MANIFEST, MANIFEST_PATH  # noqa: F401 (re-exported)
from jaxcse.data.root import DATA_DIR_ENV

# What can be downloaded, from where, with which sha256: downloads.json beside this module (see its _comment).
SIMCSE_HF_REVISION = _MANIFEST["revision"]
ENDPOINT_ENV = "HF_ENDPOINT"  # huggingface_hub's own variable: a mirror of the hub (or a local server in tests).
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
  name: tuple(
    RemoteFile(
      f["filename"],
      f["target"],
      f["sha256"],
      extract_to=f.get("extract_to"),
      verified_members=tuple(f.get("verified_members", {}).items()),
    )
    for f in files
  )
  for name, files in _MANIFEST["downloads"].items()
}


def _offline_error(url: str, dest: str, sha256: str | None, cause: object) -> DownloadError:
  check = f" (sha256 {sha256})" if sha256 else ""
  return DownloadError(
    f"cannot download {url}: {cause}. If this machine has no network access, download the file elsewhere and "
    f"copy it by hand to {dest}{check}; running the command again then verifies it and goes on."
  )


def _http_error(url: str, error: huggingface_hub.errors.HfHubHTTPError) -> DownloadError:
  return DownloadError(f"cannot download {url}: {compat.http_status(error)}")


def fetch_file(
  filename: str,
  dest: str,
  *,
  sha256: str | None = None,
  endpoint: str | None = None,
  repo_id: str = _MANIFEST["repository"],
  revision: str = SIMCSE_HF_REVISION,
) -> str:
  """Downloads ``filename`` of a Hugging Face dataset repository to ``dest``, verified; returns its sha256.

  The transfer is ``huggingface_hub.hf_hub_download``'s (retries, resume of
  an interrupted download with a ``Range`` request, size check, progress bar)
  into a staging folder ``dest + ".download"`` that is kept while the file is
  incomplete, so running again resumes it. The file must then match
  ``sha256``, else the digest the hub announces for it (the LFS sha256 in its
  ``ETag``); with neither it is kept unverified with a warning. A file that
  does not verify is deleted, never moved into place; a verified one is
  renamed to ``dest`` in one step. ``endpoint``: the hub or a mirror of it
  (default ``$HF_ENDPOINT``, else huggingface.co).

  Raises:
    DownloadError: the hub cannot be reached (offline), answers an HTTP
      error, the transfer breaks off (what was received is kept for a
      resume where huggingface_hub keeps it), or the digest differs (the
      download is deleted).
  """
  endpoint = (endpoint or os.environ.get(ENDPOINT_ENV) or huggingface_hub.constants.ENDPOINT).rstrip("/")
  url = huggingface_hub.hf_hub_url(repo_id, filename, repo_type="dataset", revision=revision, endpoint=endpoint)
  try:
    # HEAD first: a file whose announced digest differs from the pinned one is never fetched.
    announced = huggingface_hub.get_hf_file_metadata(url).etag
  except huggingface_hub.errors.HfHubHTTPError as e:
    raise _http_error(url, e) from None
  except compat.network_errors() as e:
    # After huggingface_hub's own retries. The socket's reason ("[Errno 111] Connection refused") if it is there.
    reason = re.search(r"\[Errno [^\]]*\][^'\")]*", str(e))
    raise _offline_error(url, dest, sha256, reason.group(0) if reason else str(e).splitlines()[0]) from None
  announced = announced.lower() if announced and _SHA256_HEX.fullmatch(announced.lower()) else None
  if sha256 and announced and announced != sha256:
    raise DownloadError(
      f"{url}: the hub announces sha256 {announced}, not the expected {sha256}; the remote file "
      "has changed, so it is not downloaded"
    )
  staging = dest + ".download"
  try:
    path = huggingface_hub.hf_hub_download(
      repo_id, filename, repo_type="dataset", revision=revision, endpoint=endpoint, local_dir=staging
    )
  except huggingface_hub.errors.HfHubHTTPError as e:
    raise _http_error(url, e) from None
  except compat.transfer_errors() as e:  # Connection lost for good, short read, size mismatch.
    # huggingface_hub < 2 keeps the bytes it received (a resume continues from them); 2.x resumes within the call
    # and deletes them when its retries run out.
    kept = any(name.endswith(".incomplete") for _, _, names in os.walk(staging) for name in names)
    then = (
      f"{staging} is kept and running the command again resumes it"
      if kept
      else "running the command again downloads it again"
    )
    raise DownloadError(f"download of {url} broke off ({type(e).__name__}: {str(e).splitlines()[0]}); {then}") from None
  actual = file_sha256(path)
  expected = sha256 or announced
  if expected is None:
    logging.warning("%s: no sha256 known or announced by the hub; kept unverified (sha256 %s)", url, actual)
  elif actual != expected:
    shutil.rmtree(staging)
    source = "pinned" if sha256 else "announced by the hub"
    raise DownloadError(
      f"{url}: downloaded sha256 {actual} differs from the expected {expected} ({source}); the "
      "corrupted file was deleted, run the command again to retry"
    )
  os.replace(path, dest)
  shutil.rmtree(staging)  # Only the hub's download metadata is left in it.
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


def download(name: str, root: str, *, endpoint: str | None = None) -> list[str]:
  """Fetches one of ``DOWNLOADS`` (``senteval``, ``wiki1m``, ``nli``) into the data root ``root``.

  The files come from SimCSE's Hugging Face dataset at a pinned revision,
  through ``endpoint`` (default ``$HF_ENDPOINT``, else huggingface.co). Files
  already present and verified are not fetched again; a present file with the
  wrong digest is an error (it is not overwritten). Returns the paths it
  checked or wrote.
  """
  if name not in DOWNLOADS:
    raise DownloadError(f"unknown download {name!r}; choose from {', '.join(DOWNLOADS)}")
  done = []
  for remote in DOWNLOADS[name]:
    target = os.path.join(root, remote.target)
    if remote.extract_to:
      extract_dir = os.path.join(root, remote.extract_to)
      if remote.verified_members and _members_ok(extract_dir, remote.verified_members):
        logging.info("%s: already there, %d files verified", extract_dir, len(remote.verified_members))
        done.append(extract_dir)
        continue
      fetched = not os.path.exists(target)
      if fetched:
        fetch_file(remote.filename, target, sha256=remote.sha256, endpoint=endpoint)
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
      logging.info(
        "%s: extracted %d files (%d verified by sha256)", extract_dir, len(written), len(remote.verified_members)
      )
      done.append(extract_dir)
      continue
    if os.path.exists(target):
      actual = file_sha256(target)
      if remote.sha256 and actual != remote.sha256:
        raise DownloadError(
          f"{target} exists but its sha256 is {actual}, not {remote.sha256}; remove it to download it again"
        )
      logging.info("%s: already there%s", target, ", sha256 verified" if remote.sha256 else "")
    else:
      fetch_file(remote.filename, target, sha256=remote.sha256, endpoint=endpoint)
      logging.info("%s: downloaded and verified", target)
    done.append(target)
  return done


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  prog = errors.command_name("jaxcse.data")
  parser = errors.ArgumentParser(
    prog=prog,
    description="Fetch SimCSE's training and evaluation data into a data root, verified by sha256.",
    epilog=f"example: {prog} download senteval wiki1m --data_dir DIR (then pass --data_dir DIR to the other "
    f"commands, or set ${DATA_DIR_ENV}=DIR); {prog} download --help lists its flags.",
  )
  commands = parser.add_subparsers(dest="command", required=True)
  fetch = commands.add_parser("download", help="fetch SimCSE's training and evaluation data, verified by sha256")
  fetch.add_argument(
    "names",
    nargs="+",
    choices=sorted(DOWNLOADS),
    metavar="NAME",
    help="what to fetch: senteval (STS12-16, STS-B, SICK-R and the transfer tasks, for "
    "jaxcse-evaluate), wiki1m (SimCSE's 1M Wikipedia sentences, configs/base.py), nli (SimCSE's "
    "supervised NLI triplets, configs/simcse_sup.py)",
  )
  fetch.add_argument("--data_dir", default=None, help=f"data root (default ${DATA_DIR_ENV}); created if missing")
  fetch.add_argument(
    "--endpoint",
    default=None,
    help=f"the Hugging Face hub or a mirror of it (default ${ENDPOINT_ENV}, else huggingface.co)",
  )
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  # What the libraries log would bury the one line that says what failed and what to do: huggingface_hub logs each
  # retry ("... thrown while requesting HEAD ...", "Retrying in 1s [Retry 1/5]") through a handler of its own, and
  # httpx every request at INFO. Errors still reach the user as the DownloadError's line.
  huggingface_hub.utils.logging.set_verbosity_error()
  logging.getLogger("huggingface_hub").propagate = False
  for client in ("httpx", "httpx2", "httpcore", "httpcore2", "urllib3"):
    logging.getLogger(client).setLevel(logging.WARNING if client.startswith("httpcore") else logging.ERROR)
  root = args.data_dir or os.environ.get(DATA_DIR_ENV)
  if not root:
    parser.error(f"no data directory: pass --data_dir or set ${DATA_DIR_ENV}")
  errors.check_output(root, folder=True)  # The folders are made when the first file arrives, not before.
  for name in args.names:
    for path in download(name, root, endpoint=args.endpoint):
      print(path)
  return 0
