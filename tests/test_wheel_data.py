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
  source = tmp_path / "src"  # A clean copy of the package's sources: no build folders of a checkout leak in.
  shutil.copytree(
    REPO,
    source,
    ignore=shutil.ignore_patterns(
      ".git", "build", "*.egg-info", "__pycache__", "experiments", "notebooks", "benchmarks", "workdirs"
    ),
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
