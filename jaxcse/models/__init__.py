"""Sentence encoders: a Flax transformer backbone plus a pooler, described apart from their weights.

This is the only module that builds Hugging Face transformers models: loading
backbones and tokenizers, building fresh backbones from a config, saving the
model description. Swapping the backbone library is a change to this file.

A ``ModelSpec`` is what a model *is* (backbone module, tokenizer, poolers, HF
config, optional MLM head) and never changes; its parameters are a separate
pytree, owned by whoever holds them (the train state, an ``Encoder``).

A *model folder* is a Hugging Face style folder (``config.json``, tokenizer
files, weights). jaxcse writes its own model description into a workdir's
``model/`` folder: the same files without weights plus ``jaxcse.json``, which
records the pooler the model was trained with and the pooler it must be tested
with, so that evaluation cannot silently use the wrong one.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
from typing import Any, NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxcse import files, hub, poolers
from jaxcse.errors import JaxcseError

JAXCSE_MODEL_FILE = "jaxcse.json"
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass(frozen=True)
class PoolerSpec:
  """How token states become one sentence vector, in training and at test time.

  Attributes:
    pooler: the training pooler (a name in ``poolers``). ``cls`` is SimCSE's:
      the [CLS] state through a freshly initialised Linear(H, H) + tanh (not
      BERT's NSP pooler).
    mlp_only_train: SimCSE's flag: train with ``cls`` and its MLP, but
      evaluate (during training and at test time) with ``cls_before_pooler``.
    test_pooler_override: the pooler the final model is tested with, when it
      is not the one used for model selection during training. MixCSE trains
      with ``cls`` (its dev evaluations use the MLP) but reports test numbers
      with ``cls_before_pooler``.
    dev_pooler_override: the pooler of the evaluations during training, when
      it is neither the training pooler nor SimCSE's ``mlp_only_train`` choice
      (DCLR's released code selects on BERT's pooler layer, ``bert_pooler``).
  """

  pooler: str = "cls"
  mlp_only_train: bool = False
  test_pooler_override: str | None = None
  dev_pooler_override: str | None = None

  def __post_init__(self):
    for p in (self.pooler, self.test_pooler_override or self.pooler, self.dev_pooler_override or self.pooler):
      poolers.get(p)  # Raises for an unknown name.
    if self.mlp_only_train and self.pooler != "cls":
      raise ValueError("mlp_only_train only makes sense with pooler='cls'")

  @property
  def dev_pooler(self) -> str:
    """The pooler of the evaluations during training (SimCSE's ``sentemb_forward``, unless overridden)."""
    if self.dev_pooler_override:
      return self.dev_pooler_override
    return "cls_before_pooler" if self.mlp_only_train else self.pooler

  @property
  def test_pooler(self) -> str:
    return self.test_pooler_override or self.dev_pooler


def _position_ids(input_ids: jax.Array, padding_idx: int | None) -> jax.Array:
  if padding_idx is None:  # BERT: 0 .. len-1.
    return jnp.broadcast_to(jnp.arange(input_ids.shape[-1]), input_ids.shape)
  # RoBERTa: padding_idx + 1 + rank among non-padding tokens; padding_idx at padding.
  not_pad = (input_ids != padding_idx).astype(jnp.int32)
  return jnp.cumsum(not_pad, axis=-1) * not_pad + padding_idx


class PooledBackbone(nn.Module):
  """The Flax module: a transformer backbone followed by a pooler.

  Params are ``{"backbone": <HF params>, "mlp": {"kernel", "bias"}}``; the
  ``mlp`` entry exists only for poolers with an MLP (``cls``).

  Attributes:
    backbone: a transformers Flax module (``FlaxBertModule``,
      ``FlaxRobertaModule``).
    pooler: a name in ``poolers``.
    initializer_range: std of the MLP's normal init (BERT's init, as SimCSE).
    position_padding_idx: RoBERTa numbers positions after its padding index;
      ``None`` for BERT's ``0..len-1``.
    attend_padding: attend to the padding tokens too, as a model called without an attention mask on a batch
      padded to its longest sentence does (DCLR's released code); positions past the batch's longest sentence
      stay hidden, so the result does not depend on how far jaxcse padded. Pooling still uses the real mask.
  """

  backbone: nn.Module
  pooler: str = "cls"
  initializer_range: float = 0.02
  position_padding_idx: int | None = None
  attend_padding: bool = False

  @nn.compact
  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array, *, train: bool = False) -> jax.Array:
    pooler = poolers.get(self.pooler)
    attended = attention_mask
    if self.attend_padding:
      longest = jnp.max(jnp.sum(attention_mask, axis=-1))
      attended = jnp.broadcast_to(jnp.arange(input_ids.shape[-1]) < longest, input_ids.shape).astype(
          attention_mask.dtype)
    outputs = self.backbone(
        input_ids,
        attended,
        token_type_ids=jnp.zeros_like(input_ids),
        position_ids=_position_ids(input_ids, self.position_padding_idx),
        head_mask=None,
        deterministic=not train,
        output_hidden_states=pooler.needs_hidden_states,
    )
    pooled = poolers.pool(self.pooler, attention_mask, outputs.last_hidden_state, outputs.hidden_states,
                          getattr(outputs, "pooler_output", None))
    if pooler.has_mlp:
      dense = nn.Dense(
          pooled.shape[-1],
          kernel_init=nn.initializers.normal(self.initializer_range),
          bias_init=nn.initializers.zeros,
          name="mlp",
      )
      pooled = jnp.tanh(dense(pooled))
    return pooled


@dataclasses.dataclass(frozen=True)
class MLMHead:
  """A masked-language-model head on the encoder's backbone (MLM pretraining and SimCSE's ``do_mlm``).

  ``module`` is the transformers ``Flax*ForMaskedLM`` module; its backbone
  params are the encoder's own (``params["backbone"]``) under ``prefix``, and
  its head params live in ``params["mlm_head"]``. ``tied``: the output
  projection is the input word embeddings (BERT's pretraining); untied, it is
  a matrix of its own (SimCSE's ``do_mlm`` head), so the MLM loss reaches the
  word embeddings only through the encoder.
  """

  module: nn.Module
  prefix: str
  pretrained: bool  # False: the checkpoint had no MLM head and it was freshly initialised.
  tied: bool = True


# The auxiliary MLM head (config.mlm.head). SimCSE's do_mlm head is a BertLMPredictionHead named lm_head, which the
# checkpoint (cls.predictions.*) does not fill: untied and freshly initialised.
MLM_HEADS = ("untied_fresh", "untied_pretrained", "tied")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """What a sentence encoder is, without its weights: backbone, tokenizer, poolers, HF config, MLM head.

  Immutable; params live apart (``load_pretrained`` and ``loading.load_model``
  return them beside the spec). ``module_for(pooler)`` builds the Flax module
  that embeds with a pooler (``pooling.pooler`` while training, with the
  objective's padding). The tokenizer is
  a Hugging Face object: treat it as read-only.
  """

  hf_config: Any
  tokenizer: Any
  backbone: nn.Module
  pooling: PoolerSpec
  source: str = ""
  mlm: MLMHead | None = None
  revision: str | None = None  # The hub commit the weights came from (None: a local folder or a fresh init).

  def module_for(self, pooler: str, *, attend_padding: bool = False) -> PooledBackbone:
    padding_idx = self.hf_config.pad_token_id if self.hf_config.model_type in ("roberta", "xlm-roberta") else None
    return PooledBackbone(
        backbone=self.backbone,
        pooler=pooler,
        initializer_range=getattr(self.hf_config, "initializer_range", 0.02),
        position_padding_idx=padding_idx,
        attend_padding=attend_padding,
    )

  def position_ids(self, input_ids: jax.Array) -> jax.Array:
    return _position_ids(input_ids, self.module_for("avg").position_padding_idx)

  @property
  def max_positions(self) -> int:
    # RoBERTa's position table has padding_idx + 1 unusable rows.
    n = self.hf_config.max_position_embeddings
    return n - 2 if self.hf_config.model_type in ("roberta", "xlm-roberta") else n

  @property
  def hidden_size(self) -> int:
    return self.hf_config.hidden_size

  def with_dtype(self, dtype: Any) -> "ModelSpec":
    """The same model computing in ``dtype`` (params keep their own dtype; Flax casts them per op)."""
    mlm = None if self.mlm is None else dataclasses.replace(self.mlm, module=self.mlm.module.clone(dtype=dtype))
    return dataclasses.replace(self, backbone=self.backbone.clone(dtype=dtype), mlm=mlm)


def _mlm_variables(spec: ModelSpec, params) -> dict:
  return {"params": {spec.mlm.prefix: params["backbone"], **params["mlm_head"]}}


def mlm_logits(spec: ModelSpec, params, input_ids: jax.Array, attention_mask: jax.Array, *, train: bool,
               rng: jax.Array | None = None) -> jax.Array:
  """Vocabulary logits ``[batch, len, vocab]`` of the MLM head on the encoder's backbone, at every position."""
  return spec.mlm.module.apply(
      _mlm_variables(spec, params), input_ids, attention_mask, jnp.zeros_like(input_ids),
      spec.position_ids(input_ids), None, deterministic=not train, rngs={"dropout": rng} if train else {},
  ).logits


def _logits_at_positions(prefix: str):
  """A method of a ``Flax*ForMaskedLMModule``: its forward with the output layer only at ``positions``.

  The same computation as the module's ``__call__`` (backbone, then the
  prediction head with the tied word embeddings), gathered before the head.
  ``prefix`` names the backbone submodule (``bert``, ``roberta``).
  """

  def method(module, input_ids, attention_mask, token_type_ids, position_ids, positions, deterministic):
    backbone = getattr(module, prefix)
    hidden = backbone(input_ids, attention_mask, token_type_ids, position_ids, None,
                      deterministic=deterministic).last_hidden_state
    gathered = jnp.take_along_axis(hidden, positions[..., None], axis=1)  # [batch, predictions, hidden]
    shared = None
    if module.config.tie_word_embeddings:
      shared = backbone.variables["params"]["embeddings"]["word_embeddings"]["embedding"]
    head = module.lm_head if hasattr(module, "lm_head") else module.cls  # RoBERTa's name, BERT's name.
    return head(gathered, shared_embedding=shared)

  return method


def mlm_logits_at(spec: ModelSpec, params, input_ids: jax.Array, attention_mask: jax.Array, positions: jax.Array,
                  *, train: bool, rng: jax.Array | None = None) -> jax.Array:
  """Vocabulary logits ``[batch, predictions, vocab]`` at ``positions`` ``[batch, predictions]`` only.

  Equal to ``mlm_logits`` gathered at ``positions``, without computing the
  output layer (hidden x vocab, the largest matmul of a small BERT) at the
  ~85% of positions that are not predicted.
  """
  return spec.mlm.module.apply(
      _mlm_variables(spec, params), input_ids, attention_mask, jnp.zeros_like(input_ids),
      spec.position_ids(input_ids), positions, not train, method=_logits_at_positions(spec.mlm.prefix),
      rngs={"dropout": rng} if train else {},
  )


# --------------------------------------------------------------------------
# Building and loading.


def _flax_model_class(hf_config, *, masked_lm: bool = False):
  from transformers import FlaxAutoModel, FlaxAutoModelForMaskedLM

  mapping = (FlaxAutoModelForMaskedLM if masked_lm else FlaxAutoModel)._model_mapping  # config class -> Flax class
  try:
    return mapping[type(hf_config)]
  except KeyError:
    what = "masked-LM head" if masked_lm else "implementation"
    raise ValueError(f"model type {hf_config.model_type!r} has no Flax {what} in transformers") from None


def hf_config_from_pretrained(path: str, dropout: float | None = None):
  from transformers import AutoConfig

  hf_config = AutoConfig.from_pretrained(path)
  if dropout is not None:
    hf_config.hidden_dropout_prob = dropout
    hf_config.attention_probs_dropout_prob = dropout
  return hf_config


@contextlib.contextmanager
def quiet_transformers():
  """transformers' warnings off (e.g. "position_ids not used", "cls.* newly initialized"): we report what matters."""
  from transformers.utils import logging as hf_logging

  verbosity = hf_logging.get_verbosity()
  hf_logging.set_verbosity_error()
  try:
    yield
  finally:
    hf_logging.set_verbosity(verbosity)


def _mlm_head(hf_config, dtype, *, pretrained: bool, tied: bool = True) -> MLMHead:
  cls = _flax_model_class(hf_config, masked_lm=True)
  if not tied:
    hf_config = copy.deepcopy(hf_config)
    hf_config.tie_word_embeddings = False
  module = cls(hf_config, dtype=dtype, _do_init=False).module
  return MLMHead(module, cls.base_model_prefix, pretrained, tied)


class _LoadedBackbone(NamedTuple):
  module: nn.Module
  params: Any


def _load_backbone(path: str, hf_config, dtype, gradient_checkpointing: bool) -> _LoadedBackbone:
  """The Flax backbone and its weights. Flax weights load without transformers' random initialisation (which
  compiles hundreds of small programs: seconds per process); PyTorch-named ``model.safetensors`` convert only
  against initialised params, so they take that path."""
  cls = _flax_model_class(hf_config)
  kwargs = dict(config=hf_config, dtype=dtype, gradient_checkpointing=gradient_checkpointing)
  try:
    model, params = cls.from_pretrained(path, _do_init=False, **kwargs)
    expected = set(flax.traverse_util.flatten_dict(model.params_shape_tree))
    if expected <= set(flax.traverse_util.flatten_dict(params)):
      return _LoadedBackbone(model.module, params)
  except ValueError:  # PyTorch weights: transformers needs the initialised params to convert them.
    pass
  model = cls.from_pretrained(path, **kwargs)  # Missing weights (e.g. no pooler layer) get BERT's init.
  return _LoadedBackbone(model.module, model.params)


class _MLPAlone(nn.Module):
  """The ``mlp`` child of ``PooledBackbone`` alone: same name, so the same init from the same key."""

  hidden: int
  initializer_range: float

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.hidden, kernel_init=nn.initializers.normal(self.initializer_range),
                    bias_init=nn.initializers.zeros, name="mlp")(x)


