"""XLA:CPU's dot path: chosen per CPU kind from a measured table, overridable, in effect once chosen, and exact to
float32's bound on every path (jaxcse/core/platforms.py, choose_cpu_dot_path; issue 68 item 2)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from jaxcse.core import platforms

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAXLIB = platforms.jaxlib_release()
KNOWS_FLAGS = JAXLIB is not None and JAXLIB >= platforms.DOT_FLAGS_SINCE

ZEN2 = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n"
ZEN4 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
SAPPHIRE = "vendor_id\t: GenuineIntel\nflags\t\t: avx2 avx512f amx_bf16 amx_tile\n"
SKYLAKE = "vendor_id\t: GenuineIntel\nflags\t\t: avx2 avx512f\n"


@pytest.mark.parametrize(
  "cpuinfo,kind",
  [
    (ZEN2, "amd-avx2"),
    (ZEN4, "amd-avx512"),
    (SAPPHIRE, "intel-amx"),
    (SKYLAKE, "intel-avx512"),
    ("vendor_id\t: HygonGenuine\nflags\t\t: sse2\n", "other-older"),
    (ZEN2 + "\nprocessor\t: 1\nvendor_id\t: GenuineIntel\nflags\t\t: avx512f\n", "amd-avx2"),  # The first CPU's.
    ("", None),  # No /proc/cpuinfo (macOS) or no flags line (an ARM kernel's Features).
    ("processor\t: 0\nFeatures\t: fp asimd\n", None),
  ],
)
def test_the_cpu_kind_is_vendor_and_widest_vector_isa(cpuinfo, kind):
  assert platforms.cpu_kind(cpuinfo) == kind


def test_the_default_is_the_measured_table_and_xla_elsewhere(monkeypatch):
  monkeypatch.setattr(platforms, "MEASURED_FASTEST", {("amd-avx512", (0, 10)): "onednn"})
  assert platforms.dot_path_wanted({}, "amd-avx512", (0, 10, 2)) == "onednn"
  assert platforms.dot_path_wanted({}, "amd-avx512", (0, 12, 0)) == "xla"  # Another release: not measured there.
  assert platforms.dot_path_wanted({}, "intel-amx", (0, 10, 2)) == "xla"  # Another kind: not measured there.
  assert platforms.dot_path_wanted({}, None, (0, 10, 2)) == "xla"


def test_the_users_choice_wins_where_jaxlib_knows_the_flags():
  for kind in ("amd-avx512", "intel-amx", None):
    assert platforms.dot_path_wanted({platforms.DOT_CHOICE: "onednn"}, kind, (0, 10, 2)) == "onednn"
    assert platforms.dot_path_wanted({platforms.DOT_CHOICE: " xla "}, kind, (0, 10, 2)) == "xla"
  # A jaxlib whose XLA would end the process on these flags (0.8.0), or none installed: XLA's own dots.
  assert platforms.dot_path_wanted({platforms.DOT_CHOICE: "onednn"}, "amd-avx2", (0, 8, 0)) == "xla"
  assert platforms.dot_path_wanted({platforms.DOT_CHOICE: "onednn"}, "amd-avx2", None) == "xla"
  with pytest.raises(ValueError, match=r"JAXCSE_CPU_DOTS='one_dnn': expected one of xla, onednn, no_ynn"):
    platforms.dot_path_wanted({platforms.DOT_CHOICE: "one_dnn"}, "amd-avx2", (0, 10, 2))


@pytest.mark.skipif(not KNOWS_FLAGS, reason=f"jaxlib {JAXLIB} lacks the dot flags")
def test_the_flags_are_added_after_the_users_own(tmp_path):
  environ = {
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=2 ",
    "JAXCSE_CPU_DOTS": "onednn",
  }
  assert platforms.choose_cpu_dot_path(environ, modules={}) == "onednn"
  assert environ["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=2", *platforms.DOT_PATHS["onednn"]]
  assert platforms.cpu_dot_path(environ) == "onednn"
  environ = {"JAX_PLATFORMS": "cpu", "JAXCSE_CPU_DOTS": "xla"}
  assert platforms.choose_cpu_dot_path(environ, modules={}) == "xla"
  assert "XLA_FLAGS" not in environ and platforms.cpu_dot_path(environ) == "xla"


@pytest.mark.parametrize(
  "environ",
  [
    {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_cpu_use_onednn=false", "JAXCSE_CPU_DOTS": "onednn"},  # The user's.
    {"JAX_PLATFORMS": "cuda", "JAXCSE_CPU_DOTS": "onednn"},  # An accelerator: its CPU backend is not the step's.
    {"JAX_PLATFORMS": "cpu", "JAXCSE_CPU_DOTS": "onedn"},  # Misspelt: a warning, XLA's own.
  ],
)
def test_the_flags_are_left_alone(environ):
  before = dict(environ)
  with pytest.warns(UserWarning, match="onedn") if environ["JAXCSE_CPU_DOTS"] == "onedn" else contextlib.nullcontext():
    assert platforms.choose_cpu_dot_path(environ, modules={}) is None
  assert environ == before


# A process that imports jax (or not) before jaxcse, then compiles a dot: which path XLA took, and how far its
# result is from the exact one against float32's bound for a dot of that length (any summation order meets it).
_DOT = """
import json, sys
if sys.argv[1] == "jax_first":
  import jax
