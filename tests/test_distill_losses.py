"""The distillation losses and the spread-out regulariser (jaxcse.training.distill_losses) equal sentence-transformers
6.2's on the same embeddings and labels.

s-t's ``compute_loss_from_embeddings`` in torch float64 against ours under float64, loss and gradient w.r.t. every
embedding, over the settings s-t offers (distances, similarity functions, temperatures, label layouts, aggregation).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse.core import compat
from jaxcse.training import distill_losses
from tests import helpers


def _st_losses():
  return pytest.importorskip("sentence_transformers.sentence_transformer.losses")


def _similarity(name: str):
  util = pytest.importorskip("sentence_transformers.util")
  return {"dot": util.pairwise_dot_score, "cosine": util.pairwise_cos_sim}[name]


@pytest.mark.parametrize("distance", distill_losses.DISTANCES)
@pytest.mark.parametrize("columns,per_column", [(1, False), (3, False), (3, True)])
def test_embed_distill_equals_sentence_transformers(distance, columns, per_column):
  z = helpers.parity_embeddings(6, columns, seed=columns)
  teacher = np.random.default_rng(9).normal(size=(6, columns, 8) if per_column else (6, 8))
  theirs_loss = _st_losses().EmbedDistillLoss(None, distance_metric=distance)

  def theirs(embeddings, labels):  # Its forward's label layouts, without the model's forward.
    targets = [labels[:, c] for c in range(columns)] if per_column else [labels] * columns
    return theirs_loss.compute_loss_from_embeddings(embeddings, targets)

  ours = helpers.ours_value_and_grad(
    lambda e: distill_losses.embed_distill_loss(e, jnp.asarray(teacher), distance=distance), z
  )
  helpers.assert_parity(ours, helpers.st_value_and_grad(theirs, z, teacher))


def test_mse_loss_is_embed_distill_with_mse():
  z, teacher = helpers.parity_embeddings(5, 2, seed=1), helpers.parity_embeddings(5, 1, seed=2)[:, 0]
  mse = _st_losses().MSELoss(None)
  ours = helpers.ours_value_and_grad(
    lambda e: distill_losses.embed_distill_loss(e, jnp.asarray(teacher), distance="mse"), z
  )
  helpers.assert_parity(
    ours, helpers.st_value_and_grad(lambda e, t: mse.compute_loss_from_embeddings(e, [t, t]), z, teacher)
  )


@pytest.mark.parametrize("similarity", distill_losses.SIMILARITIES)
@pytest.mark.parametrize(
  "negatives,layout", [(1, "flat"), (1, "margins"), (1, "scores"), (3, "margins"), (3, "scores")]
)
def test_margin_mse_equals_sentence_transformers(similarity, negatives, layout):
  z = helpers.parity_embeddings(7, 2 + negatives, seed=negatives)
  rng = np.random.default_rng(4)
  labels = {
    "flat": rng.normal(size=7),
    "margins": rng.normal(size=(7, negatives)),
    "scores": rng.normal(size=(7, negatives + 1)),
  }[layout]
  theirs = _st_losses().MarginMSELoss(None, similarity_fct=_similarity(similarity))
  ours = helpers.ours_value_and_grad(
    lambda e: distill_losses.margin_mse_loss(e, jnp.asarray(labels), similarity=similarity), z
  )
  helpers.assert_parity(ours, helpers.st_value_and_grad(theirs.compute_loss_from_embeddings, z, labels))


def test_margin_mse_refuses_labels_of_another_shape():
  with pytest.raises(ValueError, match=r"labels must be \[4, 2\].*or \[4, 3\].*got \(4, 5\)"):
    distill_losses.margin_mse_loss(jnp.ones((4, 4, 3)), jnp.ones((4, 5)))


@pytest.mark.parametrize("similarity", distill_losses.SIMILARITIES)
@pytest.mark.parametrize(
  "temperatures", [(1.0, 1.0), (2.0, 0.5), (0.05, 1.0)], ids=["default", "two_temperatures", "sharp_student"]
)
@pytest.mark.parametrize("candidates", [2, 4])
def test_distill_kl_div_equals_sentence_transformers(similarity, temperatures, candidates):
  student_temperature, teacher_temperature = temperatures
  z = helpers.parity_embeddings(6, 1 + candidates, seed=candidates)
  labels = np.random.default_rng(5).normal(size=(6, candidates)) * 3
  theirs = _st_losses().DistillKLDivLoss(
    None,
    similarity_fct=_similarity(similarity),
    student_temperature=student_temperature,
    teacher_temperature=teacher_temperature,
  )
  ours = helpers.ours_value_and_grad(
    functools.partial(
      lambda e, **kw: distill_losses.distill_kl_div_loss(e, jnp.asarray(labels), **kw),
      similarity=similarity,
      student_temperature=student_temperature,
      teacher_temperature=teacher_temperature,
    ),
    z,
  )
  helpers.assert_parity(ours, helpers.st_value_and_grad(theirs.compute_loss_from_embeddings, z, labels))


def test_distill_kl_div_where_the_teacher_excludes_a_candidate():
  # A teacher score of -inf (a candidate left out on purpose, as s-t's check allows): probability 0, adding 0, and
  # the student's score of it still gets the gradient of its log-softmax's normaliser.
  z = helpers.parity_embeddings(4, 4, seed=6)
  labels = np.random.default_rng(7).normal(size=(4, 3))
  labels[1, 2] = -np.inf
  theirs = _st_losses().DistillKLDivLoss(None)
  ours = helpers.ours_value_and_grad(lambda e: distill_losses.distill_kl_div_loss(e, jnp.asarray(labels)), z)
  helpers.assert_parity(ours, helpers.st_value_and_grad(theirs.compute_loss_from_embeddings, z, labels))
  assert np.isfinite(ours[0])


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("aggregation", distill_losses.AGGREGATIONS)
@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.0, 2.5), (0.7, 0.0)])
@pytest.mark.parametrize("columns", [1, 3])
def test_global_orthogonal_regularization_equals_sentence_transformers(similarity, aggregation, weights, columns):
  util = pytest.importorskip("sentence_transformers.util")
  mean_weight, second_moment_weight = weights
  # dim 4, batch 6: random cosines' second moment (~1/4) crosses 1/dim in some columns, so both sides of the relu.
  z = helpers.parity_embeddings(6, columns, dim=4, seed=columns) + (0.5 if similarity == "cosine" else 0.0)
  theirs = _st_losses().GlobalOrthogonalRegularizationLoss(
    None,
    similarity_fct=util.cos_sim if similarity == "cosine" else util.dot_score,
    mean_weight=mean_weight,
    second_moment_weight=second_moment_weight,
    aggregation=aggregation,
  )

  def ours(e):
    terms = distill_losses.global_orthogonal_regularization(
      e,
      mean_weight=mean_weight,
      second_moment_weight=second_moment_weight,
      aggregation=aggregation,
      similarity=similarity,
    )
    return terms[0] + terms[1]

  helpers.assert_parity(
    helpers.ours_value_and_grad(ours, z), helpers.st_value_and_grad(theirs.compute_loss_from_embeddings, z, None)
  )


def test_global_orthogonal_regularization_is_zero_for_a_spread_out_batch():
  # An orthonormal batch: every off-diagonal cosine 0, so both terms are 0; a batch of one vector repeated: mean
  # term 1 (every cosine 1) and second-moment term 1 - 1/dim.
  with compat.enable_x64(True):
    eye = jnp.eye(4)[:, None, :]
    assert [float(t) for t in distill_losses.global_orthogonal_regularization(eye)] == [0.0, 0.0]
    same = jnp.ones((5, 1, 4))
    mean, second = distill_losses.global_orthogonal_regularization(same)
    np.testing.assert_allclose([float(mean), float(second)], [1.0, 0.75], rtol=1e-15)


@pytest.mark.parametrize(
  "call,message",
  [
    (lambda: distill_losses.embed_distill_loss(jnp.ones((2, 1, 4)), jnp.ones((2, 3))), "needs a projection"),
    (lambda: distill_losses.embed_distill_loss(jnp.ones((2, 1, 4)), jnp.ones((2, 4)), distance="dot"), "distance"),
    (lambda: distill_losses.distill_kl_div_loss(jnp.ones((2, 2, 4)), jnp.ones((2, 1))), "at least 2 candidates"),
    (lambda: distill_losses.distill_kl_div_loss(jnp.ones((2, 3, 4)), jnp.ones((2, 3))), r"labels must be \[2, 2\]"),
    (lambda: distill_losses.margin_mse_loss(jnp.ones((2, 2, 4)), jnp.ones(2)), "query, positive, negatives"),
    (lambda: distill_losses.global_orthogonal_regularization(jnp.ones((2, 1, 4)), aggregation="max"), "aggregation"),
  ],
)
def test_refusals_name_the_problem(call, message):
  with pytest.raises(ValueError, match=message):
    call()
