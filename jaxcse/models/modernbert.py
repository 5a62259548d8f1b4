"""ModernBERT (Warner et al., 2024) as Flax linen modules, numerically equal to transformers' PyTorch ModernBERT.

ModernBERT is a BERT-style bidirectional encoder with the architecture of recent decoder LLMs:

* rotary position embeddings (no position table), with a different theta for global and local layers;
* attention alternating between global layers (every token sees every token) and local layers (a token sees the
  tokens at distance <= local_attention // 2): ``config.layer_types``, by default global every third layer from 0;
* a GeGLU feed-forward block (``Wi`` projects to twice the intermediate size: an input half and a gate half);
* pre-norm residual blocks and a final LayerNorm; no biases in linear layers and LayerNorms by default.

Only the fields of a transformers ``ModernBertConfig`` are read; no transformers model class is used. Parameter
names mirror PyTorch's module names (``embeddings/tok_embeddings``, ``layers/0/attn/Wqkv``, ``final_norm``, ...),
so that a PyTorch name is the Flax path joined by "." with the leaf renamed (``kernel`` -> ``weight``,
transposed; ``embedding`` -> ``weight``; LayerNorm ``scale`` -> ``weight``).

Initialisation mirrors transformers': normals truncated at ``initializer_cutoff_factor`` standard deviations, std
``initializer_range`` for the input projections and embeddings and ``initializer_range / sqrt(2 * layers)`` for
the output projections, the head's dense layer and the untied decoder; LayerNorm weights one, biases zero.
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcse.models import attention
from jaxcse.models.common import BackboneOutput, Embed, activation


def _init(config, std: float) -> Callable:
  cutoff = config.initializer_cutoff_factor if config.initializer_cutoff_factor is not None else 3.0
  return nn.initializers.truncated_normal(std, lower=-cutoff, upper=cutoff)


def _stds(config) -> tuple[float, float]:
  """transformers' init stds: ``in`` (input projections, embeddings) and ``out`` (output projections, head)."""
  return config.initializer_range, config.initializer_range / math.sqrt(2.0 * config.num_hidden_layers)


def _layer_norm(config, dtype, name: str) -> nn.LayerNorm:
  # Two-pass variance, as PyTorch's: the fast E[x^2] - E[x]^2 loses digits to cancellation.
  return nn.LayerNorm(
    epsilon=config.norm_eps, use_bias=config.norm_bias, use_fast_variance=False, dtype=dtype, name=name
  )


