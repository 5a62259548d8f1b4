"""Tests for the MixCSE and DCLR losses in jaxcse.training.losses and jaxcse.training.dclr_losses.

Golden values come from independent float64 numpy implementations written from the formulas (row by row,
not vectorised like the JAX code), plus small cases worked out by hand; then gradients, compilation, and the
properties each method relies on (what carries gradient, what the ascent ascends, which weights are 0).
"""

from __future__ import annotations

import doctest
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import test_util

from jaxcse.core import compat
from jaxcse.training import dclr_losses, losses
from jaxcse.training.dclr_losses import dclr_initial_noise, dclr_instance_weights, dclr_loss, dclr_noise_negatives
from jaxcse.training.losses import cosine_similarity_matrix, mixcse_loss, simcse_loss
from tests.helpers import random_normal

# Compiled once per shape and option set; eager dispatch is far slower. test_*_jit_matches_eager check that
# the eager functions agree. The wrappers pass every argument explicitly, so that calls relying on a default
# share the compiled function with calls that spell it out (jit keys on which arguments are given); the float
# ones (temperature, lambda, step size, phi) are traced, so one compile serves every value.
_mixcse_jit = jax.jit(mixcse_loss, static_argnames=("neighbour", "symmetric", "stop_gradient"))
_noise_jit = jax.jit(dclr_noise_negatives, static_argnames=("steps",))
_dclr_jit = jax.jit(dclr_loss, static_argnames=("form",))
_weights_jit = jax.jit(dclr_instance_weights)
_simcse = jax.jit(simcse_loss)
_cosine = jax.jit(cosine_similarity_matrix)


def _mixcse(
  z1, z2, *, temperature=0.05, mix_lambda=0.2, neighbour="roll", symmetric=True, stop_gradient=True, rng=None
):
  return _mixcse_jit(
    z1,
    z2,
    temperature=temperature,
    mix_lambda=mix_lambda,
    neighbour=neighbour,
    symmetric=symmetric,
    stop_gradient=stop_gradient,
    rng=rng,
  )


def _noise(z1, z2, noise, *, temperature=0.05, steps=4, step_size=1e-3):
  return _noise_jit(z1, z2, noise, temperature=temperature, steps=steps, step_size=step_size)


def _dclr(z1, z2, noise, weights, *, temperature=0.05, form="official"):
  return _dclr_jit(z1, z2, noise, weights, temperature=temperature, form=form)


def _weights(c1, c2, *, phi=0.9):
  return _weights_jit(c1, c2, phi=phi)


# ------------------------------------------------------------------------
# Independent float64 references.


def _np_unit(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, np.float64)
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-8)


def _np_cos(a, b) -> float:
  """cos(a, b) of two vectors, norms clamped at 1e-8 as torch.nn.CosineSimilarity does."""
  return float(_np_unit(a) @ _np_unit(b))


def _np_logsumexp(x: np.ndarray) -> float:
  m = np.max(x)
  return float(m + np.log(np.sum(np.exp(x - m))))


def np_mixcse_loss(
  z1, z2, *, temperature, mix_lambda, nb12, nb21, symmetric=True, mix_src=None, normalise_mix=False
) -> float:
  """MixCSE from its definition, one row at a time.

  Row i: [cos(z1_i, z2_j) | cos(z1_i, m_k) | cos(n_i, z2_j)] / tau, label i, with
  m_k = lam z2_k + (1 - lam) z2_{nb12[k]} set to logit 0 where nb12[k] == i (mostly z2_i), and
  n_i = lam z1_i + (1 - lam) z1_{nb21[i]} set to 0 at column j == nb21[i] (n_i is mostly z2_j's partner).
  `mix_src=(s1, s2)` builds the mixes from other (constant) vectors, to differentiate with them fixed;
  `normalise_mix` divides each mix by its norm, as the paper writes it.
  """
  z1 = np.asarray(z1, np.float64)
  z2 = np.asarray(z2, np.float64)
  s1, s2 = (z1, z2) if mix_src is None else (np.asarray(m, np.float64) for m in mix_src)
  batch, lam, tau = len(z1), mix_lambda, temperature
  m = [lam * s2[k] + (1 - lam) * s2[nb12[k]] for k in range(batch)]
  n = [lam * s1[k] + (1 - lam) * s1[nb21[k]] for k in range(batch)]
  if normalise_mix:
    m, n = [v / np.linalg.norm(v) for v in m], [v / np.linalg.norm(v) for v in n]
  total = 0.0
  for i in range(batch):
    row = [_np_cos(z1[i], z2[j]) / tau for j in range(batch)]
    row += [0.0 if nb12[k] == i else _np_cos(z1[i], m[k]) / tau for k in range(batch)]
    if symmetric:
      row += [0.0 if j == nb21[i] else _np_cos(n[i], z2[j]) / tau for j in range(batch)]
    row = np.array(row)
    total += _np_logsumexp(row) - row[i]
  return total / batch


