"""jaxcse asks jax for its CPU only when this machine has no accelerator and nobody chose the platforms; on the CPU
only, glibc's malloc keeps XLA's buffers; the commands turn on jax's persistent compilation cache."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jaxcse.core import platforms

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_accelerator_and_no_choice_means_cpu(tmp_path):
  environ = {}
  assert platforms.cpu_only_without_accelerators(environ, patterns=(str(tmp_path / "accel*"),), modules={})
  assert environ == {"JAX_PLATFORMS": "cpu"}


def test_an_accelerator_device_node_leaves_jax_to_choose(tmp_path):
  (tmp_path / "accel0").touch()  # What a TPU v4 VM has.
  environ = {}
  assert not platforms.cpu_only_without_accelerators(environ, patterns=(str(tmp_path / "accel*"),), modules={})
  assert environ == {}


def test_the_users_choice_is_kept_even_when_empty(tmp_path):
  for chosen in ("tpu", ""):  # "": jax's own discovery, asked for explicitly.
    environ = {"JAX_PLATFORMS": chosen}
    assert not platforms.cpu_only_without_accelerators(environ, patterns=(str(tmp_path / "none*"),), modules={})
    assert environ == {"JAX_PLATFORMS": chosen}


def _platforms_after(code: str) -> str:
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  env["PYTHONPATH"] = REPO
  return subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=REPO
  ).stdout.strip()


def test_importing_jaxcse_applies_it_before_jax_starts():
  expected = "None" if platforms.has_accelerator() else "cpu"
  assert _platforms_after("import os, jaxcse; print(os.environ.get('JAX_PLATFORMS'))") == expected
  if expected == "cpu":  # And jax, imported afterwards, uses the CPU only.
    assert _platforms_after("import jaxcse, jax; print(jax.default_backend(), len(jax.devices()))") == "cpu 1"


def test_a_program_that_imported_jax_first_keeps_jaxs_choice():
  assert _platforms_after("import jax, os, jaxcse; print(os.environ.get('JAX_PLATFORMS'))") == "None"


class _Libc:
  """Records ``mallopt`` calls as glibc would take them (1: accepted)."""

  def __init__(self):
    self.calls = []

  def mallopt(self, parameter, value):
    self.calls.append((parameter, value))
    return 1


@pytest.mark.parametrize(
  "environ",
  [
    {"JAX_PLATFORMS": "cpu"},
    {},  # No choice and no accelerator (a program that imported jax first): jax ends up on the CPU.
  ],
)
def test_mallopt_is_set_when_jax_runs_on_the_cpu_only(environ, tmp_path):
  libc = _Libc()
  assert platforms.keep_xla_cpu_buffers(environ, libc=libc, patterns=(str(tmp_path / "accel*"),))
  assert libc.calls == [(platforms.M_ARENA_MAX, 1), (platforms.M_MMAP_MAX, 0), (platforms.M_TRIM_THRESHOLD, -1)]


def test_cpu_programs_run_inline_once_jax_is_imported():
  meta_path = []
  assert platforms.run_cpu_programs_inline(modules={}, meta_path=meta_path)
  assert platforms.run_cpu_programs_inline(modules={}, meta_path=meta_path)  # Called twice: one finder.
  assert [type(finder).__name__ for finder in meta_path] == ["_AfterImport"]


@pytest.mark.parametrize(
  "choice,arenas,wanted",
  [("", 1, False), ("", 2, True), ("", None, False), ("1", 1, True), ("0", 3, False), ("auto", 2, True)],
)
def test_inline_where_a_thread_allocated_before_jaxcse_or_where_asked(choice, arenas, wanted):
  assert platforms.inline_wanted({platforms.INLINE_CHOICE: choice}, arenas) is wanted


@pytest.mark.skipif(platforms.glibc() is None, reason="malloc_info is glibc's")
def test_glibc_arenas_counts_a_threads_own_arena():
  script = (
    "import threading\n"
    "from jaxcse.core import platforms\n"
    "libc = platforms.glibc()\n"
    "before = platforms.glibc_arenas(libc)\n"
    "t = threading.Thread(target=lambda: [bytearray(1000) for _ in range(100)])\n"
    "t.start(); t.join()\n"
    "print(before, platforms.glibc_arenas(libc))\n"
  )
  env = {**os.environ, "PYTHONPATH": REPO, "JAXCSE_MALLOPT": "0"}  # Its M_ARENA_MAX=1 would keep the thread's off.
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True).stdout
  assert out.split() == ["1", "2"]


_INLINE = """
import sys
order = sys.argv[1]
if order == "jax_first":
  import jax
