"""The train step's masked-LM term (``objectives.Needs.token_loss``): BERT's pretraining, or SimCSE's auxiliary
loss; its targets (the whole batch masked once) and its sums over predicted tokens (what GradCache adds chunk by
chunk)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections

from jaxcse import models
from jaxcse.models import mlm
from jaxcse.training.views import flat_views


class MaskedPositions(NamedTuple):
  """Masked-LM pretraining's targets of some rows (``mlm.mask_positions``): predicted at the masked positions only."""

  masked: jax.Array  # [rows, len] ids, the masked positions replaced.
  mask: jax.Array  # [rows, len] attention mask.
  positions: jax.Array  # [rows, predictions] the masked positions.
  labels: jax.Array  # [rows, predictions] the original ids there.
  weights: jax.Array  # [rows, predictions] 1 for a real prediction, 0 for padding.


class MaskedViews(NamedTuple):
  """SimCSE's auxiliary masked-LM targets of some rows (``mlm.mask_tokens``): every position of every view.

  ``[rows, views, len]``, so that GradCache's chunks take whole examples.
  """

  masked: jax.Array  # Ids, the masked tokens replaced.
  mask: jax.Array  # Attention mask.
  labels: jax.Array  # The original id of a masked token, negative where nothing is predicted.


class TokenSums(NamedTuple):
  """The masked-LM term of some rows, summed over their predicted tokens (GradCache adds chunks' sums)."""

  cross_entropy: jax.Array
  correct: jax.Array  # Predictions equal to the label.


@dataclasses.dataclass(frozen=True)
class MaskedLMTerm:
  """The step's masked-LM term (``objectives.Needs.token_loss``): BERT's pretraining, or SimCSE's auxiliary loss.

  Pretraining predicts at the masked positions only (output layer there only), weight 1; SimCSE's auxiliary loss
  predicts at every position of every view, weight ``config.mlm.weight``. Either is the mean cross-entropy over
  the whole batch's predicted tokens.
  """

  spec: models.ModelSpec
  pretraining: bool  # Else auxiliary.
  masking: dict  # mlm.mask_positions / mlm.mask_tokens's settings.
  num_predictions: int | None  # Pretraining: predicted positions per row.
  weight: float  # Of the mean token cross-entropy in the step's loss.

  @classmethod
  def from_config(
    cls, config: ml_collections.ConfigDict, spec: models.ModelSpec, token_loss: str | None
  ) -> MaskedLMTerm | None:
    if token_loss is None:
      return None
    masking = mlm.masking_settings(spec.tokenizer, spec.hf_config.vocab_size, config.mlm.probability)
    if token_loss == "pretraining":
      return cls(spec, True, masking, mlm.pretraining_predictions(config), 1.0)
    return cls(spec, False, masking, None, config.mlm.weight)

  def targets(self, batch: dict, key: jax.Array) -> tuple[MaskedPositions | MaskedViews, jax.Array]:
    """The whole batch masked once (the same tokens whatever the chunking), and its number of predicted tokens
    (at least 1)."""
    if self.pretraining:
      ids, mask, _, _ = flat_views(batch, two_views=False)
      masked, positions, labels, weights = mlm.mask_positions(
        key, ids, mask, num_predictions=self.num_predictions, **self.masking
      )
      return MaskedPositions(masked, mask, positions, labels, weights), jnp.maximum(weights.sum(), 1)
    ids, mask, b, _ = flat_views(batch)
    masked, labels = mlm.mask_tokens(key, ids, mask, **self.masking)
    views = MaskedViews(*(x.reshape(b, -1, x.shape[-1]) for x in (masked, mask, labels)))
    return views, jnp.maximum((labels >= 0).sum(), 1)

  def sums(self, params, targets: MaskedPositions | MaskedViews, key: jax.Array) -> TokenSums:
    """The term over ``targets``' rows, with dropout ``key``."""
    if self.pretraining:
      logits = models.mlm_logits_at(
        self.spec, params, targets.masked, targets.mask, targets.positions, train=True, rng=key
      )
      return TokenSums(*mlm.cross_entropy_sums(logits, targets.labels, targets.weights))
    masked, mask, labels = (x.reshape(-1, x.shape[-1]) for x in targets)
    logits = models.mlm_logits(self.spec, params, masked, mask, train=True, rng=key)
    return TokenSums(*mlm.cross_entropy_sums(logits, jnp.where(labels >= 0, labels, 0), labels >= 0))