def np_mixcse_official_matrix_form(z1, z2, *, temperature, mix_lambda, symmetric=True) -> float:
  """The official layout in matrix form: neighbours by np.roll, zeroed cells by rolled identities."""
  z1 = np.asarray(z1, np.float64)
  z2 = np.asarray(z2, np.float64)
  batch = len(z1)
  eye = np.eye(batch)
  m = mix_lambda * z2 + (1 - mix_lambda) * np.roll(z2, -1, axis=0)  # m_i mixes z2_i with z2_{i+1}.
  blocks = [_np_unit(z1) @ _np_unit(z2).T]
  blocks.append((1 - np.roll(eye, 1, axis=0)) * (_np_unit(z1) @ _np_unit(m).T))  # Cell (i, i-1) is 0.
  if symmetric:
    n = mix_lambda * z1 + (1 - mix_lambda) * np.roll(z1, -1, axis=0)
    blocks.append((1 - np.roll(eye, 1, axis=1)) * (_np_unit(n) @ _np_unit(z2).T))  # Cell (i, i+1) is 0.
  logits = np.concatenate(blocks, axis=1) / temperature
  return float(np.mean([_np_logsumexp(row) - row[i] for i, row in enumerate(logits)]))


def np_roll_neighbours(batch: int) -> tuple[list[int], list[int]]:
  nb = [(i + 1) % batch for i in range(batch)]
  return nb, nb


def np_hardest_neighbours(z1, z2) -> tuple[list[int], list[int]]:
  batch = len(z1)
  nb12 = [max((j for j in range(batch) if j != i), key=lambda j: _np_cos(z1[i], z2[j])) for i in range(batch)]
  nb21 = [max((j for j in range(batch) if j != i), key=lambda j: _np_cos(z2[i], z1[j])) for i in range(batch)]
  return nb12, nb21


def np_noise_objective_and_grad(z1, z2, noise, temperature) -> tuple[float, np.ndarray]:
  """The ascended loss, mean_i CE([cos(z1_i, z2) | cos(z1_i, noise)] / tau, i), and its gradient by hand.

  d cos(a, n) / d n = (a/|a| - cos(a, n) n/|n|) / |n|, so
  d L / d n_k = 1/(batch tau) sum_i p_{i, batch+k} (a_i - cos(a_i, n_k) n_k/|n_k|) / |n_k|.
  """
  z1, z2, noise = (np.asarray(x, np.float64) for x in (z1, z2, noise))
  batch = len(z1)
  a = _np_unit(z1)
  norms = np.linalg.norm(noise, axis=1)
  nhat = noise / norms[:, None]
  logits = np.concatenate([a @ _np_unit(z2).T, a @ nhat.T], axis=1) / temperature
  p = np.exp(logits - logits.max(axis=1, keepdims=True))
  p /= p.sum(axis=1, keepdims=True)
  loss = float(np.mean([_np_logsumexp(row) - row[i] for i, row in enumerate(logits)]))
  grad = np.zeros_like(noise)
  for k in range(len(noise)):
    for i in range(batch):
      c = a[i] @ nhat[k]
      grad[k] += p[i, batch + k] * (a[i] - c * nhat[k]) / norms[k]
  return loss, grad / (batch * temperature)


def np_noise_negatives(z1, z2, noise, *, temperature, steps, step_size) -> np.ndarray:
  noise = np.asarray(noise, np.float64).copy()
  for _ in range(steps):
    _, g = np_noise_objective_and_grad(z1, z2, noise, temperature)
    noise = noise + step_size * g / np.linalg.norm(g, axis=1, keepdims=True)
  return noise


def np_instance_weights(c1, c2, phi) -> np.ndarray:
  batch = len(c1)
  return np.array(
    [[1.0 if i == j or not _np_cos(c1[i], c2[j]) > phi else 0.0 for j in range(batch)] for i in range(batch)]
  )


def np_dclr_loss(z1, z2, noise, weights, *, temperature, form) -> float:
  """Both DCLR forms from their definitions, float64, one row at a time."""
  z1 = np.asarray(z1, np.float64)
  z2 = np.asarray(z2, np.float64)
  batch = len(z1)
  noise = np.zeros((0, z1.shape[1])) if noise is None else np.asarray(noise, np.float64)
  w = np.ones((batch, batch)) if weights is None else np.asarray(weights, np.float64).copy()
  np.fill_diagonal(w, 1.0)
  cells = []
  for i in range(batch):
    x = np.array([_np_cos(z1[i], v) / temperature for v in list(z2) + list(noise)])
    wi = np.concatenate([w[i], np.ones(len(noise))])
    if form == "official":
      e = np.exp(wi * x - np.max(wi * x))
      p = e / e.sum()
      cells += [-math.log(p[j]) if j == i else -math.log(1 - p[j]) for j in range(len(x))]
    else:
      cells.append(-(x[i] - math.log(np.sum(wi * np.exp(x)))))
  return float(np.mean(cells))


# ------------------------------------------------------------------------
# Doctests (tests/test_losses.py::test_doctest runs the whole module's). First: the eager tests below use
# the doctests' shapes, so that op-by-op execution compiles each primitive once.
#
# Compilation dominates the run time, so the tests below do their own arithmetic in numpy, share a few shapes
# ((3, 3) and (8, 16) for MixCSE), and call module-level jitted functions, whose float arguments (temperature,
# lambda, step size, phi) are traced: one compile serves every value.


