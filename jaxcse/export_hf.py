r"""Export a jaxcse encoder as a Hugging Face / sentence-transformers folder, without torch.

  python -m jaxcse.export_hf WORKDIR_OR_MODEL OUT_DIR [--checkpoint best|latest|STEP] [--pooler P]

The folder loads in PyTorch with ``transformers.AutoModel.from_pretrained(OUT_DIR)``
and with ``sentence_transformers.SentenceTransformer(OUT_DIR)``; the latter
gives the same embeddings as jaxcse's test-time pooler (or ``--pooler``):

| pooler              | sentence-transformers modules                     | AutoModel output                          |
|---------------------|---------------------------------------------------|-------------------------------------------|
| `cls`               | Transformer, Pooling(cls), Dense(H, H, tanh)      | `pooler_output` (the MLP is `pooler.dense`) |
| `cls_before_pooler` | Transformer, Pooling(cls)                         | `last_hidden_state[:, 0]`                 |
| `avg`               | Transformer, Pooling(mean)                        | masked mean of `last_hidden_state`        |
| `avg_top2`          | Transformer, WeightedLayerPooling, Pooling(mean)  | masked mean of `(hidden_states[-1] + hidden_states[-2]) / 2` |
| `avg_first_last`    | Transformer, WeightedLayerPooling, Pooling(mean)  | masked mean of `(hidden_states[1] + hidden_states[-1]) / 2`  |

``WeightedLayerPooling`` with weights that pick exactly the two layers (the
others get weight 0) is the layer average; for these two poolers
``config.json`` sets ``output_hidden_states`` so that both libraries return
every layer. Embeddings are not normalised (no ``Normalize`` module), as in
jaxcse. Weights are written as float32 ``model.safetensors`` with PyTorch's
parameter names, from numpy.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import flax
import jax
import numpy as np
from safetensors.numpy import save_file

from jaxcse import checkpoints, models

# Backbones whose Flax parameter tree has exactly the PyTorch model's module names.
SUPPORTED_MODEL_TYPES = {"bert": "BertModel", "roberta": "RobertaModel"}

# Module class names in the spelling sentence-transformers has used since 2.x (5.x maps them to its new
# module paths; tested with 5.7.0). Dense and WeightedLayerPooling weights are model.safetensors.
_ST_TRANSFORMER = "sentence_transformers.models.Transformer"
_ST_POOLING = "sentence_transformers.models.Pooling"
_ST_DENSE = "sentence_transformers.models.Dense"
_ST_LAYER_POOLING = "sentence_transformers.models.WeightedLayerPooling"
_ST_TANH = "torch.nn.modules.activation.Tanh"

# Flax leaf name -> PyTorch parameter name.
_LEAF_NAMES = {"kernel": "weight", "embedding": "weight", "scale": "weight", "bias": "bias"}


class ExportError(ValueError):
  """The model cannot be exported as asked (unsupported backbone, pooler without its head, ...)."""


def torch_state_dict(backbone_params: Any, mlp_params: Any = None) -> dict[str, np.ndarray]:
  """PyTorch ``BertModel``/``RobertaModel`` state dict (float32 numpy) from Flax backbone params.

  Flax ``Dense`` kernels are ``[in, out]`` and torch ``Linear`` weights
  ``[out, in]``, so kernels are transposed; embeddings and LayerNorm keep
  their shape. ``mlp_params`` (the ``cls`` pooler's Linear + tanh) replace
  the backbone's ``pooler.dense``, whose forward is the same Linear + tanh on
  the [CLS] state, so ``AutoModel``'s ``pooler_output`` is the embedding.

  Args:
    backbone_params: the ``backbone`` subtree of a jaxcse model's params.
    mlp_params: ``{"kernel": [H, H], "bias": [H]}`` or None to keep the backbone's pooler.
  """
  params = jax.device_get(backbone_params)
  if mlp_params is not None:
    params = {**params, "pooler": {"dense": jax.device_get(mlp_params)}}
  state = {}
  for path, value in flax.traverse_util.flatten_dict(params).items():
    *modules, leaf = path
    if leaf not in _LEAF_NAMES:
      raise ExportError(f"parameter {'/'.join(path)}: no PyTorch equivalent for a Flax {leaf!r}")
    value = np.asarray(value, np.float32)
    if leaf == "kernel":
      if value.ndim != 2:
        raise ExportError(f"parameter {'/'.join(path)}: expected a 2-d Dense kernel, got shape {value.shape}")
      value = value.T
    state[".".join([*modules, _LEAF_NAMES[leaf]])] = np.ascontiguousarray(value)
  return state


def _layer_weights(pooler: str, num_layers: int) -> tuple[int, np.ndarray]:
  """``(layer_start, weights)`` for WeightedLayerPooling over ``hidden_states[layer_start:]``.

  ``hidden_states`` holds the embedding output and then one entry per layer
  (``num_layers + 1`` in all); weight 1 on the two averaged layers, 0 elsewhere.
  """
  if pooler == "avg_top2":  # hidden_states[-2], hidden_states[-1]
    return num_layers - 1, np.ones(2, np.float32)
  weights = np.zeros(num_layers, np.float32)  # avg_first_last: hidden_states[1] .. hidden_states[-1]
  weights[0] += 1.0
  weights[-1] += 1.0  # A 1-layer model averages hidden_states[1] with itself: weight 2 / 2.
  return 1, weights


def _write_json(path: str, obj: Any) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(obj, f, indent=2)
    f.write("\n")


def _sentence_transformers_modules(folder: str, pooler: str, hidden: int, num_layers: int, max_seq_len: int,
                                   mlp: dict[str, np.ndarray] | None) -> list[str]:
  """Writes sentence-transformers' module chain for ``pooler`` into ``folder``; returns the module folders."""
  modules = [("", _ST_TRANSFORMER)]
  _write_json(os.path.join(folder, "sentence_bert_config.json"), {"max_seq_length": max_seq_len, "do_lower_case": False})
  if pooler in ("avg_top2", "avg_first_last"):
    layer_start, weights = _layer_weights(pooler, num_layers)
    sub = f"{len(modules)}_WeightedLayerPooling"
    _write_json(os.path.join(folder, sub, "config.json"),
                {"word_embedding_dimension": hidden, "layer_start": layer_start, "num_hidden_layers": num_layers})
    save_file({"layer_weights": weights}, os.path.join(folder, sub, "model.safetensors"), metadata={"format": "pt"})
    modules.append((sub, _ST_LAYER_POOLING))
  sub = f"{len(modules)}_Pooling"
  cls_token = pooler in ("cls", "cls_before_pooler")
  _write_json(os.path.join(folder, sub, "config.json"), {
      "word_embedding_dimension": hidden,
      "pooling_mode_cls_token": cls_token,
      "pooling_mode_mean_tokens": not cls_token,
      "pooling_mode_max_tokens": False,
      "pooling_mode_mean_sqrt_len_tokens": False,
  })
  modules.append((sub, _ST_POOLING))
  if pooler == "cls":
    sub = f"{len(modules)}_Dense"
    _write_json(os.path.join(folder, sub, "config.json"),
                {"in_features": hidden, "out_features": hidden, "bias": True, "activation_function": _ST_TANH})
    save_file({"linear.weight": mlp["pooler.dense.weight"], "linear.bias": mlp["pooler.dense.bias"]},
              os.path.join(folder, sub, "model.safetensors"), metadata={"format": "pt"})
    modules.append((sub, _ST_DENSE))
  _write_json(os.path.join(folder, "modules.json"),
              [{"idx": i, "name": str(i), "path": path, "type": kind} for i, (path, kind) in enumerate(modules)])
  _write_json(os.path.join(folder, "config_sentence_transformers.json"), {
      "model_type": "SentenceTransformer",
      "prompts": {},
      "default_prompt_name": None,
      "similarity_fn_name": "cosine",  # SimCSE's training and STS evaluation compare by cosine.
  })
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
    active = [m for key, m in (("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
                               ("pooling_mode_max_tokens", "max"), ("pooling_mode_mean_sqrt_len_tokens", "sqrt"),
                               ("pooling_mode_weightedmean_tokens", "weighted"), ("pooling_mode_lasttoken", "last"))
              if config.get(key)]
    mode = active[0] if len(active) == 1 else None
  return mode if mode in ("cls", "mean") else None


def _tensors(path: str) -> dict[str, np.ndarray]:
  from safetensors.numpy import load_file

  return load_file(path) if os.path.isfile(path) else {}


def sentence_transformers_pooler(folder: str) -> str | None:
  """The jaxcse pooler that a sentence-transformers folder's module chain computes; None if none does.

  Reads ``modules.json`` (else the classic ``1_Pooling/config.json``) and
  recognises the chains ``export`` writes (module class names in any
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
    for pooler in ("avg_top2", "avg_first_last"):
      start, expected = _layer_weights(pooler, config.get("num_hidden_layers", -1))
      if config.get("layer_start") == start and np.array_equal(weights / weights.sum(), expected / expected.sum()):
        return pooler
  return None


_AUTOMODEL_POOLING = {
    "cls": "embeddings = outputs.pooler_output  # [CLS] state through the MLP (Linear + tanh), stored as pooler.dense",
    "cls_before_pooler": "embeddings = outputs.last_hidden_state[:, 0]",
    "avg": "h = outputs.last_hidden_state",
    "avg_top2": "h = (outputs.hidden_states[-1] + outputs.hidden_states[-2]) / 2",
    "avg_first_last": "h = (outputs.hidden_states[1] + outputs.hidden_states[-1]) / 2",
}


def _model_card(pooler: str, source: str, architecture: str, modules: list[str]) -> str:
  lines = _AUTOMODEL_POOLING[pooler]
  if pooler.startswith("avg"):
    lines += ("\nmask = batch['attention_mask'].unsqueeze(-1).float()"
              "\nembeddings = (h * mask).sum(1) / mask.sum(1).clamp(min=1)")
  return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, feature-extraction, sentence-similarity, jaxcse]
---
# Sentence encoder exported from jaxcse

- Source: `{source}`
- Backbone: `{architecture}`; pooler: `{pooler}` (the sentence vector jaxcse tests this model with)
- sentence-transformers modules: Transformer, {", ".join(m.split("_", 1)[1] for m in modules)}
- Embeddings are not normalised; compare them by cosine similarity.

## sentence-transformers

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("PATH_TO_THIS_FOLDER")
embeddings = model.encode(["A man is playing a guitar.", "Someone plays music."])
```

## transformers (PyTorch)

```python
import torch
from transformers import AutoModel, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("PATH_TO_THIS_FOLDER")
model = AutoModel.from_pretrained("PATH_TO_THIS_FOLDER").eval()
batch = tokenizer(["A man is playing a guitar.", "Someone plays music."], padding=True, truncation=True,
                  return_tensors="pt")
with torch.no_grad():
  outputs = model(**batch)
{lines}
```
"""


def export(model: models.Model, out_dir: str, pooler: str | None = None) -> dict:
  """Writes ``model`` with ``pooler`` (default: its test pooler) as a HF + sentence-transformers folder.

  The folder is built next to ``out_dir`` and renamed into place, so
  ``out_dir`` is either complete or absent; an existing non-empty
  ``out_dir`` is an error (stale module folders would confuse a reader).

  Returns:
    A summary: ``{"out_dir", "pooler", "architecture", "modules"}``.

  Raises:
    ExportError: the backbone is not BERT/RoBERTa, or ``pooler`` is ``cls``
      and the model has no MLP head, or ``out_dir`` is not empty.
  """
  pooler = pooler or model.pooling.test_pooler
  if pooler not in models.POOLERS:
    raise ExportError(f"unknown pooler {pooler!r}; choose one of {models.POOLERS}")
  model_type = model.hf_config.model_type
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ExportError(f"cannot export a {model_type!r} backbone; supported: {sorted(SUPPORTED_MODEL_TYPES)}")
  if pooler == "cls" and "mlp" not in model.params:
    raise ExportError("pooler 'cls' needs the model's MLP head, and this model has none "
                      f"(it was trained with pooler {model.pooling.pooler!r}); export another pooler")
  if os.path.isdir(out_dir) and os.listdir(out_dir):
    raise ExportError(f"{out_dir}: exists and is not empty; choose a new folder or remove it")

  architecture = SUPPORTED_MODEL_TYPES[model_type]
  state = torch_state_dict(model.params["backbone"], model.params["mlp"] if pooler == "cls" else None)
  hf_config = copy.deepcopy(model.hf_config)
  hf_config.architectures = [architecture]
  # Both libraries return every layer's output only when the config asks; the layer-average poolers need them.
  hf_config.output_hidden_states = pooler in ("avg_top2", "avg_first_last")
  tokenizer = copy.deepcopy(model.tokenizer)
  tokenizer.model_max_length = model.max_positions  # jaxcse cuts there; truncation=True in torch then agrees.

  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".tmp-", dir=parent)
  try:
    hf_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    save_file(state, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    mlp = {k: v for k, v in state.items() if k.startswith("pooler.dense.")}
    modules = _sentence_transformers_modules(tmp, pooler, hf_config.hidden_size, hf_config.num_hidden_layers,
                                             model.max_positions, mlp)
    with open(os.path.join(tmp, "README.md"), "w") as f:
      f.write(_model_card(pooler, model.source, architecture, modules))
    if os.path.isdir(out_dir):
      os.rmdir(out_dir)  # Empty (checked above); rename needs the name free.
    os.rename(tmp, out_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return {"out_dir": out_dir, "pooler": pooler, "architecture": architecture, "modules": modules}


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m jaxcse.export_hf", description=__doc__.split("\n\n")[0])
  parser.add_argument("model", help="a jaxcse workdir or checkpoint folder, or a HF folder / hub id")
  parser.add_argument("out_dir", help="the folder to write (must not exist, or be empty)")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step")
  parser.add_argument("--pooler", choices=models.POOLERS, default=None, help="default: the model's test pooler")
  args = parser.parse_args(argv)
  if os.path.isdir(args.out_dir) and os.listdir(args.out_dir):  # Before the slow part; export checks again.
    print(f"error: {args.out_dir}: exists and is not empty; choose a new folder or remove it", file=sys.stderr)
    return 1
  try:
    if args.pooler and checkpoints.find_workdir(args.model) is None:
      # A HF folder has no saved pooler; `cls` is its own pooler layer (SimCSE's released checkpoints keep the MLP there).
      model = models.load_pretrained(args.model, models.PoolerSpec(args.pooler), mlp_from_backbone_pooler=True)
    else:
      model, _ = checkpoints.load_model(args.model, checkpoint=args.checkpoint)
      if args.pooler and args.pooler != model.pooling.test_pooler:
        print(f"warning: exporting with pooler {args.pooler!r}, not the model's saved test pooler "
              f"{model.pooling.test_pooler!r}", file=sys.stderr)
    summary = export(model, args.out_dir, args.pooler)
  except (ValueError, FileNotFoundError) as e:  # ExportError is a ValueError.
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"wrote {summary['out_dir']}: {summary['architecture']}, pooler {summary['pooler']}, "
        f"sentence-transformers modules Transformer + {' + '.join(summary['modules'])}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