def _fresh_mlp(spec: ModelSpec, seed: int) -> dict:
  """SimCSE's MLP as ``init_params`` initialises it (bit for bit), without initialising the whole backbone."""
  module = _MLPAlone(spec.hidden_size, getattr(spec.hf_config, "initializer_range", 0.02))
  # Eagerly, as init_params runs: under jit the normal sampler's ops fuse and round differently (~1 ulp).
  return module.init(jax.random.key(seed), jnp.ones((1, spec.hidden_size), jnp.float32))["params"]["mlp"]


def _fresh_mlm_head(spec: ModelSpec, seed: int) -> dict:
  dummy = jnp.ones((1, 4), jnp.int32)
  full = spec.mlm.module.init(jax.random.key(seed), dummy, dummy, dummy, dummy, None)  # As init_params does.
  return {k: v for k, v in full["params"].items() if k != spec.mlm.prefix}


def params_fingerprint(params: Any) -> str:
  """sha256 (first 16 hex digits) of a params pytree's paths and array bytes, in tree order: its identity."""
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_leaves_with_path(jax.device_get(params)):
    digest.update(jax.tree_util.keystr(path).encode())
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return digest.hexdigest()[:16]


def init_params(spec: ModelSpec, seed: int) -> dict:
  """Random params for the training pooler's module (+ MLM head); padding attended or not, the same params."""
  dummy = jnp.ones((1, 4), jnp.int32)
  params = spec.module_for(spec.pooling.pooler).init(jax.random.key(seed), dummy, dummy)["params"]
  if spec.mlm is not None:
    full = spec.mlm.module.init(jax.random.key(seed), dummy, dummy, dummy, dummy, None)["params"]
    params["mlm_head"] = {k: v for k, v in full.items() if k != spec.mlm.prefix}
  return params


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
    mlm_head: str = "tied",
    revision: str | None = None,
) -> tuple[ModelSpec, dict]:
  """Loads a Hugging Face model folder or hub id: ``(spec, params)``.

  Weights come from ``flax_model.msgpack`` or ``model.safetensors`` (torch is
  not needed for safetensors). The pooler's MLP, when there is one, is freshly
  initialised from ``seed``.

  Args:
    name_or_path: a local folder, a hub id, or a name in ``hub.OFFLINE_PACKAGES``.
    pooling: the pooler to train with (and the test pooler it implies).
    dropout: overrides the config's hidden and attention dropout (SimCSE: 0.1).
    seed: seeds the MLP head's initialisation.
    dtype: computation dtype of the backbone (params stay float32).
    gradient_checkpointing: rematerialise each layer in the backward pass.
    mlp_from_backbone_pooler: use the checkpoint's own pooler layer (BERT's
      ``pooler.dense``) as the ``cls`` MLP instead of a fresh one. SimCSE's
      released checkpoints store their trained MLP there, and its
      evaluation.py's ``cls`` means exactly this.
    with_mlm_head: also give the model a masked-LM head, of kind ``mlm_head``.
    mlm_head: ``tied``: the checkpoint's head (fresh if it has none; ``spec.mlm.pretrained`` tells), output
      tied to the word embeddings; ``untied_fresh``: a fresh head with its own output matrix (SimCSE's
      ``do_mlm``); ``untied_pretrained``: the checkpoint's head with a copy of the word embeddings as its own
      output matrix.
    revision: for a hub id, the branch, tag or commit to load (default: main); the commit is recorded in
      ``spec.revision`` and in the saved description.
  """
  from transformers import AutoTokenizer

  path, commit = hub.local_folder(name_or_path, revision)
  hf_config = hf_config_from_pretrained(path, dropout)
  with quiet_transformers():
    hf_model = _load_backbone(path, hf_config, dtype, gradient_checkpointing)
    tokenizer = AutoTokenizer.from_pretrained(path)
    head, head_params = None, None
    if with_mlm_head:
      if mlm_head not in MLM_HEADS:
        raise ValueError(f"unknown mlm head {mlm_head!r}; choose one of {', '.join(MLM_HEADS)}")
      if mlm_head == "untied_fresh":
        head = _mlm_head(hf_config, dtype, pretrained=False, tied=False)
      else:
        head, head_params = _load_mlm_head(path, hf_config, dtype, seed)
        if mlm_head == "untied_pretrained":
          head = _mlm_head(hf_config, dtype, pretrained=head.pretrained, tied=False)
          head_params = _untie(head, head_params, hf_model.params)
  spec = ModelSpec(hf_config, tokenizer, hf_model.module, pooling, source=name_or_path, mlm=head, revision=commit)
  params = {"backbone": hf_model.params}
  if poolers.get(pooling.pooler).has_mlp:
    params["mlp"] = _fresh_mlp(spec, seed)
  if head is not None:
    params["mlm_head"] = head_params if head_params is not None else _fresh_mlm_head(spec, seed)
  if mlp_from_backbone_pooler and "mlp" in params:
    if "pooler" not in hf_model.params:
      raise ValueError(f"{name_or_path}: pooler 'cls' needs the checkpoint's pooler layer, and it has none")
    params["mlp"] = hf_model.params["pooler"]["dense"]
  return spec, params