def test_doctests_of_new_functions():
  runner = doctest.DocTestRunner()
  for module, name in (
    (losses, "mixcse_loss"),
    (dclr_losses, "dclr_initial_noise"),
    (dclr_losses, "dclr_noise_negatives"),
    (dclr_losses, "dclr_instance_weights"),
    (dclr_losses, "dclr_loss"),
  ):
    (test,) = doctest.DocTestFinder().find(getattr(module, name), name, globs=vars(module).copy())
    assert test.examples, f"{name} has no doctest example"
    runner.run(test)
  result = runner.summarize(verbose=False)
  assert result.attempted >= 10 and result.failed == 0


# ------------------------------------------------------------------------
# MixCSE: golden values.


@pytest.mark.parametrize(
  "batch,dim,neighbour,symmetric",
  [
    (3, 3, "roll", True),
    (3, 3, "roll", False),
    (3, 3, "hardest", False),
    (8, 16, "roll", True),
    (8, 16, "roll", False),
    (8, 16, "hardest", True),
  ],
)
def test_mixcse_matches_numpy(batch, dim, neighbour, symmetric):
  for seed, (temperature, mix_lambda) in itertools.product((0, 1), [(0.05, 0.2), (0.5, 0.6)]):
    z1 = random_normal(seed, batch, dim)
    z2 = z1 + 0.5 * random_normal(seed + 7, batch, dim)
    nb12, nb21 = np_roll_neighbours(batch) if neighbour == "roll" else np_hardest_neighbours(z1, z2)
    want = np_mixcse_loss(
      z1, z2, temperature=temperature, mix_lambda=mix_lambda, nb12=nb12, nb21=nb21, symmetric=symmetric
    )
    got = float(
      _mixcse(z1, z2, temperature=temperature, mix_lambda=mix_lambda, neighbour=neighbour, symmetric=symmetric)
    )
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    if neighbour == "roll":
      # The default is the official layout: its matrix form (np.roll neighbours, rolled-identity zeroing) too.
      official = np_mixcse_official_matrix_form(
        z1, z2, temperature=temperature, mix_lambda=mix_lambda, symmetric=symmetric
      )
      np.testing.assert_allclose(got, official, rtol=2e-5, atol=1e-6)


def test_mixcse_single_row():
  # batch 1: the only mix is the positive itself; the official code zeroes it (its rolled mask is all ones).
  z1, z2 = random_normal(0, 1, 3), random_normal(1, 1, 3)
  got = float(_mixcse(z1, z2))
  np.testing.assert_allclose(got, np_mixcse_official_matrix_form(z1, z2, temperature=0.05, mix_lambda=0.2), rtol=1e-5)
  # Row [s, 0, 0]: -log(e^s / (e^s + 2)) = log(1 + 2 e^-s).
  s = _np_cos(z1[0], z2[0]) / 0.05
  np.testing.assert_allclose(got, math.log1p(2 * math.exp(-s)), rtol=1e-5)


def test_mixcse_by_hand():
  # z1 = z2 = I_3, tau = 1, lam = 0.2. m_k = 0.2 e_k + 0.8 e_{k+1}; c = 0.2 / sqrt(0.68) = 0.2425356,
  # d = 0.8 / sqrt(0.68) = 0.9701425. Row 0:
  #   in-batch:    [1, 0, 0]
  #   z1_0 vs m:   [c, 0, d -> 0]   (m_2 = 0.2 e_2 + 0.8 e_0 is mostly the positive: zeroed)
  #   n_0 vs z2:   [c, d -> 0, 0]   (n_0 = 0.2 e_0 + 0.8 e_1 is mostly z2_1's partner: zeroed)
  # so loss = log(e + 6 + 2 e^c) - 1 = log(11.267235) - 1 = 1.4218990; every row alike.
  # Without the third block: log(e + 4 + e^c) - 1 = log(7.992758) - 1 = 1.0785359.
  z = np.eye(3, dtype=np.float32)
  c = 0.2 / math.sqrt(0.68)
  assert float(_mixcse(z, z, temperature=1.0)) == pytest.approx(math.log(math.e + 6 + 2 * math.exp(c)) - 1, rel=1e-6)
  single = float(_mixcse(z, z, temperature=1.0, symmetric=False))
  assert single == pytest.approx(math.log(math.e + 4 + math.exp(c)) - 1, rel=1e-6)


def test_mixcse_unnormalised_mix_equals_normalised_mix():
  # The official code does not normalise the mix and the paper does; cosine scores make the two the same.
  z1, z2 = random_normal(0, 8, 16), random_normal(1, 8, 16)
  nb12, nb21 = np_roll_neighbours(8)
  want = np_mixcse_loss(z1, z2, temperature=0.1, mix_lambda=0.2, nb12=nb12, nb21=nb21, normalise_mix=True)
  base = float(_mixcse(z1, z2, temperature=0.1))
  np.testing.assert_allclose(base, want, rtol=2e-5)
  # But the rows are mixed before any normalisation (raw pooled outputs, as in the code; the paper mixes unit
  # vectors): rescaling rows unevenly moves the mixes, unlike SimCSE's loss. A common scale does not.
  scales = np.random.default_rng(2).uniform(0.1, 10.0, size=(8, 1)).astype(np.float32)
  assert abs(float(_mixcse(z1, z2 * scales, temperature=0.1)) - base) > 1e-3
  np.testing.assert_allclose(float(_mixcse(z1 * 7.0, z2 * 7.0, temperature=0.1)), base, rtol=1e-5)


