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


def _check_pair(z1: jax.Array, z2: jax.Array) -> None:
  if z1.ndim != 2 or z1.shape != z2.shape:
    raise ValueError(f"z1 and z2 must both be [batch, dim]; got {z1.shape} and {z2.shape}")


# ------------------------------------------------------------------------
# MixCSE.

_MIXCSE_NEIGHBOURS = ("roll", "random", "hardest")


def _mixcse_neighbours(sim: jax.Array, neighbour: str, rng: jax.Array | None) -> tuple[jax.Array, jax.Array]:
  """Indices of the rows mixed into each positive: ``(for z2 rows, for z1 rows)``, both ``[batch]``."""
  batch = sim.shape[0]
  rows = jnp.arange(batch)
  if neighbour == "roll":
    # The official code mixes row i with row i + 1 (cyclically) on both sides.
    nxt = (rows + 1) % batch
    return nxt, nxt
  if neighbour == "random":
    rng12, rng21 = jax.random.split(rng)
    # An offset in [1, batch) never lands on the row itself, and is uniform over the others.
    offset12 = jax.random.randint(rng12, (batch,), 1, batch)
    offset21 = jax.random.randint(rng21, (batch,), 1, batch)
    return (rows + offset12) % batch, (rows + offset21) % batch
  # "hardest": the most similar non-partner. The anchor z1_i ranks the z2_j (row i of sim); the anchor z2_i
  # ranks the z1_j (column i of sim). argmax has no gradient, so nothing to stop here.
  masked = jnp.where(jnp.eye(batch, dtype=bool), -jnp.inf, jax.lax.stop_gradient(sim))
  return jnp.argmax(masked, axis=1), jnp.argmax(masked, axis=0)


def mixcse_loss(
  z1: jax.Array,
  z2: jax.Array,
  *,
  temperature: float = 0.05,
  mix_lambda: float = 0.2,
  neighbour: str = "roll",
  symmetric: bool = True,
  stop_gradient: bool = True,
  rng: jax.Array | None = None,
) -> jax.Array:
  r"""MixCSE: SimCSE's loss plus hard negatives mixed from the positives (Zhang et al., 2022).

  With ``S[i, j] = cos(z1[i], z2[j]) / temperature``, ``lam = mix_lambda`` and
  a neighbour map ``nb`` (``nb(i) = (i + 1) mod batch`` by default), the
  mixed negatives are

  * ``m[k] = lam * z2[k] + (1 - lam) * z2[nb(k)]`` (mixes of positives), and
  * ``n[k] = lam * z1[k] + (1 - lam) * z1[nb'(k)]`` (mixes of anchors),

  both wrapped in ``stop_gradient``. Row ``i`` of the ``[batch, 3 * batch]``
  logits is::

    [ S[i, :] | cos(z1[i], m[:]) / tau | cos(n[i], z2[:]) / tau ]

  and the loss is the mean cross-entropy with label ``i``. Some entries are set
  to logit 0 (they stay in the softmax as ``exp(0) = 1``; they are not
  removed): in the second block every ``m[k]`` with ``nb(k) = i``, which is
  mostly (``1 - lam``) the anchor's own positive (for the default, exactly
  ``m[i - 1]``); in the third block column ``j = nb'(i)``, where ``n[i]`` is
  mostly the partner ``z1[j]`` of ``z2[j]`` (for the default, ``j = i + 1``).

  This default is what the official code runs (``mixcse/models_mix.py``,
  ``cl_forward``), and it differs from the paper in these ways:

  * The paper mixes the positive with a *random* negative and adds one mixed
    negative per anchor; the code uses the fixed neighbour ``i + 1`` and scores
    each anchor against all ``batch`` mixes (so ``m[k]`` for ``k != i`` are
    extra, easier negatives), zeroing ``m[i - 1]`` rather than dropping it.
  * The paper's features are unit vectors and it normalises the mix; the code
    mixes the raw pooled outputs and does not normalise the mix. The latter
    changes nothing, as the scores are cosines (up to the ``1e-8`` norm
    clamp); the former does: with unequal norms the effective share of each
    direction is not ``lam``. We do as the code does.
  * The paper's second direction uses ``z2[i]`` as the anchor against a mix of
    ``z1`` rows. The code instead appends ``cos(n[i], z2[j])`` for all ``j`` to
    row ``i`` of the same softmax, whose label is still ``z2[i]``: these
    columns push every ``z2[j]`` away from ``n[i]``, and only ``z2`` gets
    gradient from them (``z1`` only through ``S`` and the second block).
  * The code also adds its ``hard_negative_weight`` to cell ``(i, i)`` of both
    mixed blocks; it is 0 unless set, and the released script does not set
    it, so we leave it out.

  ``neighbour="random"`` (a uniformly random other row for each ``k``, drawn
  independently for the two mixes) and ``neighbour="hardest"`` (``nb(i)`` =
  the ``z2[j]``, ``j != i``, most similar to ``z1[i]``; ``nb'(i)`` = the
  ``z1[j]``, ``j != i``, most similar to ``z2[i]``) follow the paper's wording
  for the choice of negative while keeping the official layout and zeroing rule
  above, which reduces to the official one for ``"roll"``.

  Args:
    z1: anchors, ``[batch, dim]``.
    z2: positives, ``[batch, dim]``; ``z2[i]`` is the positive of ``z1[i]``.
    temperature: the softmax temperature tau (0.05 in the paper).
    mix_lambda: the weight ``lam`` of the positive in each mix (0.2 in the
      paper and the official script); ``1 - lam`` goes to the neighbour.
    neighbour: ``"roll"`` (official), ``"random"`` or ``"hardest"``.
    symmetric: whether to append the third block; ``False`` is the paper's
      MixCSE_single ablation (``[batch, 2 * batch]`` logits).
    stop_gradient: whether the mixed negatives are constants (the method);
      ``False`` is the paper's "w/o stop-gradient" ablation.
    rng: a PRNG key, needed for ``neighbour="random"`` only.

  Returns:
    The mean cross-entropy over the ``batch`` rows, a scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.eye(2)
    >>> # Row 0: [1, 0 | c, 0 | c, 0] with c = 0.2 / sqrt(0.2^2 + 0.8^2).
    >>> round(float(mixcse_loss(z, z, temperature=1.0)), 4)
    1.1123

  References:
    Zhang, Zhang, Mensah, Liu and Mao. Unsupervised Sentence Representation
    via Contrastive Learning with Mixing Negatives. AAAI 2022.
    https://github.com/BDBC-KG-NLP/MixCSE_AAAI2022
  """
  _check_pair(z1, z2)
  if neighbour not in _MIXCSE_NEIGHBOURS:
    raise ValueError(f"neighbour must be one of {_MIXCSE_NEIGHBOURS}; got {neighbour!r}")
  if neighbour != "roll" and z1.shape[0] < 2:
    raise ValueError(f'neighbour="{neighbour}" needs at least two rows to pick another row from')
  if neighbour == "random" and rng is None:
    raise ValueError('neighbour="random" needs an rng')
  batch = z1.shape[0]
  rows = jnp.arange(batch)
  sim = cosine_similarity_matrix(z1, z2)
  nb12, nb21 = _mixcse_neighbours(sim, neighbour, rng)
  maybe_stop = jax.lax.stop_gradient if stop_gradient else (lambda x: x)

  mixed2 = maybe_stop(mix_lambda * z2 + (1 - mix_lambda) * z2[nb12])
  block2 = cosine_similarity_matrix(z1, mixed2) / temperature
  # Entry (i, k) is m[k]; it is mostly z2[i], the anchor's positive, when nb(k) == i.
  block2 = jnp.where(nb12[None, :] == rows[:, None], 0.0, block2)
  blocks = [sim / temperature, block2]

  if symmetric:
    mixed1 = maybe_stop(mix_lambda * z1 + (1 - mix_lambda) * z1[nb21])
    block3 = cosine_similarity_matrix(mixed1, z2) / temperature
    # Entry (i, j) scores n[i] against z2[j]; n[i] is mostly z2[j]'s own partner z1[j] when j == nb'(i).
    block3 = jnp.where(rows[None, :] == nb21[:, None], 0.0, block3)
    blocks.append(block3)

  logits = jnp.concatenate(blocks, axis=1)
  return optax.softmax_cross_entropy_with_integer_labels(logits, rows).mean()


