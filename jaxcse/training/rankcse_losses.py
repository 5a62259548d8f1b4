r"""RankCSE's terms (Liu et al., 2023) as pure functions: listwise ranking distillation from a teacher's in-batch
similarity lists (ListNet, ListMLE) and the ranking consistency of the two dropout views.

RankCSE trains unsupervised SimCSE (InfoNCE over the two views ``z1``, ``z2``) plus two terms on ``[batch, batch]``
similarity lists, each row one anchor's list over the batch:

* ``teacher_scores``: the teacher's list, ``cos(t_i, t_j) / tau2`` from its embeddings of the batch's texts; with two
  teachers, ``alpha * S_1 + (1 - alpha) * S_2``.
* ``listnet_loss``: ListNet's top-one cross entropy from the teacher's softmax over each row (the anchor itself left
  out) to the student's, ``cos(z1_i, z2_j) / tau2``; mean over rows.
* ``listmle_loss``: ListMLE, the Plackett-Luce negative log-likelihood of the teacher's order of each row (the
  anchor itself included, as released) under the student's scores; mean over positions, then rows.
* ``consistency_loss``: the two views' lists, ``cos(z1_i, z2_j) / temp`` and ``cos(z2_i, z1_j) / temp``, made to
  agree. ``form="jsd"`` is the paper's Jensen-Shannon divergence of their softmaxes. ``form="as_released"`` is what
  the released code computes: it clamps ``log m`` (always <= 0) at ``1e-7`` from below, so ``m`` is the constant
  ``1e-7`` and the term is the mean negative entropy of the two softmaxes (clamped at ``1e-7``), minus ``1e-7``:
  it sharpens both lists rather than aligning them.

The released code (github.com/perceptiveshawty/RankCSE, ``rankcse/models.py`` and ``trainers.py``) adds InfoNCE,
the consistency term (weight 1) and ``gamma`` times one distillation term; its run script uses ``temp = tau2 =
0.05``, ``gamma = 1``, ``alpha = 0.33`` (teachers DiffCSE-BERT-base and unsupervised SimCSE-BERT-large). Two details
of its ListMLE are not reproduced, and matter only for exact ties in a teacher's list: it shuffles each row before
sorting (random tie order), and treats a teacher score of exactly -1 as padding. ``tests/test_rankcse_losses.py``
checks each term against a float64 transcription of the released functions (relative error <= 1e-10, loss and
gradient).

Reference: Liu et al., RankCSE: Unsupervised Sentence Representations Learning via Learning to Rank (ACL 2023),
https://arxiv.org/abs/2305.16726; Cao et al., ListNet (ICML 2007); Xia et al., ListMLE (ICML 2008).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcse.training.losses import unit_rows

CONSISTENCY_FORMS = ("as_released", "jsd")
# The released code's floor for probabilities and logarithms.
_EPS = 1e-7


def cosine_scores(a: jax.Array, b: jax.Array, temperature: float) -> jax.Array:
  """``[batch, batch]``: ``cos(a_i, b_j) / temperature`` for ``a``, ``b`` ``[batch, dim]``."""
  return unit_rows(a) @ unit_rows(b).T / temperature


def teacher_scores(
  teacher: jax.Array, second_teacher: jax.Array | None = None, *, temperature: float, alpha: float = 0.5
) -> jax.Array:
  """The teacher's similarity lists ``[batch, batch]`` from its embeddings ``[batch, dim]`` of the batch's texts.

  One teacher: ``cos(t_i, t_j) / temperature``. Two: ``alpha`` times the first's plus ``1 - alpha`` times the
  second's (their widths may differ).

    >>> scores = teacher_scores(jnp.array([[1.0, 0.0], [0.6, 0.8]]), temperature=0.5)  # Cosines 1 and 0.6, / 0.5.
    >>> [round(float(scores[0, 0]), 4), round(float(scores[0, 1]), 4)]
    [2.0, 1.2]
  """
  scores = cosine_scores(teacher, teacher, temperature)
  if second_teacher is None:
    return scores
  return alpha * scores + (1.0 - alpha) * cosine_scores(second_teacher, second_teacher, temperature)


def listnet_loss(student: jax.Array, teacher: jax.Array) -> jax.Array:
  """ListNet: mean over rows of the cross entropy from ``softmax(teacher_i)`` to ``softmax(student_i)``, each over
  the row's other entries (the diagonal, the anchor itself, left out).

  Args:
    student, teacher: ``[batch, batch]`` similarity lists (each already divided by its temperature).

  Returns: a scalar.

    >>> scores = jnp.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    >>> round(float(listnet_loss(scores, scores)), 4)  # Rows 1-2: the entropy of softmax(1, 0), 0.5822; row 3: log 2.
    0.6192
  """
  diagonal = jnp.eye(student.shape[0], dtype=bool)
  log_p = jax.nn.log_softmax(jnp.where(diagonal, -jnp.inf, student), axis=-1)
  q = jax.nn.softmax(jnp.where(diagonal, -jnp.inf, teacher), axis=-1)
  return -jnp.sum(jnp.where(diagonal, 0.0, q * log_p)) / student.shape[0]


def listmle_loss(student: jax.Array, teacher: jax.Array) -> jax.Array:
  """ListMLE: the Plackett-Luce negative log-likelihood of each row's order by the teacher under the student's
  scores, ``log(sum_{k >= j} exp(s_k) + 1e-7) - s_j`` over the positions ``j`` in the teacher's order (scores less
  the row's largest, as released), averaged over positions, then rows.

  Args:
    student, teacher: ``[batch, batch]`` similarity lists; ties in the teacher's rows keep their column order.

  Returns: a scalar.

    >>> teacher = jnp.array([[2.0, 1.0], [1.0, 2.0]])
    >>> # Each row in the teacher's order, scored (0, -1): -log softmax(0, -1)[0] = 0.3133, then log(e^-1) + 1 = 0.
    >>> round(float(listmle_loss(jnp.array([[0.0, -1.0], [-1.0, 0.0]]), teacher)), 4)
    0.1566
  """
  order = jnp.argsort(-teacher, axis=-1, stable=True)
  ranked = jnp.take_along_axis(student, order, axis=-1)
  ranked = ranked - jnp.max(ranked, axis=-1, keepdims=True)
  tail_sums = jnp.flip(jnp.cumsum(jnp.flip(jnp.exp(ranked), axis=-1), axis=-1), axis=-1)
  return jnp.mean(jnp.log(tail_sums + _EPS) - ranked)


def consistency_loss(scores_12: jax.Array, scores_21: jax.Array, *, form: str = "as_released") -> jax.Array:
  """The ranking consistency of the two views' lists ``[batch, batch]`` (``cos(z1_i, z2_j) / temp`` and
  ``cos(z2_i, z1_j) / temp``), on their row softmaxes ``p``, ``q`` clamped at ``1e-7``.

  ``form="jsd"``: ``(KL(p || m) + KL(q || m)) / 2`` with ``m = (p + q) / 2``, summed over each row and averaged over
  rows (the paper's). ``form="as_released"``: ``(sum p log p + sum q log q) / (2 batch) - 1e-7 (sum p + sum q) /
  (2 batch)`` (the released code's, see the module docstring).

    >>> same = jnp.zeros((2, 2))  # Both views' lists uniform over 2: a JSD of 0, a negative entropy of -log 2.
    >>> float(consistency_loss(same, same, form="jsd")), round(float(consistency_loss(same, same)), 4)
    (0.0, -0.6931)
  """
  if form not in CONSISTENCY_FORMS:
    raise ValueError(f"form must be one of {', '.join(CONSISTENCY_FORMS)}, not {form!r}")
  rows = scores_12.shape[0]
  p = jnp.maximum(jax.nn.softmax(scores_12, axis=-1), _EPS)
  q = jnp.maximum(jax.nn.softmax(scores_21, axis=-1), _EPS)
  if form == "as_released":
    return 0.5 * (jnp.sum(p * (jnp.log(p) - _EPS)) + jnp.sum(q * (jnp.log(q) - _EPS))) / rows
  log_m = jnp.log(0.5 * (p + q))
  return 0.5 * (jnp.sum(p * (jnp.log(p) - log_m)) + jnp.sum(q * (jnp.log(q) - log_m))) / rows