def test_mixcse_random_neighbour_is_a_valid_map():
  # batch 3: each row picks one of the two other rows, for each of the two mixes: 2^3 * 2^3 = 64 maps.
  # The loss must equal the reference for one of them (so never the row itself) and vary with the key.
  z1, z2 = random_normal(0, 3, 3), random_normal(1, 3, 3)
  others = [[j for j in range(3) if j != i] for i in range(3)]
  table = {}
  for nb12 in itertools.product(*others):
    for nb21 in itertools.product(*others):
      table[(nb12, nb21)] = np_mixcse_loss(z1, z2, temperature=0.1, mix_lambda=0.2, nb12=nb12, nb21=nb21)
  assert len({round(v, 5) for v in table.values()}) == 64  # The maps are distinguishable from the value.
  seen = set()
  for seed in range(12):
    got = float(_mixcse(z1, z2, temperature=0.1, neighbour="random", rng=jax.random.key(seed)))
    match = [k for k, v in table.items() if abs(v - got) < 1e-5 * max(1.0, abs(v))]
    assert len(match) == 1, got
    seen.add(match[0])
  assert len(seen) > 3
  # Same key, same value.
  assert float(_mixcse(z1, z2, neighbour="random", rng=jax.random.key(5))) == float(
    _mixcse(z1, z2, neighbour="random", rng=jax.random.key(5))
  )


def test_mixcse_lambda_one_mixes_are_the_positives():
  # lam = 1: m_k = z2_k, so the second block repeats the in-batch columns, but for the zeroed cell.
  z1, z2 = random_normal(3, 8, 16), random_normal(4, 8, 16)
  got = float(_mixcse(z1, z2, temperature=0.2, mix_lambda=1.0, symmetric=False))
  s = np.array([[_np_cos(a, b) / 0.2 for b in z2] for a in z1])
  rows = [np.concatenate([s[i], np.where(np.arange(8) == (i - 1) % 8, 0.0, s[i])]) for i in range(8)]
  np.testing.assert_allclose(got, np.mean([_np_logsumexp(r) - r[i] for i, r in enumerate(rows)]), rtol=1e-5)
  assert got > np_mixcse_official_matrix_form(z1, z2, temperature=0.2, mix_lambda=0.0, symmetric=False) - 10
  assert got > float(_simcse(z1, z2, temperature=0.2))


# ------------------------------------------------------------------------
# MixCSE: gradients.


@pytest.mark.parametrize("neighbour,symmetric", [("roll", True)])
def test_mixcse_check_grads_without_stop_gradient(neighbour, symmetric):
  # Finite differences move the mixes too, so they only describe the loss without the stop-gradient.
  # (The stop-gradient version is checked against finite differences with the mixes held fixed, below.)
  z1 = random_normal(0, 4, 5).astype(np.float64)
  z2 = z1 + 0.5 * random_normal(1, 4, 5).astype(np.float64)
  with compat.enable_x64(True):
    z1, z2 = jnp.asarray(z1), jnp.asarray(z2)
    f = jax.jit(
      lambda a, b: mixcse_loss(a, b, temperature=0.1, neighbour=neighbour, symmetric=symmetric, stop_gradient=False)
    )
    test_util.check_grads(f, (z1, z2), order=1, modes=["rev"])