def build_spec(hf_config, tokenizer, pooling: PoolerSpec = PoolerSpec(), *, dtype: Any = jnp.float32,
               gradient_checkpointing: bool = False, with_mlm_head: bool = False, mlm_head: str = "tied",
               source: str = "") -> ModelSpec:
  """The spec of a backbone of ``hf_config``, without weights (``jax.eval_shape(init_params)`` gives their shapes).

  ``mlm_head`` as ``load_pretrained``'s: ``tied``, or ``untied_*`` (an output matrix of its own).
  """
  if with_mlm_head and mlm_head not in MLM_HEADS:
    raise ValueError(f"unknown mlm head {mlm_head!r}; choose one of {', '.join(MLM_HEADS)}")
  with quiet_transformers():
    module = _flax_model_class(hf_config)(hf_config, dtype=dtype, _do_init=False,
                                          gradient_checkpointing=gradient_checkpointing).module
    head = _mlm_head(hf_config, dtype, pretrained=False, tied=mlm_head == "tied") if with_mlm_head else None
  return ModelSpec(hf_config, tokenizer, module, pooling, source=source, mlm=head)


def build_random(hf_config, tokenizer, pooling: PoolerSpec = PoolerSpec(), *, seed: int = 0,
                 dtype: Any = jnp.float32, gradient_checkpointing: bool = False, with_mlm_head: bool = False,
                 source: str = "random") -> tuple[ModelSpec, dict]:
  """A randomly initialised backbone of ``hf_config`` (BERT's own initialisation), for pretraining from scratch."""
  spec = build_spec(hf_config, tokenizer, pooling, dtype=dtype, gradient_checkpointing=gradient_checkpointing,
                    with_mlm_head=with_mlm_head, source=source)
  return spec, init_params(spec, seed)


