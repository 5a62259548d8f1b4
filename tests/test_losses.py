"""Tests for jaxcse.training.losses: golden values from an independent numpy SimCSE loss, gradients, invariances."""

from __future__ import annotations

import doctest
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import test_util

import jaxcse.training.dclr_losses
import jaxcse.training.losses
from jaxcse.core import compat
from jaxcse.training.losses import cosine_similarity_matrix, simcse_loss
from tests.helpers import random_normal


def _np_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """cos(a_i, b_j) in float64, norms clamped at 1e-8 as torch.nn.CosineSimilarity does."""
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-8)
  b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-8)
  return a @ b.T


def np_simcse_loss(z1, z2, z3=None, temperature=0.05, hard_negative_weight=0.0) -> float:
  """SimCSE's loss written from the paper's formula and the official code, in float64 numpy."""
  logits = _np_cosine(z1, z2) / temperature
  if z3 is not None:
    hard = _np_cosine(z1, z3) / temperature
    # The official code adds the weight after the temperature, to the anchor's own hard negative only.
    hard = hard + hard_negative_weight * np.eye(len(z1))
    logits = np.concatenate([logits, hard], axis=1)
  m = logits.max(axis=1, keepdims=True)
  log_z = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))[:, 0]
  positives = logits[np.arange(len(z1)), np.arange(len(z1))]
  return float(np.mean(log_z - positives))


# Compiled once per shape; eager dispatch compiles every primitive per shape, which is ~10x slower here.
# test_jit_matches_eager checks that the eager function agrees.
_loss = jax.jit(simcse_loss)


# ------------------------------------------------------------------------
# Golden values.