def _central_differences(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
  grad = np.zeros_like(x)
  for idx in np.ndindex(*x.shape):
    up, down = x.copy(), x.copy()
    up[idx] += eps
    down[idx] -= eps
    grad[idx] = (f(up) - f(down)) / (2 * eps)
  return grad


def test_mixcse_stop_gradient_matches_fixed_mix_finite_differences():
  # With stop_gradient, d loss / d z is the derivative with the mixed negatives held constant: only the
  # in-batch block and the scored side of each mixed block (z1 in block 2, z2 in block 3) contribute.
  z1 = random_normal(0, 4, 5).astype(np.float64)
  z2 = z1 + 0.5 * random_normal(1, 4, 5).astype(np.float64)
  nb12, nb21 = np_roll_neighbours(4)

  def all_grads(a, b):
    out = {}
    for symmetric, sg in itertools.product((True, False), (True, False)):
      f = lambda a, b: mixcse_loss(a, b, temperature=0.1, symmetric=symmetric, stop_gradient=sg)
      out[symmetric, sg] = jax.value_and_grad(f, argnums=(0, 1))(a, b)
    return out

  with compat.enable_x64(True):
    results = jax.jit(all_grads)(z1, z2)
  for symmetric in (True, False):
    kw = dict(temperature=0.1, mix_lambda=0.2, nb12=nb12, nb21=nb21, symmetric=symmetric, mix_src=(z1, z2))
    want1 = _central_differences(lambda a: np_mixcse_loss(a, z2, **kw), z1)
    want2 = _central_differences(lambda b: np_mixcse_loss(z1, b, **kw), z2)
    value, (got1, got2) = results[symmetric, True]
    free_value, (free1, free2) = results[symmetric, False]
    np.testing.assert_allclose(np.asarray(got1), want1, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(got2), want2, rtol=1e-6, atol=1e-8)
    # The stop-gradient changes no value ...
    assert float(value) == pytest.approx(np_mixcse_loss(z1, z2, **kw), rel=1e-12)
    assert float(free_value) == pytest.approx(float(value), rel=1e-12)
    # ... but without it the mixes pass gradient back: z2 through block 2, and z1 through block 3.
    assert np.abs(np.asarray(free2) - want2).max() > 1e-3
    if symmetric:
      assert np.abs(np.asarray(free1) - want1).max() > 1e-3
    else:
      np.testing.assert_allclose(np.asarray(free1), want1, rtol=1e-6, atol=1e-8)
  # MixCSE_single and MixCSE differ in their gradients too.
  assert np.abs(np.asarray(results[True, True][1][1]) - np.asarray(results[False, True][1][1])).max() > 1e-3


def test_mixcse_single_and_symmetric_differ():
  z1, z2 = random_normal(0, 8, 16), random_normal(1, 8, 16)
  both, single = float(_mixcse(z1, z2)), float(_mixcse(z1, z2, symmetric=False))
  assert abs(both - single) > 1e-2
  # (So do their gradients: see test_mixcse_stop_gradient_matches_fixed_mix_finite_differences.)


# ------------------------------------------------------------------------
# MixCSE: compilation, invariances, errors.


def test_mixcse_jit_matches_eager():
  z1, z2 = jnp.asarray(random_normal(0, 2, 2)), jnp.asarray(random_normal(1, 2, 2))  # The doctest's shapes.
  for neighbour in ("roll", "hardest"):  # "random" runs under jit in test_mixcse_random_neighbour_is_a_valid_map.
    eager = mixcse_loss(z1, z2, temperature=0.05, mix_lambda=0.2, neighbour=neighbour)
    jitted = _mixcse(z1, z2, temperature=0.05, mix_lambda=0.2, neighbour=neighbour)
    np.testing.assert_allclose(float(jitted), float(eager), rtol=1e-6)


def test_mixcse_roll_is_invariant_to_cyclic_shifts_only():
  z1 = random_normal(0, 8, 16)
  z2 = z1 + 0.3 * random_normal(1, 8, 16)
  base = float(_mixcse(z1, z2))
  for shift in (1, 3, 7):
    np.testing.assert_allclose(float(_mixcse(np.roll(z1, shift, 0), np.roll(z2, shift, 0))), base, rtol=1e-5)
  # Any other reordering changes who is mixed with whom.
  swap = np.array([1, 0, 2, 3, 4, 5, 6, 7])
  assert abs(float(_mixcse(z1[swap], z2[swap])) - base) > 1e-4
  reverse = np.arange(8)[::-1]
  assert abs(float(_mixcse(z1[reverse], z2[reverse])) - base) > 1e-4


def test_mixcse_hardest_is_permutation_invariant():
  z1 = random_normal(0, 8, 16)
  z2 = z1 + 0.3 * random_normal(1, 8, 16)
  perm = np.random.default_rng(3).permutation(8)
  base = float(_mixcse(z1, z2, neighbour="hardest"))
  np.testing.assert_allclose(float(_mixcse(z1[perm], z2[perm], neighbour="hardest")), base, rtol=1e-5)
  # Breaking the pairing is not a reordering: a different loss.
  assert abs(float(_mixcse(z1, z2[perm], neighbour="hardest")) - base) > 1.0


def test_mixcse_errors():
  z = np.ones((4, 8), np.float32)
  with pytest.raises(ValueError):
    mixcse_loss(z, np.ones((4, 7), np.float32))
  with pytest.raises(ValueError):
    mixcse_loss(z, z, neighbour="nearest")
  with pytest.raises(ValueError):
    mixcse_loss(z, z, neighbour="random")  # No rng.
  with pytest.raises(ValueError):
    mixcse_loss(z[:1], z[:1], neighbour="hardest")  # No other row.


# ------------------------------------------------------------------------
# DCLR: noise negatives.


def test_initial_noise():
  noise = dclr_initial_noise(jax.random.key(0), 1000, 64, sigma=2.0)
  assert noise.shape == (1000, 64) and noise.dtype == jnp.float32
  noise = np.asarray(noise)
  assert noise.std() == pytest.approx(2.0, rel=0.02)
  assert abs(noise.mean()) < 0.02
  np.testing.assert_array_equal(np.asarray(dclr_initial_noise(jax.random.key(0), 1000, 64, sigma=2.0)), noise)


@pytest.mark.parametrize("batch,num,dim,x64", [(3, 7, 5, True), (8, 8, 16, False)])
def test_noise_negatives_match_numpy(batch, num, dim, x64):
  for seed, (step_size, temperature) in itertools.product((0, 1), [(1e-3, 0.05), (0.1, 0.5)]):
    z1, z2, n0 = random_normal(seed, batch, dim), random_normal(seed + 1, batch, dim), random_normal(seed + 2, num, dim)
    want = np_noise_negatives(z1, z2, n0, temperature=temperature, steps=4, step_size=step_size)
    if x64:
      with compat.enable_x64(True):
        got = _noise(
          z1.astype(np.float64),
          z2.astype(np.float64),
          n0.astype(np.float64),
          temperature=temperature,
          steps=4,
          step_size=step_size,
        )
        assert got.shape == (num, dim) and got.dtype == jnp.float64
      # Compare the displacement, which is what the ascent computes (1e-3 per step against noise of size ~1).
      np.testing.assert_allclose(np.asarray(got) - n0, want - n0, rtol=1e-7, atol=1e-12)
    else:
      # float32 agrees to float32 precision.
      got = _noise(z1, z2, n0, temperature=temperature, steps=4, step_size=step_size)
      assert got.shape == (num, dim) and got.dtype == jnp.float32
      np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6)


