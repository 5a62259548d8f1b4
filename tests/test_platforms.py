"""jaxcse asks jax for its CPU only when this machine has no accelerator and nobody chose the platforms."""

from __future__ import annotations

import os
import subprocess
import sys

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
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                        cwd=REPO).stdout.strip()


def test_importing_jaxcse_applies_it_before_jax_starts():
  expected = "None" if platforms.has_accelerator() else "cpu"
  assert _platforms_after("import os, jaxcse; print(os.environ.get('JAX_PLATFORMS'))") == expected
  if expected == "cpu":  # And jax, imported afterwards, uses the CPU only.
    assert _platforms_after("import jaxcse, jax; print(jax.default_backend(), len(jax.devices()))") == "cpu 1"


def test_a_program_that_imported_jax_first_keeps_jaxs_choice():
  assert _platforms_after("import jax, os, jaxcse; print(os.environ.get('JAX_PLATFORMS'))") == "None"
