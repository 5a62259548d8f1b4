"""BERT's masked-language-model objective as pure functions: choosing tokens, and the loss on them.

Two maskings, each as its reference does it:

* ``mask_tokens``: every candidate token is chosen with probability
  ``probability`` (Hugging Face's ``DataCollatorForLanguageModeling``, which
  SimCSE's auxiliary ``do_mlm`` loss uses); the loss is computed at every
  position and counted at the chosen ones.
* ``mask_positions``: exactly ``round(probability * candidates)`` tokens per
  sequence, at most ``max_predictions`` (BERT's ``create_pretraining_data.py``),
  returned as positions, so the output layer runs only there
  (``models.mlm_logits_at``): the vocabulary projection, the largest matmul of
  a small BERT, shrinks by ``1 / probability``.

In both, a chosen token becomes [MASK] 80% of the time, a random token 10%,
and stays itself 10%; special tokens and padding are never chosen.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax


def mask_tokens(
  rng: jax.Array,
  ids: jax.Array,
  attention_mask: jax.Array,
  *,
  mask_token_id: int,
  vocab_size: int,
  special_ids: tuple[int, ...],
  probability: float,
) -> tuple[jax.Array, jax.Array]:
  """Bernoulli masking of ``[rows, len]`` ids: returns (masked ids, labels; -100 = not predicted).

  Each non-special, non-padding token is chosen with ``probability``; a chosen
  token becomes [MASK] 80% of the time, a random token 10%, and stays 10%.
  """
  k_choose, k_how, k_token = jax.random.split(rng, 3)
  special = jnp.isin(ids, jnp.asarray(special_ids)) | (attention_mask == 0)
  chosen = (jax.random.uniform(k_choose, ids.shape) < probability) & ~special
  how = jax.random.uniform(k_how, ids.shape)
  random_tokens = jax.random.randint(k_token, ids.shape, 0, vocab_size, dtype=ids.dtype)
  masked = jnp.where(chosen & (how < 0.8), mask_token_id, jnp.where(chosen & (how < 0.9), random_tokens, ids))
  return masked, jnp.where(chosen, ids, -100)


def masking_settings(tokenizer, vocab_size: int, probability: float) -> dict:
  """The keyword arguments ``mask_tokens`` and ``mask_positions`` take for a model's tokenizer and vocabulary."""
  return dict(
    mask_token_id=tokenizer.mask_token_id,
    vocab_size=vocab_size,
    special_ids=tuple(tokenizer.all_special_ids),
    probability=probability,
  )


def pretraining_predictions(config) -> int:
  """Predicted positions per row in masked-LM pretraining: ``config.mlm.max_predictions``, else BERT's share of
  ``config.data.max_seq_len`` (``max_predictions``)."""
  return config.mlm.max_predictions or max_predictions(config.data.max_seq_len, config.mlm.probability)


def max_predictions(max_seq_len: int, probability: float) -> int:
  """Prediction slots per sequence for ``mask_positions``: enough for a full sequence (BERT: 20 at 128, 15%)."""
  return max(1, math.ceil(probability * max_seq_len))


def mask_positions(
  rng: jax.Array,
  ids: jax.Array,
  attention_mask: jax.Array,
  *,
  mask_token_id: int,
  vocab_size: int,
  special_ids: tuple[int, ...],
  probability: float,
  num_predictions: int,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """BERT's pretraining masking of ``[rows, len]`` ids, as positions.

  Per sequence, ``n = min(num_predictions, max(1, round(probability * c)))``
  of its ``c`` candidate tokens (not special, not padding; ``n = 0`` when
  ``c = 0``) are chosen uniformly at random without replacement.

  Returns:
    ``(masked_ids [rows, len], positions [rows, P], labels [rows, P], weights [rows, P])`` with
    ``P = num_predictions``; slot ``j`` of a row is a prediction when ``weights[:, j] == 1`` (the first ``n``).
  """
  if num_predictions > ids.shape[1]:
    raise ValueError(f"num_predictions={num_predictions} exceeds the sequence length {ids.shape[1]}")
  k_order, k_how, k_token = jax.random.split(rng, 3)
  candidate = ~jnp.isin(ids, jnp.asarray(special_ids)) & (attention_mask != 0)
  count = candidate.sum(axis=1)
  n = jnp.minimum(num_predictions, jnp.maximum(1, jnp.round(probability * count))).astype(jnp.int32)
  n = jnp.minimum(n, count)
  # Candidates get a uniform score in [0, 1), the rest 2: the P lowest scores are a random order of the candidates
  # first, so the first n slots are a uniform sample of n candidates.
  score = jnp.where(candidate, jax.random.uniform(k_order, ids.shape), 2.0)
  _, positions = jax.lax.top_k(-score, num_predictions)
  weights = (jnp.arange(num_predictions)[None, :] < n[:, None]).astype(jnp.float32)
  labels = jnp.take_along_axis(ids, positions, axis=1)
  how = jax.random.uniform(k_how, positions.shape)
  random_tokens = jax.random.randint(k_token, positions.shape, 0, vocab_size, dtype=ids.dtype)
  replaced = jnp.where(how < 0.8, mask_token_id, jnp.where(how < 0.9, random_tokens, labels))
  replaced = jnp.where(weights > 0, replaced, labels)  # Unused slots write the token back unchanged.
  rows = jnp.arange(ids.shape[0])[:, None]
  return ids.at[rows, positions].set(replaced), positions, labels, weights


def cross_entropy_sums(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(sum of weighted cross-entropies, sum of weighted correct predictions)`` over ``[..., vocab]`` logits.

  Computed in at least float32 (a bfloat16 model's logits are upcast; a float64 model keeps float64).
  """
  logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
  weights = weights.astype(logits.dtype)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  correct = (jnp.argmax(logits, axis=-1) == labels).astype(logits.dtype)
  return jnp.sum(ce * weights), jnp.sum(correct * weights)