def test_noise_zero_steps_is_identity():
  z1, z2, n0 = (random_normal(k, 8, 16) for k in range(3))
  np.testing.assert_array_equal(np.asarray(_noise(z1, z2, n0, steps=0)), n0)


def test_noise_ascent_increases_its_objective_every_step():
  z1 = random_normal(0, 8, 16).astype(np.float64)
  z2 = z1 + 0.3 * random_normal(1, 8, 16)
  start = random_normal(2, 8, 16).astype(np.float64)
  noise = start
  values = [np_noise_objective_and_grad(z1, z2, noise, 0.05)[0]]
  with compat.enable_x64(True):
    for _ in range(8):
      new = np.asarray(_noise(z1, z2, noise, steps=1))
      # Normalised per noise vector: every row moves by exactly the step size (a global norm would not).
      np.testing.assert_allclose(np.linalg.norm(new - noise, axis=1), 1e-3, rtol=1e-9)
      noise = new
      values.append(np_noise_objective_and_grad(z1, z2, noise, 0.05)[0])
      if len(values) == 5:
        # The steps compose: four single steps are the reference's steps=4.
        np.testing.assert_allclose(
          noise, np_noise_negatives(z1, z2, start, temperature=0.05, steps=4, step_size=1e-3), rtol=1e-12
        )
  assert all(b > a for a, b in zip(values, values[1:])), values


def test_noise_carries_no_gradient():
  z1, z2, n0 = (random_normal(k, 8, 16) for k in range(3))
  jac1, jac2 = jax.jit(jax.jacobian(lambda a, b: dclr_noise_negatives(a, b, n0), argnums=(0, 1)))(z1, z2)
  assert jac1.shape == (8, 16, 8, 16)
  assert np.abs(np.asarray(jac1)).max() == 0.0 and np.abs(np.asarray(jac2)).max() == 0.0


def test_dclr_full_step_jits():
  # The whole DCLR objective as a training step builds it, under one jit.
  @jax.jit
  def step(z1, z2, c1, c2, rng):
    noise = dclr_noise_negatives(z1, z2, dclr_initial_noise(rng, z1.shape[0], z1.shape[1]))
    return dclr_loss(z1, z2, noise, dclr_instance_weights(c1, c2, phi=0.9))

  z1, z2, c1, c2 = (random_normal(k, 8, 16) for k in range(4))
  rng = jax.random.key(0)
  loss = float(step(z1, z2, c1, c2, rng))
  want = np_dclr_loss(
    z1,
    z2,
    np.asarray(_noise(z1, z2, dclr_initial_noise(rng, 8, 16))),
    np_instance_weights(c1, c2, 0.9),
    temperature=0.05,
    form="official",
  )
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert loss != float(step(z1, z2, c1, c2, jax.random.key(1)))  # Fresh noise each step.


def test_noise_with_zero_gradient_row_is_reset_to_zero():
  # Every anchor is e_0 and noise row 0 is e_0: d cos / d n_0 = 0 (exactly, with unit vectors), the normalised
  # step is 0 / 0, and the official code replaces the NaNs with 0. The other rows move normally.
  z1 = np.zeros((8, 16))
  z1[:, 0] = 1.0
  z2 = random_normal(0, 8, 16).astype(np.float64)
  n0 = random_normal(1, 8, 16).astype(np.float64)
  n0[0] = z1[0]
  with compat.enable_x64(True):  # The shapes and dtype of test_noise_ascent_increases_its_objective_every_step.
    out = np.asarray(_noise(z1, z2, n0, steps=1))
  np.testing.assert_array_equal(out[0], np.zeros(16))
  assert np.isfinite(out).all()
  np.testing.assert_allclose(np.linalg.norm(out[1:] - n0[1:], axis=1), 1e-3, rtol=1e-9)


def test_noise_jit_matches_eager():
  z1, z2, n0 = (jnp.asarray(random_normal(k, 4, 8)) for k in range(3))  # The doctest's shapes.
  eager = dclr_noise_negatives(z1, z2, n0)
  np.testing.assert_allclose(np.asarray(_noise(z1, z2, n0)), np.asarray(eager), rtol=1e-6)


# ------------------------------------------------------------------------
# DCLR: instance weights.


def test_instance_weights_threshold_is_strict():
  c1 = random_normal(0, 8, 16)
  c2 = c1 + 0.8 * random_normal(1, 8, 16)
  sim = np.asarray(_cosine(c1, c2))
  off = ~np.eye(8, dtype=bool)
  # The largest off-diagonal similarity as the threshold: equal is not "exceeds", so it keeps weight 1 ...
  phi = float(sim[off].max())
  i, j = np.argwhere((sim == phi) & off)[0]
  w = np.asarray(_weights(c1, c2, phi=phi))
  assert w[i, j] == 1.0 and np.all(w == 1.0)
  # ... and one float below it, it gets 0.
  w = np.asarray(_weights(c1, c2, phi=float(np.nextafter(np.float32(phi), np.float32(-1)))))
  assert w[i, j] == 0.0 and w.sum() == 63.0