import jaxcse
import jax, jax.numpy as jnp
jnp.ones(2).block_until_ready()
print(jax.config.read("jax_cpu_enable_async_dispatch"))
"""


@pytest.mark.parametrize(
  "order,choice,inline",
  [("jaxcse_first", "1", True), ("jax_first", "1", True), ("jaxcse_first", "0", False), ("jaxcse_first", "", False)],
)
def test_jax_runs_cpu_programs_inline_whichever_is_imported_first(order, choice, inline):
  env = {k: v for k, v in os.environ.items() if k not in ("JAXCSE_MALLOPT",)}
  env.update(PYTHONPATH=REPO, JAX_PLATFORMS="cpu", **{platforms.INLINE_CHOICE: choice})
  out = subprocess.run(
    [sys.executable, "-c", _INLINE, order], capture_output=True, text=True, env=env, check=True, cwd=REPO
  ).stdout.split()
  assert out == [str(not inline)]  # jax's flag: asynchronous dispatch.


def test_mallopt_is_left_alone_where_jax_may_find_an_accelerator(tmp_path):
  (tmp_path / "accel0").touch()
  libc = _Libc()
  assert not platforms.keep_xla_cpu_buffers({}, libc=libc, patterns=(str(tmp_path / "accel*"),))
  assert libc.calls == []


@pytest.mark.parametrize(
  "environ",
  [
    {"JAX_PLATFORMS": "cuda"},
    {"JAX_PLATFORMS": ""},  # jax's own discovery, asked for: it may use an accelerator.
    {"JAX_PLATFORMS": "cpu", "JAXCSE_MALLOPT": "0"},  # The opt-out.
    {"JAX_PLATFORMS": "cpu", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},  # The user's own malloc settings.
  ],
)
def test_mallopt_is_left_alone(environ):
  libc = _Libc()
  assert not platforms.keep_xla_cpu_buffers(environ, libc=libc)
  assert libc.calls == []


# A program whose 128 MiB temporary buffer XLA:CPU allocates at every call, the way a train step allocates its own,
# on one core (as the step was measured: with two threads other allocations fault too, with and without mallopt).
_FAULTS_PER_CALL = """
import os, resource, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
if sys.argv[1] == "thread_first":  # As in a Jupyter kernel: a thread allocated before jaxcse was imported.
  import threading
  started = threading.Event()
  def allocate():
    kept = [bytearray(1000) for _ in range(1000)]  # Its first mallocs: glibc gives the thread an arena of its own.
    started.set()
    threading.Event().wait()
  threading.Thread(target=allocate, daemon=True).start()
  started.wait()
if sys.argv[1] == "jax_first":  # As benchmarks/bench.py and many programs do, JAX_PLATFORMS unset.
  import jax, jax.numpy as jnp, jaxcse
else:
  import jaxcse, jax, jax.numpy as jnp
f = jax.jit(lambda a, b: jnp.tanh(a @ b) @ b.T)
a, b = jnp.ones((4096, 16)), jnp.ones((16, 8192)) / 16
temp = f.lower(a, b).compile().memory_analysis().temp_size_in_bytes
for _ in range(4):  # glibc's heap grows to its footprint in the first calls (a few of them 1 fault a page).
  f(a, b).block_until_ready()
calls = []  # Each call's faults: a buffer mapped afresh faults at every call, a heap still growing at a few.
for _ in range(8):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(a, b).block_until_ready()
  calls.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(temp, *calls)  # In call order: a failure shows whether the heap was still growing or mapped afresh.
