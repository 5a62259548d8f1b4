r"""Learning from a teacher, and spreading embeddings out: sentence-transformers 6.2's distillation losses and its
global orthogonal regulariser, as pure functions on the global batch's embeddings.

* ``embed_distill_loss``: ``EmbedDistillLoss`` (and ``MSELoss``, its ``distance="mse"``): each column's student
  embedding against the teacher's embedding of it (a label: ``[batch, dim]`` for every column alike, or
  ``[batch, columns, dim]`` column by column), by squared error, Euclidean distance or cosine distance.
* ``margin_mse_loss``: ``MarginMSELoss``: the student's score margins ``sim(q, p) - sim(q, n_i)`` against the
  teacher's (a label per row: the margins, or the teacher's scores of the positive and each negative).
* ``distill_kl_div_loss``: ``DistillKLDivLoss``: KL divergence from the teacher's softmax over a query's candidates
  to the student's, at the two temperatures, times the student temperature squared.
* ``global_orthogonal_regularization``: ``GlobalOrthogonalRegularizationLoss`` (Zhang et al. 2017's spread-out
  regulariser, as EmbeddingGemma adds it): the squared mean and the second moment (above ``1 / dim``) of the
  cosines of distinct in-batch embeddings, column by column.

Like ``ranking_losses``, each is written on the whole global batch: under ``jax.jit`` with a batch-sharded input
the compiler gathers what it needs across devices, and GradCache hands it the cached embeddings of every chunk.
``tests/test_distill_losses.py`` checks each against sentence-transformers 6.2.0's ``compute_loss_from_embeddings``
in float64 (relative error <= 1e-10 on the loss and on its gradient).

References (sentence-transformers 6.2.0, ``sentence_transformers/sentence_transformer/losses/``): ``embed_distill.py``,
``mse.py``, ``margin_mse.py``, ``distill_kl_div.py``, ``global_orthogonal_regularization.py``. Kim et al., EmbedDistill
(2023), https://arxiv.org/abs/2301.12005; Reimers & Gurevych (2020), https://arxiv.org/abs/2004.09813; Hofstätter et
al., Margin-MSE (2020), https://arxiv.org/abs/2010.02666; Lin et al. (2020), https://arxiv.org/abs/2010.11386; Zhang
et al., spread-out descriptors (2017), https://arxiv.org/abs/1708.06320.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcse.training.losses import unit_rows

# EmbedDistillLoss's distance_metric: F.mse_loss, the mean Euclidean distance, the mean of 1 - cosine.
DISTANCES = ("mse", "l2", "cosine")
# The similarity_fct of MarginMSELoss and DistillKLDivLoss (default pairwise_dot_score), and of the regulariser
# (default cos_sim): the dot product, or the cosine.
SIMILARITIES = ("dot", "cosine")
# GlobalOrthogonalRegularizationLoss's aggregation of its per-column terms.
AGGREGATIONS = ("mean", "sum")
# s-t normalises for its cosines with F.normalize (x / max(||x||, 1e-12)); we with unit_rows' 1e-8 clamp, which an
# embedding never reaches (the two agree wherever ||x|| > 1e-8).


def _check_columns(z: jax.Array, at_least: int, name: str) -> None:
  if z.ndim != 3 or z.shape[1] < at_least:
    raise ValueError(f"{name} takes [batch, columns >= {at_least}, dim] embeddings; got {z.shape}")


def _for_similarity(similarity: str, *embeddings: jax.Array) -> tuple[jax.Array, ...]:
  """The embeddings whose dot products are ``similarity``: unit rows for ``cosine``, as they are for ``dot``."""
  if similarity == "cosine":
    return tuple(unit_rows(e) for e in embeddings)
  if similarity != "dot":
    raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}, not {similarity!r}")
  return embeddings


def _pairwise(similarity: str, a: jax.Array, b: jax.Array) -> jax.Array:
  """``[batch]`` similarities of ``a[i]`` and ``b[i]`` (s-t's ``pairwise_dot_score`` / ``pairwise_cos_sim``)."""
  a, b = _for_similarity(similarity, a, b)
  return jnp.sum(a * b, axis=-1)


def embed_distill_loss(student: jax.Array, teacher: jax.Array, *, distance: str = "cosine") -> jax.Array:
  r"""sentence-transformers 6's ``EmbedDistillLoss`` (``MSELoss`` is its ``distance="mse"``).

  For each text column ``c``, the distance between the student's embeddings ``student[:, c]`` and the teacher's
  ``t_c`` (``teacher`` itself if ``[batch, dim]``, else ``teacher[:, c]``), then the mean over columns::

    mse:    mean over rows and dims of (s - t)^2      (F.mse_loss)
    l2:     mean over rows of ||s - t||
    cosine: mean over rows of 1 - cos(s, t)

  Args:
    student: ``[batch, columns, dim]``, the student's embeddings of the batch's text columns.
    teacher: ``[batch, dim]`` (one target for every column: a translation's columns distilled to the source's
      teacher embedding) or ``[batch, columns, dim]`` (a target per column); not differentiated.
    distance: one of ``DISTANCES``.

  Returns:
    A scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> student = jnp.array([[[1.0, 0.0]], [[0.0, 2.0]]])  # Two rows, one column.
    >>> teacher = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    >>> float(embed_distill_loss(student, teacher, distance="mse"))  # (0 + 0 + 0 + 1) / 4
    0.25
    >>> float(embed_distill_loss(student, teacher, distance="cosine"))  # Both rows point the teacher's way.
    0.0

  References:
    sentence-transformers 6.2.0, ``EmbedDistillLoss.compute_loss_from_embeddings``; Kim et al. (2023),
    https://arxiv.org/abs/2301.12005.
  """
  _check_columns(student, 1, "embed_distill_loss")
  batch, columns, dim = student.shape
  if teacher.shape not in ((batch, dim), (batch, columns, dim)):
    raise ValueError(
      f"the teacher's embeddings must be [{batch}, {dim}] or [{batch}, {columns}, {dim}] for the student's "
      f"{student.shape}; got {teacher.shape} (the student's embeddings are {dim}-dimensional: a teacher of another "
      "width needs a projection, which jaxcse does not have)"
    )
  if distance not in DISTANCES:
    raise ValueError(f"distance must be one of {', '.join(DISTANCES)}, not {distance!r}")
  teacher = jax.lax.stop_gradient(teacher).astype(student.dtype)
  if teacher.ndim == 2:
    teacher = jnp.broadcast_to(teacher[:, None], student.shape)
  if distance == "mse":
    per_column = jnp.mean((student - teacher) ** 2, axis=(0, 2))
  elif distance == "l2":
    per_column = jnp.mean(jnp.linalg.norm(student - teacher, axis=-1), axis=0)
  else:
    per_column = jnp.mean(1.0 - jnp.sum(unit_rows(student) * unit_rows(teacher), axis=-1), axis=0)
  return jnp.mean(per_column)


def margins_of_labels(labels: jax.Array, batch: int, negatives: int) -> jax.Array:
  """``[batch, negatives]`` teacher margins from a ``MarginMSELoss`` label: ``[batch]`` (one negative),
  ``[batch, negatives]`` (the margins) or ``[batch, negatives + 1]`` (the scores of the positive, then of each
  negative: margins ``labels[:, :1] - labels[:, 1:]``); ``ValueError`` for any other shape."""
  if labels.shape == (batch, negatives + 1):
    return labels[:, :1] - labels[:, 1:]
  if labels.shape == (batch,):
    labels = labels[:, None]
  if labels.shape != (batch, negatives):
    raise ValueError(
      f"MarginMSE's labels must be [{batch}, {negatives}] (the teacher's margins sim(q, p) - sim(q, n_i)) or "
      f"[{batch}, {negatives + 1}] (its scores of the positive and of each negative) for {negatives} negative "
      f"column(s); got {labels.shape}"
    )
  return labels


def margin_mse_loss(z: jax.Array, labels: jax.Array, *, similarity: str = "dot") -> jax.Array:
  r"""sentence-transformers 6's ``MarginMSELoss``: the mean squared error between the student's and the teacher's
  score margins.

  With columns query ``q``, positive ``p`` and negatives ``n_1..n_k``::

    L = mean over rows and i of ((sim(q, p) - sim(q, n_i)) - m_i)^2

  where ``m`` is the teacher's margins (``margins_of_labels``).

  Args:
    z: ``[batch, 2 + k, dim]``, columns query, positive, negatives (k >= 1).
    labels: ``[batch]`` (k = 1), ``[batch, k]`` (margins) or ``[batch, k + 1]`` (scores); not differentiated.
    similarity: ``dot`` (s-t's default ``pairwise_dot_score``) or ``cosine``.

  Returns:
    A scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])  # q.p = 1, q.n = 0: margin 1.
    >>> float(margin_mse_loss(z, jnp.array([0.5])))  # (1 - 0.5)^2
    0.25

  References:
    sentence-transformers 6.2.0, ``MarginMSELoss.compute_loss_from_embeddings``; Hofstätter et al. (2020),
    https://arxiv.org/abs/2010.02666.
  """
  _check_columns(z, 3, "margin_mse_loss (query, positive, negatives)")
  batch, columns, _ = z.shape
  teacher = jax.lax.stop_gradient(margins_of_labels(labels, batch, columns - 2)).astype(z.dtype)
  positive = _pairwise(similarity, z[:, 0], z[:, 1])
  negatives = jnp.stack([_pairwise(similarity, z[:, 0], z[:, c]) for c in range(2, columns)], axis=1)
  return jnp.mean((positive[:, None] - negatives - teacher) ** 2)


def distill_kl_div_loss(
  z: jax.Array,
  labels: jax.Array,
  *,
  student_temperature: float = 1.0,
  teacher_temperature: float = 1.0,
  similarity: str = "dot",
) -> jax.Array:
  r"""sentence-transformers 6's ``DistillKLDivLoss``: the KL divergence of the student's distribution over each
  query's candidates from the teacher's, scaled by the student temperature squared.

  With ``s_j = sim(q, c_j) / T_s`` over the candidates ``c_1..c_N`` (positive and negatives) and the teacher's
  scores ``t_j``::

    L = T_s^2 * mean over rows of sum_j p_j (log p_j - log softmax(s)_j),   p = softmax(t / T_t)

  (``torch.nn.KLDivLoss(reduction="batchmean")``: a teacher probability of exactly 0 adds 0).

  Args:
    z: ``[batch, 1 + N, dim]``, columns query then N >= 2 candidates.
    labels: ``[batch, N]`` the teacher's scores of the candidates (logits); not differentiated.
    student_temperature, teacher_temperature: divide the student's similarities and the teacher's scores.
    similarity: ``dot`` (s-t's default) or ``cosine``.

  Returns:
    A scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])  # Student scores 1 and 0 ...
    >>> round(float(distill_kl_div_loss(z, jnp.array([[1.0, 0.0]]))), 6)  # ... as the teacher's: no divergence.
    0.0

  References:
    sentence-transformers 6.2.0, ``DistillKLDivLoss.compute_loss_from_embeddings``; Lin et al. (2020),
    https://arxiv.org/abs/2010.11386.
  """
  _check_columns(z, 3, "distill_kl_div_loss (query and at least 2 candidates)")
  batch, columns, _ = z.shape
  if labels.shape != (batch, columns - 1):
    raise ValueError(
      f"DistillKLDiv's labels must be [{batch}, {columns - 1}], the teacher's score of each of the "
      f"{columns - 1} candidate columns; got {labels.shape}"
    )
  scores = jnp.stack([_pairwise(similarity, z[:, 0], z[:, c]) for c in range(1, columns)], axis=1)
  student_log_probs = jax.nn.log_softmax(scores / student_temperature, axis=1)
  teacher = jax.lax.stop_gradient(labels).astype(z.dtype) / teacher_temperature
  teacher_probs, teacher_log_probs = jax.nn.softmax(teacher, axis=1), jax.nn.log_softmax(teacher, axis=1)
  pointwise = jnp.where(teacher_probs > 0, teacher_probs * (teacher_log_probs - student_log_probs), 0.0)
  return jnp.sum(pointwise) / batch * student_temperature**2


def global_orthogonal_regularization(
  z: jax.Array,
  *,
  mean_weight: float = 1.0,
  second_moment_weight: float = 1.0,
  aggregation: str = "mean",
  similarity: str = "cosine",
) -> tuple[jax.Array, jax.Array]:
  r"""sentence-transformers 6's ``GlobalOrthogonalRegularizationLoss``: ``(mean term, second-moment term)``.

  For each column's ``[batch, dim]`` embeddings, with ``S`` their similarity matrix and ``M = batch (batch - 1)``
  its off-diagonal count::

    mean term:          (sum over i != j of S_ij / M)^2
    second-moment term: max(0, sum over i != j of S_ij^2 / M - 1 / dim)

  each aggregated over the columns (``mean`` or ``sum``) and multiplied by its weight. Random unit vectors in
  ``dim`` dimensions have cosines of mean 0 and second moment ``1 / dim``: the regulariser pushes the batch's
  embeddings to spread out like them. s-t returns the two as separate loss terms, which its trainer sums.

  Args:
    z: ``[batch, columns, dim]``.
    mean_weight, second_moment_weight: the two terms' weights (0 leaves a term out: it is 0).
    aggregation: one of ``AGGREGATIONS``.
    similarity: ``cosine`` (s-t's default ``cos_sim``) or ``dot``.

  Returns:
    The two weighted terms, scalars.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.array([[[1.0, 0.0]], [[0.0, 1.0]]])  # Two orthogonal rows: cosine 0 ...
    >>> [float(t) for t in global_orthogonal_regularization(z)]  # ... mean 0, second moment 0 < 1/2.
    [0.0, 0.0]

  References:
    sentence-transformers 6.2.0, ``GlobalOrthogonalRegularizationLoss.compute_gor``; Zhang et al. (2017),
    https://arxiv.org/abs/1708.06320.
  """
  _check_columns(z, 1, "global_orthogonal_regularization")
  if aggregation not in AGGREGATIONS:
    raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, not {aggregation!r}")
  batch, _, dim = z.shape
  off_diagonal = max(batch * (batch - 1), 1)
  (columns,) = _for_similarity(similarity, jnp.swapaxes(z, 0, 1))  # [columns, batch, dim]
  sim = jnp.einsum("cid,cjd->cij", columns, columns) * (1.0 - jnp.eye(batch, dtype=z.dtype))
  mean_terms = (jnp.sum(sim, axis=(1, 2)) / off_diagonal) ** 2
  second_moment_terms = jax.nn.relu(jnp.sum(sim**2, axis=(1, 2)) / off_diagonal - 1.0 / dim)
  reduce = jnp.sum if aggregation == "sum" else jnp.mean
  return mean_weight * reduce(mean_terms), second_moment_weight * reduce(second_moment_terms)
