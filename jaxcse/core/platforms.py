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
``glibc.malloc`` tunable (the user's own choice), and ``JAXCSE_MALLOPT=0`` (the opt-out). Where a thread allocated
before jaxcse was imported (a notebook's), glibc's settings cannot reach its arena: then CPU programs run inline
(``run_cpu_programs_inline``).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.abc
import importlib.util
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


def jax_cpu_only(environ=os.environ, patterns: tuple[str, ...] = ACCELERATOR_DEVICE_NODES) -> bool:
  """Whether jax will run on the CPU alone: ``JAX_PLATFORMS=cpu``, or ``JAX_PLATFORMS`` unset and no accelerator
  device node (a program that imported jax before jaxcse)."""
  chosen = environ.get("JAX_PLATFORMS")
  return chosen.strip() == "cpu" if chosen is not None else not has_accelerator(patterns)


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
  if environ.get(MALLOPT_OPT_OUT, "").strip() == "0" or not jax_cpu_only(environ, patterns):
    return False
  if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
    return False
  libc = libc if libc is not None else glibc()
  if libc is None:
    return False
  # mallopt returns 1 on success; every parameter is set even if one is refused (each helps the others' effect).
  kept = all([libc.mallopt(parameter, value) == 1 for parameter, value in MALLOPT_SETTINGS])
  if inline_wanted(environ, glibc_arenas(libc)):
    run_cpu_programs_inline()
  return kept


INLINE_CHOICE = "JAXCSE_INLINE_CPU"  # 1: CPU programs always inline; 0: never; unset: where mallopt cannot reach.


def inline_wanted(environ, arenas: int | None) -> bool:
  """Whether CPU programs should run on the thread that calls them (``run_cpu_programs_inline``).

  ``JAXCSE_INLINE_CPU=1`` always, ``=0`` never; otherwise where glibc already has more than one arena (``arenas``)
  when jaxcse is imported: a thread allocated before it, which ``M_ARENA_MAX=1`` cannot reach.
  """
  choice = environ.get(INLINE_CHOICE, "").strip()
  if choice in ("0", "1"):
    return choice == "1"
  return arenas is not None and arenas > 1


def glibc_arenas(libc) -> int | None:
  """How many arenas glibc's malloc has now (``malloc_info``'s heaps), or None where that cannot be asked."""
  try:
    buffer, size = ctypes.c_void_p(), ctypes.c_size_t()
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = libc.free.argtypes = [ctypes.c_void_p]
    stream = libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    if not stream:
      return None
    written = libc.malloc_info(0, stream)
    libc.fclose(stream)  # Flushes the text into ``buffer``.
    text = ctypes.string_at(buffer.value, size.value).decode("ascii", "replace") if buffer.value else ""
    libc.free(buffer)
  except (AttributeError, OSError):  # Not glibc's functions (a test's stand-in, another C library).
    return None
  return text.count("<heap nr=") if written == 0 else None


def run_cpu_programs_inline(modules=sys.modules, meta_path=sys.meta_path) -> bool:
  """Asks jax to run each CPU program on the thread that calls it (``jax_cpu_enable_async_dispatch=False``), before
  jax's CPU client exists; returns whether it did or will (once jax is imported). ``keep_xla_cpu_buffers`` calls
  it where ``inline_wanted``.

  ``M_ARENA_MAX=1`` reaches only threads that first allocate after it: a thread that allocated before ``import
  jaxcse`` (every Jupyter kernel has some) has an arena of its own, and glibc hands that arena to other new threads
  in turn, so XLA's dispatch threads map and unmap the step's temporary buffer again every step (159k minor faults
  and +40% CPU seconds a quickstart-shaped step on one core: experiments/bench/cpu_step/README.md). Inline, the
  program runs on the calling thread, which is the main one in a command and in a notebook: the main arena, 0
  faults. Inline also keeps no second temporary buffer in flight (a third less peak memory on two cores), at a cost
  of 1-6% CPU seconds where mallopt works alone (measured there), which is why it is not the default there. The host work a step
  overlaps with runs in jaxcse's prefetch threads, which go on meanwhile.

  jax reads this flag from ``jax.config`` only (no environment variable), so where jax is not imported yet this
  sets it the moment jax's import finishes (``_AfterImport``): before anything can start jax's backends. Left
  alone: a process whose jax backends started before jaxcse was imported.
  """
  jax = modules.get("jax")
  if jax is None:
    if not any(isinstance(finder, _AfterImport) for finder in meta_path):
      meta_path.insert(0, _AfterImport("jax", _inline))
    return True
  return _inline(jax)


def _inline(jax) -> bool:
  try:
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():  # Too late: the CPU client has its dispatch threads already.
      return False
    jax.config.update("jax_cpu_enable_async_dispatch", False)
  except (ImportError, AttributeError):  # A jax without this flag (or that moved it): its own dispatch.
    return False
  return True


class _AfterImport(importlib.abc.MetaPathFinder):
  """Calls ``then(module)`` once module ``name`` has been imported, then leaves ``sys.meta_path``.

  Python has no post-import hook: this finder, first in ``sys.meta_path``, finds the module as the others would and
  wraps its loader so that ``then`` runs right after the module's own code.
  """

  def __init__(self, name: str, then):
    self.name, self.then = name, then

  def find_spec(self, name, path=None, target=None):
    if name != self.name:
      return None
    if self in sys.meta_path:
      sys.meta_path.remove(self)
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.loader is not None:
      spec.loader = _ThenLoader(spec.loader, self.then)
    return spec


class _ThenLoader(importlib.abc.Loader):
  """``loader``, which runs ``then(module)`` after the module's code; everything else is the loader's own."""

  def __init__(self, loader, then):
    self._loader, self._then = loader, then

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    self._loader.exec_module(module)
    self._then(module)

  def __getattr__(self, name):  # get_resource_reader, is_package, ...: the wrapped loader's.
    return getattr(self._loader, name)


DOT_CHOICE = "JAXCSE_CPU_DOTS"  # xla | onednn | no_ynn; unset: the path measured fastest on this CPU's kind.

# XLA:CPU's ways to compute a dot, as XLA flags. ``xla``: XLA's default (its own dot emitter, with YNNPACK's
# fusions where XLA picks them); ``onednn``: every dot on its own through oneDNN's matmul; ``no_ynn``: XLA's
# emitter without YNNPACK's fusions.
DOT_PATHS = {
  "xla": (),
  "onednn": (
    "--xla_cpu_use_onednn=true",
    "--xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
  ),
  "no_ynn": ("--xla_cpu_experimental_ynn_fusion_type=",),
}
# A user's XLA_FLAGS naming any of these is the user's choice of dot path: left as it is.
DOT_FLAG_NAMES = (
  "xla_cpu_use_onednn",
  "xla_cpu_experimental_onednn_fusion_type",
  "xla_cpu_experimental_ynn_fusion_type",
)
# The first jaxlib whose XLA knows every flag above: XLA ends the process on a flag it does not know, and 0.7.2's
# and 0.8.0's lack the YNN flag and INDIVIDUAL_DOT (read from the wheels' libraries; 0.8.3, 0.9.0, 0.10.2 and
# 0.12.0.1 have them).
DOT_FLAGS_SINCE = (0, 8, 3)
# The path whole train steps ran fastest on, per CPU kind and jaxlib release, by alternated processes
# (experiments/bench/cpu_step/dot_path.txt); any other kind or release keeps ``xla`` until it is measured there.
# Empty so far: on the AMD EPYC without AVX-512 (amd-avx2, jaxlib 0.10.2) oneDNN was faster in 7 of 7 rounds
# (mini 2.94-3.27 against 3.29-5.46 CPU s a step, minilm 8.66-10.19 against 10.35-10.66) but its peak memory was
# 1.5-1.7x XLA's (minilm 4.4 against 2.6 GiB), against issue 68's memory aim; with AVX-512 (amd-avx512) it took
# 0.64-0.77x XLA's time where neither process faulted, but was slower in one round and again 1.7x the memory
# (experiments/bench/cpu_step/README.md). ``JAXCSE_CPU_DOTS=onednn`` opts in.
MEASURED_FASTEST = {}


def cpu_kind(cpuinfo: str) -> str | None:
  """``vendor-isa`` of the first CPU in ``/proc/cpuinfo``'s text: vendor ``amd``, ``intel`` or ``other``, the widest
  vector ISA the dot kernels care for ``amx``, ``avx512``, ``avx2`` or ``older``; None where there is no such text."""
  fields = {}
  for line in cpuinfo.splitlines():
    key, _, value = line.partition(":")
    fields.setdefault(key.strip(), value.strip())
  if "flags" not in fields:
    return None
  vendor = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(fields.get("vendor_id", ""), "other")
  flags = set(fields["flags"].split())
  isa = next(
    (name for name, flag in (("amx", "amx_tile"), ("avx512", "avx512f"), ("avx2", "avx2")) if flag in flags), "older"
  )
  return f"{vendor}-{isa}"


def read_cpuinfo() -> str:
  """The start of ``/proc/cpuinfo`` (what ``cpu_kind`` reads); "" where there is none (not Linux)."""
  try:
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
      return f.read(1 << 16)  # The first CPU's lines are all that cpu_kind reads.
  except OSError:
    return ""


def jaxlib_release() -> tuple[int, ...] | None:
  """The installed jaxlib's version numbers, e.g. ``(0, 10, 2)``, read without importing it; None if absent."""
  from importlib import metadata

  try:
    version = metadata.version("jaxlib")
  except metadata.PackageNotFoundError:
    return None
  return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def dot_path_wanted(environ, kind: str | None, jaxlib: tuple[int, ...] | None) -> str:
  """The dot path for this process: ``JAXCSE_CPU_DOTS`` if set (a name of ``DOT_PATHS``), else the one measured
  fastest on CPU ``kind`` with this ``jaxlib`` (its first two numbers), else ``xla``; ``xla`` wherever this jaxlib
  does not know the flags. A name not in ``DOT_PATHS`` is a ``ValueError`` naming the variable and the choices."""
  choice = environ.get(DOT_CHOICE, "").strip()
  if choice and choice not in DOT_PATHS:
    raise ValueError(f"{DOT_CHOICE}={choice!r}: expected one of {', '.join(DOT_PATHS)}")
  if jaxlib is None or jaxlib < DOT_FLAGS_SINCE:
    return "xla"
  return choice or MEASURED_FASTEST.get((kind, jaxlib[:2]), "xla")


def choose_cpu_dot_path(
  environ=os.environ, patterns=ACCELERATOR_DEVICE_NODES, modules=sys.modules, cpuinfo=None
) -> str | None:
  """Adds the dot path ``dot_path_wanted`` picks to ``XLA_FLAGS`` before jax's CPU client reads them; returns its
  name, or None where it left the flags alone: jax may use an accelerator, the user's ``XLA_FLAGS`` name a dot flag
  (``DOT_FLAG_NAMES``), or jax's backends started before jaxcse was imported (XLA has read its flags by then).

  Why per CPU: which of XLA:CPU's dot paths is fastest differs between CPUs (on the AMD EPYC with AVX-512 oneDNN
  took 12-22% off a train step; on the Intel Xeon flag trials found nothing), so the default is a measured table,
  not a guess. A misspelt ``JAXCSE_CPU_DOTS`` is a warning and today's path: this runs at ``import jaxcse``.
  """
  flags = environ.get("XLA_FLAGS", "")
  if not jax_cpu_only(environ, patterns) or any(name in flags for name in DOT_FLAG_NAMES) or _backends_started(modules):
    return None
  try:
    path = dot_path_wanted(environ, cpu_kind(cpuinfo if cpuinfo is not None else read_cpuinfo()), jaxlib_release())
  except ValueError as e:
    import warnings

    warnings.warn(f"{e}; XLA's own dots are used", stacklevel=2)
    return None
  if DOT_PATHS[path]:
    environ["XLA_FLAGS"] = " ".join([flags.strip(), *DOT_PATHS[path]]).strip()
  return path


def _backends_started(modules) -> bool:
  if "jax" not in modules:
    return False
  try:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()
  except (ImportError, AttributeError):
    return True  # Cannot tell: as if started, leaving the flags alone.


def cpu_dot_path(environ=os.environ) -> str:
  """The dot path ``XLA_FLAGS`` asks of XLA:CPU now: a name of ``DOT_PATHS``, or ``custom`` for other dot flags."""
  flags = environ.get("XLA_FLAGS", "").split()
  for name, path_flags in DOT_PATHS.items():
    if path_flags and all(flag in flags for flag in path_flags):
      return name
  return "custom" if any(name in " ".join(flags) for name in DOT_FLAG_NAMES) else "xla"


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