def _load_mlm_head(path: str, hf_config, dtype, seed: int) -> tuple[MLMHead, dict]:
  """The checkpoint's MLM head (or a fresh one if it has none) and its params."""
  cls = _flax_model_class(hf_config, masked_lm=True)
  prefix = cls.base_model_prefix
  try:
    mlm_model, loaded = cls.from_pretrained(path, config=hf_config, dtype=dtype, _do_init=False)
    expected = {k for k in flax.traverse_util.flatten_dict(mlm_model.params_shape_tree) if k[0] != prefix}
    present = {k for k in flax.traverse_util.flatten_dict(loaded) if k[0] != prefix}
    pretrained = expected <= present
  except ValueError:  # PyTorch-named weights (model.safetensors) convert only against initialised params.
    mlm_model = cls.from_pretrained(path, config=hf_config, dtype=dtype, seed=seed)
    loaded = mlm_model.params
    pretrained = _torch_checkpoint_has_head(path)
  if pretrained:
    head = {k: v for k, v in loaded.items() if k != prefix}
  else:  # e.g. sentence-transformers checkpoints keep no MLM head.
    fresh = mlm_model.init_weights(jax.random.key(seed), (1, 4))
    head = {k: v for k, v in fresh.items() if k != prefix}
  return MLMHead(mlm_model.module, prefix, pretrained), head


