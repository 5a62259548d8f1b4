"""Hugging Face checkpoint tensors <-> jaxcse parameter trees, both directions, by one naming rule.

jaxcse's modules use PyTorch's module names, so a parameter's checkpoint name is its tree path joined by "." with
the Flax leaf renamed (``LEAF_NAMES``), and a Dense ``kernel`` (``[in, out]``) is the transposed PyTorch Linear
``weight`` (``[out, in]``). A masked-LM checkpoint prefixes the encoder's names with the family's backbone prefix
(``bert.``, ``roberta.``, ``model.``); a base-model checkpoint does not. Old BERT checkpoints name LayerNorm
parameters ``gamma``/``beta``.

``read_state(folder)`` reads ``model.safetensors`` (single, or sharded with its index) or transformers' Flax
``flax_model.msgpack`` into one PyTorch-named numpy state; ``fill(shapes, state, ...)`` takes a tree of shapes
(``jax.eval_shape`` of a module's init) and fills it, naming every tensor that is missing or left over;
``to_state(params)`` is the inverse, for export.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import flax
import jax
import numpy as np

from jaxcse.core.errors import JaxcseError

LEAF_NAMES = {"kernel": "weight", "embedding": "weight", "scale": "weight", "bias": "bias"}
# Names older checkpoints (BERT's original conversion) give LayerNorm parameters.
_ALIASES = {"weight": ("gamma",), "bias": ("beta",)}
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
FLAX_MSGPACK = "flax_model.msgpack"
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, FLAX_MSGPACK)


class WeightsError(JaxcseError, ValueError):
  """A checkpoint's tensors do not fit the model: one missing, left over, or of another shape (named)."""


def checkpoint_name(path: tuple[str, ...]) -> str:
  """``("encoder", "layer", "0", ..., "kernel")`` -> ``"encoder.layer.0....weight"``."""
  *modules, leaf = path
  if leaf not in LEAF_NAMES:
    raise WeightsError(f"parameter {'/'.join(path)}: no checkpoint name for a Flax {leaf!r}")
  return ".".join([*modules, LEAF_NAMES[leaf]])


def to_state(params: Any, prefix: str = "") -> dict[str, np.ndarray]:
  """A params (sub)tree as a PyTorch-named float32 numpy state dict (kernels transposed)."""
  state = {}
  for path, value in flax.traverse_util.flatten_dict(jax.device_get(params)).items():
    value = np.asarray(value, np.float32)
    if path[-1] == "kernel":
      if value.ndim != 2:
        raise WeightsError(f"parameter {'/'.join(path)}: expected a 2-d Dense kernel, got shape {value.shape}")
      value = value.T
    state[prefix + checkpoint_name(path)] = np.ascontiguousarray(value)
  return state


def weights_file(folder: str) -> str | None:
  """The weights file jaxcse reads in ``folder`` (safetensors first), or None."""
  for name in WEIGHT_FILES:
    if os.path.isfile(os.path.join(folder, name)):
      return os.path.join(folder, name)
  return None


def read_state(folder: str) -> dict[str, np.ndarray]:
  """Every tensor of a Hugging Face folder's weights, PyTorch-named (a Flax msgpack is renamed and transposed)."""
  from safetensors import SafetensorError
  from safetensors.numpy import load_file

  file = weights_file(folder)
  if file is None:
    raise WeightsError(
      f"{folder}: no weights ({', '.join(WEIGHT_FILES)}); jaxcse reads safetensors or Flax "
      "msgpack, not PyTorch .bin files (convert them with transformers' save_pretrained)"
    )
  try:
    if file.endswith(SAFETENSORS):
      return load_file(file)
    if file.endswith(SAFETENSORS_INDEX):
      with open(file) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
      state = {}
      for shard in shards:
        state.update(load_file(os.path.join(folder, shard)))
      return state
    with open(file, "rb") as f:
      tree = flax.serialization.msgpack_restore(f.read())
    return to_state(tree)
  except (OSError, ValueError, KeyError, TypeError, SafetensorError) as e:  # Truncated or foreign files.
    raise WeightsError(
      f"{file}: unreadable weights ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    ) from None


def _candidates(name: str, prefixes: Iterable[str]) -> list[str]:
  module, _, leaf = name.rpartition(".")
  leaves = (leaf, *_ALIASES.get(leaf, ()))
  return [f"{p}{module}.{l}" for p in prefixes for l in leaves]


def fill(
  shapes: Any,
  state: Mapping[str, np.ndarray],
  *,
  prefixes: Iterable[str] = ("",),
  where: str = "",
  optional: Iterable[str] = (),
) -> tuple[dict, list[str], set[str]]:
  """Fills a tree of shapes with ``state``'s tensors: ``(params, missing optional subtrees, names used)``.

  A leaf's tensor is looked up under each of ``prefixes`` (and LayerNorm's old names). A missing leaf is an error
  unless it lies under one of the ``optional`` top-level subtrees (e.g. BERT's NSP ``pooler``), which are then
  reported as missing whole (and left out of the params); a tensor of another shape is always an error.
  """
  prefixes = tuple(prefixes)
  optional = set(optional)
  params, missing, absent_optional, used = {}, [], set(), set()
  for path, leaf in flax.traverse_util.flatten_dict(shapes).items():
    name = checkpoint_name(path)
    found = next((n for n in _candidates(name, prefixes) if n in state), None)
    if found is None:
      (absent_optional.add(path[0]) if path[0] in optional else missing.append(prefixes[0] + name))
      continue
    value = np.asarray(state[found])
    if path[-1] == "kernel":
      value = value.T
    if value.shape != tuple(leaf.shape):
      raise WeightsError(f"{where}: tensor {found} has shape {value.shape}, the model's config needs {leaf.shape}")
    params[path] = np.asarray(value, leaf.dtype)
    used.add(found)
  if missing:
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    raise WeightsError(
      f"{where}: the checkpoint has no tensor {', '.join(missing[:3])}{more} (is it another architecture or config?)"
    )
  kept = {p: v for p, v in params.items() if p[0] not in absent_optional}
  return flax.traverse_util.unflatten_dict(kept), sorted(absent_optional), used


def check_all_used(state: Mapping[str, np.ndarray], used: set[str], *, ignored: tuple[str, ...], where: str) -> None:
  """Raises for a tensor that no parameter took and that is not another head's (``ignored`` name prefixes)."""
  left = sorted(n for n in state if n not in used and not n.startswith(ignored) and not n.endswith("position_ids"))
  if left:
    more = f" and {len(left) - 3} more" if len(left) > 3 else ""
    raise WeightsError(
      f"{where}: the checkpoint has tensors the model does not use: {', '.join(left[:3])}{more} "
      "(is it another architecture or config?)"
    )
