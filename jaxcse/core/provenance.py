"""Where a result came from: code, library versions, device, model checkpoint, config, data files, wall time.

Every results JSON jaxcse writes (``evaluate --output``, a workdir's ``summary.json``, ``encode``'s sidecar)
carries ``provenance(...)`` under the key ``"provenance"``, so a number can be traced and reproduced.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from jaxcse import version
from jaxcse.core import files

LIBRARIES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "transformers", "tokenizers", "numpy")
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # jaxcse/


def _version(name: str) -> str | None:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def git_commit() -> str | None:
  """The commit of the jaxcse checkout this code runs from (with ``+dirty`` for local changes); None if installed."""
  root = os.path.dirname(_PACKAGE_DIR)
  if not os.path.exists(os.path.join(root, ".git")):
    return None
  try:
    commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    if commit.returncode != 0:
      return None
    dirty = subprocess.run(
      ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "jaxcse"],
      capture_output=True,
      text=True,
      timeout=10,
    ).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return commit.stdout.strip() + ("+dirty" if dirty else "")


def data_digests(paths: Iterable[str], root: str | None = None) -> dict[str, str]:
  """sha256 of every file of ``paths`` (files, or folders walked), keyed by path relative to ``root``."""
  out = {}
  for path in paths:
    found = [path] if os.path.isfile(path) else sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
    for file in found:
      out[os.path.relpath(file, root) if root else file] = files.file_sha256(file)
  return dict(sorted(out.items()))


def provenance(
  *,
  config: dict | None = None,
  model: str | None = None,
  checkpoint_step: int | None = None,
  revision: str | None = None,
  data: dict[str, str] | None = None,
  wall_seconds: float | None = None,
) -> dict[str, Any]:
  """The provenance record: jaxcse version and commit, library versions, devices, and what the caller knows."""
  import jax

  devices = jax.devices()
  record = {
    "jaxcse": version.__version__,
    "git_commit": git_commit(),
    "python": platform.python_version(),
    "libraries": {name: _version(name) for name in LIBRARIES},
    "devices": {
      "platform": devices[0].platform,
      "kind": devices[0].device_kind,
      "count": len(devices),
      "processes": jax.process_count(),
    },
    "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]) if sys.argv else None,
    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
  }
  for key, value in (
    ("model", model),
    ("checkpoint_step", checkpoint_step),
    ("revision", revision),
    ("wall_seconds", None if wall_seconds is None else round(wall_seconds, 1)),
    ("config", config),
    ("data_sha256", data),
  ):
    if value is not None:
      record[key] = value
  return record
