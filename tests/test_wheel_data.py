"""The wheel carries every shipped data file, byte for byte (so `jaxcse-evaluate --tasks sts` works after install)."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from jaxcse.data import manifest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_wheel_holds_every_pinned_data_file(tmp_path):
  if not os.path.isfile(os.path.join(REPO, "pyproject.toml")):
    pytest.skip("not a source checkout")
  # A clean copy of what the wheel is built from, nothing else: a checkout also holds venvs, caches and workdirs
  # (CI's holds three venvs, many GB, some still being installed while this runs).
  source = tmp_path / "src"
  source.mkdir()
  for name in ("pyproject.toml", "README.md"):
    shutil.copy2(os.path.join(REPO, name), source / name)
  shutil.copytree(
    os.path.join(REPO, "jaxcse"), source / "jaxcse", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
  )
  build = subprocess.run(
    [
      sys.executable,
      "-m",
      "pip",
      "wheel",
      "--no-deps",
      "--no-build-isolation",
      "-q",
      "-w",
      str(tmp_path / "dist"),
      str(source),
    ],
    capture_output=True,
    text=True,
    timeout=600,
  )
  if build.returncode != 0 and "No module named pip" in build.stderr:
    pytest.skip("pip is not installed")
  assert build.returncode == 0, build.stderr
  (wheel,) = glob.glob(str(tmp_path / "dist" / "*.whl"))
  folder = os.path.relpath(manifest.EMBEDDED_ROOT, os.path.dirname(os.path.dirname(manifest.MANIFEST_PATH)))
  with zipfile.ZipFile(wheel) as archive:
    names = set(archive.namelist())
    for relpath, digest in manifest.EMBEDDED_SHA256.items():
      name = f"jaxcse/{folder}/{relpath}".replace(os.sep, "/")
      assert name in names, name
      assert hashlib.sha256(archive.read(name)).hexdigest() == digest, name
    assert "jaxcse/data/downloads.json" in names
    assert "jaxcse/storage/published_shapes.json" in names  # hub.published_shape reads it.
