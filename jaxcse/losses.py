"""Contrastive losses on pooled sentence embeddings, as pure functions.

Every loss takes embeddings of the global batch (``[batch, dim]``) and returns
a scalar. Written on the global batch, they need nothing special for data
parallelism: under ``jax.jit`` with a batch-sharded input the compiler gathers
the in-batch negatives across devices and routes the gradients back.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

# torch.nn.CosineSimilarity clamps each norm at this value; so do we, so that a
# zero vector gives similarity 0 instead of NaN, exactly as in the reference code.
_COSINE_EPS = 1e-8


def cosine_similarity_matrix(a: jax.Array, b: jax.Array) -> jax.Array:
  """Pairwise cosine similarities.

  Args:
    a: ``[n, dim]``.
    b: ``[m, dim]``.

  Returns:
    ``[n, m]`` with ``out[i, j] = cos(a[i], b[j])``.
  """
  return _unit_rows(a) @ _unit_rows(b).T


def _unit_rows(x: jax.Array) -> jax.Array:
  # max(|x|, eps) written on the squared norm: the same values, and a finite (zero) gradient at x = 0,
  # where the gradient of jnp.linalg.norm is NaN.
  return x * jax.lax.rsqrt(jnp.maximum(jnp.sum(x * x, axis=-1, keepdims=True), _COSINE_EPS**2))


def simcse_loss(
    z1: jax.Array,
    z2: jax.Array,
    hard_negatives: jax.Array | None = None,
    *,
    temperature: float = 0.05,
    hard_negative_weight: float = 0.0,
) -> jax.Array:
  """SimCSE's InfoNCE loss with in-batch negatives (Gao et al., 2021).

  Row ``i`` of ``z1`` is scored against every row of ``z2`` (and, in the
  supervised variant, every row of ``hard_negatives``); the positive is
  ``z2[i]``. Unsupervised SimCSE passes the same sentences twice through the
  encoder with independent dropout masks to get ``z1`` and ``z2``; supervised
  SimCSE passes (premise, entailment) and the contradictions as hard negatives.

  Args:
    z1: anchors, ``[batch, dim]``.
    z2: positives, ``[batch, dim]``; ``z2[i]`` is the positive of ``z1[i]``.
    hard_negatives: optional ``[batch, dim]``; appended as ``batch`` extra
      columns of the logits (``[batch, 2 * batch]``), as in the official code.
    temperature: the softmax temperature tau (0.05 in the paper).
    hard_negative_weight: a log-weight added to logit ``(i, batch + i)``, the
      anchor's own hard negative (the official ``hard_negative_weight``; 0 in
      the paper).

  Returns:
    The mean cross-entropy over the ``batch`` rows, a scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.eye(2)
    >>> round(float(simcse_loss(z, z, temperature=1.0)), 4)  # log(1 + e^-1)
    0.3133

  References:
    Gao, Yao and Chen. SimCSE: Simple Contrastive Learning of Sentence
    Embeddings. EMNLP 2021. https://arxiv.org/abs/2104.08821
  """
  if z1.ndim != 2 or z1.shape != z2.shape:
    raise ValueError(f"z1 and z2 must both be [batch, dim]; got {z1.shape} and {z2.shape}")
  logits = cosine_similarity_matrix(z1, z2) / temperature
  if hard_negatives is not None:
    if hard_negatives.shape != z1.shape:
      raise ValueError(f"hard_negatives must be {z1.shape}; got {hard_negatives.shape}")
    hard_logits = cosine_similarity_matrix(z1, hard_negatives) / temperature
    hard_logits = hard_logits + hard_negative_weight * jnp.eye(z1.shape[0], dtype=hard_logits.dtype)
    logits = jnp.concatenate([logits, hard_logits], axis=1)
  labels = jnp.arange(z1.shape[0])
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