def mixcse_mix_scores(
  z1: jax.Array,
  z2: jax.Array,
  *,
  mix_lambda: float = 0.2,
  neighbour: str = "roll",
  rng: jax.Array | None = None,
) -> jax.Array:
  """The MixCSE paper's mix score per anchor, as a cosine: ``cos(z1[i], lam * z2[i] + (1 - lam) * z2[nb(i)])``.

  Each anchor against its own mixed negative (its positive mixed with the
  neighbour ``nb(i)``), the quantity of the paper's Fig. 4a (which plots it
  divided by tau). ``nb`` is drawn exactly as ``mixcse_loss`` draws it for the
  same arguments (same ``rng`` for ``"random"``), so these are the mixes the
  loss used. Without gradient.

  Args:
    z1: anchors, ``[batch, dim]``.
    z2: positives, ``[batch, dim]``.
    mix_lambda: the weight of the positive in the mix.
    neighbour: ``"roll"``, ``"random"`` or ``"hardest"`` (see ``mixcse_loss``).
    rng: a PRNG key, needed for ``neighbour="random"`` only.

  Returns:
    ``[batch]`` cosines.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.eye(2)  # Anchor 0 against 0.2 * e0 + 0.8 * e1.
    >>> [round(float(s), 4) for s in mixcse_mix_scores(z, z)]
    [0.2425, 0.2425]
  """
  _check_pair(z1, z2)
  if neighbour not in _MIXCSE_NEIGHBOURS:
    raise ValueError(f"neighbour must be one of {_MIXCSE_NEIGHBOURS}; got {neighbour!r}")
  z1, z2 = jax.lax.stop_gradient(z1), jax.lax.stop_gradient(z2)
  nb12, _ = _mixcse_neighbours(cosine_similarity_matrix(z1, z2), neighbour, rng)
  mixed = mix_lambda * z2 + (1 - mix_lambda) * z2[nb12]
  return jnp.sum(_unit_rows(z1) * _unit_rows(mixed), axis=-1)


# ------------------------------------------------------------------------
# DCLR.


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
  _check_pair(z1, z2)
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
  _check_pair(c1, c2)
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
  _check_pair(z1, z2)
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
