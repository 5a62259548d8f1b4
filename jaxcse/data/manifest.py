"""The data manifest, ``downloads.json`` beside this module: every data file jaxcse knows, with its sha256.

It lists what ``jaxcse-data download NAME`` fetches (``downloads``: SimCSE's files, pinned to a revision of their
Hugging Face dataset) and the quickstart data root shipped inside the package (``embedded``: ``EMBEDDED_ROOT``).
"""

from __future__ import annotations

import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST_PATH = os.path.join(_HERE, "downloads.json")
with open(MANIFEST_PATH) as _f:
  MANIFEST = json.load(_f)

# The embedded data root and the pinned sha256 of each of its files, by path relative to it ("/"-separated).
EMBEDDED_ROOT = os.path.join(_HERE, MANIFEST["embedded"]["folder"])
EMBEDDED_SHA256: dict[str, str] = MANIFEST["embedded"]["files"]


def download_providing(relpath: str) -> str | None:
  """The ``jaxcse-data download NAME`` that puts ``relpath`` (relative to a data root) in place, or None."""
  relpath = os.path.normpath(relpath).replace(os.sep, "/")
  for name, files in MANIFEST["downloads"].items():
    for remote in files:
      extracted = remote.get("extract_to")
      if relpath == remote["target"] or (extracted and relpath.startswith(extracted + "/")):
        return name
  return None