@pytest.mark.parametrize("batch,dim", [(3, 5), (8, 16)])
def test_instance_weights_match_numpy(batch, dim):
  c1 = random_normal(batch, batch, dim)
  c2 = c1 + 0.8 * random_normal(batch + 1, batch, dim)
  for phi in (0.9, 0.5, 0.0, -0.3):
    got = np.asarray(_weights(c1, c2, phi=phi))
    np.testing.assert_array_equal(got, np_instance_weights(c1, c2, phi))
    assert set(np.unique(got)) <= {0.0, 1.0}
    np.testing.assert_array_equal(np.diag(got), 1.0)
    if phi == 0.0:
      assert 0.0 < got.mean() < 1.0  # The data have both kinds of pairs, so the test can fail either way.


def test_instance_weights_by_hand():
  # cos(c_0, c_1) = 1 / sqrt(1.01) = 0.995 > 0.9 -> 0 both ways; c_2 is orthogonal to c_0 and has
  # cos 0.0995 with c_1 -> 1; the diagonal (cos 1 > 0.9) is forced to 1.
  c = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]], np.float32)
  np.testing.assert_array_equal(np.asarray(_weights(c, c, phi=0.9)), [[1, 0, 1], [0, 1, 1], [1, 1, 1]])
  # Different views: c2 = [c_0, c_0, c_1]. Row 0 vs c2_1 = c_0: cos 1 -> 0; vs c2_2 = c_1: 0.995 -> 0.
  # Row 1 vs c2_0 = c_0: 0.995 -> 0; vs c2_2 = c_1: 1 -> 0. Row 2 vs c_0: 0, vs c_0: 0 -> 1, 1.
  c2 = c[[0, 0, 1]]
  np.testing.assert_array_equal(np.asarray(_weights(c, c2, phi=0.9)), [[1, 0, 0], [0, 1, 0], [1, 1, 1]])


def test_instance_weights_carry_no_gradient_and_jit():
  c1, c2 = random_normal(0, 8, 16), random_normal(1, 8, 16)
  probe = np.arange(64.0, dtype=np.float32).reshape(8, 8)
  g = jax.jit(jax.grad(lambda a: jnp.sum(dclr_instance_weights(a, c2, phi=0.2) * probe)))(c1)
  assert np.abs(np.asarray(g)).max() == 0.0
  c = jnp.asarray(random_normal(2, 3, 2))  # The doctest's shapes.
  np.testing.assert_array_equal(np.asarray(dclr_instance_weights(c, c, phi=0.2)), np.asarray(_weights(c, c, phi=0.2)))


# ------------------------------------------------------------------------
# DCLR: the loss.


def _dclr_inputs(seed: int, batch: int, num: int, dim: int):
  z1 = random_normal(seed, batch, dim)
  z2 = z1 + 0.5 * random_normal(seed + 1, batch, dim)
  noise = random_normal(seed + 2, num, dim) if num else None
  weights = (np.random.default_rng(seed + 3).uniform(size=(batch, batch)) > 0.3).astype(np.float32)
  return z1, z2, noise, weights


@pytest.mark.parametrize(
  "batch,num,dim,form,use_weights",
  [
    (1, 0, 3, "official", True),
    (1, 0, 3, "infonce", True),
    (3, 7, 5, "official", True),
    (3, 7, 5, "infonce", True),
    (3, 7, 5, "official", False),
    (8, 0, 16, "official", True),
    (8, 0, 16, "infonce", True),
  ],
)
def test_dclr_loss_matches_numpy(batch, num, dim, form, use_weights):
  for seed, temperature in itertools.product((0, 1), (0.05, 0.5)):
    z1, z2, noise, weights = _dclr_inputs(seed, batch, num, dim)
    weights = weights if use_weights else None
    want = np_dclr_loss(z1, z2, noise, weights, temperature=temperature, form=form)
    got = float(_dclr(z1, z2, noise, weights, temperature=temperature, form=form))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_dclr_by_hand():
  # z1 = z2 = [e_0, e_1] in R^3, one noise vector e_2, all weights 1, tau = 1. Row 0 logits [1, 0, 0]:
  # p = [e, 1, 1] / (e + 2) = [0.5761169, 0.2119416, 0.2119416]; cells -log p_00 = 0.5514447 and twice
  # -log(1 - 0.2119416) = 0.2381830. Both rows alike; mean over 2 x 3 cells = (0.5514447 + 2 * 0.2381830) / 3
  # = 0.3426036.
  z = np.eye(3, dtype=np.float32)[:2]
  noise = np.eye(3, dtype=np.float32)[2:]
  ones = np.ones((2, 2), np.float32)
  assert float(_dclr(z, z, noise, ones, temperature=1.0)) == pytest.approx(0.3426036, abs=1e-6)
  assert (0.5514447 + 2 * 0.2381830) / 3 == pytest.approx(0.3426036, abs=1e-7)
  # InfoNCE: -log(e / (e + 2)) = 0.5514447 per row.
  assert float(_dclr(z, z, noise, ones, temperature=1.0, form="infonce")) == pytest.approx(0.5514447, abs=1e-6)
  # Weight 0 on (0, 1) and (1, 0): in the official form this changes nothing here, as those logits are already 0
  # (a weight makes a logit 0, not -inf). InfoNCE drops them: -log(e / (e + 1)) = 0.3132617 (the noise stays).
  w = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
  assert float(_dclr(z, z, noise, w, temperature=1.0)) == pytest.approx(0.3426036, abs=1e-6)
  assert float(_dclr(z, z, noise, w, temperature=1.0, form="infonce")) == pytest.approx(0.3132617, abs=1e-6)