def _untie(head: MLMHead, tied_params: dict, backbone_params: dict) -> dict:
  """Head params for the untied ``head``: the tied head's, and a copy of the word embeddings as the output matrix."""
  shapes = jax.eval_shape(lambda: head.module.init(jax.random.key(0), *([jnp.ones((1, 4), jnp.int32)] * 4), None))
  flat = flax.traverse_util.flatten_dict(tied_params)
  embeddings = np.asarray(backbone_params["embeddings"]["word_embeddings"]["embedding"])
  for key in flax.traverse_util.flatten_dict(shapes["params"]):
    if key[0] != head.prefix and "decoder" in key and key[-1] == "kernel":
      flat[key] = jnp.array(embeddings.T)  # [hidden, vocab], a copy: trained apart from the embeddings.
  return flax.traverse_util.unflatten_dict(flat)


def _torch_checkpoint_has_head(path: str) -> bool:
  """Whether a folder's PyTorch ``model.safetensors`` holds a masked-LM head (``cls.*`` BERT, ``lm_head.*`` RoBERTa)."""
  from safetensors import safe_open

  file = os.path.join(path, "model.safetensors")
  if not os.path.isfile(file):
    return False
  with safe_open(file, framework="numpy") as f:
    return any(k.startswith(("cls.predictions.", "lm_head.")) for k in f.keys())