import jaxcse
import jax, jax.numpy as jnp, numpy as np
from jaxcse.core import platforms
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 768)).astype(np.float32)
b = rng.standard_normal((768, 96)).astype(np.float32)
f = jax.jit(lambda a, b: (a @ b, jax.grad(lambda b: jnp.sum(jnp.tanh(a @ b)))(b)))
text = f.lower(a, b).compile().as_text()
out, grad = (np.asarray(x, np.float64) for x in f(a, b))
exact = a.astype(np.float64) @ b.astype(np.float64)
u = 2.0**-24
bound = (768 * u / (1 - 768 * u)) * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
print(json.dumps({"path": platforms.cpu_dot_path(), "onednn": "onednn_fusion" in text,
                  "within": bool(np.all(np.abs(out - exact) <= bound)), "finite": bool(np.isfinite(grad).all())}))
"""


def _dot_process(order: str, **env) -> dict:
  environ = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", platforms.DOT_CHOICE)}
  environ.update(PYTHONPATH=REPO, JAX_PLATFORMS="cpu", **env)
  out = subprocess.run(
    [sys.executable, "-c", _DOT, order], capture_output=True, text=True, env=environ, check=True, cwd=REPO
  )
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("order", ["jaxcse_first", "jax_first"])
def test_the_chosen_path_is_the_one_xla_compiles_and_every_path_is_exact_to_float32s_bound(order):
  for path in platforms.DOT_PATHS:
    result = _dot_process(order, JAXCSE_CPU_DOTS=path)
    expected = path if KNOWS_FLAGS else "xla"  # Where jaxlib lacks the flags, the choice falls back to XLA's own.
    assert result == {"path": expected, "onednn": expected == "onednn", "within": True, "finite": True}, path


def test_the_default_here_is_the_tables_entry_for_this_machine():
  kind = platforms.cpu_kind(platforms.read_cpuinfo())
  expected = platforms.MEASURED_FASTEST.get((kind, JAXLIB[:2]), "xla") if KNOWS_FLAGS else "xla"
  assert _dot_process("jaxcse_first")["path"] == expected


def test_a_process_whose_jax_started_before_jaxcse_keeps_its_flags():
  code = (
    "import jax, os; jax.devices()\n"
    "import jaxcse\n"
    "from jaxcse.core import platforms\n"
    "print(repr(os.environ.get('XLA_FLAGS')), platforms.cpu_dot_path())\n"
  )
  environ = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS",)}
  environ.update(PYTHONPATH=REPO, JAX_PLATFORMS="cpu", JAXCSE_CPU_DOTS="onednn")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, check=True, cwd=REPO)
  assert out.stdout.split() == ["None", "xla"]  # XLA read its flags when jax's backend started.