def rotary_tables(position_ids: jax.Array, theta: float, head_dim: int, dtype: Any) -> tuple[jax.Array, jax.Array]:
  """cos and sin ``[batch or 1, len, head_dim]`` of the rotary angles ``position * theta^(-2i / head_dim)``.

  Computed in float32 (in float64 when ``dtype`` is float64) and then cast to ``dtype``, as transformers computes
  them in float32 and casts them to the hidden states' dtype: bfloat16 rounds the tables, not the angles. (In a
  ``.double()`` PyTorch model transformers still computes them, and rotates q and k, in float32; we do not mirror
  that downgrade.) PyTorch's and XLA's float32 cos and sin can differ by an ulp.
  """
  compute = jnp.promote_types(dtype, jnp.float32)
  inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=compute) / head_dim))
  angles = position_ids[..., None].astype(compute) * inv_freq
  angles = jnp.concatenate([angles, angles], axis=-1)  # Frequency i drives dims i and i + head_dim / 2.
  return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def apply_rotary(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotates ``x`` ``[batch, len, heads, head_dim]``: dims i and i + head_dim / 2 form a pair rotated by the angle.

  The rotation is computed in at least float32 (transformers upcasts q and k for it) and cast back.
  """
  xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  first, second = jnp.split(xf, 2, axis=-1)
  rotated = jnp.concatenate([-second, first], axis=-1)
  cos, sin = cos[:, :, None, :], sin[:, :, None, :]  # Broadcast over heads.
  return (xf * cos + rotated * sin).astype(x.dtype)


class ModernBertEmbeddings(nn.Module):
  """Token embeddings, LayerNorm, dropout: no position or token type embeddings (positions are rotary)."""

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, input_ids: jax.Array, deterministic: bool) -> jax.Array:
    c = self.config
    x = Embed(  # Looked up in float32, the rows cast: a float32 gradient (common.Embed).
      c.vocab_size, c.hidden_size, dtype=self.dtype, embedding_init=_init(c, _stds(c)[0]), name="tok_embeddings"
    )(input_ids)
    x = _layer_norm(c, self.dtype, "norm")(x)
    return nn.Dropout(c.embedding_dropout, name="dropout")(x, deterministic=deterministic)


class ModernBertAttention(nn.Module):
  """Multi-head self-attention with rotary q and k; the mask says which keys each query sees."""

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, cos: jax.Array, sin: jax.Array, deterministic: bool) -> jax.Array:
    c = self.config
    std_in, std_out = _stds(c)
    batch, length, hidden = x.shape
    heads = c.num_attention_heads
    head_dim = hidden // heads
    qkv = nn.Dense(3 * hidden, use_bias=c.attention_bias, dtype=self.dtype, kernel_init=_init(c, std_in), name="Wqkv")(
      x
    )
    # Wqkv's output is [q | k | v], each [heads, head_dim].
    q, k, v = jnp.unstack(qkv.reshape(batch, length, 3, heads, head_dim), axis=2)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    dropout = c.attention_dropout > 0 and not deterministic
    out = attention.attend(
      q,
      k,
      v,
      mask,
      dtype=self.dtype,
      dropout_rate=c.attention_dropout,
      dropout_rng=self.make_rng("dropout") if dropout else None,
    )
    out = nn.Dense(hidden, use_bias=c.attention_bias, dtype=self.dtype, kernel_init=_init(c, std_out), name="Wo")(
      out.reshape(batch, length, hidden)
    )
    # transformers applies attention_dropout twice: to the probabilities and to the output projection.
    return nn.Dropout(c.attention_dropout, name="output_dropout")(out, deterministic=deterministic)


class ModernBertMLP(nn.Module):
  """GeGLU: ``Wo(act(input) * gate)`` where ``Wi(x) = [input | gate]`` (the first half goes through the activation)."""

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
    c = self.config
    std_in, std_out = _stds(c)
    h = nn.Dense(
      2 * c.intermediate_size, use_bias=c.mlp_bias, dtype=self.dtype, kernel_init=_init(c, std_in), name="Wi"
    )(x)
    inputs, gate = jnp.split(h, 2, axis=-1)
    h = nn.Dropout(c.mlp_dropout, name="dropout")(
      activation(c.hidden_activation)(inputs) * gate, deterministic=deterministic
    )
    return nn.Dense(c.hidden_size, use_bias=c.mlp_bias, dtype=self.dtype, kernel_init=_init(c, std_out), name="Wo")(h)


class ModernBertEncoderLayer(nn.Module):
  """Pre-norm block: ``x + attn(attn_norm(x))`` then ``x + mlp(mlp_norm(x))``.

  Layer 0 has no ``attn_norm`` (PyTorch: an Identity, no weights): the embeddings end with a LayerNorm already.
  """

  config: Any
  layer_id: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, cos: jax.Array, sin: jax.Array, deterministic: bool) -> jax.Array:
    normed = x if self.layer_id == 0 else _layer_norm(self.config, self.dtype, "attn_norm")(x)
    x = x + ModernBertAttention(self.config, self.dtype, name="attn")(normed, mask, cos, sin, deterministic)
    normed = _layer_norm(self.config, self.dtype, "mlp_norm")(x)
    return x + ModernBertMLP(self.config, self.dtype, name="mlp")(normed, deterministic)


class _Layers(nn.Module):
  """The encoder layers, named ``0``, ``1``, ... under ``layers`` as PyTorch's ModuleList (``layers.0.attn...``)."""

  config: Any
  dtype: Any = jnp.float32
  gradient_checkpointing: bool = False

  @nn.compact
  def __call__(self, x, masks: dict, rotary: dict, deterministic: bool) -> tuple[jax.Array, list[jax.Array]]:
    layer_cls = ModernBertEncoderLayer
    if self.gradient_checkpointing:  # Arguments count self: (self, x, mask, cos, sin, deterministic).
      layer_cls = nn.remat(ModernBertEncoderLayer, static_argnums=(5,))
    outputs = []
    for i, layer_type in enumerate(self.config.layer_types):
      x = layer_cls(self.config, i, self.dtype, name=str(i))(x, masks[layer_type], *rotary[layer_type], deterministic)
      outputs.append(x)
    return x, outputs


def _rope_theta(config, layer_type: str) -> float:
  params = config.rope_parameters[layer_type]
  if params.get("rope_type", "default") != "default":
    raise ValueError(f"ModernBERT: only the default rotary embedding is implemented, not {params['rope_type']!r}")
  return params["rope_theta"]


class ModernBertModel(nn.Module):
  """The ModernBERT encoder: ``last_hidden_state`` is after ``final_norm``, as transformers'.

  Attributes:
    config: a transformers ``ModernBertConfig`` (only its fields are read).
    dtype: the computation dtype; params stay float32.
    gradient_checkpointing: rematerialise each layer in the backward pass.
    add_pooling_layer: accepted for the interface shared with BERT; ModernBERT has no pooler layer, so
      ``pooler_output`` is always None (and ``first_tokens``, BERT's pooler's places, is not read).

  Packed rows (``packing``): ``segment_ids`` instead of a mask; each text attends to itself only (its local window
  within itself) and is rotated from its own first token (``attention.segment_positions``).
  """

  config: Any
  dtype: Any = jnp.float32
  gradient_checkpointing: bool = False
  add_pooling_layer: bool = False

  @nn.compact
  def __call__(
    self,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    token_type_ids: jax.Array | None = None,
    position_ids: jax.Array | None = None,
    *,
    segment_ids: jax.Array | None = None,
    first_tokens=None,
    deterministic: bool = True,
    output_hidden_states: bool = False,
  ) -> BackboneOutput:
    del token_type_ids, first_tokens  # ModernBERT has no token types and no pooler layer.
    c = self.config
    length = input_ids.shape[-1]
    if position_ids is None:  # Packed rows: each text rotated from its own first token.
      position_ids = jnp.arange(length)[None, :] if segment_ids is None else attention.segment_positions(segment_ids)
    x = ModernBertEmbeddings(c, self.dtype, name="embeddings")(input_ids, deterministic)

    # Boolean masks [batch, 1, query or 1, key]: a query sees the real keys of its row (or, packed, of its own
    # segment), within the window in local layers. Padding queries are not masked (their outputs are meaningless
    # and never reach a real token); a padding query farther than the window from every real token sees no key at
    # all; its attention is then uniform over all keys, finite, as in transformers' eager attention (its SDPA path
    # gives other values there).
    seen = {"attention_mask": attention_mask} if segment_ids is None else {"segment_ids": segment_ids}
    masks = {
      "full_attention": attention.visible(**seen),
      "sliding_attention": attention.visible(**seen, window=c.local_attention // 2),
    }

    head_dim = c.hidden_size // c.num_attention_heads
    rotary = {t: rotary_tables(position_ids, _rope_theta(c, t), head_dim, self.dtype) for t in set(c.layer_types)}
    embedded = x
    x, layer_outputs = _Layers(c, self.dtype, self.gradient_checkpointing, name="layers")(
      x, masks, rotary, deterministic
    )
    last = _layer_norm(c, self.dtype, "final_norm")(x)
    hidden_states = None
    if output_hidden_states:
      # As transformers 5 returns them: the embedding output, then each layer's output, except that the last
      # entry is last_hidden_state (after final_norm): the final layer's raw output is not returned at all.
      hidden_states = (embedded, *layer_outputs[:-1], last)
    return BackboneOutput(last_hidden_state=last, hidden_states=hidden_states)


class ModernBertPredictionHead(nn.Module):
  """The MLM head's transform: dense, activation, LayerNorm (``head.dense``, ``head.norm``)."""

  config: Any
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    c = self.config
    x = nn.Dense(
      c.hidden_size, use_bias=c.classifier_bias, dtype=self.dtype, kernel_init=_init(c, _stds(c)[1]), name="dense"
    )(x)
    return _layer_norm(c, self.dtype, "norm")(activation(c.classifier_activation)(x))


class _Decoder(nn.Module):
  """The output layer ``decoder``: the word embeddings (tied) or a kernel of its own, plus a bias."""

  config: Any
  tied: bool
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, word_embeddings: jax.Array) -> jax.Array:
    c = self.config
    if self.tied:
      kernel = word_embeddings.T  # [hidden, vocab]
    else:
      kernel = self.param("kernel", _init(c, _stds(c)[1]), (c.hidden_size, c.vocab_size))
    logits = x @ kernel.astype(self.dtype)
    if c.decoder_bias:
      logits = logits + self.param("bias", nn.initializers.zeros, (c.vocab_size,)).astype(self.dtype)
    return logits


class ModernBertForMaskedLM(nn.Module):
  """ModernBERT with its masked-language-model head: vocabulary logits.

  Params: ``{"model": <ModernBertModel>, "head": {"dense", "norm"}, "decoder": {"bias"[, "kernel"]}}``, as
  transformers' ``model.*``, ``head.*``, ``decoder.*``. With ``positions`` ``[batch, predictions]``, only the
  hidden states at those positions go through the head: ``[batch, predictions, vocab]``.

  Attributes:
    tied: the decoder's matrix is the word embeddings (transformers' default); False: a kernel of its own.
  """

  config: Any
  dtype: Any = jnp.float32
  gradient_checkpointing: bool = False
  tied: bool = True
  backbone_prefix: ClassVar[str] = "model"

  @nn.compact
  def __call__(
    self,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    token_type_ids: jax.Array | None = None,
    position_ids: jax.Array | None = None,
    positions: jax.Array | None = None,
    *,
    deterministic: bool = True,
  ) -> jax.Array:
    backbone = ModernBertModel(self.config, self.dtype, self.gradient_checkpointing, name=self.backbone_prefix)
    hidden = backbone(
      input_ids, attention_mask, token_type_ids, position_ids, deterministic=deterministic
    ).last_hidden_state
    if positions is not None:
      hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)  # [batch, predictions, hidden]
    hidden = ModernBertPredictionHead(self.config, self.dtype, name="head")(hidden)
    word_embeddings = backbone.variables["params"]["embeddings"]["tok_embeddings"]["embedding"]
    return _Decoder(self.config, self.tied, self.dtype, name="decoder")(hidden, word_embeddings)
