"""Sentence encoders: one of jaxcse's own Flax encoders plus a pooler, described apart from their weights.

The encoders are jaxcse's (``bert.py``: BERT, RoBERTa, XLM-R; ``modernbert.py``), chosen by the Hugging Face
config's ``model_type`` (``families.py``), their weights read from Hugging Face folders by ``weights.py``. They
attend through one function (``attention.py``) and take padded batches or packed rows (``packing.py``).
transformers is used only for configs (``AutoConfig``) and tokenizers (``AutoTokenizer``).

A ``ModelSpec`` (``spec.py``) is what a model *is* (backbone module, tokenizer, poolers, HF
config, optional MLM head) and never changes; its parameters are a separate
pytree, owned by whoever holds them (the train state, an ``Encoder``). This module builds and loads them.

A *model folder* is a Hugging Face style folder (``config.json``, tokenizer
files, weights). jaxcse writes its own model description into a workdir's
``model/`` folder: the same files without weights plus ``jaxcse.json``, which
records the pooler the model was trained with and the pooler it must be tested
with, so that evaluation cannot silently use the wrong one (``storage.description`` writes and reads it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxcse.models import families, poolers, weights
from jaxcse.models.common import BackboneOutput  # noqa: F401  (re-exported: what every backbone returns)
from jaxcse.models.spec import (  # noqa: F401  (re-exported: models.ModelSpec is the name every layer uses)
  DTYPES,
  MLM_HEADS,
  MLMHead,
  ModelSpec,
  PooledBackbone,
  PoolerSpec,
  mlm_logits,
  mlm_logits_at,
)
from jaxcse.storage import hub

log = logging.getLogger("jaxcse")


# --------------------------------------------------------------------------
# Building and loading: one builder (``build_spec``) for every model; its params are ``init_params`` (random),
# ``jax.eval_shape`` of it (shapes only: jaxcse-compile) or a checkpoint's tensors filled into those shapes.


def hf_config_from_pretrained(path: str, dropout: float | None = None):
  """The model's Hugging Face config (``config.json``), with the dropout override (SimCSE: 0.1) if given."""
  from transformers import AutoConfig

  hf_config = AutoConfig.from_pretrained(path)
  if dropout is not None:
    families.get(hf_config.model_type).set_dropout(hf_config, dropout)
  return hf_config


@contextlib.contextmanager
def quiet_transformers():
  """transformers' warnings off while jaxcse reads configs and tokenizers: we report what matters."""
  from transformers.utils import logging as hf_logging

  verbosity = hf_logging.get_verbosity()
  hf_logging.set_verbosity_error()
  try:
    yield
  finally:
    hf_logging.set_verbosity(verbosity)


def _mlm_head(
  hf_config, dtype, *, pretrained: bool, tied: bool = True, attention_dropout_per_element: bool = True
) -> MLMHead:
  family = families.get(hf_config.model_type)
  module = family.masked_lm(
    hf_config, dtype=dtype, tied=tied, **family.attention_dropout_options(attention_dropout_per_element)
  )
  return MLMHead(module, module.backbone_prefix, pretrained, tied)


class _DenseAlone(nn.Module):
  """One Dense layer named ``name`` at the top: the same init, from the same key, as that child of a bigger module."""

  hidden: int
  initializer_range: float
  child: str

  @nn.compact
  def __call__(self, x):
    return nn.Dense(
      self.hidden,
      kernel_init=nn.initializers.normal(self.initializer_range),
      bias_init=nn.initializers.zeros,
      name=self.child,
    )(x)


def _fresh_dense(spec: ModelSpec, seed: int, child: str = "mlp") -> dict:
  """SimCSE's MLP as ``init_params`` initialises it (bit for bit), without initialising the whole backbone."""
  module = _DenseAlone(spec.hidden_size, getattr(spec.hf_config, "initializer_range", 0.02), child)
  # Eagerly, as init_params runs: under jit the normal sampler's ops fuse and round differently (~1 ulp).
  return module.init(jax.random.key(seed), jnp.ones((1, spec.hidden_size), jnp.float32))["params"][child]


def _fresh_mlm_head(spec: ModelSpec, seed: int) -> dict:
  dummy = jnp.ones((1, 4), jnp.int32)
  full = spec.mlm.module.init(jax.random.key(seed), dummy, dummy)["params"]
  return {k: v for k, v in full.items() if k != spec.mlm.prefix}


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
    params["mlm_head"] = _fresh_mlm_head(spec, seed)
  return params


