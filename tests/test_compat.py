"""jaxcse.compat: each library-version workaround still works with the installed versions, and is still needed."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import pytest

from jaxcse import compat
from tests.helpers import unused_port


def test_network_errors_catch_what_the_installed_hub_raises_offline(monkeypatch):
  import huggingface_hub
  import huggingface_hub.constants

  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_ETAG_TIMEOUT", 2)
  compat.reset_hub_sessions()
  url = f"http://127.0.0.1:{unused_port()}/datasets/x/y/resolve/main/f.txt"
  with pytest.raises(Exception) as raised:
    huggingface_hub.get_hf_file_metadata(url, timeout=2)
  assert isinstance(raised.value, compat.network_errors()), type(raised.value).__mro__
  # Needed: the installed hub's connection error is not a builtin OSError, so without this list it would escape
  # the downloader's one-line error.
  assert not isinstance(raised.value, OSError) or compat.version("huggingface_hub").major < 1


def test_http_status_reads_the_installed_hubs_response(monkeypatch):
  import http.server
  import threading

  import huggingface_hub
  import huggingface_hub.errors

  class NotFound(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
      pass

    def do_HEAD(self):
      self.send_response(404)
      self.send_header("Content-Length", "0")
      self.end_headers()

  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  compat.reset_hub_sessions()
  try:
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError) as raised:
      huggingface_hub.get_hf_file_metadata(f"http://127.0.0.1:{server.server_address[1]}/f.txt")
  finally:
    server.shutdown()
    server.server_close()
  assert compat.http_status(raised.value) == "HTTP 404 Not Found"


def test_hlo_module_cost_analysis_reads_an_optimized_module():
  compiled = jax.jit(lambda a, b: a @ b).lower(jnp.ones((64, 32)), jnp.ones((32, 16))).compile()
  cost = compat.hlo_module_cost_analysis(compiled.runtime_executable().hlo_modules()[0])
  assert cost["flops"] == pytest.approx(2 * 64 * 32 * 16, rel=0.01)


def test_enable_x64_computes_in_float64_inside_and_restores_the_default_after():
  # Float64 tests (gradient checks, 1 vs 2 devices) rely on it on every jax jaxcse supports; none may leak x64.
  default = jnp.ones(1).dtype
  with compat.enable_x64(True):
    assert jnp.ones(1).dtype == jnp.float64
    with compat.enable_x64(False):
      assert jnp.ones(1).dtype == jnp.float32
  assert jnp.ones(1).dtype == default == jnp.float32
