"""What a sentence encoder is, apart from its weights: ``ModelSpec`` (backbone module, tokenizer, poolers, Hugging
Face config, optional masked-LM head), ``PoolerSpec`` and the Flax module that embeds (``PooledBackbone``).

``jaxcse.models`` builds and loads them (``build_spec``, ``load_pretrained``) and re-exports every name here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcse.models import families, packing, poolers

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


class PooledBackbone(nn.Module):
  """The Flax module: a transformer backbone followed by a pooler.

  Params are ``{"backbone": <encoder params>, "mlp": {"kernel", "bias"}}``; the
  ``mlp`` entry exists only for poolers with an MLP (``cls``).

  Attributes:
    backbone: an encoder of ``families`` (``bert.BertModel``, ``modernbert.ModernBertModel``).
    pooler: a name in ``poolers``.
    initializer_range: std of the MLP's normal init (BERT's init, as SimCSE).
    attend_padding: attend to the padding tokens too, as a model called without an attention mask on a batch
      padded to its longest sentence does (DCLR's released code); positions past the batch's longest sentence
      stay hidden, so the result does not depend on how far jaxcse padded. Pooling still uses the real mask.
  """

  backbone: nn.Module
  pooler: str = "cls"
  initializer_range: float = 0.02
  attend_padding: bool = False

  @nn.compact
  def __call__(
    self,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    *,
    train: bool = False,
    places: packing.Places | None = None,
  ) -> jax.Array:
    """``[batch, hidden]`` of a padded batch ``[batch, len]``; with ``places``, of the texts packed in
    ``input_ids`` ``[rows, row_len]`` whose segment ids ``attention_mask`` holds (``packing.Packed``):
    ``[texts, hidden]``, each text pooled from its own tokens as its padded row would be."""
    pooler = poolers.get(self.pooler)
    if places is not None:
      if self.attend_padding:
        raise ValueError("attend_padding reads the padding of a padded batch; a packed batch has none to read")
      outputs = self.backbone(
        input_ids,
        attention_mask > 0,
        segment_ids=attention_mask,
        first_tokens=packing.PackedTokens(places).first,
        deterministic=not train,
        output_hidden_states=pooler.needs_hidden_states,
      )
      pooled = poolers.pool(
        self.pooler,
        packing.PackedTokens(places),
        outputs.last_hidden_state,
        outputs.hidden_states,
        outputs.pooler_output,
      )
    else:
      attended = attention_mask
      if self.attend_padding:
        longest = jnp.max(jnp.sum(attention_mask, axis=-1))
        attended = jnp.broadcast_to(jnp.arange(input_ids.shape[-1]) < longest, input_ids.shape).astype(
          attention_mask.dtype
        )
      outputs = self.backbone(
        input_ids, attended, deterministic=not train, output_hidden_states=pooler.needs_hidden_states
      )
      pooled = poolers.pool(
        self.pooler, attention_mask, outputs.last_hidden_state, outputs.hidden_states, outputs.pooler_output
      )
    if pooler.has_mlp:  # SimCSE's MLP.
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

  ``module`` is the family's masked-LM module; its backbone params are the encoder's own (``params["backbone"]``)
  under ``prefix``, and its head params live in ``params["mlm_head"]``. ``tied``: the output projection is the
  input word embeddings (BERT's pretraining); untied, it is a matrix of its own (SimCSE's ``do_mlm`` head), so the
  MLM loss reaches the word embeddings only through the encoder.
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
    return PooledBackbone(
      backbone=self.backbone,
      pooler=pooler,
      initializer_range=getattr(self.hf_config, "initializer_range", 0.02),
      attend_padding=attend_padding,
    )

  @property
  def family(self) -> families.Family:
    return families.get(self.hf_config.model_type)

  @property
  def max_positions(self) -> int:
    return self.family.max_positions(self.hf_config)  # RoBERTa's table has pad_token_id + 1 unusable rows.

  @property
  def hidden_size(self) -> int:
    return self.hf_config.hidden_size

  def with_attention_dropout(self, per_element: bool) -> "ModelSpec":
    """The same model drawing its attention-dropout mask per element (PyTorch's) or, False, shared across the batch
    where its family can (``families.Family.shares_attention_dropout``); the same params."""
    options = self.family.attention_dropout_options(per_element)
    if not options:
      return self
    mlm = None if self.mlm is None else dataclasses.replace(self.mlm, module=self.mlm.module.clone(**options))
    return dataclasses.replace(self, backbone=self.backbone.clone(**options), mlm=mlm)

  def with_dtype(self, dtype: Any) -> "ModelSpec":
    """The same model computing in ``dtype`` (params keep their own dtype; Flax casts them per op)."""
    mlm = None if self.mlm is None else dataclasses.replace(self.mlm, module=self.mlm.module.clone(dtype=dtype))
    return dataclasses.replace(self, backbone=self.backbone.clone(dtype=dtype), mlm=mlm)


def _mlm_variables(spec: ModelSpec, params) -> dict:
  return {"params": {spec.mlm.prefix: params["backbone"], **params["mlm_head"]}}


def mlm_logits(
  spec: ModelSpec, params, input_ids: jax.Array, attention_mask: jax.Array, *, train: bool, rng: jax.Array | None = None
) -> jax.Array:
  """Vocabulary logits ``[batch, len, vocab]`` of the MLM head on the encoder's backbone, at every position."""
  return spec.mlm.module.apply(
    _mlm_variables(spec, params),
    input_ids,
    attention_mask,
    deterministic=not train,
    rngs={"dropout": rng} if train else {},
  )


def mlm_logits_at(
  spec: ModelSpec,
  params,
  input_ids: jax.Array,
  attention_mask: jax.Array,
  positions: jax.Array,
  *,
  train: bool,
  rng: jax.Array | None = None,
) -> jax.Array:
  """Vocabulary logits ``[batch, predictions, vocab]`` at ``positions`` ``[batch, predictions]`` only.

  Equal to ``mlm_logits`` gathered at ``positions``, without computing the
  output layer (hidden x vocab, the largest matmul of a small BERT) at the
  ~85% of positions that are not predicted.
  """
  return spec.mlm.module.apply(
    _mlm_variables(spec, params),
    input_ids,
    attention_mask,
    positions=positions,
    deterministic=not train,
    rngs={"dropout": rng} if train else {},
  )