"""


@pytest.mark.skipif(platforms.glibc() is None, reason="mallopt is glibc's")
@pytest.mark.parametrize("order", ["jaxcse_first", "jax_first", "thread_first"])
@pytest.mark.parametrize("opt_out", [False, True])
def test_xlas_cpu_buffers_are_not_mapped_afresh_every_call(opt_out, order):
  """thread_first, opted out: ``JAXCSE_INLINE_CPU=0`` only (the mallopt settings kept): a thread that allocated
  before ``import jaxcse`` has its own arena, which glibc hands to XLA's dispatch threads, so mallopt alone leaves
  one fault per page; jaxcse sees the second arena and runs CPU programs inline, on the calling thread, whose
  buffers are the main arena's."""
  env = {
    k: v
    for k, v in os.environ.items()
    if k not in ("GLIBC_TUNABLES", "JAXCSE_MALLOPT", "JAX_PLATFORMS", platforms.INLINE_CHOICE)
  }
  env["PYTHONPATH"] = REPO
  if opt_out:
    env.update({platforms.INLINE_CHOICE: "0"} if order == "thread_first" else {"JAXCSE_MALLOPT": "0"})
  if order != "jax_first":
    env["JAX_PLATFORMS"] = "cpu"
  elif platforms.has_accelerator():
    pytest.skip("jax would choose an accelerator here")
  out = subprocess.run(
    [sys.executable, "-c", _FAULTS_PER_CALL, order], capture_output=True, text=True, env=env, check=True, cwd=REPO
  ).stdout.split()
  pages, calls = int(out[0]) / 4096, [int(faults) for faults in out[1:]]
  assert pages >= 2**15  # Over glibc's 64 MiB arena heap: mapped afresh on a worker thread's arena.
  assert_mapped_afresh_every_call(calls, pages, expected=opt_out)


def assert_mapped_afresh_every_call(calls: list[int], pages: float, *, expected: bool) -> None:
  """``calls``: each of 8 calls' minor faults, in call order. Measured on one core: 0 faults a call with jaxcse's settings,
  one per page of the buffer (32,769) at every call without. Mapped afresh: every call at least a fault a page.
  Kept: most calls (5 of 8) under an eighth of the pages, which leaves room for the program's other allocations and
  for glibc's heap still growing by a buffer at a few calls (seen with jax 0.7's CPU client)."""
  ordered, calls = calls, sorted(calls)
  if expected:
    assert calls[0] >= pages, ordered
  else:
    assert calls[4] < pages / 8, ordered


_CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE", "JAXCSE_COMPILATION_CACHE", "XDG_CACHE_HOME")


def _cache_env(tmp_path, **extra) -> dict[str, str]:
  """This environment without any compilation-cache choice, the user's cache home in ``tmp_path``, plus ``extra``."""
  env = {k: v for k, v in os.environ.items() if k not in _CACHE_ENV}
  env.update(
    PYTHONPATH=REPO,
    JAX_PLATFORMS="cpu",
    XDG_CACHE_HOME=str(tmp_path / "home_cache"),
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    **extra,
  )
  return env


_USE_CACHE_THEN_COMPILE = """
from jaxcse.core import platforms
import jax, jax.numpy as jnp
print(platforms.use_compilation_cache())
jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()
"""


@pytest.mark.parametrize(
  "choice", ["default", "JAX_COMPILATION_CACHE_DIR", "JAXCSE_COMPILATION_CACHE=0", "JAX_ENABLE_COMPILATION_CACHE=false"]
)
def test_the_compilation_cache_is_on_in_jaxcses_folder_unless_chosen_otherwise(tmp_path, choice):
  jaxcse_folder, own = tmp_path / "home_cache" / "jaxcse" / "jax", tmp_path / "own"
  extra = {
    "default": {},
    "JAX_COMPILATION_CACHE_DIR": {"JAX_COMPILATION_CACHE_DIR": str(own)},
    "JAXCSE_COMPILATION_CACHE=0": {"JAXCSE_COMPILATION_CACHE": "0"},
    "JAX_ENABLE_COMPILATION_CACHE=false": {"JAX_ENABLE_COMPILATION_CACHE": "false"},
  }[choice]
  printed = subprocess.run(
    [sys.executable, "-c", _USE_CACHE_THEN_COMPILE],
    capture_output=True,
    text=True,
    check=True,
    env=_cache_env(tmp_path, **extra),
    cwd=REPO,
  ).stdout.strip()
  expected = {"default": jaxcse_folder, "JAX_COMPILATION_CACHE_DIR": own}.get(choice)
  assert printed == str(expected)
  for folder in (jaxcse_folder, own):
    written = folder.is_dir() and any(folder.iterdir())
    assert written == (folder == expected), folder


def test_a_command_compiles_into_the_cache(tmp_path, tiny_model_dir):
  (tmp_path / "in.txt").write_text("a sentence\nanother one\n")
  subprocess.run(
    [
      sys.executable,
      "-m",
      "jaxcse.encode",
      "--model",
      tiny_model_dir,
      "--input",
      str(tmp_path / "in.txt"),
      "--output",
      str(tmp_path / "out.npy"),
    ],
    capture_output=True,
    check=True,
    env=_cache_env(tmp_path),
    cwd=REPO,
  )
  assert any((tmp_path / "home_cache" / "jaxcse" / "jax").iterdir())
