"""BERT, RoBERTa and XLM-RoBERTa in Flax (linen): one encoder, three ways of numbering positions.

The three families share one architecture (post-norm transformer encoder: embeddings + LayerNorm, then per layer
self-attention -> residual -> LayerNorm -> feed-forward -> residual -> LayerNorm, and BERT's NSP pooler on the
first token). They differ only in how positions are numbered (RoBERTa and XLM-R count from ``pad_token_id + 1``
over non-padding tokens and give padding ``pad_token_id``), in the number of token types, and in their masked-LM
heads (BERT's ``cls.predictions``, RoBERTa's ``lm_head``).

Module and parameter names are those of transformers' Flax classes (``FlaxBertModule`` and friends, removed from
transformers in 5.0), which are also PyTorch's module names: every jaxcse checkpoint and exported folder written
with those classes loads unchanged, and a PyTorch checkpoint maps by one rule (``weights.py``). The computation is
the same, operation for operation, including the dropout streams (each ``nn.Dropout`` and the attention-weights
dropout draw from the same module paths), so a run resumed with these modules continues as it would have.
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcse.models import attention
from jaxcse.models.common import BackboneOutput, Embed, activation

ROBERTA_TYPES = ("roberta", "xlm-roberta")


def default_position_ids(config: Any, input_ids: jax.Array) -> jax.Array:
  """BERT: ``0 .. len-1``. RoBERTa/XLM-R: ``pad + 1 + rank`` among non-padding tokens, ``pad`` at padding."""
  if config.model_type not in ROBERTA_TYPES:
    return jnp.broadcast_to(jnp.arange(input_ids.shape[-1]), input_ids.shape)
  pad = config.pad_token_id
  not_pad = (input_ids != pad).astype(jnp.int32)
  return jnp.cumsum(not_pad, axis=-1) * not_pad + pad


def positions_out_of_order(config: Any, input_ids: jax.Array, past: int) -> jax.Array:
  """RoBERTa's and XLM-R's positions (``default_position_ids``) of the tokens that are neither padding nor numbered
  ``pad + 1 + j`` at their column ``j``, ``past`` (an id past the table) for all others: in a right-padded batch,
  ``past`` everywhere."""
  pad = config.pad_token_id
  positions = default_position_ids(config, input_ids)
  in_order = positions == pad + 1 + jnp.arange(input_ids.shape[-1])
  return jnp.where((input_ids == pad) | in_order, past, positions)


def padding_aware_places(table: Embed, config: Any, input_ids: jax.Array) -> jax.Array:
  """RoBERTa's and XLM-R's positions (``default_position_ids``) looked up in ``table``, with a gradient that is
  mostly sums over the batch rather than a scatter.

  A token numbered ``pad + 1 + j`` at column ``j`` (every token of a right-padded sentence) takes row
  ``pad + 1 + j`` of a slice of the table broadcast, padding takes row ``pad`` broadcast; only the other tokens
  (those after a padding token inside a sentence: ``positions_out_of_order``) are gathered, the rest given an id
  past the table, which the gather's gradient drops. The values are the gather's; on a GPU no two tokens of a
  right-padded batch update an entry atomically (the padding row would take every padding token's update).
  """
  pad, length = config.pad_token_id, input_ids.shape[-1]
  if pad + 1 + length > table.num_embeddings:
    return table(default_position_ids(config, input_ids))
  padding = (input_ids == pad)[..., None]
  out_of_order = positions_out_of_order(config, input_ids, table.num_embeddings)
  in_order = ~padding & (out_of_order == table.num_embeddings)[..., None]
  return jnp.where(
    in_order,
    table.leading(input_ids.shape, pad + 1),
    jnp.where(padding, table.row(pad, input_ids.shape), table(out_of_order)),
  )


def _normal(config: Any):
  return nn.initializers.normal(config.initializer_range)


class BertEmbeddings(nn.Module):
  """Word + token type + position embeddings, LayerNorm, dropout.

  ``token_type_ids`` None: type 0 everywhere; ``positions`` None: the family's (``default_position_ids``). The tables
  are looked up in float32 and the rows cast to ``dtype`` (``common.Embed``): the default positions of BERT and the
  default token types with no gather at all, so that their gradients are sums over the batch, not scatter-adds;
  RoBERTa's default positions mostly so (``padding_aware_places``).
  """

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, input_ids, token_type_ids, positions, deterministic: bool):
    c = self.config

    def table(size: int, name: str) -> Embed:
      return Embed(size, c.hidden_size, embedding_init=_normal(c), dtype=self.dtype, name=name)

    words = table(c.vocab_size, "word_embeddings")(input_ids.astype("i4"))
    position_table = table(c.max_position_embeddings, "position_embeddings")
    if positions is not None:
      places = position_table(positions.astype("i4"))
    elif c.model_type in ROBERTA_TYPES:
      places = padding_aware_places(position_table, c, input_ids)
    else:
      places = position_table.leading(input_ids.shape)
    type_table = table(c.type_vocab_size, "token_type_embeddings")
    types = type_table.row(0, input_ids.shape) if token_type_ids is None else type_table.select(token_type_ids)
    hidden = nn.LayerNorm(epsilon=c.layer_norm_eps, dtype=self.dtype, name="LayerNorm")(words + types + places)
    return nn.Dropout(rate=c.hidden_dropout_prob, name="dropout")(hidden, deterministic=deterministic)


class BertSelfAttention(nn.Module):
  """Multi-head self-attention over the keys ``visible`` lets each query see (``attention.visible``)."""

  config: Any
  dtype: Any = jnp.float32
  # False: one attention-dropout mask per element, as PyTorch's BERT draws it; True: one per layer for the whole
  # batch and every head (flax's broadcast_dropout, as transformers' Flax BERT drew it; jaxcse's old default).
  shared_attention_dropout: bool = False

  @nn.compact
  def __call__(self, hidden, visible, deterministic: bool):
    c = self.config
    heads = c.num_attention_heads
    if c.hidden_size % heads:
      raise ValueError(f"hidden_size {c.hidden_size} is not a multiple of num_attention_heads {heads}")
    split = lambda x: x.reshape(x.shape[:2] + (heads, c.hidden_size // heads))  # noqa: E731  [b, len, heads, d]
    dense = lambda name: nn.Dense(c.hidden_size, dtype=self.dtype, kernel_init=_normal(c), name=name)  # noqa: E731
    projected = [dense(name)(hidden) for name in ("query", "key", "value")]  # All three, then the heads (the
    query, key, value = (split(x) for x in projected)  # order transformers' Flax BERT traced: the same program).
    rate = c.attention_probs_dropout_prob
    dropout = not deterministic and rate > 0.0
    out = attention.attend(
      query,
      key,
      value,
      visible,
      dtype=self.dtype,
      dropout_rate=rate,
      dropout_rng=self.make_rng("dropout") if dropout else None,
      shared_dropout=self.shared_attention_dropout,
    )
    return out.reshape(out.shape[:2] + (-1,))


class BertResidual(nn.Module):
  """Dense -> dropout -> LayerNorm(x + residual): the output of the attention block and of the feed-forward block."""

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, hidden, residual, deterministic: bool):
    c = self.config
    hidden = nn.Dense(c.hidden_size, kernel_init=_normal(c), dtype=self.dtype, name="dense")(hidden)
    hidden = nn.Dropout(rate=c.hidden_dropout_prob, name="dropout")(hidden, deterministic=deterministic)
    return nn.LayerNorm(epsilon=c.layer_norm_eps, dtype=self.dtype, name="LayerNorm")(hidden + residual)


class BertAttention(nn.Module):
  config: Any
  dtype: Any = jnp.float32
  shared_attention_dropout: bool = False

  @nn.compact
  def __call__(self, hidden, visible, deterministic: bool):
    attended = BertSelfAttention(self.config, self.dtype, self.shared_attention_dropout, name="self")(
      hidden, visible, deterministic
    )
    return BertResidual(self.config, self.dtype, name="output")(attended, hidden, deterministic)


class BertIntermediate(nn.Module):
  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, hidden):
    c = self.config
    return activation(c.hidden_act)(
      nn.Dense(c.intermediate_size, kernel_init=_normal(c), dtype=self.dtype, name="dense")(hidden)
    )


class BertLayer(nn.Module):
  config: Any
  dtype: Any = jnp.float32
  shared_attention_dropout: bool = False

  @nn.compact
  def __call__(self, hidden, visible, deterministic: bool):
    attended = BertAttention(self.config, self.dtype, self.shared_attention_dropout, name="attention")(
      hidden, visible, deterministic
    )
    expanded = BertIntermediate(self.config, self.dtype, name="intermediate")(attended)
    return BertResidual(self.config, self.dtype, name="output")(expanded, attended, deterministic)


class BertLayers(nn.Module):
  """The stack, as children named "0", "1", ... (transformers' ``encoder.layer.N``)."""

  config: Any
  dtype: Any = jnp.float32
  gradient_checkpointing: bool = False
  shared_attention_dropout: bool = False

  def setup(self):
    # Rematerialised layers keep their activations out of memory; `deterministic` (argument 3, self counted) is a
    # Python bool, static for the remat trace.
    layer = nn.remat(BertLayer, static_argnums=(3,)) if self.gradient_checkpointing else BertLayer
    self.layers = [
      layer(self.config, self.dtype, self.shared_attention_dropout, name=str(i))
      for i in range(self.config.num_hidden_layers)
    ]

  def __call__(self, hidden, visible, deterministic: bool, output_hidden_states: bool):
    states = [hidden] if output_hidden_states else None
    for layer in self.layers:
      hidden = layer(hidden, visible, deterministic)
      if output_hidden_states:
        states.append(hidden)
    return hidden, None if states is None else tuple(states)


class BertEncoder(nn.Module):
  config: Any
  dtype: Any = jnp.float32
  gradient_checkpointing: bool = False
  shared_attention_dropout: bool = False

  @nn.compact
  def __call__(self, hidden, visible, deterministic: bool, output_hidden_states: bool):
    return BertLayers(
      self.config, self.dtype, self.gradient_checkpointing, self.shared_attention_dropout, name="layer"
    )(hidden, visible, deterministic, output_hidden_states)


class BertPooler(nn.Module):
  """BERT's NSP pooler: Linear + tanh on each text's first token state (``[texts, hidden]`` in)."""

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, first_tokens):
    c = self.config
    return nn.tanh(nn.Dense(c.hidden_size, kernel_init=_normal(c), dtype=self.dtype, name="dense")(first_tokens))


def packed_position_ids(config: Any, segment_ids: jax.Array) -> jax.Array:
  """The family's positions of texts packed in rows (``attention.segment_positions``): BERT's ``0 .. len-1`` within
  each segment, 0 at padding; RoBERTa's and XLM-R's ``pad + 1 + j`` within each, ``pad`` at padding: each text
  numbered as if it had a row of its own."""
  within = attention.segment_positions(segment_ids)
  if config.model_type not in ROBERTA_TYPES:
    # Padding at 0: a row's padding can outrun the position table (a 128-token row of a 64-position model), and a
    # NaN row there would reach real tokens through their zero attention weights (0 * NaN).
    return jnp.where(segment_ids > 0, within, 0)
  pad = config.pad_token_id
  return jnp.where(segment_ids > 0, pad + 1 + within, pad)


class BertModel(nn.Module):
  """The encoder: ``(input_ids, attention_mask) -> BackboneOutput``. BERT, RoBERTa or XLM-R by ``config.model_type``.

  Packed rows (several texts in one row, ``packing``): ``segment_ids`` instead of a mask, each text attending only
  to itself and numbered from its own first token (``packed_position_ids``); ``first_tokens`` maps the last hidden
  states ``[rows, row_len, hidden]`` to each text's first token's ``[texts, hidden]``, which the NSP pooler reads
  (``packing.PackedTokens.first``; None: column 0 of every row).

  Attributes:
    config: a transformers config (``BertConfig``, ``RobertaConfig``, ``XLMRobertaConfig``): only its fields are read.
    dtype: the computation dtype; parameters stay float32.
    gradient_checkpointing: rematerialise each layer in the backward pass.
    add_pooling_layer: build the NSP pooler (``pooler_output``); masked-LM models have none.
    shared_attention_dropout: False (the default): one attention-dropout mask per element, as PyTorch's BERT draws
      it; True: one per layer for the whole batch and every head (flax's ``broadcast_dropout``, as transformers'
      Flax BERT drew it), which every jaxcse run trained with before ``model.attention_dropout_per_element``
      became True by default.
  """

  config: Any
  dtype: Any = jnp.float32
  gradient_checkpointing: bool = False
  add_pooling_layer: bool = True
  shared_attention_dropout: bool = False

  @nn.compact
  def __call__(
    self,
    input_ids,
    attention_mask,
    token_type_ids=None,
    position_ids=None,
    *,
    segment_ids=None,
    first_tokens=None,
    deterministic: bool = True,
    output_hidden_states: bool = False,
  ) -> BackboneOutput:
    if segment_ids is not None and position_ids is None:
      position_ids = packed_position_ids(self.config, segment_ids)
    hidden = BertEmbeddings(self.config, self.dtype, name="embeddings")(
      input_ids, token_type_ids, position_ids, deterministic
    )
    visible = attention.visible(attention_mask) if segment_ids is None else attention.visible(segment_ids=segment_ids)
    hidden, states = BertEncoder(
      self.config, self.dtype, self.gradient_checkpointing, self.shared_attention_dropout, name="encoder"
    )(hidden, visible, deterministic, output_hidden_states)
    pooled = None
    if self.add_pooling_layer:
      firsts = hidden[:, 0] if first_tokens is None else first_tokens(hidden)
      pooled = BertPooler(self.config, self.dtype, name="pooler")(firsts)
    return BackboneOutput(hidden, states, pooled)


# --------------------------------------------------------------------------
# Masked-LM heads.


def _project(hidden, word_embeddings, config, dtype, tied: bool, kernel_init):
  """The output projection to the vocabulary: the word embeddings (tied) or a ``decoder`` matrix of its own."""
  if tied:  # The same Dense computation on the transposed embedding table, with no parameter of its own.
    return nn.Dense(config.vocab_size, dtype=dtype, use_bias=False, parent=None).apply(
      {"params": {"kernel": word_embeddings.T}}, hidden
    )
  return nn.Dense(config.vocab_size, dtype=dtype, use_bias=False, kernel_init=kernel_init, name="decoder")(hidden)


class BertPredictionTransform(nn.Module):
  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, hidden):
    c = self.config
    # Flax's default init (lecun normal) here, as transformers' Flax head: only a fresh head's values depend on it.
    hidden = activation(c.hidden_act)(nn.Dense(c.hidden_size, dtype=self.dtype, name="dense")(hidden))
    return nn.LayerNorm(epsilon=c.layer_norm_eps, dtype=self.dtype, name="LayerNorm")(hidden)