def test_dclr_official_weight_zero_means_logit_zero():
  # z2_1 is nearly z1_0: a false negative of anchor 0, weighted out. tau = 0.05.
  # Row 0: w * x = [20, 0] (logit 0, still in the softmax): both cells are log(1 + e^-20).
  # Row 1: x = [0, a] with a = (0.01 / sqrt(1.0001)) / 0.05 = 0.1999900: both cells are log(1 + e^-a).
  z1 = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
  z2 = np.array([[1.0, 0.0, 0.0], [1.0, 0.01, 0.0]], np.float32)
  w = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
  a = 0.01 / math.sqrt(1.0001) / 0.05
  want = (2 * math.log1p(math.exp(-20)) + 2 * math.log1p(math.exp(-a))) / 4
  assert float(_dclr(z1, z2, None, w, temperature=0.05)) == pytest.approx(want, rel=1e-5)
  # Unweighted, row 0 is [20, 19.9995]: the false negative costs about log 2 per cell.
  assert float(_dclr(z1, z2, None, np.ones((2, 2), np.float32), temperature=0.05)) > want + 0.3


def test_dclr_diagonal_of_weights_is_ignored():
  z1, z2, noise, weights = _dclr_inputs(0, 3, 7, 5)
  zeroed = weights * (1 - np.eye(3, dtype=np.float32))
  for form in ("official", "infonce"):
    assert float(_dclr(z1, z2, noise, weights, form=form)) == float(_dclr(z1, z2, noise, zeroed, form=form))


def test_dclr_infonce_with_ones_and_no_noise_is_simcse():
  for batch, dim in ((1, 3), (8, 16)):
    z1, z2 = random_normal(batch, batch, dim), random_normal(batch + 1, batch, dim)
    ones = np.ones((batch, batch), np.float32)
    want = float(_simcse(z1, z2, temperature=0.07))
    np.testing.assert_allclose(float(_dclr(z1, z2, None, ones, temperature=0.07, form="infonce")), want, rtol=1e-6)
  # The official form is a different function of the same logits.
  assert abs(float(_dclr(z1, z2, None, ones, temperature=0.07)) - want) > 1e-2


def test_dclr_check_grads():
  z1, z2, noise, weights = _dclr_inputs(0, 4, 3, 5)
  assert weights.min() == 0.0
  with compat.enable_x64(True):
    z1, z2, noise, weights = (jnp.asarray(x, jnp.float64) for x in (z1, z2, noise, weights))
    assert z1.dtype == jnp.float64
    # Both forms at once, as a vector: rev mode checks a random combination of the two.
    f = jax.jit(
      lambda a, b: jnp.stack(
        [dclr_loss(a, b, noise, weights, temperature=0.1, form=form) for form in ("official", "infonce")]
      )
    )
    test_util.check_grads(f, (z1, z2), order=1, modes=["rev"])


def test_dclr_gradient_is_finite_when_a_probability_saturates():
  # tau tiny: the positive's probability rounds to 1 in float32. The label cell must not route log(1 - p)
  # = log 0 into the gradient; nor may log(0) weights in the InfoNCE form.
  z = np.eye(4, dtype=np.float32)
  w = np.zeros((4, 4), np.float32)
  grads = jax.jit(
    lambda a: (
      jax.grad(lambda a: dclr_loss(a, z, None, None, temperature=1e-3))(a),
      jax.grad(lambda a: dclr_loss(a, z, None, w, temperature=1e-3, form="infonce"))(a),
    )
  )(z)
  for grad in grads:
    assert np.isfinite(np.asarray(grad)).all()


def test_dclr_jit_matches_eager():
  z, noise = jnp.eye(3)[:2], jnp.eye(3)[2:]  # The doctest's shapes.
  z2 = jnp.asarray(random_normal(0, 2, 3))
  w = jnp.asarray([[1.0, 0.0], [1.0, 1.0]])
  for form in ("official", "infonce"):
    eager = dclr_loss(z, z2, noise, w, temperature=0.05, form=form)
    np.testing.assert_allclose(float(_dclr(z, z2, noise, w, temperature=0.05, form=form)), float(eager), rtol=1e-6)


def test_dclr_errors():
  z = np.ones((4, 8), np.float32)
  with pytest.raises(ValueError):
    dclr_loss(z, z, None, None, form="weighted")
  with pytest.raises(ValueError):
    dclr_loss(z, z, None, np.ones((3, 3)))
  with pytest.raises(ValueError):
    dclr_loss(z, z, np.ones((4, 7)), None)
  with pytest.raises(ValueError):
    dclr_noise_negatives(z, z, np.ones((4, 7)))
  with pytest.raises(ValueError):
    dclr_instance_weights(z, np.ones((3, 8)))
