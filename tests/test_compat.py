"""jaxcse.core.compat: each library-version workaround still works with the installed versions, and is still needed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from packaging.version import Version

from jaxcse.core import compat
from tests.helpers import REPO, unused_port


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


# What the libraries print on a machine without their accelerator: jax-cuda12-plugin 0.10.2 when jax starts it,
# libtpu 0.0.42.1 when it starts without a TPU VM's environment.
NATIVE_LINES = [
  "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
  "I0000 00:00:1795694288.892745   19808 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will "
  "not be used.",
  "Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type, please set "
  "env var `TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly initialize.",
  "WARNING: Logging before InitGoogle() is written to STDERR",
  "E0000 00:00:1795694577.214182   24147 common_lib.cc:554] INVALID_ARGUMENT: Error: unexpected worker hostname "
  "'WARNING: could not determine TPU worker hostnames or IP addresses' from env var TPU_WORKER_HOSTNAMES.",
  "=== Source Location Trace: === ",
  "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327",
]


def test_harmless_native_lines_are_dropped_from_file_descriptor_2_and_the_rest_passes(capfd):
  ours = [
    "does not fit v5e-1: the compiler ran out of memory (RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm)",
    "WARNING: a warning of our own",
    "Traceback (most recent call last):",
  ]
  with compat.harmless_native_lines_dropped():
    # A child process writes to the descriptor it inherits, as a native library writes to its process's.
    subprocess.run(
      [
        sys.executable,
        "-c",
        "import sys; sys.stderr.write(sys.argv[1])",
        "\n".join(NATIVE_LINES[:4] + ours[:2] + NATIVE_LINES[4:]) + "\n",
      ],
      check=True,
    )
    os.write(2, (ours[2] + "\n").encode())
  assert capfd.readouterr().err.splitlines() == ours


def _library_start_stderr(code: str, *, unset: tuple[str, ...] = (), **env: str) -> list[str]:
  """The lines a Python child running ``code`` prints on stderr, without the variables ``unset``."""
  env = {**{k: v for k, v in os.environ.items() if k not in unset}, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu", **env}
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
  assert result.returncode == 0, result.stderr
  return result.stderr.splitlines()


def test_the_cuda_plugin_still_prints_only_lines_the_filter_drops():
  from jaxcse.compile import targets

  if importlib.util.find_spec("jax_cuda12_plugin") is None and not os.path.isdir(
    os.path.join(targets.gpu_compiler_dir(), "jax_plugins")
  ):
    pytest.skip("needs jax's CUDA plugin (jaxcse-compile --install_gpu_compiler)")
  # As jaxcse-compile starts jax: the plugin installed for compiling found, then jax's CPU asked for.
  printed = _library_start_stderr(
    "from jaxcse.compile import targets; targets.use_gpu_compiler(); import jax; jax.devices('cpu')"
  )
  # jaxlib 0.10.2's plugin prints 8 lines at every start (absl's InitializeLog warning, cudart_stub); 0.12.0.1's
  # prints none (CI's newest end, 2026-11-26). The filter stays while the supported range holds a plugin that prints.
  if compat.version("jaxlib") < Version("0.12"):
    assert printed, "the CUDA plugin prints nothing now: its lines in compat.HARMLESS_NATIVE_LINES may go"
  assert [line for line in printed if not compat.HARMLESS_NATIVE_LINES.search(line)] == []


def test_libtpu_started_without_a_tpu_vms_environment_still_prints_only_lines_the_filter_drops():
  if importlib.util.find_spec("libtpu") is None:
    pytest.skip('needs libtpu (pip install "jaxcse[aot]")')
  printed = _library_start_stderr(
    "from jax.experimental import topologies; topologies.get_topology_desc(topology_name='v5e:2x2', platform='tpu')",
    unset=("TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"),
    # No query of a cloud metadata server; no claim on a TPU (as targets.devices).
    TPU_SKIP_MDS_QUERY="1",
    ALLOW_MULTIPLE_LIBTPU_LOAD="1",
  )
  assert printed, "libtpu prints nothing now: drop its lines from compat.HARMLESS_NATIVE_LINES"
  assert [line for line in printed if not compat.HARMLESS_NATIVE_LINES.search(line)] == []


# Imports transformers as in an environment without PyTorch (find_spec finds no torch), after jaxcse or not.
WITHOUT_TORCH = """
import importlib.util, sys
find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if name.split(".")[0] == "torch" else find_spec(name, package)
if sys.argv[1] == "jaxcse":
  import jaxcse
import transformers
assert not transformers.utils.is_torch_available()
transformers.utils.logging.get_logger("transformers").warning("another message")
"""


@pytest.mark.parametrize("first", ["jaxcse", "nothing"])
def test_transformers_notice_that_torch_is_absent_is_dropped_and_nothing_else(first):
  """Needed: transformers prints it without jaxcse's filter. Works: with it, every other message still shows."""
  run = subprocess.run(
    [sys.executable, "-c", WITHOUT_TORCH, first],
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "PYTHONPATH": REPO},
    cwd=REPO,
  )
  assert run.returncode == 0, run.stderr
  assert ("PyTorch was not found" in run.stderr) == (first == "nothing"), run.stderr
  assert "another message" in run.stderr