def build_spec(
  hf_config,
  tokenizer,
  pooling: PoolerSpec = PoolerSpec(),
  *,
  dtype: Any = jnp.float32,
  gradient_checkpointing: bool = False,
  with_mlm_head: bool = False,
  mlm_head: str = "tied",
  mlm_pretrained: bool = False,
  source: str = "",
  revision: str | None = None,
  attention_dropout_per_element: bool = True,
) -> ModelSpec:
  """The spec of an encoder of ``hf_config`` (any of ``families``): real params come from ``load_pretrained`` or
  ``init_params``, their shapes from ``jax.eval_shape(lambda: init_params(spec, seed))``.

  ``mlm_head`` as ``load_pretrained``'s: ``tied``, or ``untied_*`` (an output matrix of its own).
  ``attention_dropout_per_element``: draw the attention-dropout mask per element, as PyTorch (the default); False
  shares one mask across the batch and heads where the family can (BERT's modules, as transformers' Flax BERT;
  ``families.Family.shares_attention_dropout``): how jaxcse trained before, kept to reproduce those runs.
  """
  if with_mlm_head and mlm_head not in MLM_HEADS:
    raise ValueError(f"unknown mlm head {mlm_head!r}; choose one of {', '.join(MLM_HEADS)}")
  family = families.get(hf_config.model_type)
  module = family.backbone(
    hf_config,
    dtype=dtype,
    gradient_checkpointing=gradient_checkpointing,
    add_pooling_layer=family.has_pooler,
    **family.attention_dropout_options(attention_dropout_per_element),
  )
  head = (
    _mlm_head(
      hf_config,
      dtype,
      pretrained=mlm_pretrained,
      tied=mlm_head == "tied",
      attention_dropout_per_element=attention_dropout_per_element,
    )
    if with_mlm_head
    else None
  )
  return ModelSpec(hf_config, tokenizer, module, pooling, source=source, mlm=head, revision=revision)


def build_random(
  hf_config,
  tokenizer,
  pooling: PoolerSpec = PoolerSpec(),
  *,
  seed: int = 0,
  dtype: Any = jnp.float32,
  gradient_checkpointing: bool = False,
  with_mlm_head: bool = False,
  source: str = "random",
) -> tuple[ModelSpec, dict]:
  """A randomly initialised backbone of ``hf_config`` (BERT's own initialisation), for pretraining from scratch."""
  spec = build_spec(
    hf_config,
    tokenizer,
    pooling,
    dtype=dtype,
    gradient_checkpointing=gradient_checkpointing,
    with_mlm_head=with_mlm_head,
    source=source,
  )
  return spec, init_params(spec, seed)


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
  attention_dropout_per_element: bool = True,
) -> tuple[ModelSpec, dict]:
  """Loads a Hugging Face model folder or hub id: ``(spec, params)``.

  Weights come from ``model.safetensors`` (PyTorch names; single or sharded with its index) or transformers'
  Flax ``flax_model.msgpack``, into jaxcse's own modules (``families``); neither torch nor transformers' model
  classes are needed. Every encoder tensor must be there and every checkpoint tensor must be used (other heads'
  excepted): ``weights.WeightsError`` names the first that is not. Only what the method defines as new is
  initialised: the pooler's MLP (``cls``) from ``seed``, and a missing NSP pooler layer or MLM head (one line each).

  Args:
    name_or_path: a local folder, a hub id, or a name in ``hub.OFFLINE_PACKAGES`` (``hub.resolve``).
    pooling: the pooler to train with (and the test pooler it implies).
    dropout: overrides the config's dropout (SimCSE: 0.1; BERT's hidden and attention dropout).
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
    attention_dropout_per_element: as ``build_spec``'s.
  """
  from transformers import AutoTokenizer

  resolved = hub.resolve(name_or_path, revision)
  path, commit = resolved.folder, resolved.commit
  hf_config = hf_config_from_pretrained(path, dropout)
  with quiet_transformers():
    tokenizer = AutoTokenizer.from_pretrained(path)
  spec = build_spec(
    hf_config,
    tokenizer,
    pooling,
    dtype=dtype,
    gradient_checkpointing=gradient_checkpointing,
    with_mlm_head=with_mlm_head,
    mlm_head=mlm_head,
    source=name_or_path,
    revision=commit,
    attention_dropout_per_element=attention_dropout_per_element,
  )
  shapes = jax.eval_shape(lambda: init_params(spec, seed))
  state = weights.read_state(path)
  family = spec.family
  backbone, absent, used = weights.fill(
    shapes["backbone"], state, prefixes=("", spec_prefix(spec) + "."), where=path, optional=("pooler",)
  )
  if absent:  # BERT's NSP pooler layer, which masked-LM checkpoints lack.
    # Read by the bert_pooler poolers, and as the cls MLP when mlp_from_backbone_pooler: a pooler with no MLP (avg,
    # cls_before_pooler, ...) never reads it, so its absence is no error then.
    pooler = poolers.get(pooling.pooler)
    if pooler.needs_pooler_output or (mlp_from_backbone_pooler and pooler.has_mlp):
      raise weights.WeightsError(
        f"{name_or_path}: pooler {pooling.pooler!r} needs the checkpoint's pooler layer (pooler.dense), and it has none"
      )
    log.info(
      "%s has no NSP pooler layer (pooler.dense): initialised fresh (only the bert_pooler poolers read it)",
      name_or_path,
    )
    backbone["pooler"] = {"dense": _fresh_dense(spec, seed, "dense")}
  params = {"backbone": backbone}
  if poolers.get(pooling.pooler).has_mlp:
    params["mlp"] = _fresh_dense(spec, seed)
  if with_mlm_head:
    head, head_used = _checkpoint_head(spec, shapes["mlm_head"], state, backbone, mlm_head, path)
    used |= head_used
    spec = dataclasses.replace(spec, mlm=dataclasses.replace(spec.mlm, pretrained=head is not None))
    params["mlm_head"] = head if head is not None else _fresh_mlm_head(spec, seed)
  weights.check_all_used(state, used, ignored=family.heads, where=path)
  if mlp_from_backbone_pooler and "mlp" in params:
    params["mlp"] = backbone["pooler"]["dense"]
  return spec, jax.tree_util.tree_map(jnp.asarray, params)


