"""DCLR's losses (Zhou et al., 2022): noise-based negatives found by gradient ascent, instance weights, the loss.

Pure functions on pooled embeddings of the global batch (``[batch, dim]``), as ``losses``; the noise vectors'
ascent is ``jax.grad`` of the loss with respect to the noise, inside the step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxcse.training.losses import check_pair, cosine_similarity_matrix


def dclr_initial_noise(
  rng: jax.Array, num: int, dim: int, *, sigma: float = 1.0, dtype: jax.typing.DTypeLike = jnp.float32
) -> jax.Array:
  """DCLR's noise-based negatives before the ascent: i.i.d. N(0, sigma^2).

  The official code draws ``int(batch * noise_times)`` vectors of the hidden
  size from N(0, 1) at every step (noise_times 1 for BERT-base, 2.5 for
  RoBERTa-base).

  Args:
    rng: a PRNG key.
    num: the number ``k`` of noise vectors.
    dim: the embedding size.
    sigma: the standard deviation.
    dtype: the dtype of the result.

  Returns:
    ``[num, dim]``.

  Example:
    >>> import jax
    >>> dclr_initial_noise(jax.random.key(0), 3, 5).shape
    (3, 5)
  """
  return sigma * jax.random.normal(rng, (num, dim), dtype)


def _noise_objective(z1: jax.Array, in_batch_logits: jax.Array, noise: jax.Array, temperature: float) -> jax.Array:
  # SimCSE's cross-entropy with the noise vectors as extra columns: the loss the noise ascends.
  logits = jnp.concatenate([in_batch_logits, cosine_similarity_matrix(z1, noise) / temperature], axis=1)
  labels = jnp.arange(z1.shape[0])
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def dclr_noise_negatives(
  z1: jax.Array,
  z2: jax.Array,
  noise: jax.Array,
  *,
  temperature: float = 0.05,
  steps: int = 4,
  step_size: float = 1e-3,
) -> jax.Array:
  r"""DCLR's noise-based negatives: ``steps`` normalised gradient-ascent steps on the noise.

  The objective is the official code's (``simcse/models.py``,
  ``cl_vat_forward``): the mean over anchors ``i`` of the cross-entropy, label
  ``i``, of the row::

    [ cos(z1[i], z2[:]) / tau | cos(z1[i], noise[:]) / tau ]

  so the anchors are ``z1``, the in-batch columns stay in the softmax, and the
  noise shares the loss's temperature (the paper's separate ``tau_u`` and its
  noise-only denominator are not what the code runs). Each step is::

    g = d objective / d noise
    noise <- noise + step_size * g / ||g||    # ||.||: L2 norm of each row

  (ascent, normalised per noise vector), after which any NaN entry, which
  a zero gradient row produces, is set to 0, as in the official code. The
  gradient is taken with respect to the noise only: ``z1`` and ``z2`` are
  constants of the ascent and the result is wrapped in ``stop_gradient``, so no
  gradient reaches the encoder through it.

  Args:
    z1: anchors, ``[batch, dim]``.
    z2: positives, ``[batch, dim]``.
    noise: the starting noise, ``[num, dim]`` (see ``dclr_initial_noise``).
    temperature: tau, the loss's temperature (0.05).
    steps: the number ``t`` of ascent steps (the official ``pgd``, 4); static.
    step_size: the step length ``beta`` of each row (``1e-3`` in the code).

  Returns:
    The updated noise, ``[num, dim]``, without gradient.

  Example:
    >>> import jax
    >>> z = jax.random.normal(jax.random.key(0), (4, 8))
    >>> noise = dclr_initial_noise(jax.random.key(1), 4, 8)
    >>> out = dclr_noise_negatives(z, z, noise)  # 4 steps of length 1e-3 per row.
    >>> out.shape
    (4, 8)

  References:
    Zhou, Zhang, Zhao and Wen. Debiased Contrastive Learning of Unsupervised
    Sentence Representations. ACL 2022. https://github.com/RUCAIBox/DCLR
  """
  check_pair(z1, z2)
  if noise.ndim != 2 or noise.shape[1] != z1.shape[1]:
    raise ValueError(f"noise must be [num, {z1.shape[1]}]; got {noise.shape}")
  z1 = jax.lax.stop_gradient(z1)
  in_batch_logits = cosine_similarity_matrix(z1, jax.lax.stop_gradient(z2)) / temperature
  grad_fn = jax.grad(lambda n: _noise_objective(z1, in_batch_logits, n, temperature))

  def step(_, n):
    g = grad_fn(n)
    n = n + step_size * (g / jnp.linalg.norm(g, axis=-1, keepdims=True))
    # A zero gradient row gives 0 / 0: the official code resets such entries to 0.
    return jnp.where(jnp.isnan(n), jnp.zeros_like(n), n)

  noise = jax.lax.fori_loop(0, steps, step, noise)
  return jax.lax.stop_gradient(noise)


def dclr_instance_weights(c1: jax.Array, c2: jax.Array, *, phi: float = 0.9) -> jax.Array:
  """DCLR's instance weights from a frozen complementary model.

  ``w[i, j] = 0`` if ``cos(c1[i], c2[j]) > phi`` (strictly; the paper writes
  ``>=``) and 1 otherwise, with ``w[i, i] = 1``: the in-batch negatives the
  complementary model finds too similar to the anchor are treated as false
  negatives. The official code compares ``cos / temp > 20 * phi``, with the 20
  hard-coded, which is ``cos > phi`` at its temperature 0.05 only. Noise
  negatives always get weight 1 (``dclr_loss`` appends those columns).

  Args:
    c1: the complementary model's embeddings of the anchors, ``[batch, dim]``
      (in the official code: an unsup-SimCSE checkpoint that gets no gradient,
      run on the same doubled batch as the encoder, dropout on).
    c2: its embeddings of the second view, ``[batch, dim]``.
    phi: the threshold (0.9 for BERT, 0.85 for RoBERTa in the paper).

  Returns:
    ``[batch, batch]`` of 0s and 1s in ``c1``'s dtype, without gradient.

  Example:
    >>> import jax.numpy as jnp
    >>> c = jnp.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    >>> dclr_instance_weights(c, c, phi=0.9).astype(int).tolist()
    [[1, 0, 1], [0, 1, 1], [1, 1, 1]]
  """
  check_pair(c1, c2)
  sim = cosine_similarity_matrix(c1, c2)
  weights = jnp.where(sim > phi, 0.0, 1.0).astype(sim.dtype)
  weights = jnp.where(jnp.eye(c1.shape[0], dtype=bool), 1.0, weights).astype(sim.dtype)
  return jax.lax.stop_gradient(weights)


_DCLR_FORMS = ("official", "infonce")


def dclr_loss(
  z1: jax.Array,
  z2: jax.Array,
  noise: jax.Array | None,
  weights: jax.Array | None,
  *,
  temperature: float = 0.05,
  form: str = "official",
) -> jax.Array:
  r"""DCLR's instance-weighted contrastive loss with noise negatives (Zhou et al., 2022).

  With ``k`` noise vectors, let ``x`` be the ``[batch, batch + k]`` logits
  ``[cos(z1, z2) | cos(z1, noise)] / tau`` and ``w`` the weights, extended with
  ones over the noise columns (``w[i, i]`` is taken as 1 whatever is passed,
  as the official code forces it).

  ``form="official"`` is what the released code computes (``simcse/models.py``,
  ``cl_vat_forward``): ``p = softmax(w * x)`` per row (a weight of 0 gives a
  logit of 0, not -inf, so the false negative still counts ``exp(0) = 1`` in
  the denominator), then a binary cross-entropy against the one-hot labels
  averaged over all ``batch * (batch + k)`` cells::

    L = -mean_{i,j} [ y_ij log p_ij + (1 - y_ij) log(1 - p_ij) ],  y_ij = [j == i]

  ``log(1 - p)`` is computed as ``log(-expm1(log p))``, which is the same
  value with less cancellation than the official ``log(1 - p)``.

  ``form="infonce"`` is the paper's weighted InfoNCE, where the weights
  multiply the exponentials of the negatives::

    L = mean_i -log( e^{x_ii} / (sum_j w_ij e^{x_ij} + sum_l e^{x_{i, batch + l}}) )

  (the sum over ``j`` includes the positive, with ``w_ii = 1``); with all-ones
  weights and no noise it is ``simcse_loss``.

  Args:
    z1: anchors, ``[batch, dim]``.
    z2: positives, ``[batch, dim]``.
    noise: noise negatives, ``[k, dim]`` (from ``dclr_noise_negatives``), or
      ``None`` for none. Used as given: gradient w.r.t. it is not stopped here.
    weights: ``[batch, batch]`` (from ``dclr_instance_weights``), or ``None``
      for all ones.
    temperature: tau (0.05).
    form: ``"official"`` or ``"infonce"``.

  Returns:
    A scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.eye(3)[:2]  # Two anchors, their own positives.
    >>> noise = jnp.eye(3)[2:]  # One noise vector, orthogonal to both.
    >>> w = jnp.array([[1.0, 0.0], [0.0, 1.0]])  # The other row is a false negative.
    >>> # Row 0: w * logits = [1, 0 | 0], p = [e, 1, 1] / (e + 2); the mean over
    >>> # 2 x 3 cells of -log p_00, -log(1 - p_01), -log(1 - p_02).
    >>> round(float(dclr_loss(z, z, noise, w, temperature=1.0)), 4)
    0.3426
    >>> # InfoNCE drops the weighted-out negative: -log(e / (e + 1)).
    >>> round(float(dclr_loss(z, z, noise, w, temperature=1.0, form="infonce")), 4)
    0.3133

  References:
    Zhou, Zhang, Zhao and Wen. Debiased Contrastive Learning of Unsupervised
    Sentence Representations. ACL 2022. https://github.com/RUCAIBox/DCLR
  """
  check_pair(z1, z2)
  if form not in _DCLR_FORMS:
    raise ValueError(f"form must be one of {_DCLR_FORMS}; got {form!r}")
  batch = z1.shape[0]
  if weights is not None and weights.shape != (batch, batch):
    raise ValueError(f"weights must be {(batch, batch)}; got {weights.shape}")
  if noise is not None and (noise.ndim != 2 or noise.shape[1] != z1.shape[1]):
    raise ValueError(f"noise must be [k, {z1.shape[1]}]; got {noise.shape}")
  logits = cosine_similarity_matrix(z1, z2) / temperature
  if weights is None:
    weights = jnp.ones((batch, batch), logits.dtype)
  weights = jnp.where(jnp.eye(batch, dtype=bool), 1.0, weights).astype(logits.dtype)
  if noise is not None:
    noise_logits = cosine_similarity_matrix(z1, noise) / temperature
    logits = jnp.concatenate([logits, noise_logits], axis=1)
    weights = jnp.concatenate([weights, jnp.ones_like(noise_logits)], axis=1)
  labels = jnp.arange(batch)

  if form == "infonce":
    keep = weights > 0
    # log(w) in the logits multiplies the exponentials by w; the inner where keeps log(0) out of the graph.
    log_weights = jnp.where(keep, jnp.log(jnp.where(keep, weights, 1.0)), -jnp.inf)
    return optax.softmax_cross_entropy_with_integer_labels(logits + log_weights, labels).mean()

  log_p = jax.nn.log_softmax(logits * weights, axis=-1)
  is_label = jnp.eye(batch, logits.shape[1], dtype=bool)
  # The label cells do not use log(1 - p); a dummy there keeps a p = 1 (log 0) out of the gradient.
  log_not_p = jnp.log(-jnp.expm1(jnp.where(is_label, -1.0, log_p)))
  return jnp.mean(jnp.where(is_label, -log_p, -log_not_p))
