"""Downloads against a local HTTP server on 127.0.0.1: verification, resume, atomic rename, offline, extraction.

No test reaches the internet: every URL points at a server started here (or
at a closed local port, for the offline case).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import os
import re
import socket
import tarfile
import threading

import pytest

from jaxcse.data import downloads
from jaxcse.data.downloads import DownloadError

PAYLOAD = b"".join(b"sentence %d of a small corpus\n" % i for i in range(3000))  # ~90 KB: several read chunks.
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


class FileServer(http.server.ThreadingHTTPServer):
  """Serves ``files`` (URL path -> bytes) with the behaviours a test asks for, and logs what it was asked."""

  def __init__(self):
    super().__init__(("127.0.0.1", 0), _Handler)
    self.files: dict[str, bytes] = {}
    self.redirects: dict[str, tuple[str, dict[str, str]]] = {}  # path -> (location, extra headers of the 302).
    self.honour_range = True
    self.cut_after: int | None = None  # Announce the full length but close after this many body bytes.
    self.requests: list[tuple[str, str | None]] = []  # (path, Range header).

  @property
  def base(self) -> str:
    return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
  server: FileServer

  def log_message(self, *args):  # Keep pytest's output clean.
    pass

  def do_GET(self):
    self.server.requests.append((self.path, self.headers.get("Range")))
    if self.path in self.server.redirects:
      location, extra = self.server.redirects[self.path]
      self.send_response(302)
      self.send_header("Location", location)
      for key, value in extra.items():
        self.send_header(key, value)
      self.send_header("Content-Length", "0")
      self.end_headers()
      return
    body = self.server.files.get(self.path)
    if body is None:
      self.send_error(404)
      return
    start = 0
    wanted = self.headers.get("Range")
    if wanted and self.server.honour_range:
      start = int(wanted.removeprefix("bytes=").split("-")[0])
      if start >= len(body):
        self.send_response(416)
        self.send_header("Content-Range", f"bytes */{len(body)}")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return
      self.send_response(206)
      self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
    else:
      self.send_response(200)
    self.send_header("Content-Length", str(len(body) - start))
    self.end_headers()
    chunk = body[start:] if self.server.cut_after is None else body[start:start + self.server.cut_after]
    self.wfile.write(chunk)
    if self.server.cut_after is not None:
      self.close_connection = True


@pytest.fixture
def server():
  srv = FileServer()
  thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
  thread.start()
  yield srv
  srv.shutdown()
  srv.server_close()
  thread.join(timeout=5)


def _read(path) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def test_good_download_is_verified_and_renamed(server, tmp_path):
  server.files["/corpus.txt"] = PAYLOAD
  dest = str(tmp_path / "sub" / "corpus.txt")
  assert downloads.fetch_file(f"{server.base}/corpus.txt", dest, sha256=PAYLOAD_SHA) == PAYLOAD_SHA
  assert _read(dest) == PAYLOAD
  assert not os.path.exists(dest + ".part")


def test_corrupted_download_is_rejected_and_removed(server, tmp_path):
  server.files["/corpus.txt"] = PAYLOAD[:-2] + b"X\n"
  dest = str(tmp_path / "corpus.txt")
  with pytest.raises(DownloadError, match=rf"corpus.txt: downloaded sha256 [0-9a-f]{{64}} differs from the expected {PAYLOAD_SHA}"):
    downloads.fetch_file(f"{server.base}/corpus.txt", dest, sha256=PAYLOAD_SHA)
  assert not os.path.exists(dest)
  assert not os.path.exists(dest + ".part")


def test_partial_file_is_resumed_with_a_range_request(server, tmp_path):
  server.files["/corpus.txt"] = PAYLOAD
  dest = str(tmp_path / "corpus.txt")
  kept = 40_000
  with open(dest + ".part", "wb") as f:
    f.write(PAYLOAD[:kept])
  downloads.fetch_file(f"{server.base}/corpus.txt", dest, sha256=PAYLOAD_SHA)
  assert server.requests == [("/corpus.txt", f"bytes={kept}-")]
  assert _read(dest) == PAYLOAD
  assert not os.path.exists(dest + ".part")


def test_broken_transfer_keeps_the_part_and_the_next_run_resumes(server, tmp_path):
  server.files["/corpus.txt"] = PAYLOAD
  server.cut_after = 25_000
  dest = str(tmp_path / "corpus.txt")
  with pytest.raises(DownloadError, match=r"broke off .*corpus.txt.part is kept and running the command again resumes"):
    downloads.fetch_file(f"{server.base}/corpus.txt", dest, sha256=PAYLOAD_SHA)
  assert not os.path.exists(dest)
  assert _read(dest + ".part") == PAYLOAD[:25_000]
  server.cut_after = None
  downloads.fetch_file(f"{server.base}/corpus.txt", dest, sha256=PAYLOAD_SHA)
  assert server.requests[-1] == ("/corpus.txt", "bytes=25000-")
  assert _read(dest) == PAYLOAD


def test_server_ignoring_range_restarts_from_scratch(server, tmp_path):
  server.files["/corpus.txt"] = PAYLOAD
  server.honour_range = False
  dest = str(tmp_path / "corpus.txt")
  with open(dest + ".part", "wb") as f:
    f.write(b"stale bytes that are not the start of the file")
  downloads.fetch_file(f"{server.base}/corpus.txt", dest, sha256=PAYLOAD_SHA)
  assert _read(dest) == PAYLOAD


def test_complete_part_is_verified_after_416(server, tmp_path):
  server.files["/corpus.txt"] = PAYLOAD
  dest = str(tmp_path / "corpus.txt")
  with open(dest + ".part", "wb") as f:
    f.write(PAYLOAD)
  downloads.fetch_file(f"{server.base}/corpus.txt", dest, sha256=PAYLOAD_SHA)
  assert _read(dest) == PAYLOAD


def test_hub_announced_sha256_is_checked_when_none_is_pinned(server, tmp_path):
  # Like huggingface.co/.../resolve/...: a 302 carrying the LFS sha256, then the bytes elsewhere.
  server.files["/cdn/blob"] = PAYLOAD
  server.redirects["/resolve/corpus.txt"] = (f"{server.base}/cdn/blob", {"X-Linked-Etag": f'"{PAYLOAD_SHA}"'})
  dest = str(tmp_path / "corpus.txt")
  assert downloads.fetch_file(f"{server.base}/resolve/corpus.txt", dest) == PAYLOAD_SHA
  server.files["/cdn/blob"] = PAYLOAD + b"tampered\n"
  os.remove(dest)
  with pytest.raises(DownloadError, match="announced by the server"):
    downloads.fetch_file(f"{server.base}/resolve/corpus.txt", dest)
  assert not os.path.exists(dest) and not os.path.exists(dest + ".part")


def test_announced_sha256_different_from_the_pinned_one_fails_before_downloading(server, tmp_path):
  server.files["/cdn/blob"] = PAYLOAD
  server.redirects["/resolve/corpus.txt"] = (f"{server.base}/cdn/blob", {"X-Linked-Etag": f'"{"0" * 64}"'})
  dest = str(tmp_path / "corpus.txt")
  with pytest.raises(DownloadError, match="remote file has changed"):
    downloads.fetch_file(f"{server.base}/resolve/corpus.txt", dest, sha256=PAYLOAD_SHA)
  assert not os.path.exists(dest) and not os.path.exists(dest + ".part")


def test_http_error_names_url_and_status(server, tmp_path):
  with pytest.raises(DownloadError, match=r"cannot download http://127\.0\.0\.1:\d+/missing.txt: HTTP 404"):
    downloads.fetch_file(f"{server.base}/missing.txt", str(tmp_path / "missing.txt"), sha256=PAYLOAD_SHA)


def _closed_port() -> int:
  with contextlib.closing(socket.socket()) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]  # Closed again on return: connecting to it is refused, like a machine offline.


def test_offline_error_names_url_cause_and_the_manual_copy(tmp_path):
  url = f"http://127.0.0.1:{_closed_port()}/wiki1m_for_simcse.txt"
  dest = str(tmp_path / "corpora" / "wiki1m_for_simcse.txt")
  with pytest.raises(DownloadError) as error:
    downloads.fetch_file(url, dest, sha256=PAYLOAD_SHA)
  message = str(error.value)
  assert f"cannot download {url}" in message
  assert "refused" in message.lower()
  assert f"copy it by hand to {dest} (sha256 {PAYLOAD_SHA})" in message
  assert not os.path.exists(dest)


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
  written = downloads.extract_tar(str(archive), str(dest),
                             verified_members=[("STS/x.txt", hashlib.sha256(b"x\n").hexdigest())])
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
  from jaxcse import evaluate

  server.files["/senteval.tar"] = _senteval_tar(real_data_dir)
  root = str(tmp_path / "data")
  downloads.main(["download", "senteval", "--data_dir", root, "--base_url", server.base])
  downstream = os.path.join(root, "senteval", "downstream")
  assert os.path.isfile(os.path.join(downstream, "MR", "rt-polarity.pos"))
  assert not os.path.exists(os.path.join(root, "senteval", "senteval.tar"))  # Deleted once extracted and verified.
  assert len(evaluate.load_stsb(root)["test"]) == 1379  # The layout the evaluation reads.
  requests = len(server.requests)
  assert downloads.download("senteval", root, base_url=server.base) == [downstream]
  assert len(server.requests) == requests  # Already there and verified: nothing fetched.


def test_download_senteval_with_a_changed_file_fails(server, tmp_path, real_data_dir, monkeypatch):
  tar = _senteval_tar(real_data_dir).replace(b"a girl is styling her hair .", b"a girl is styling her hat  .")
  server.files["/senteval.tar"] = tar
  root = str(tmp_path / "data")
  monkeypatch.setenv(downloads.BASE_URL_ENV, server.base)  # The environment variable works as --base_url does.
  with pytest.raises(DownloadError, match=r"STS/\S+ has sha256 [0-9a-f]{64}, expected .*archive was deleted"):
    downloads.download("senteval", root)
  assert os.listdir(os.path.join(root, "senteval")) == []  # No archive, no partial downstream/.


def test_download_cli_wrong_pinned_digest_is_an_error_and_leaves_nothing(server, tmp_path, capsys):
  # The served bytes are not SimCSE's wiki1m, so the pinned digest must reject them.
  server.files["/wiki1m_for_simcse.txt"] = PAYLOAD
  root = str(tmp_path / "data")
  assert downloads.main(["download", "wiki1m", "--data_dir", root, "--base_url", server.base]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and re.search(r"^error: .*wiki1m_for_simcse.txt: downloaded sha256 .* differs from the "
                                     r"expected 7b1825863a99aa76479b0456f7c210539dfaeeb69598b41fb4de4f524dd5a706 "
                                     r"\(pinned\)", err[0]), err
  assert os.listdir(os.path.join(root, "corpora")) == []


def test_download_existing_file_with_wrong_digest_is_not_overwritten(tmp_path):
  root = tmp_path / "data"
  (root / "corpora").mkdir(parents=True)
  (root / "corpora" / "nli_for_simcse.csv").write_bytes(b"sent0,sent1,hard_neg\na,b,c\n")
  with pytest.raises(DownloadError, match="exists but its sha256 .* remove it to download it again"):
    downloads.download("nli", str(root), base_url="http://127.0.0.1:9")  # Never contacted.
  assert (root / "corpora" / "nli_for_simcse.csv").read_bytes() == b"sent0,sent1,hard_neg\na,b,c\n"


def test_download_unknown_name():
  with pytest.raises(DownloadError, match="unknown download 'glue'; choose from wiki1m, nli, senteval"):
    downloads.download("glue", "/nonexistent")
