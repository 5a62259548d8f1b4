"""Downloads against a hub imitated on 127.0.0.1: verification, resume, atomic rename, offline, extraction.

No test reaches the internet: the endpoint is a server started here that
answers as huggingface.co does for an LFS file of a dataset repository (a HEAD
or GET on ``/datasets/<repo>/resolve/<revision>/<file>`` is a 302 carrying the
file's sha256, size and the commit; the bytes are at the redirect's target),
or a closed local port, for the offline case.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import subprocess
import sys
import tarfile
import threading

import huggingface_hub.constants
import huggingface_hub.utils
import pytest

from jaxcse.core import compat
from jaxcse.data import downloads
from jaxcse.data.downloads import DownloadError
from tests.helpers import unused_port

PAYLOAD = b"".join(b"sentence %d of a small corpus\n" % i for i in range(3000))  # ~90 KB: several read chunks.
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESOLVE = f"/datasets/{downloads._MANIFEST['repository']}/resolve/{downloads.SIMCSE_HF_REVISION}/"


class HubServer(http.server.ThreadingHTTPServer):
  """Serves ``files`` (file name -> bytes) as the hub does, with the faults a test asks for; logs what it was asked."""

  def __init__(self):
    super().__init__(("127.0.0.1", 0), _Handler)
    self.files: dict[str, bytes] = {}
    self.announced: dict[str, str] = {}  # File name -> the sha256 announced, where it is not that of the bytes.
    self.honour_range = True
    # Announce the full length but never send the file's bytes past this offset (a resume gets nothing more).
    self.cut_after: int | None = None
    self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header).
    self.cdn_status: int | None = None  # Answer every request for the bytes with this HTTP status (503: overloaded).

  @property
  def base(self) -> str:
    return f"http://127.0.0.1:{self.server_address[1]}"

  def cdn_gets(self) -> list[tuple[str, str | None]]:
    return [(path, wanted) for method, path, wanted in self.requests if method == "GET" and path.startswith("/cdn/")]


class _Handler(http.server.BaseHTTPRequestHandler):
  server: HubServer

  def log_message(self, *args):  # Keep pytest's output clean.
    pass

  def do_HEAD(self):
    self._answer(send_body=False)

  def do_GET(self):
    self._answer(send_body=True)

  def _answer(self, *, send_body: bool):
    self.server.requests.append((self.command, self.path, self.headers.get("Range")))
    if self.path.startswith(RESOLVE):
      name = self.path.removeprefix(RESOLVE)
      if name not in self.server.files:
        self.send_response(404)
        self.send_header("X-Error-Code", "EntryNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return
      body = self.server.files[name]
      self.send_response(302)
      # The CDN on another host name, as the hub's: huggingface_hub >= 1 follows redirects that stay on the hub's
      # host (and would then miss the X-Repo-Commit of this response) but not those to a CDN.
      self.send_header("Location", f"{self.server.base.replace('127.0.0.1', 'localhost')}/cdn/{name}")
      self.send_header("X-Repo-Commit", downloads.SIMCSE_HF_REVISION)
      self.send_header("X-Linked-Etag", f'"{self.server.announced.get(name, hashlib.sha256(body).hexdigest())}"')
      self.send_header("X-Linked-Size", str(len(body)))
      self.send_header("Content-Length", "0")
      self.end_headers()
      return
    if self.server.cdn_status is not None:
      self.send_response(self.server.cdn_status)
      self.send_header("Content-Length", "0")
      self.end_headers()
      return
    body = self.server.files.get(self.path.removeprefix("/cdn/")) if self.path.startswith("/cdn/") else None
    if body is None:
      self.send_error(404)
      return
    start = 0
    wanted = self.headers.get("Range")
    if wanted and self.server.honour_range:
      start = int(wanted.removeprefix("bytes=").split("-")[0])
      self.send_response(206)
      self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
    else:
      self.send_response(200)
    self.send_header("Content-Length", str(len(body) - start))
    self.end_headers()
    if send_body:
      cut = self.server.cut_after
      self.wfile.write(body[start:] if cut is None else body[start : max(start, cut)])
      if cut is not None:
        self.close_connection = True


@pytest.fixture(autouse=True)
def fresh_hub_sessions():
  """huggingface_hub caches its HTTP sessions, and one made while offline mode was on (by any test) stays offline."""
  compat.reset_hub_sessions()
  yield
  compat.reset_hub_sessions()


@pytest.fixture
def server():
  srv = HubServer()
  thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
  thread.start()
  yield srv
  srv.shutdown()
  srv.server_close()
  thread.join(timeout=5)


def _read(path) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def _fetch(server, dest, **kwargs) -> str:
  return downloads.fetch_file("corpus.txt", str(dest), endpoint=server.base, **kwargs)


def test_good_download_is_verified_and_renamed(server, tmp_path):
  server.files["corpus.txt"] = PAYLOAD
  dest = tmp_path / "sub" / "corpus.txt"
  assert _fetch(server, dest, sha256=PAYLOAD_SHA) == PAYLOAD_SHA
  assert _read(dest) == PAYLOAD
  assert os.listdir(tmp_path / "sub") == ["corpus.txt"]  # The staging folder is gone.
  assert server.requests[0] == ("HEAD", RESOLVE + "corpus.txt", None)  # At the pinned revision.
  assert server.cdn_gets() == [("/cdn/corpus.txt", None)]


def test_corrupted_download_is_rejected_and_removed(server, tmp_path):
  server.files["corpus.txt"] = PAYLOAD[:-2] + b"X\n"  # Corrupted on the way: the hub announces the right digest.
  server.announced["corpus.txt"] = PAYLOAD_SHA
  dest = tmp_path / "corpus.txt"
  with pytest.raises(
    DownloadError,
    match=rf"corpus.txt: downloaded sha256 [0-9a-f]{{64}} differs from the expected {PAYLOAD_SHA} \(pinned\)",
  ):
    _fetch(server, dest, sha256=PAYLOAD_SHA)
  assert os.listdir(tmp_path) == []


def test_broken_transfer_is_kept_and_the_next_run_resumes_with_a_range_request(server, tmp_path, monkeypatch):
  # huggingface_hub writes what it received in chunks; small ones so that a 90 KB file breaks off part-way.
  monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 4096)
  server.files["corpus.txt"] = PAYLOAD
  server.cut_after = 25_000
  dest = tmp_path / "corpus.txt"
  with pytest.raises(DownloadError, match=r"broke off") as error:
    _fetch(server, dest, sha256=PAYLOAD_SHA)
  assert not dest.exists()
  assert server.cdn_gets()[0] == ("/cdn/corpus.txt", None)
  incomplete = list((tmp_path / "corpus.txt.download").rglob("*.incomplete"))
  before = len(server.cdn_gets())
  server.cut_after = None
  if compat.version("huggingface_hub").major >= 2:  # It resumes within the call, and drops the bytes at the end.
    assert not incomplete and "running the command again downloads it again" in str(error.value)
    assert before > 2 and all(w and w.startswith("bytes=") for _, w in server.cdn_gets()[1:before])  # Resumes.
    assert _fetch(server, dest, sha256=PAYLOAD_SHA) == PAYLOAD_SHA
    assert server.cdn_gets()[before:] == [("/cdn/corpus.txt", None)]
  else:
    assert "corpus.txt.download is kept and running the command again resumes" in str(error.value)
    [incomplete] = incomplete
    kept = incomplete.read_bytes()
    assert 0 < len(kept) <= 25_000 and PAYLOAD.startswith(kept)
    assert _fetch(server, dest, sha256=PAYLOAD_SHA) == PAYLOAD_SHA
    assert server.cdn_gets()[before:] == [("/cdn/corpus.txt", f"bytes={len(kept)}-")]
  assert _read(dest) == PAYLOAD
  assert os.listdir(tmp_path) == ["corpus.txt"]


def test_server_ignoring_range_restarts_from_scratch(server, tmp_path, monkeypatch):
  monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 4096)
  server.files["corpus.txt"] = PAYLOAD
  server.cut_after = 25_000
  dest = tmp_path / "corpus.txt"
  with pytest.raises(DownloadError, match="broke off"):
    _fetch(server, dest, sha256=PAYLOAD_SHA)
  server.cut_after = None
  server.honour_range = False  # Answers the resume's Range request with the whole file (200).
  assert _fetch(server, dest, sha256=PAYLOAD_SHA) == PAYLOAD_SHA
  assert _read(dest) == PAYLOAD


def test_hub_announced_sha256_is_checked_when_none_is_pinned(server, tmp_path):
  server.files["corpus.txt"] = PAYLOAD
  dest = tmp_path / "corpus.txt"
  assert _fetch(server, dest) == PAYLOAD_SHA
  os.remove(dest)
  server.files["corpus.txt"] = PAYLOAD + b"tampered\n"
  server.announced["corpus.txt"] = PAYLOAD_SHA
  with pytest.raises(DownloadError, match=r"differs from the expected .* \(announced by the hub\)"):
    _fetch(server, dest)
  assert os.listdir(tmp_path) == []


def test_announced_sha256_different_from_the_pinned_one_fails_before_downloading(server, tmp_path):
  server.files["corpus.txt"] = PAYLOAD
  server.announced["corpus.txt"] = "0" * 64
  with pytest.raises(DownloadError, match="remote file has changed"):
    _fetch(server, tmp_path / "corpus.txt", sha256=PAYLOAD_SHA)
  assert server.cdn_gets() == [] and os.listdir(tmp_path) == []


def test_http_error_names_url_and_status(server, tmp_path):
  with pytest.raises(
    DownloadError, match=rf"cannot download http://127\.0\.0\.1:\d+{re.escape(RESOLVE)}corpus.txt: HTTP 404"
  ):
    _fetch(server, tmp_path / "corpus.txt", sha256=PAYLOAD_SHA)


def test_offline_error_names_url_cause_and_the_manual_copy(tmp_path, monkeypatch):
  monkeypatch.setattr("time.sleep", lambda seconds: None)  # huggingface_hub waits 23 s over its five retries.
  endpoint = f"http://127.0.0.1:{unused_port()}"
  dest = str(tmp_path / "corpora" / "wiki1m_for_simcse.txt")
  with pytest.raises(DownloadError) as error:
    downloads.fetch_file("wiki1m_for_simcse.txt", dest, sha256=PAYLOAD_SHA, endpoint=endpoint)
  message = str(error.value)
  assert f"cannot download {endpoint}{RESOLVE}wiki1m_for_simcse.txt" in message
  assert "[Errno 111] Connection refused." in message  # The cause, not the whole repr of the retries.
  assert f"copy it by hand to {dest} (sha256 {PAYLOAD_SHA})" in message
  assert not os.path.exists(dest)


def test_hub_offline_mode_is_the_offline_error(server, tmp_path, monkeypatch):
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # What HF_HUB_OFFLINE=1 sets.
  server.files["corpus.txt"] = PAYLOAD
  with pytest.raises(DownloadError, match="copy it by hand to"):
    _fetch(server, tmp_path / "corpus.txt", sha256=PAYLOAD_SHA)
  assert server.requests == []


def _tar(members: dict[str, bytes]) -> bytes:
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w") as tar:
    for name, content in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(content)
      tar.addfile(info, io.BytesIO(content))
  return buffer.getvalue()


def test_archive_extraction_verifies_then_moves_into_place(tmp_path):
  archive = tmp_path / "a.tar"
  archive.write_bytes(_tar({"STS/x.txt": b"x\n", "SICK/y.txt": b"y\n"}))
  dest = tmp_path / "downstream"
  (dest / "MR").mkdir(parents=True)
  (dest / "MR" / "keep.txt").write_bytes(b"not in the archive")
  written = downloads.extract_tar(
    str(archive), str(dest), verified_members=[("STS/x.txt", hashlib.sha256(b"x\n").hexdigest())]
  )
  assert written == ["SICK/y.txt", "STS/x.txt"]
  assert (dest / "STS" / "x.txt").read_bytes() == b"x\n"
  assert (dest / "MR" / "keep.txt").read_bytes() == b"not in the archive"
  assert [p for p in os.listdir(tmp_path) if p.startswith(".extract-")] == []


def test_archive_with_a_bad_member_digest_writes_nothing(tmp_path):
  archive = tmp_path / "a.tar"
  archive.write_bytes(_tar({"STS/x.txt": b"corrupted\n"}))
  dest = tmp_path / "downstream"
  with pytest.raises(DownloadError, match=r"STS/x.txt has sha256 [0-9a-f]{64}, expected"):
    downloads.extract_tar(str(archive), str(dest), verified_members=[("STS/x.txt", hashlib.sha256(b"x\n").hexdigest())])
  assert not dest.exists()


@pytest.mark.parametrize("name", ["../escaped.txt", "STS/../../escaped.txt"])
def test_archive_path_traversal_is_refused(tmp_path, name):
  archive = tmp_path / "a.tar"
  archive.write_bytes(_tar({"STS/ok.txt": b"ok\n", name: b"evil\n"}))
  dest = tmp_path / "inner" / "downstream"
  with pytest.raises(DownloadError, match="cannot extract safely"):
    downloads.extract_tar(str(archive), str(dest))
  assert not dest.exists()
  assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "inner" / "escaped.txt").exists()


def test_archive_absolute_member_stays_inside(tmp_path):
  outside = tmp_path / "outside.txt"
  archive = tmp_path / "a.tar"
  archive.write_bytes(_tar({str(outside): b"evil\n"}))
  dest = tmp_path / "downstream"
  downloads.extract_tar(str(archive), str(dest))
  assert not outside.exists()  # The leading "/" is stripped: the file lands under dest.
  assert (dest / str(outside).lstrip("/")).read_bytes() == b"evil\n"


def test_archive_link_outside_is_refused(tmp_path):
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w") as tar:
    link = tarfile.TarInfo("STS/link")
    link.type = tarfile.SYMTYPE
    link.linkname = "../../../outside"
    tar.addfile(link)
  (tmp_path / "a.tar").write_bytes(buffer.getvalue())
  with pytest.raises(DownloadError, match="cannot extract safely"):
    downloads.extract_tar(str(tmp_path / "a.tar"), str(tmp_path / "downstream"))


def _senteval_tar(real_root: str) -> bytes:
  """A senteval.tar laid out as SimCSE's (STS/..., SICK/... at the top) from the real evaluation files."""
  downstream = os.path.join(real_root, "senteval", "downstream")
  members = {}
  for relpath, _ in downloads.DOWNLOADS["senteval"][0].verified_members:
    with open(os.path.join(downstream, relpath), "rb") as f:
      members[relpath] = f.read()
  members["MR/rt-polarity.pos"] = b"a transfer-task file the evaluation does not pin\n"
  return _tar(members)


