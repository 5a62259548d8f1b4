"""A batch's views as encoder rows, and their embeddings: ``[batch, columns, len]`` ids in, ``[batch, views, hidden]``
out, in one forward pass (a one-column batch becomes SimCSE's two views, each with its own dropout mask)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcse import models


def flat_views(batch: dict, *, two_views: bool = True) -> tuple[jax.Array, jax.Array, int, int]:
  """``[batch * views, len]`` ids and mask; a one-column (unsupervised) batch becomes two views if ``two_views``."""
  ids, mask = batch["input_ids"], batch["attention_mask"]
  if ids.shape[1] == 1 and two_views:
    ids = jnp.repeat(ids, 2, axis=1)
    mask = jnp.repeat(mask, 2, axis=1)
  b, v, length = ids.shape
  # Rows of one example stay adjacent, so the reshape keeps the batch sharding.
  return ids.reshape(b * v, length), mask.reshape(b * v, length), b, v


def embed_views(
  module: models.PooledBackbone,
  params,
  batch: dict,
  rng: jax.Array,
  *,
  train: bool = True,
  same_dropout_mask: bool = False,
  two_views: bool = True,
) -> jax.Array:
  """Embeds every sentence of the batch in one forward pass, with dropout when ``train``.

  ``batch`` holds ``[batch, columns, len]`` arrays. A one-column batch
  (unsupervised) is duplicated into two views (with ``two_views``, the default),
  which get independent dropout masks because they are different rows of one
  forward pass (SimCSE's formulation). Returns ``[batch, views, hidden]``.

  ``same_dropout_mask`` (SimCSE's "fixed 0.1", one-column batches only): both
  views get one dropout mask. Two passes of the same sentence with the same mask
  compute the same vector, so the sentence is embedded once and the vector used
  for both views: the same values, and the same gradient (the sum of both
  views' contributions through the one computation), at half the cost.
  """
  if same_dropout_mask:
    if batch["input_ids"].shape[1] != 1:
      raise ValueError(
        f"augment.same_dropout_mask needs one sentence per example (its views are copies of it); "
        f"this batch has {batch['input_ids'].shape[1]} columns"
      )
    z = module.apply(
      {"params": params},
      batch["input_ids"][:, 0],
      batch["attention_mask"][:, 0],
      train=train,
      rngs={"dropout": rng} if train else {},
    )
    return jnp.stack([z, z], axis=1)
  ids, mask, b, v = flat_views(batch, two_views=two_views)
  z = module.apply({"params": params}, ids, mask, train=train, rngs={"dropout": rng} if train else {})
  return z.reshape(b, v, -1)