class BertLMPredictionHead(nn.Module):
  """BERT's ``cls.predictions``: ``transform`` (dense, activation, LayerNorm), the projection, its ``bias``."""

  config: Any
  dtype: Any = jnp.float32
  tied: bool = True

  @nn.compact
  def __call__(self, hidden, word_embeddings):
    hidden = BertPredictionTransform(self.config, self.dtype, name="transform")(hidden)
    hidden = _project(hidden, word_embeddings, self.config, self.dtype, self.tied, nn.initializers.lecun_normal())
    return hidden + jnp.asarray(self.param("bias", nn.initializers.zeros, (self.config.vocab_size,)), self.dtype)


class BertOnlyMLMHead(nn.Module):
  config: Any
  dtype: Any = jnp.float32
  tied: bool = True

  @nn.compact
  def __call__(self, hidden, word_embeddings):
    return BertLMPredictionHead(self.config, self.dtype, self.tied, name="predictions")(hidden, word_embeddings)


class RobertaLMHead(nn.Module):
  """RoBERTa's (and XLM-R's) ``lm_head``: dense -> exact GELU -> ``layer_norm``, the projection, its ``bias``."""

  config: Any
  dtype: Any = jnp.float32
  tied: bool = True

  @nn.compact
  def __call__(self, hidden, word_embeddings):
    c = self.config
    hidden = nn.gelu(
      nn.Dense(c.hidden_size, dtype=self.dtype, kernel_init=_normal(c), name="dense")(hidden), approximate=False
    )  # GELU whatever config.hidden_act says, as transformers' RoBERTa head.
    hidden = nn.LayerNorm(epsilon=c.layer_norm_eps, dtype=self.dtype, name="layer_norm")(hidden)
    hidden = _project(hidden, word_embeddings, c, self.dtype, self.tied, _normal(c))
    return hidden + jnp.asarray(self.param("bias", nn.initializers.zeros, (c.vocab_size,)), self.dtype)