def test_download_senteval_end_to_end_then_skip(server, tmp_path, real_data_dir):
  from jaxcse.evaluation import sts_data

  server.files["senteval.tar"] = _senteval_tar(real_data_dir)
  root = str(tmp_path / "data")
  downloads.main(["download", "senteval", "--data_dir", root, "--endpoint", server.base])
  downstream = os.path.join(root, "senteval", "downstream")
  assert os.path.isfile(os.path.join(downstream, "MR", "rt-polarity.pos"))
  assert not os.path.exists(os.path.join(root, "senteval", "senteval.tar"))  # Deleted once extracted and verified.
  assert len(sts_data.load_stsb(root)["test"]) == 1379  # The layout the evaluation reads.
  requests = len(server.requests)
  assert downloads.download("senteval", root, endpoint=server.base) == [downstream]
  assert len(server.requests) == requests  # Already there and verified: nothing fetched.


def test_download_senteval_with_a_changed_file_fails(server, tmp_path, real_data_dir, monkeypatch):
  tar = _senteval_tar(real_data_dir).replace(b"a girl is styling her hair .", b"a girl is styling her hat  .")
  server.files["senteval.tar"] = tar
  root = str(tmp_path / "data")
  monkeypatch.setenv("HF_ENDPOINT", server.base)  # The hub's own variable works as --endpoint does.
  with pytest.raises(DownloadError, match=r"STS/\S+ has sha256 [0-9a-f]{64}, expected .*archive was deleted"):
    downloads.download("senteval", root)
  assert os.listdir(os.path.join(root, "senteval")) == []  # No archive, no partial downstream/.


