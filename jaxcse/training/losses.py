"""Contrastive losses on pooled sentence embeddings, as pure functions.

Every loss takes embeddings of the global batch (``[batch, dim]``) and returns
a scalar. Written on the global batch, they need nothing special for data
parallelism: under ``jax.jit`` with a batch-sharded input the compiler gathers
the in-batch negatives across devices and routes the gradients back.

Here: the cosine similarities every loss shares, SimCSE's InfoNCE and MixCSE's; DCLR's are in ``dclr_losses``,
the ranking losses of sentence-transformers in ``ranking_losses``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

# torch.nn.CosineSimilarity clamps each norm at this value; so do we, so that a
# zero vector gives similarity 0 instead of NaN, exactly as in the reference code.
_COSINE_EPS = 1e-8
# The most a loss may multiply a cosine by (a scale, 1 / a temperature, mnrl's hardness strength; the config checks
# hold every such field to it). At 1e4, cosines 1e-4 apart already differ by 1 in logit: the softmax is an arg max,
# so nothing is gained above it, while float32 overflows within reach (from about 1e19 the gradient's squared norm,
# which clipping computes, is inf; from about 1e38 the logits): NaN at step 1, after the workdir is written.
MAX_LOGIT_SCALE = 1e4


def cosine_similarity_matrix(a: jax.Array, b: jax.Array) -> jax.Array:
  """Pairwise cosine similarities.

  Args:
    a: ``[n, dim]``.
    b: ``[m, dim]``.

  Returns:
    ``[n, m]`` with ``out[i, j] = cos(a[i], b[j])``.
  """
  return unit_rows(a) @ unit_rows(b).T


def unit_rows(x: jax.Array) -> jax.Array:
  """``x [..., dim]`` with each row divided by ``max(|row|, 1e-8)``, as ``torch.nn.CosineSimilarity`` normalises."""
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


def check_pair(z1: jax.Array, z2: jax.Array) -> None:
  """Raises ``ValueError`` unless ``z1`` and ``z2`` are both ``[batch, dim]`` of one shape."""
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
  check_pair(z1, z2)
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
  check_pair(z1, z2)
  if neighbour not in _MIXCSE_NEIGHBOURS:
    raise ValueError(f"neighbour must be one of {_MIXCSE_NEIGHBOURS}; got {neighbour!r}")
  z1, z2 = jax.lax.stop_gradient(z1), jax.lax.stop_gradient(z2)
  nb12, _ = _mixcse_neighbours(cosine_similarity_matrix(z1, z2), neighbour, rng)
  mixed = mix_lambda * z2 + (1 - mix_lambda) * z2[nb12]
  return jnp.sum(unit_rows(z1) * unit_rows(mixed), axis=-1)