class BertForMaskedLM(nn.Module):
  """The encoder (without its NSP pooler) and a masked-LM head: vocabulary logits.

  ``backbone_prefix`` names the encoder's child (and its weights' prefix in a PyTorch checkpoint), ``head_name``
  the head's. ``tied``: the projection is the word embeddings (pretraining); untied, a matrix of its own
  (SimCSE's ``do_mlm`` head), so the MLM loss reaches the word embeddings only through the encoder.
  """

  config: Any
  dtype: Any = jnp.float32
  gradient_checkpointing: bool = False
  tied: bool = True
  shared_attention_dropout: bool = False  # As BertModel's.
  backbone_prefix: ClassVar[str] = "bert"
  head_name: ClassVar[str] = "cls"
  head: ClassVar[type[nn.Module]] = BertOnlyMLMHead

  @nn.compact
  def __call__(
    self,
    input_ids,
    attention_mask,
    token_type_ids=None,
    position_ids=None,
    positions=None,
    *,
    deterministic: bool = True,
  ) -> jax.Array:
    """Logits ``[batch, len, vocab]``; with ``positions`` ``[batch, predictions]``, only there (the output layer,
    the largest matmul of a small BERT, skips the ~85% of positions that are not predicted)."""
    backbone = BertModel(
      self.config,
      self.dtype,
      self.gradient_checkpointing,
      add_pooling_layer=False,
      shared_attention_dropout=self.shared_attention_dropout,
      name=self.backbone_prefix,
    )
    hidden = backbone(
      input_ids, attention_mask, token_type_ids, position_ids, deterministic=deterministic
    ).last_hidden_state
    if positions is not None:
      hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)  # [batch, predictions, hidden]
    word_embeddings = backbone.variables["params"]["embeddings"]["word_embeddings"]["embedding"]
    return self.head(self.config, self.dtype, self.tied, name=self.head_name)(hidden, word_embeddings)


class RobertaForMaskedLM(BertForMaskedLM):
  backbone_prefix: ClassVar[str] = "roberta"
  head_name: ClassVar[str] = "lm_head"
  head: ClassVar[type[nn.Module]] = RobertaLMHead
