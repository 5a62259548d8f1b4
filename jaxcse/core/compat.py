"""Where jaxcse meets library versions that differ: each difference behind one function, with why and which versions.

jaxcse supports ranges of jax, huggingface_hub and transformers (pyproject.toml). Where those releases differ in
an API jaxcse needs, where jaxcse needs something a library only offers privately, or where a native library
(libtpu, jax's CUDA plugin) prints what no setting silences, the code that knows it lives here, each function
saying which versions need it; tests/test_compat.py fails when a workaround stops working or
is no longer needed. Nothing else in jaxcse imports a private ``jax._src`` / ``xla_client._xla`` name.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import threading

from packaging.version import Version

from jaxcse.core import interrupts


def version(package: str) -> Version:
  """The installed version of ``package`` (a distribution name)."""
  return Version(importlib.metadata.version(package))


# --------------------------------------------------------------------------
# huggingface_hub: 0.x downloads through requests, 1.x through httpx, 2.x through httpx2.


def network_errors() -> tuple[type[BaseException], ...]:
  """The exceptions huggingface_hub lets through when the network cannot be reached (after its own retries).

  huggingface_hub < 1 raises ``requests``' ``ConnectionError``/``Timeout``; 1.x raises ``httpx``'s ``TransportError``
  family (connect errors, timeouts, broken reads), 2.x the same from ``httpx2``. Each installed one is listed.
  """
  import huggingface_hub.errors

  found: list[type[BaseException]] = [huggingface_hub.errors.OfflineModeIsEnabled]
  for client in ("httpx2", "httpx"):  # huggingface_hub 2.x uses httpx's fork httpx2, 1.x httpx itself.
    if importlib.util.find_spec(client) is not None:
      found.append(importlib.import_module(client).TransportError)
  if importlib.util.find_spec("requests") is not None:
    import requests

    found.extend([requests.ConnectionError, requests.Timeout])
  return tuple(found)


def transfer_errors() -> tuple[type[BaseException], ...]:
  """What a download that breaks off midway raises: every network error and a short or failed read."""
  found = list(network_errors())
  if importlib.util.find_spec("requests") is not None:
    import requests

    found.append(requests.RequestException)
  return (*found, OSError)


def http_status(error) -> str:
  """``"HTTP 404 Not Found"`` of a ``HfHubHTTPError``: requests' response has ``reason``, httpx's ``reason_phrase``."""
  response = getattr(error, "response", None)
  if response is None:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
  reason = getattr(response, "reason_phrase", None) or getattr(response, "reason", None) or ""
  return f"HTTP {response.status_code} {reason}".rstrip()


def reset_hub_sessions() -> None:
  """Drops huggingface_hub's cached HTTP session(s), so the next call reads the offline flag and endpoint anew.

  huggingface_hub < 1 calls it ``reset_sessions`` (requests); 1.x and 2.x ``close_session`` (httpx).
  """
  import huggingface_hub.utils

  reset = getattr(huggingface_hub.utils, "close_session", None) or huggingface_hub.utils.reset_sessions
  reset()


# --------------------------------------------------------------------------
# jax: float64 for a block.


def enable_x64(enabled: bool = True):
  """A context manager: jax computes in 64 bits inside it (float64 tests). ``jax.enable_x64`` from jax 0.8 on;
  ``jax.experimental.enable_x64`` (removed in 0.9) before."""
  import jax

  if hasattr(jax, "enable_x64"):
    return jax.enable_x64(enabled)
  from jax import experimental

  return experimental.enable_x64(enabled) if enabled else experimental.disable_x64()


# --------------------------------------------------------------------------
# jax: XLA's HLO cost analysis has no public API.


def hlo_module_cost_analysis(hlo_module) -> dict:
  """XLA's cost analysis (flops, bytes accessed, ...) of an optimized ``HloModule``, on this machine's CPU client.

  The device-less GPU executable (jaxcse-compile for a GPU that is not here) offers no ``cost_analysis()``; XLA's
  analysis of its optimized module is reachable only through jaxlib's private ``_xla`` extension (jax 0.7 to
  0.12 at least: tests/test_compat.py calls it on a real module, so a jax that moves it fails there first).
  """
  from jax._src import xla_bridge
  from jax._src.lib import xla_client

  return xla_client._xla.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), hlo_module)


# --------------------------------------------------------------------------
# transformers: its notice that PyTorch is absent.

# transformers 5.x logs "PyTorch was not found. Models won't be available and only tokenizers, configuration and
# file/data utilities can be used." on its "transformers" logger when it is imported without torch. jaxcse needs
# only its tokenizers and configs, so in a torch-less environment (torch is an extra) every command printed it
# before its own output or its one error line. TRANSFORMERS_NO_ADVISORY_WARNINGS would silence every advisory
# warning of the user's process; a filter on that logger drops this one message only.
TRANSFORMERS_TORCH_NOTICE = "PyTorch was not found. Models won't be available"


class _WithoutTorchNotice:
  def filter(self, record) -> bool:
    return not str(record.msg).startswith(TRANSFORMERS_TORCH_NOTICE)


def without_transformers_torch_notice() -> None:
  """Drops transformers' notice that PyTorch is absent (idempotent). Call it before transformers is imported: the
  notice is logged at import."""
  import logging

  logger = logging.getLogger("transformers")
  if not any(isinstance(f, _WithoutTorchNotice) for f in logger.filters):
    logger.addFilter(_WithoutTorchNotice())


# --------------------------------------------------------------------------
# libtpu and jax's CUDA plugin: C++ log lines on file descriptor 2 that no setting silences.

# Lines that native libraries print on a machine without the accelerator, harmless and not ours: the CUDA plugin's
# absent driver, absl's note on logging before its initialisation, libtpu's search for the TPU it runs on.
# jax-cuda12-plugin 0.10.2 (jaxcse-compile --install_gpu_compiler) prints "WARNING: All log messages before
# absl::InitializeLog() ..." and "cudart_stub.cc:31] Could not find cuda drivers" four times each when jax starts
# its plugins, JAX_PLATFORMS=cpu or not. libtpu 0.0.42.1 (jax 0.10.2's) prints the "could not determine TPU ...",
# "Logging before InitGoogle()" and libtpu_init_utils.cc lines when it starts without a TPU VM's environment
# (targets.devices sets that environment's defaults; with them it printed nothing). Both write from C++ straight to
# file descriptor 2, before and outside Python's logging and absl-py's: neither TF_CPP_MIN_LOG_LEVEL nor a Python
# logging level reaches them, so only a filter on the descriptor itself keeps them off a command's stderr.
HARMLESS_NATIVE_LINES = re.compile(
  r"cudart_stub\.cc:\d+\] Could not find cuda drivers"
  r"|^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
  r"|^WARNING: Logging before InitGoogle\(\) is written to STDERR"
  r"|could not determine TPU (accelerator type|worker hostnames)|Failed to find host bounds for accelerator type"
  r"|libtpu_init_utils\.cc|^=== Source Location Trace: ==="
)


@contextlib.contextmanager
def harmless_native_lines_dropped():
  """Passes everything written to file descriptor 2 (Python's and native libraries') through, less the
  ``HARMLESS_NATIVE_LINES``, as it comes."""
  sys.stderr.flush()
  saved = os.dup(2)
  relayed = os.dup(saved)  # The relay's own copy of the real stderr: it may write after ``saved`` is closed.
  read_end, write_end = os.pipe()
  os.dup2(write_end, 2)
  os.close(write_end)

  def relay():
    with os.fdopen(read_end, "rb") as pipe, os.fdopen(relayed, "wb", buffering=0) as out:
      for line in pipe:
        if not HARMLESS_NATIVE_LINES.search(line.decode("utf-8", "replace")):
          out.write(line)

  thread = threading.Thread(target=relay, daemon=True)
  thread.start()
  interrupts.STDERR.append(saved)  # Ctrl-C's line (os._exit: the relay would not pass it on) to the real stderr.
  try:
    yield
  finally:
    sys.stderr.flush()
    os.dup2(saved, 2)  # Closes the pipe's last write end: the relay reads to its end and stops.
    interrupts.STDERR.remove(saved)
    os.close(saved)
    thread.join(timeout=5)