@pytest.mark.parametrize("batch,dim", [(1, 3), (2, 5), (8, 16), (33, 7)])
@pytest.mark.parametrize("temperature", [0.05, 0.1, 1.0])
def test_matches_numpy_reference_unsupervised(batch, dim, temperature):
  z1, z2 = random_normal(batch * 100 + dim, batch, dim), random_normal(batch * 100 + dim + 1, batch, dim)
  got = float(_loss(jnp.asarray(z1), jnp.asarray(z2), temperature=temperature))
  np.testing.assert_allclose(got, np_simcse_loss(z1, z2, temperature=temperature), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch,dim", [(1, 3), (4, 8), (16, 32)])
@pytest.mark.parametrize("temperature", [0.05, 0.5])
@pytest.mark.parametrize("weight", [0.0, 1.0, -2.5])
def test_matches_numpy_reference_with_hard_negatives(batch, dim, temperature, weight):
  z1, z2, z3 = (random_normal(batch + dim + k, batch, dim) for k in range(3))
  got = float(
    _loss(jnp.asarray(z1), jnp.asarray(z2), jnp.asarray(z3), temperature=temperature, hard_negative_weight=weight)
  )
  want = np_simcse_loss(z1, z2, z3, temperature=temperature, hard_negative_weight=weight)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_hard_negative_weight_changes_loss():
  # Guards against the weight being ignored (the golden test alone would pass if both sides ignored it).
  z1, z2, z3 = (jnp.asarray(random_normal(k, 4, 8)) for k in range(3))
  base = _loss(z1, z2, z3, temperature=0.1)
  assert float(_loss(z1, z2, z3, temperature=0.1, hard_negative_weight=1.0)) > float(base) + 1e-3
  assert float(_loss(z1, z2, z3, temperature=0.1, hard_negative_weight=-1.0)) < float(base) - 1e-3


def test_orthonormal_by_hand():
  # z1 = z2 = I_4, tau = 1: row i has logit 1 for its positive and 0 for the 3 others, so
  # loss = -log(e / (e + 3)) = log(1 + 3/e) = log(2.1036383...) = 0.7436683...
  z = jnp.eye(4)
  assert float(_loss(z, z, temperature=1.0)) == pytest.approx(math.log(1 + 3 / math.e), rel=1e-6)


def test_orthonormal_with_hard_negatives_by_hand():
  # z1 = z2 = I_3, hard negatives -I_3, tau = 1, weight 2. Row i: positive 1; 2 in-batch negatives at 0;
  # own hard negative -1 + 2 = 1; 2 other hard negatives at 0. So
  # loss = -log(e / (e + 4 + e)) = log(2 + 4/e) = log(3.4715178...) = 1.2445919...
  z = jnp.eye(3)
  got = float(_loss(z, z, -z, temperature=1.0, hard_negative_weight=2.0))
  assert got == pytest.approx(math.log(2 + 4 / math.e), rel=1e-6)


def test_cosine_similarity_matrix_rectangular():
  a, b = random_normal(0, 3, 6), random_normal(1, 5, 6)
  got = np.asarray(cosine_similarity_matrix(jnp.asarray(a), jnp.asarray(b)))
  assert got.shape == (3, 5)
  np.testing.assert_allclose(got, _np_cosine(a, b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module", [jaxcse.training.losses, jaxcse.training.dclr_losses], ids=lambda m: m.__name__)
def test_doctest(module):
  result = doctest.testmod(module)
  assert result.attempted >= 1
  assert result.failed == 0


# ------------------------------------------------------------------------
# Gradients and compilation.


def test_grads_unsupervised():
  # float64 only inside this test: finite differences in float32 are too noisy.
  with compat.enable_x64(True):
    z1, z2 = jnp.asarray(random_normal(0, 4, 5), jnp.float64), jnp.asarray(random_normal(1, 4, 5), jnp.float64)
    test_util.check_grads(jax.jit(lambda a, b: simcse_loss(a, b, temperature=0.1)), (z1, z2), order=1, modes=["rev"])


def test_grads_with_hard_negatives():
  with compat.enable_x64(True):
    z1, z2, z3 = (jnp.asarray(random_normal(k, 3, 4), jnp.float64) for k in range(3))
    f = jax.jit(lambda a, b, c: simcse_loss(a, b, c, temperature=0.2, hard_negative_weight=0.7))
    test_util.check_grads(f, (z1, z2, z3), order=2, modes=["rev"])


@pytest.mark.parametrize("hard", [False, True])
def test_jit_matches_eager(hard):
  z1, z2, z3 = (jnp.asarray(random_normal(k, 6, 10)) for k in range(3))
  h = z3 if hard else None
  eager = simcse_loss(z1, z2, h, temperature=0.05, hard_negative_weight=0.3)
  jitted = jax.jit(lambda a, b, c: simcse_loss(a, b, c, temperature=0.05, hard_negative_weight=0.3))(z1, z2, h)
  np.testing.assert_allclose(float(jitted), float(eager), rtol=1e-6)
  # Traced temperature and weight (as under a learning-rate-style schedule) must work too.
  traced = jax.jit(lambda t, w: simcse_loss(z1, z2, h, temperature=t, hard_negative_weight=w))(0.05, 0.3)
  np.testing.assert_allclose(float(traced), float(eager), rtol=1e-6)


# ------------------------------------------------------------------------
# Invariances and properties.


@pytest.mark.parametrize("hard", [False, True])
def test_row_permutation_invariance(hard):
  z1, z3 = jnp.asarray(random_normal(0, 8, 12)), jnp.asarray(random_normal(2, 8, 12))
  z2 = z1 + 0.3 * jnp.asarray(random_normal(1, 8, 12))
  h = z3 if hard else None
  perm = np.random.default_rng(3).permutation(8)
  base = float(_loss(z1, z2, h, temperature=0.05, hard_negative_weight=0.5))
  permuted = float(
    _loss(z1[perm], z2[perm], None if h is None else h[perm], temperature=0.05, hard_negative_weight=0.5)
  )
  np.testing.assert_allclose(permuted, base, rtol=1e-5)
  # Permuting only the positives breaks the pairing: a very different loss.
  shuffled = float(_loss(z1, z2[perm], h, temperature=0.05, hard_negative_weight=0.5))
  assert abs(shuffled - base) > 1.0


def test_scale_invariance():
  z1, z2, z3 = (jnp.asarray(random_normal(k, 5, 9)) for k in range(3))
  scales = jnp.asarray(np.random.default_rng(7).uniform(0.01, 100.0, size=(5, 1)), jnp.float32)
  base = float(_loss(z1, z2, z3, temperature=0.05, hard_negative_weight=0.2))
  scaled = float(_loss(z1 * scales, z2 * scales[::-1], z3 * 3.0, temperature=0.05, hard_negative_weight=0.2))
  np.testing.assert_allclose(scaled, base, rtol=1e-5)


def test_zero_vector_gives_finite_loss():
  z1 = jnp.asarray(random_normal(0, 4, 6)).at[0].set(0.0)
  z2 = jnp.asarray(random_normal(1, 4, 6))
  loss = float(_loss(z1, z2, temperature=0.05))
  assert math.isfinite(loss)
  # The zero row has all-zero logits, so it contributes exactly log(batch); the clamp matches the reference.
  np.testing.assert_allclose(loss, np_simcse_loss(np.asarray(z1), np.asarray(z2), temperature=0.05), rtol=1e-5)
  np.testing.assert_allclose(float(_loss(jnp.zeros((4, 6)), z2)), math.log(4), rtol=1e-6)


def test_zero_vector_gives_finite_gradient():
  z1 = jnp.asarray(random_normal(0, 4, 6)).at[0].set(0.0)
  z2 = jnp.asarray(random_normal(1, 4, 6))
  grad = jax.jit(jax.grad(simcse_loss))(z1, z2)
  assert bool(jnp.all(jnp.isfinite(grad)))


def test_lower_temperature_sharpens_separated_positives():
  z1 = jnp.asarray(random_normal(0, 8, 32))
  z2 = z1 + 0.1 * jnp.asarray(random_normal(1, 8, 32))
  cos = np.asarray(cosine_similarity_matrix(z1, z2))
  # Precondition: every anchor's positive is its most similar candidate, by a margin.
  off_diagonal = cos[~np.eye(8, dtype=bool)].reshape(8, 7)
  assert np.all(np.diag(cos)[:, None] > off_diagonal + 0.1)
  losses = [float(_loss(z1, z2, temperature=t)) for t in (2.0, 1.0, 0.5, 0.2, 0.1)]
  assert all(a > b for a, b in zip(losses, losses[1:])), losses
  # With the pairing broken, the positives are no longer the nearest and sharpening hurts instead.
  mismatched = z2[np.roll(np.arange(8), 1)]
  assert float(_loss(z1, mismatched, temperature=0.05)) > float(_loss(z1, mismatched, temperature=1.0))


def test_perfect_separation_approaches_zero():
  z = jnp.eye(6)
  assert float(_loss(z, z, temperature=0.01)) < 1e-6
  assert float(_loss(z, z, temperature=1.0)) > 0.1


# ------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize(
  "shape1,shape2,shape3",
  [
    ((8,), (8,), None),  # Not [batch, dim].
    ((2, 3, 4), (2, 3, 4), None),
    ((4, 8), (4, 7), None),  # Dims differ.
    ((4, 8), (3, 8), None),  # Batches differ.
    ((4, 8), (4, 8), (3, 8)),  # Hard negatives of the wrong batch.
    ((4, 8), (4, 8), (4, 7)),
  ],
)
def test_shape_errors(shape1, shape2, shape3):
  z3 = None if shape3 is None else jnp.zeros(shape3)
  with pytest.raises(ValueError):
    simcse_loss(jnp.ones(shape1), jnp.ones(shape2), z3)
