"""The sentence-transformers folder format, read and written with numpy only (no torch, no JAX).

A sentence-transformers model folder is a Hugging Face model folder plus a
module chain (``modules.json``: Transformer, then pooling modules, each in
its own subfolder with ``config.json`` and maybe ``model.safetensors``). Each
jaxcse pooler has an exact chain:

| pooler              | modules                                           |
|---------------------|---------------------------------------------------|
| `cls`               | Transformer, Pooling(cls), Dense(H, H, tanh)      |
| `cls_before_pooler` | Transformer, Pooling(cls)                         |
| `avg`               | Transformer, Pooling(mean)                        |
| `avg_top2`          | Transformer, WeightedLayerPooling, Pooling(mean)  |
| `avg_first_last`    | Transformer, WeightedLayerPooling, Pooling(mean)  |
| `avg_embeddings_last` | Transformer, WeightedLayerPooling (from the embedding output), Pooling(mean) |
| `bert_pooler`       | Transformer, Pooling(cls), Dense(H, H, tanh) = the backbone's pooler layer |

``WeightedLayerPooling`` with weights that pick exactly the two layers (the
others get weight 0) is the layer average. ``write_modules`` writes a chain
(``export_hf`` uses it); ``read_pooler`` recognises one, so that a folder
loads with the pooler its modules compute (``loading`` uses it).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from jaxcse.core import files

# Module class names in the spelling sentence-transformers has used since 2.x (5.x maps them to its new
# module paths; tested with 5.7.0). Dense and WeightedLayerPooling weights are model.safetensors.
_ST_TRANSFORMER = "sentence_transformers.models.Transformer"
_ST_POOLING = "sentence_transformers.models.Pooling"
_ST_DENSE = "sentence_transformers.models.Dense"
_ST_LAYER_POOLING = "sentence_transformers.models.WeightedLayerPooling"
_ST_TANH = "torch.nn.modules.activation.Tanh"

# Poolers whose chain has a WeightedLayerPooling module (and whose config.json needs output_hidden_states).
LAYER_AVERAGE_POOLERS = ("avg_top2", "avg_first_last", "avg_embeddings_last")
# Poolers whose chain ends in Pooling(cls) + Dense(tanh): the Dense is pooler.dense (for cls, the MLP written there).
DENSE_POOLERS = ("cls", "bert_pooler")


def layer_weights(pooler: str, num_layers: int) -> tuple[int, np.ndarray]:
  """``(layer_start, weights)`` for WeightedLayerPooling over ``hidden_states[layer_start:]``.

  ``hidden_states`` holds the embedding output and then one entry per layer
  (``num_layers + 1`` in all); weight 1 on the two averaged layers, 0 elsewhere.
  """
  if pooler == "avg_top2":  # hidden_states[-2], hidden_states[-1]
    return num_layers - 1, np.ones(2, np.float32)
  if pooler == "avg_embeddings_last":  # hidden_states[0] (the embedding output) .. hidden_states[-1]
    weights = np.zeros(num_layers + 1, np.float32)
    weights[0] = weights[-1] = 1.0
    return 0, weights
  weights = np.zeros(num_layers, np.float32)  # avg_first_last: hidden_states[1] .. hidden_states[-1]
  weights[0] += 1.0
  weights[-1] += 1.0  # A 1-layer model averages hidden_states[1] with itself: weight 2 / 2.
  return 1, weights


def _write_json(path: str, obj: Any) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  files.write_json(path, obj)


def write_modules(
  folder: str,
  pooler: str,
  hidden: int,
  num_layers: int,
  max_seq_len: int,
  mlp: dict[str, np.ndarray] | None,
  prompts: dict[str, str] | None = None,
  truncate_dim: int | None = None,
) -> list[str]:
  """Writes sentence-transformers' module chain for ``pooler`` into ``folder``; returns the module folders.

  ``mlp`` (for ``cls``): ``{"pooler.dense.weight": [H, H], "pooler.dense.bias": [H]}`` in PyTorch layout.
  ``prompts``: name -> text put before a sentence encoded with that ``prompt_name`` (``config_sentence_transformers.json``).
  ``truncate_dim``: sentence-transformers then keeps only the first ``truncate_dim`` dims of every embedding (a
  Matryoshka-trained model's smaller size), as ``read_truncate_dim`` and jaxcse's ``Encoder`` do.
  """
  modules = [("", _ST_TRANSFORMER)]
  _write_json(
    os.path.join(folder, "sentence_bert_config.json"), {"max_seq_length": max_seq_len, "do_lower_case": False}
  )
  if pooler in LAYER_AVERAGE_POOLERS:
    layer_start, weights = layer_weights(pooler, num_layers)
    sub = f"{len(modules)}_WeightedLayerPooling"
    _write_json(
      os.path.join(folder, sub, "config.json"),
      {"word_embedding_dimension": hidden, "layer_start": layer_start, "num_hidden_layers": num_layers},
    )
    save_file({"layer_weights": weights}, os.path.join(folder, sub, "model.safetensors"), metadata={"format": "pt"})
    modules.append((sub, _ST_LAYER_POOLING))
  sub = f"{len(modules)}_Pooling"
  cls_token = pooler in ("cls", "cls_before_pooler", *DENSE_POOLERS)
  _write_json(
    os.path.join(folder, sub, "config.json"),
    {
      "word_embedding_dimension": hidden,
      "pooling_mode_cls_token": cls_token,
      "pooling_mode_mean_tokens": not cls_token,
      "pooling_mode_max_tokens": False,
      "pooling_mode_mean_sqrt_len_tokens": False,
    },
  )
  modules.append((sub, _ST_POOLING))
  if pooler in DENSE_POOLERS:
    sub = f"{len(modules)}_Dense"
    _write_json(
      os.path.join(folder, sub, "config.json"),
      {"in_features": hidden, "out_features": hidden, "bias": True, "activation_function": _ST_TANH},
    )
    save_file(
      {"linear.weight": mlp["pooler.dense.weight"], "linear.bias": mlp["pooler.dense.bias"]},
      os.path.join(folder, sub, "model.safetensors"),
      metadata={"format": "pt"},
    )
    modules.append((sub, _ST_DENSE))
  _write_json(
    os.path.join(folder, "modules.json"),
    [{"idx": i, "name": str(i), "path": path, "type": kind} for i, (path, kind) in enumerate(modules)],
  )
  _write_json(
    os.path.join(folder, "config_sentence_transformers.json"),
    {
      "model_type": "SentenceTransformer",
      "prompts": dict(prompts or {}),
      "default_prompt_name": None,
      "similarity_fn_name": "cosine",  # SimCSE's training and STS evaluation compare by cosine.
      **({"truncate_dim": int(truncate_dim)} if truncate_dim else {}),
    },
  )
  return [path for path, _ in modules[1:]]


def _read_json(path: str) -> Any:
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def _pooling_mode(config: dict) -> str | None:
  """``"cls"`` or ``"mean"`` from a Pooling config (5.x's ``pooling_mode`` or the older booleans); else None."""
  mode = config.get("pooling_mode")
  if mode is None:
    active = [
      m
      for key, m in (
        ("pooling_mode_cls_token", "cls"),
        ("pooling_mode_mean_tokens", "mean"),
        ("pooling_mode_max_tokens", "max"),
        ("pooling_mode_mean_sqrt_len_tokens", "sqrt"),
        ("pooling_mode_weightedmean_tokens", "weighted"),
        ("pooling_mode_lasttoken", "last"),
      )
      if config.get(key)
    ]
    mode = active[0] if len(active) == 1 else None
  return mode if mode in ("cls", "mean") else None


def _tensors(path: str) -> dict[str, np.ndarray]:
  return load_file(path) if os.path.isfile(path) else {}


def read_prompts(folder: str) -> dict[str, str]:
  """A sentence-transformers folder's prompts (``config_sentence_transformers.json``), name -> text; {} if none."""
  path = os.path.join(folder, "config_sentence_transformers.json")
  if not os.path.isfile(path):
    return {}
  prompts = _read_json(path).get("prompts") or {}
  if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
    raise ValueError(f"{path}: 'prompts' must map prompt names to strings")
  return dict(prompts)


def read_truncate_dim(folder: str) -> int | None:
  """A sentence-transformers folder's ``truncate_dim`` (``config_sentence_transformers.json``): its embeddings'
  first dims to keep; None if it keeps them all."""
  path = os.path.join(folder, "config_sentence_transformers.json")
  if not os.path.isfile(path):
    return None
  value = _read_json(path).get("truncate_dim")
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{path}: 'truncate_dim' must be a positive integer or null, not {value!r}")
  return value


def read_pooler(folder: str) -> str | None:
  """The jaxcse pooler that a sentence-transformers folder's module chain computes; None if none does.

  Reads ``modules.json`` (else the classic ``1_Pooling/config.json``) and
  recognises the chains ``write_modules`` writes (module class names in any
  sentence-transformers spelling); a trailing ``Normalize`` is ignored, as it
  does not change cosine similarities. Pooling(cls) + Dense(tanh) is ``cls``
  only when the Dense is the checkpoint's own pooler layer, which is what
  jaxcse's ``cls`` loads. On a 2-layer model ``avg_first_last`` and
  ``avg_top2`` are the same layers; such a folder reads as ``avg_top2``.
  """
  modules_path = os.path.join(folder, "modules.json")
  if not os.path.isfile(modules_path):
    config_path = os.path.join(folder, "1_Pooling", "config.json")
    if not os.path.isfile(config_path):
      return None
    mode = _pooling_mode(_read_json(config_path))
    return {"cls": "cls_before_pooler", "mean": "avg"}.get(mode)
  chain = [(m["type"].rsplit(".", 1)[-1], os.path.join(folder, m.get("path", ""))) for m in _read_json(modules_path)]
  if chain and chain[-1][0] == "Normalize":
    chain = chain[:-1]
  kinds = [kind for kind, _ in chain]
  if kinds == ["Transformer", "Pooling"]:
    mode = _pooling_mode(_read_json(os.path.join(chain[1][1], "config.json")))
    return {"cls": "cls_before_pooler", "mean": "avg"}.get(mode)
  if kinds == ["Transformer", "Pooling", "Dense"]:
    if _pooling_mode(_read_json(os.path.join(chain[1][1], "config.json"))) != "cls":
      return None
    dense_config = _read_json(os.path.join(chain[2][1], "config.json"))
    if dense_config.get("activation_function") != _ST_TANH:
      return None
    dense = _tensors(os.path.join(chain[2][1], "model.safetensors"))
    own = _tensors(os.path.join(folder, "model.safetensors"))
    pairs = [("linear.weight", "pooler.dense.weight"), ("linear.bias", "pooler.dense.bias")]
    same = all(a in dense and b in own and np.array_equal(dense[a], own[b]) for a, b in pairs)
    return "cls" if same else None
  if kinds == ["Transformer", "WeightedLayerPooling", "Pooling"]:
    if _pooling_mode(_read_json(os.path.join(chain[2][1], "config.json"))) != "mean":
      return None
    config = _read_json(os.path.join(chain[1][1], "config.json"))
    weights = _tensors(os.path.join(chain[1][1], "model.safetensors")).get("layer_weights")
    if weights is None:
      return None
    for pooler in LAYER_AVERAGE_POOLERS:
      start, expected = layer_weights(pooler, config.get("num_hidden_layers", -1))
      if config.get("layer_start") == start and np.array_equal(weights / weights.sum(), expected / expected.sum()):
        return pooler
  return None