def test_download_cli_wrong_pinned_digest_is_an_error_and_leaves_nothing(server, tmp_path, capsys):
  # The served bytes are not SimCSE's wiki1m, so the pinned digest must reject them.
  server.files["wiki1m_for_simcse.txt"] = PAYLOAD
  server.announced["wiki1m_for_simcse.txt"] = downloads.DOWNLOADS["wiki1m"][0].sha256  # A mirror that lies.
  root = str(tmp_path / "data")
  assert downloads.main(["download", "wiki1m", "--data_dir", root, "--endpoint", server.base]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and re.search(
    r"^error: .*wiki1m_for_simcse.txt: downloaded sha256 .* differs from the "
    r"expected 7b1825863a99aa76479b0456f7c210539dfaeeb69598b41fb4de4f524dd5a706 "
    r"\(pinned\)",
    err[0],
  ), err
  assert os.listdir(os.path.join(root, "corpora")) == []


def test_download_existing_file_with_wrong_digest_is_not_overwritten(tmp_path):
  root = tmp_path / "data"
  (root / "corpora").mkdir(parents=True)
  (root / "corpora" / "nli_for_simcse.csv").write_bytes(b"sent0,sent1,hard_neg\na,b,c\n")
  with pytest.raises(DownloadError, match="exists but its sha256 .* remove it to download it again"):
    downloads.download("nli", str(root), endpoint="http://127.0.0.1:9")  # Never contacted.
  assert (root / "corpora" / "nli_for_simcse.csv").read_bytes() == b"sent0,sent1,hard_neg\na,b,c\n"


def test_download_unknown_name():
  with pytest.raises(DownloadError, match="unknown download 'glue'; choose from wiki1m, nli, senteval"):
    downloads.download("glue", "/nonexistent")


def test_download_mistakes_create_nothing_then_it_runs(server, tmp_path, real_data_dir, monkeypatch, capsys):
  # Validate, then write: a data root that cannot be made, or a hub that cannot be reached, leaves no folder behind.
  monkeypatch.setattr("time.sleep", lambda seconds: None)  # huggingface_hub's retries.
  (tmp_path / "a_file").write_text("x\n")
  root = str(tmp_path / "data")
  for argv, message in [
    (["--data_dir", str(tmp_path / "a_file" / "data")], "a_file is not a writable folder"),
    (["--data_dir", str(tmp_path / "a_file")], "exists and is not a folder"),
    (["--data_dir", root, "--endpoint", f"http://127.0.0.1:{unused_port()}"], "Connection refused"),
  ]:
    assert downloads.main(["download", "senteval", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["a_file"] and (tmp_path / "a_file").read_text() == "x\n"
  server.files["senteval.tar"] = _senteval_tar(real_data_dir)
  assert downloads.main(["download", "senteval", "--data_dir", root, "--endpoint", server.base]) == 0
  assert os.path.isfile(os.path.join(root, "senteval", "downstream", "STS", "STSBenchmark", "sts-dev.csv"))


@pytest.mark.parametrize("fault", ["refused", "overloaded"])
def test_a_failed_download_is_one_line_without_the_hubs_retries(server, tmp_path, fault):
  # Offline, or a server answering 503: the command prints jaxcse's one line and nothing of what the libraries log
  # (httpx logs every request at INFO; huggingface_hub logs each retry through a handler of its own). A subprocess:
  # the command's own logging set-up is what is tested.
  server.files["senteval.tar"] = b"never sent"
  server.cdn_status = 503
  endpoint = f"http://127.0.0.1:{unused_port()}" if fault == "refused" else server.base
  env = {**os.environ, "PYTHONPATH": REPO}
  run = subprocess.run(
    [
      sys.executable,
      "-m",
      "jaxcse.data",
      "download",
      "senteval",
      "--data_dir",
      str(tmp_path / "data"),
      "--endpoint",
      endpoint,
    ],
    capture_output=True,
    text=True,
    env=env,
    cwd=str(tmp_path),
    timeout=300,
  )
  lines = (run.stdout + run.stderr).strip().splitlines()
  assert run.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: cannot download"), lines
  # "503" as a status, not as digits of the URL's port (a closed port may be 50319).
  assert bool(re.search(r"\b503\b", lines[0])) == (fault == "overloaded")
  assert ("refused" in lines[0]) == (fault == "refused")
  if fault == "refused":
    assert not os.path.exists(tmp_path / "data")  # Nothing reached: nothing made.
