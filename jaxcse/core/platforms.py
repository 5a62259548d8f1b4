"""On a machine without an accelerator, jaxcse asks jax for its CPU only, so installed compilers stay silent; and
when jax runs on the CPU alone, glibc's malloc keeps XLA's buffers instead of mapping them afresh every step.

jax starts every platform plugin it finds the first time a program asks for devices. The compile extra
(``pip install "jaxcse[aot]"``) installs two of them, libtpu and the CUDA plugin, only so that ``jaxcse-compile`` can
compile for TPUs and GPUs that are not here; on a machine without either, starting them prints about 36 lines of
errors ("Unable to load CUDA", "unexpected worker hostname") and costs tens of seconds in every command. So when
this machine has no accelerator device and nobody chose the platforms (``JAX_PLATFORMS`` unset), importing jaxcse
sets ``JAX_PLATFORMS=cpu`` -- what jax would end up using anyway. ``jaxcse-compile`` is unaffected: it builds its
TPU and GPU devices through ``jax.experimental.topologies``, which does not need the platforms started.

Left alone: any ``JAX_PLATFORMS`` the user set (an empty value included: jax's own discovery), any machine with an
accelerator device node, and programs that imported jax before jaxcse (their platforms are jax's to choose).

XLA:CPU allocates each execution's temporary buffer (618 MiB for a quickstart train step) with ``posix_memalign`` on
one of its worker threads. glibc serves a worker thread from its own arena, where a chunk over the arena's 64 MiB
heap is always a fresh ``mmap``, unmapped again when freed: every step then pays one minor page fault per 4 KiB page
(142k-158k faults, a sixth of the quickstart step's CPU time in the kernel: experiments/bench/cpu_step). So when jax
will run on the CPU alone (``JAX_PLATFORMS=cpu``, chosen above or by the user, or no accelerator), importing jaxcse
calls glibc's ``mallopt`` before jax starts its threads: one arena for every thread (``M_ARENA_MAX=1``), no mmapped
chunks (``M_MMAP_MAX=0``) and no trimming of the heap's top (``M_TRIM_THRESHOLD=-1``); all three are needed (any two
leave the faults as they were). The buffer is then allocated once and reused: 0 faults per step on one core (with
two threads 35k of 142k remain, from a source not found yet), and the process keeps its peak heap until it exits
instead of returning it to the system between steps (with two threads: 2.6 GiB peak resident against 1.6 GiB). Left alone: other C
libraries (musl, macOS), machines where jax may use an accelerator, a ``GLIBC_TUNABLES`` that sets any
``glibc.malloc`` tunable (the user's own choice), and ``JAXCSE_MALLOPT=0`` (the opt-out).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

# Device nodes of the accelerators jax has platforms for: TPU VMs (v2-v4 /dev/accel*, v5e/v6e VFIO groups),
# NVIDIA GPUs (Linux and WSL), AMD GPUs (ROCm's kernel driver).
ACCELERATOR_DEVICE_NODES = (
  "/dev/accel*",
  "/dev/vfio/[0-9]*",
  "/dev/nvidia[0-9]*",
  "/dev/nvidiactl",
  "/dev/dxg",
  "/dev/kfd",
)


def has_accelerator(patterns: tuple[str, ...] = ACCELERATOR_DEVICE_NODES) -> bool:
  """Whether any accelerator device node exists on this machine."""
  return any(glob.glob(pattern) for pattern in patterns)


def cpu_only_without_accelerators(
  environ=os.environ, patterns: tuple[str, ...] = ACCELERATOR_DEVICE_NODES, modules=sys.modules
) -> bool:
  """Sets ``JAX_PLATFORMS=cpu`` when no accelerator is present and the choice is still open; returns whether it did."""
  if "JAX_PLATFORMS" in environ or "jax" in modules or has_accelerator(patterns):
    return False
  environ["JAX_PLATFORMS"] = "cpu"
  return True


MALLOPT_OPT_OUT = "JAXCSE_MALLOPT"  # =0: leave glibc's malloc as it is.

# glibc's <malloc.h> parameters and the values set: one arena, no mmapped chunks, never trim (-1, documented).
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
MALLOPT_SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1))


def glibc():
  """The running process's C library through ctypes if it is glibc (the one whose ``mallopt`` is known), else None."""
  try:
    version = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"; absent (ValueError) or None elsewhere.
  except (AttributeError, ValueError, OSError):
    return None
  if not version or not version.startswith("glibc"):
    return None
  return ctypes.CDLL(None)


def keep_xla_cpu_buffers(environ=os.environ, libc=None, patterns: tuple[str, ...] = ACCELERATOR_DEVICE_NODES) -> bool:
  """Sets ``MALLOPT_SETTINGS`` with glibc's ``mallopt`` when jax runs on the CPU only; returns whether it did.

  jax runs on the CPU only where ``JAX_PLATFORMS=cpu``, or where ``JAX_PLATFORMS`` is unset and no accelerator
  device node exists (a program that imported jax before jaxcse). Should run before jax creates its CPU client
  (its worker threads), as importing jaxcse does. ``libc``: the library to call (default: this process's, if
  glibc); a no-op where it is not glibc, where ``GLIBC_TUNABLES`` sets a malloc tunable and where
  ``JAXCSE_MALLOPT=0``.
  """
  chosen = environ.get("JAX_PLATFORMS")
  cpu_only = chosen.strip() == "cpu" if chosen is not None else not has_accelerator(patterns)
  if environ.get(MALLOPT_OPT_OUT, "").strip() == "0" or not cpu_only:
    return False
  if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
    return False
  libc = libc if libc is not None else glibc()
  if libc is None:
    return False
  # mallopt returns 1 on success; every parameter is set even if one is refused (each helps the others' effect).
  return all([libc.mallopt(parameter, value) == 1 for parameter, value in MALLOPT_SETTINGS])


COMPILATION_CACHE_OPT_OUT = "JAXCSE_COMPILATION_CACHE"  # =0: no persistent compilation cache unless jax's own is set.


def default_compilation_cache_dir(environ=os.environ) -> str:
  """``$XDG_CACHE_HOME/jaxcse/jax`` (``~/.cache/jaxcse/jax``), beside ``jaxcse-compile``'s ``compile`` folder."""
  cache_home = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(cache_home, "jaxcse", "jax")


def use_compilation_cache(environ=os.environ) -> str | None:
  """Turns on jax's persistent compilation cache for a jaxcse command, before its first compilation: the folder.

  A fresh process then reads the programs an earlier run compiled instead of compiling them again (a 2-step
  quickstart: docs/benchmarks.md). The user's choice wins: a folder already set (``JAX_COMPILATION_CACHE_DIR``,
  ``jax.config``) is kept and returned; ``JAX_ENABLE_COMPILATION_CACHE=false`` or ``JAXCSE_COMPILATION_CACHE=0``
  leave jax's cache off (None). Otherwise ``default_compilation_cache_dir()``, created by jax when it first writes.
  """
  import jax

  if jax.config.jax_compilation_cache_dir:
    return jax.config.jax_compilation_cache_dir
  if environ.get(COMPILATION_CACHE_OPT_OUT, "").strip() == "0" or not jax.config.jax_enable_compilation_cache:
    return None
  path = default_compilation_cache_dir(environ)
  jax.config.update("jax_compilation_cache_dir", path)
  return path