class DescriptionError(JaxcseError, ValueError):
  """A workdir's model description is missing or unreadable."""


def from_description(folder: str, *, dtype: Any = jnp.float32, gradient_checkpointing: bool = False) -> ModelSpec:
  """Builds a ``ModelSpec`` from a folder written by ``save_description``."""
  from transformers import AutoConfig, AutoTokenizer

  info_path = os.path.join(folder, JAXCSE_MODEL_FILE)
  if not os.path.isfile(info_path):
    raise DescriptionError(f"{info_path}: not a jaxcse model description (no {JAXCSE_MODEL_FILE})")
  try:
    with open(info_path) as f:
      info = json.load(f)
    pooling = PoolerSpec(pooler=info["pooler"], mlp_only_train=info["mlp_only_train"],
                         test_pooler_override=info.get("test_pooler_override"),
                         dev_pooler_override=info.get("dev_pooler_override"))
  except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
    raise DescriptionError(f"{info_path}: unreadable model description ({type(e).__name__}: {e})") from None
  try:
    with quiet_transformers():
      hf_config = AutoConfig.from_pretrained(folder)
      module = _flax_model_class(hf_config)(
          hf_config, dtype=dtype, _do_init=False, gradient_checkpointing=gradient_checkpointing
      ).module
      tokenizer = AutoTokenizer.from_pretrained(folder)
  except (OSError, ValueError, TypeError) as e:
    raise DescriptionError(f"{folder}: the model description is incomplete or unreadable "
                           f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
  head = None
  if info.get("mlm_head"):
    head = _mlm_head(hf_config, dtype, pretrained=info["mlm_head"] == "pretrained",
                     tied=info.get("mlm_head_tied", True))
  return ModelSpec(hf_config, tokenizer, module, pooling, source=info.get("source", folder), mlm=head,
                   revision=info.get("revision"))


def save_description(spec: ModelSpec, folder: str) -> None:
  """Writes the model's config, tokenizer and poolers (no weights) to ``folder``."""
  os.makedirs(folder, exist_ok=True)
  spec.hf_config.save_pretrained(folder)
  spec.tokenizer.save_pretrained(folder)
  info = {
      "format_version": 1,
      "pooler": spec.pooling.pooler,
      "mlp_only_train": spec.pooling.mlp_only_train,
      "test_pooler": spec.pooling.test_pooler,
      "test_pooler_override": spec.pooling.test_pooler_override,
      "dev_pooler_override": spec.pooling.dev_pooler_override,
      "source": spec.source,
      "revision": spec.revision,
      # The params hold an MLM head: "pretrained" or "fresh" at the start; null: none.
      "mlm_head": None if spec.mlm is None else ("pretrained" if spec.mlm.pretrained else "fresh"),
      "mlm_head_tied": None if spec.mlm is None else spec.mlm.tied,
  }
  files.write_json(os.path.join(folder, JAXCSE_MODEL_FILE), info)