def spec_prefix(spec: ModelSpec) -> str:
  """The encoder's name prefix in the family's masked-LM checkpoints (``bert``, ``roberta``, ``model``)."""
  return spec.family.masked_lm.backbone_prefix


def _checkpoint_head(
  spec: ModelSpec, shapes: dict, state: dict, backbone: dict, kind: str, where: str
) -> tuple[dict | None, set[str]]:
  """The checkpoint's MLM head as ``kind`` asks (None: fresh), and the tensor names it took.

  ``untied_fresh`` takes nothing. ``tied`` and ``untied_pretrained`` take the checkpoint's head if it has one (all
  of it: part of a head is an error); ``untied_pretrained``'s own output matrix starts as a copy of the word
  embeddings, which is what the tied head computes with.
  """
  if kind == "untied_fresh":
    return None, set()
  flat = flax.traverse_util.flatten_dict(shapes)
  own_matrix = [p for p in flat if "decoder" in p and p[-1] == "kernel"]  # Only in an untied head.
  wanted = flax.traverse_util.unflatten_dict({p: v for p, v in flat.items() if p not in own_matrix})
  names = {weights.checkpoint_name(p) for p in flax.traverse_util.flatten_dict(wanted)}
  if not any(n in state for n in names):  # e.g. sentence-transformers checkpoints keep no MLM head.
    return None, set()
  head, _, used = weights.fill(wanted, state, where=f"{where} (masked-LM head)")
  head = flax.traverse_util.flatten_dict(head)
  embeddings = np.asarray(flax.traverse_util.flatten_dict(backbone)[_word_embeddings_path(backbone)])
  for p in own_matrix:
    head[p] = np.array(embeddings.T)  # [hidden, vocab], a copy: trained apart from the embeddings.
  return flax.traverse_util.unflatten_dict(head), used


def _word_embeddings_path(backbone: dict) -> tuple[str, ...]:
  paths = [
    p
    for p in flax.traverse_util.flatten_dict(backbone)
    if p[-1] == "embedding" and ("word_embeddings" in p or "tok_embeddings" in p)
  ]
  if len(paths) != 1:
    raise ValueError(f"cannot tell the word embeddings among {paths}")
  return paths[0]
