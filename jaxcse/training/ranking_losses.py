"""Ranking losses on pairs and tuples as sentence-transformers 6 defines them, as pure functions.

``mnrl_loss`` is ``MultipleNegativesRankingLoss`` (InfoNCE with in-batch negatives, k >= 0 hard negatives per
anchor, its ``directions``, ``partition_mode`` and hardness weighting); ``gist_loss`` is ``GISTEmbedLoss`` (the
same with the candidates a frozen guide model finds too close to the anchor left out); ``cosent_loss`` is
``CoSENTLoss`` for scored pairs. Each is written on the global batch (as ``losses``): under ``jax.jit`` with a
batch-sharded input the compiler gathers the negatives across devices, as s-t's ``gather_across_devices=True``
does, so the loss and its gradient are s-t's on the whole global batch (for ``gist_loss``, see its docstring).
``tests/test_ranking_losses.py`` and ``tests/test_gist.py`` check them against sentence-transformers 6.2.0 in
float64 (relative error <= 1e-10 on the loss and on its gradient).

References (sentence-transformers 6.2.0):
  ``sentence_transformers/sentence_transformer/losses/multiple_negatives_ranking.py``
  (``MultipleNegativesRankingLoss.compute_loss_from_embeddings``) and
  ``sentence_transformers/sentence_transformer/losses/cosent.py`` (``CoSENTLoss.compute_loss_from_embeddings``),
  ``sentence_transformers/sentence_transformer/losses/gist_embed.py`` (``GISTEmbedLoss.forward``) and
  ``cached_gist_embed.py`` (``CachedGISTEmbedLoss.calculate_loss``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxcse.training.losses import MAX_LOGIT_SCALE, cosine_similarity_matrix, unit_rows

# s-t's names. query_to_doc holds the positive pair, so every direction set includes it.
DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")
PARTITION_MODES = ("joint", "per_direction")
# s-t's hardness_mode None is "none" here (a config string).
HARDNESS_MODES = ("none", "in_batch_negatives", "hard_negatives", "all_negatives")
# GISTEmbedLoss's margin_strategy: the margin subtracted from the guide's positive score as is, or scaled by it.
MARGIN_STRATEGIES = ("absolute", "relative")


def check_mnrl_settings(
  scale: float,
  directions: Sequence[str],
  partition_mode: str,
  hardness_mode: str,
  hardness_strength: float,
  *,
  prefix: str = "",
) -> None:
  """Raises ``ValueError`` (one line naming the setting) for a setting s-t's ``MultipleNegativesRankingLoss`` refuses.

  The same rules as its constructor: ``scale > 0``; at least one direction, all known, ``query_to_doc`` among them;
  ``per_direction`` without ``query_to_query`` or ``doc_to_doc`` (their candidates never include the positive);
  a known hardness mode; ``hardness_strength >= 0``. Also: no direction twice, and ``scale`` and
  ``hardness_strength`` at most ``MAX_LOGIT_SCALE`` (s-t takes any; beyond it float32 overflows). ``prefix`` goes before each
  setting's name in the message (``"mnrl."`` for the config block).
  """
  check_multiplier(f"{prefix}scale", scale)
  if not directions:
    raise ValueError(f"{prefix}directions is empty: give at least query_to_doc")
  if unknown := [d for d in directions if d not in DIRECTIONS]:
    raise ValueError(
      f"{prefix}directions names unknown directions {', '.join(map(repr, unknown))}; choose from "
      f"{', '.join(DIRECTIONS)}"
    )
  if len(set(directions)) != len(directions):
    raise ValueError(f"{prefix}directions {','.join(directions)} name one direction twice")
  if "query_to_doc" not in directions:
    raise ValueError(
      f"{prefix}directions {','.join(directions)} lack query_to_doc, the direction that holds the positive pair"
    )
  if partition_mode not in PARTITION_MODES:
    raise ValueError(f"{prefix}partition_mode must be one of {', '.join(PARTITION_MODES)}, not {partition_mode!r}")
  if partition_mode == "per_direction" and (same := [d for d in ("query_to_query", "doc_to_doc") if d in directions]):
    raise ValueError(
      f"{prefix}partition_mode per_direction cannot take {', '.join(same)} (its candidates never "
      "include the positive, so its own softmax is ill-defined): use partition_mode joint"
    )
  if hardness_mode not in HARDNESS_MODES:
    raise ValueError(f"{prefix}hardness_mode must be one of {', '.join(HARDNESS_MODES)}, not {hardness_mode!r}")
  check_multiplier(f"{prefix}hardness_strength", hardness_strength, zero=True)


def check_multiplier(name: str, value, *, zero: bool = False) -> None:
  """``ValueError`` naming ``name`` unless ``value`` is a number in (0, ``MAX_LOGIT_SCALE``] ([0, ...] with ``zero``):
  a factor of the cosines (a scale, a hardness strength). Infinite or overflowing ones are NaN at step 1."""
  number = isinstance(value, (int, float)) and not isinstance(value, bool)
  if not (number and (value >= 0 if zero else value > 0) and value <= MAX_LOGIT_SCALE):
    raise ValueError(
      f"{name} must be a number in {'[' if zero else '('}0, {MAX_LOGIT_SCALE:g}] (it multiplies the cosines; a "
      f"larger one overflows float32), not {value!r}"
    )


def check_temperature(name: str, value) -> None:
  """``ValueError`` naming ``name`` unless ``value`` is a finite number >= 1 / ``MAX_LOGIT_SCALE``: it divides the
  cosines, so near 0 it overflows float32 as a scale does (``check_multiplier``)."""
  number = isinstance(value, (int, float)) and not isinstance(value, bool)
  if not (number and 1 / MAX_LOGIT_SCALE <= value < math.inf):
    raise ValueError(
      f"{name} must be a finite number >= {1 / MAX_LOGIT_SCALE:g} (it divides the cosines; a smaller one "
      f"overflows float32), not {value!r}"
    )


def _hardness_penalty_mask(batch: int, num_docs: int, hardness_mode: str) -> jax.Array:
  """``[batch, num_docs * batch]`` booleans: the query-to-doc logits that get the hardness penalty.

  Column ``c * batch + j`` is document column ``c`` (0 the positives, ``c >= 1`` hard negative ``c``) of row ``j``;
  row ``i``'s own documents are the columns with ``j == i``.
  """
  own = jnp.tile(jnp.eye(batch, dtype=bool), (1, num_docs))
  if hardness_mode == "in_batch_negatives":  # Every other row's positive and hard negatives.
    return ~own
  if hardness_mode == "hard_negatives":  # The row's own hard negatives only.
    return own.at[:, :batch].set(False)
  return ~own.at[:, batch:].set(False)  # all_negatives: everything but the positive.


def mnrl_loss(
  z: jax.Array,
  *,
  scale: float = 20.0,
  directions: Sequence[str] = ("query_to_doc",),
  partition_mode: str = "joint",
  hardness_mode: str = "none",
  hardness_strength: float = 0.0,
) -> jax.Array:
  r"""sentence-transformers 6's ``MultipleNegativesRankingLoss`` on the global batch's embeddings.

  ``z[:, 0]`` are the queries (anchors) ``q``, ``z[:, 1]`` their positives and ``z[:, 2:]`` their ``k >= 0`` hard
  negatives; the documents ``D`` are all ``(1 + k) * batch`` of columns 1.., column by column (the positives, then
  every row's first hard negative, ...). With ``cos`` the cosine similarity and ``s = scale``, row ``i`` (query
  ``q_i``, positive ``d_i``) scores, for each direction:

  * ``query_to_doc``: ``s cos(q_i, D_j)`` for every document (the positive is ``d_i``);
  * ``query_to_query``: ``s cos(q_i, q_j)``, ``j != i``;
  * ``doc_to_query``: ``s cos(d_i, q_j)`` for every query;
  * ``doc_to_doc``: ``s cos(d_i, D_j)`` for the documents of the other rows.

  Hardness weighting adds ``hardness_strength * stop_gradient(cos(q_i, D_j))`` (not scaled) to the query-to-doc
  logits of the negatives ``hardness_mode`` names: ``in_batch_negatives`` (the other rows' documents),
  ``hard_negatives`` (the row's own hard negatives), ``all_negatives`` (both); ``none`` or strength 0 adds
  nothing. With ``p_i = s cos(q_i, d_i)``, the loss is ``mean_i (log Z_i - p_i)`` where ``log Z_i`` is the
  logsumexp of all the row's logits (``joint``) or the mean over directions of each direction's logsumexp
  (``per_direction``).

  The default is InfoNCE with in-batch negatives. With ``k = 1`` it is supervised SimCSE's loss
  (``losses.simcse_loss`` with hard negatives, ``hard_negative_weight`` 0) at ``temperature = 1 / scale``: the
  logits are computed as ``cos / (1 / scale)``, simcse_loss's operations in its order, so where ``1 / scale`` is
  the temperature's float (scale 20, temperature 0.05) the loss and its gradient are the same bits.

  Args:
    z: ``[batch, 2 + k, dim]``: anchor, positive, hard negatives 1..k.
    scale: multiplies the cosines (s-t's ``scale``, ``1 / temperature``; 20 = temperature 0.05); in (0, 1e4].
    directions: a subset of ``DIRECTIONS`` holding ``query_to_doc`` (checked by ``check_mnrl_settings``).
    partition_mode: ``joint`` (one softmax over every direction's logits) or ``per_direction`` (one per direction,
      their log-normalisers averaged; not with ``query_to_query`` or ``doc_to_doc``).
    hardness_mode: ``none``, ``in_batch_negatives``, ``hard_negatives`` or ``all_negatives``.
    hardness_strength: the penalty's ``alpha``, in [0, 1e4].

  Returns:
    A scalar: the mean over the ``batch`` rows.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.stack([jnp.eye(2), jnp.eye(2)], axis=1)  # Two rows, each its own positive.
    >>> round(float(mnrl_loss(z, scale=1.0)), 4)  # log(1 + e^-1), as simcse_loss at temperature 1.
    0.3133

  References:
    sentence-transformers 6.2.0, ``MultipleNegativesRankingLoss.compute_loss_from_embeddings``; hardness: Lan et
    al. 2025 (https://huggingface.co/papers/2503.04812), Schechter Vera et al. 2025 (EmbeddingGemma,
    https://huggingface.co/papers/2509.20354).
  """
  if z.ndim != 3 or z.shape[1] < 2:
    raise ValueError(f"z must be [batch, 2 + k, dim] (anchor, positive, k hard negatives); got {z.shape}")
  directions = tuple(directions)
  check_mnrl_settings(scale, directions, partition_mode, hardness_mode, hardness_strength)
  batch, columns = z.shape[0], z.shape[1]
  queries, positives = z[:, 0], z[:, 1]
  docs = [z[:, c] for c in range(1, columns)]
  rows = jnp.arange(batch)
  # Column block by column block, each divided by the temperature before they are joined, as simcse_loss computes
  # its [positives | hard negatives] logits: the same operations, so the same bits (the gradient too) at k = 1,
  # eagerly or jitted. (cos / (1 / scale) is cos * scale to the last bit or one rounding off: 1e-16 in float64.)
  temperature = 1.0 / scale
  cosines = [cosine_similarity_matrix(queries, d) for d in docs]
  logits = {"query_to_doc": jnp.concatenate([c / temperature for c in cosines], axis=1)}
  # s-t's order (query_to_doc, query_to_query, doc_to_query, doc_to_doc), whatever the order of ``directions``.
  if "query_to_query" in directions:
    logits["query_to_query"] = jnp.where(
      jnp.eye(batch, dtype=bool), -jnp.inf, cosine_similarity_matrix(queries, queries) / temperature
    )
  if "doc_to_query" in directions:
    logits["doc_to_query"] = cosines[0].T / temperature  # [i, j] = cos(q_j, d_i).
  if "doc_to_doc" in directions:
    own_docs = jnp.tile(jnp.eye(batch, dtype=bool), (1, len(docs)))
    logits["doc_to_doc"] = jnp.where(
      own_docs, -jnp.inf, jnp.concatenate([cosine_similarity_matrix(positives, d) / temperature for d in docs], axis=1)
    )
  if hardness_mode != "none" and hardness_strength > 0:
    penalty = hardness_strength * jax.lax.stop_gradient(jnp.concatenate(cosines, axis=1))
    mask = _hardness_penalty_mask(batch, len(docs), hardness_mode)
    logits["query_to_doc"] = logits["query_to_doc"] + jnp.where(mask, penalty, 0.0)

  if partition_mode == "joint":
    # The positive is column i of the first block: the cross-entropy with label i (simcse_loss's computation).
    return optax.softmax_cross_entropy_with_integer_labels(jnp.concatenate(list(logits.values()), axis=1), rows).mean()
  positive = logits["query_to_doc"][rows, rows]
  log_z = sum(jax.nn.logsumexp(block, axis=1) for block in logits.values()) / len(logits)
  return jnp.mean(log_z - positive)


def check_gist_settings(
  temperature: float,
  margin_strategy: str,
  margin: float,
  contrast_anchors: bool,
  contrast_positives: bool,
  *,
  prefix: str = "",
) -> None:
  """Raises ``ValueError`` (one line naming the setting) for a setting ``gist_loss`` cannot take.

  ``temperature`` a finite number >= 1 / ``MAX_LOGIT_SCALE`` (it divides the cosines; s-t takes any > 0);
  ``margin_strategy`` one of ``MARGIN_STRATEGIES`` (s-t's constructor refuses any other); ``margin`` any finite number (s-t takes any float: a negative margin
  keeps candidates up to ``|margin|`` above the positive); the two flags booleans. ``prefix`` goes before each
  setting's name in the message (``"gist."`` for the config block).
  """
  check_temperature(f"{prefix}temperature", temperature)
  if margin_strategy not in MARGIN_STRATEGIES:
    raise ValueError(f"{prefix}margin_strategy must be one of {', '.join(MARGIN_STRATEGIES)}, not {margin_strategy!r}")
  if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin):
    raise ValueError(f"{prefix}margin must be a finite number, not {margin!r}")
  for name, flag in (("contrast_anchors", contrast_anchors), ("contrast_positives", contrast_positives)):
    if not isinstance(flag, bool):
      raise ValueError(f"{prefix}{name} must be True or False, not {flag!r}")


def gist_loss(
  z: jax.Array,
  guide: jax.Array,
  *,
  temperature: float = 0.01,
  margin_strategy: str = "absolute",
  margin: float = 0.0,
  contrast_anchors: bool = True,
  contrast_positives: bool = True,
) -> jax.Array:
  r"""sentence-transformers 6's ``GISTEmbedLoss`` on the global batch's embeddings and a guide's of the same texts.

  GISTEmbed (Solatorio 2024) is InfoNCE whose in-batch and hard negatives are filtered by a frozen guide model:
  a candidate the guide scores above the guide's own score of the anchor's positive (minus a margin) is taken as
  a false negative and left out of the softmax. With ``cos`` the cosine similarity, ``a, p`` the anchors and
  positives (``z[:, 0]``, ``z[:, 1]``), ``n^c`` hard negative column ``c`` (``z[:, 2 + c]``) and ``g(.)`` the
  guide's embeddings of the same texts, row ``i``'s threshold is

  * ``absolute``: ``t_i = cos(g(a_i), g(p_i)) - margin``;
  * ``relative``: ``t_i = cos(g(a_i), g(p_i)) - |cos(g(a_i), g(p_i))| * margin``,

  and its logits, ``-inf`` where the guide's cosine of the same pair is ``> t_i``, are the blocks

  * ``cos(a_i, p_j)`` for every row ``j`` (the positive ``j = i`` is never left out);
  * ``cos(a_i, a_j)`` for every ``j`` (``contrast_anchors``; ``j = i`` included, as s-t: the guide's
    ``cos(g(a_i), g(a_i)) = 1`` leaves it out unless the positive's guide score is 1 too);
  * ``cos(p_i, p_j)`` for every ``j`` (``contrast_positives``; likewise);
  * ``cos(a_i, n^c_j)`` for every ``j``, one block per hard negative column ``c``,

  joined in this order and divided by ``temperature``; the loss is the mean over rows of the cross-entropy with
  the positive ``cos(a_i, p_i)`` as the label. A single hard negative column is ``GISTEmbedLoss.forward``; any
  number is ``CachedGISTEmbedLoss``'s (``GISTEmbedLoss`` refuses more than one, its cached form takes them all,
  block by block as here); both are checked in float64 (``tests/test_gist.py``).

  On several devices the loss is the global batch's (the compiler gathers the candidates), which is s-t's on one
  device holding the global batch. s-t's ``gather_across_devices=True`` gathers the positives and negatives but
  not the anchors, so its ``cos(a_i, a_j)`` block holds only the anchors of the anchor's own device; here it holds
  every anchor of the batch, whatever the device count.

  Args:
    z: ``[batch, 2 + k, dim]``: anchor, positive, hard negatives 1..k (k >= 0), of the model being trained.
    guide: ``[batch, 2 + k, guide_dim]``: the guide model's embeddings of the same texts (any width); it only
      chooses which logits are left out, so no gradient reaches it.
    temperature: divides the cosines (s-t's default 0.01); >= 1e-4.
    margin_strategy: ``absolute`` or ``relative`` (``MARGIN_STRATEGIES``).
    margin: the margin below the guide's positive score from which a candidate is left out (any finite number;
      0 leaves out what the guide scores above the positive).
    contrast_anchors: include the anchor-anchor block.
    contrast_positives: include the positive-positive block.

  Returns:
    A scalar: the mean over the ``batch`` rows.

  Example:
    >>> import jax.numpy as jnp
    >>> z = jnp.stack([jnp.eye(2), jnp.eye(2)], axis=1)  # Two rows, each its own positive.
    >>> # A guide that scores every pair alike (cosine 1): with margin 0.1 every candidate but the positive is
    >>> # above the threshold 1 - 0.1, a false negative, left out; each row's softmax holds the positive alone.
    >>> float(gist_loss(z, jnp.ones((2, 2, 3)), margin=0.1))
    0.0

  References:
    Solatorio, "GISTEmbed: Guided In-sample Selection of Training Negatives for Text Embedding Fine-tuning",
    arXiv 2402.16829 (https://huggingface.co/papers/2402.16829); sentence-transformers 6.2.0,
    ``GISTEmbedLoss.forward`` and ``CachedGISTEmbedLoss.calculate_loss``.
  """
  if z.ndim != 3 or z.shape[1] < 2:
    raise ValueError(f"z must be [batch, 2 + k, dim] (anchor, positive, k hard negatives); got {z.shape}")
  if guide.ndim != 3 or guide.shape[:2] != z.shape[:2]:
    raise ValueError(
      f"guide must be [batch, columns, guide_dim] with z's batch and columns {z.shape[:2]}; got {guide.shape}"
    )
  check_gist_settings(temperature, margin_strategy, margin, contrast_anchors, contrast_positives)
  left_out = _gist_left_out(
    jax.lax.stop_gradient(guide).astype(z.dtype), margin_strategy, margin, contrast_anchors, contrast_positives
  )
  cosines = [cosine_similarity_matrix(z[:, left], z[:, right]) for left, right in left_out.blocks]
  logits = jnp.where(left_out.cells, -jnp.inf, jnp.concatenate(cosines, axis=1)) / temperature
  return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.arange(z.shape[0])).mean()


class _LeftOut(NamedTuple):
  blocks: list[tuple[int, int]]  # (row column, candidate column) of each block, in gist_loss's order.
  cells: jax.Array  # [batch, blocks * batch] booleans: the logits left out.


def _gist_left_out(
  guide: jax.Array, margin_strategy: str, margin: float, contrast_anchors: bool, contrast_positives: bool
) -> _LeftOut:
  """``gist_loss``'s blocks and the cells its guide leaves out (s-t's ``mask_false_negatives``, block by block)."""
  batch, columns = guide.shape[0], guide.shape[1]
  blocks = [(0, 1)] + [(0, 0)] * contrast_anchors + [(1, 1)] * contrast_positives
  blocks += [(0, c) for c in range(2, columns)]
  guide_cosines = [cosine_similarity_matrix(guide[:, left], guide[:, right]) for left, right in blocks]
  positive_score = jnp.diagonal(guide_cosines[0])[:, None]
  if margin_strategy == "absolute":
    threshold = positive_score - margin
  else:
    threshold = positive_score - jnp.abs(positive_score) * margin
  cells = jnp.concatenate(guide_cosines, axis=1) > threshold
  # The positive (column i of the first block) is never left out.
  positive = jnp.zeros_like(cells).at[:, :batch].set(jnp.eye(batch, dtype=bool))
  return _LeftOut(blocks, cells & ~positive)


def gist_left_out_share(
  guide: jax.Array,
  *,
  margin_strategy: str = "absolute",
  margin: float = 0.0,
  contrast_anchors: bool = True,
  contrast_positives: bool = True,
  temperature: float | None = None,
) -> jax.Array:
  """The share of ``gist_loss``'s candidates that the guide leaves out, for the training log (no gradient).

  Counted over every block's cells but the positive and each text against itself (in the anchor-anchor and
  positive-positive blocks, which any guide scoring the positive below 1 leaves out): the other rows' texts and
  every hard negative, the row's own included. ``guide`` ``[batch, 2 + k, guide_dim]``; the settings are
  ``gist_loss``'s (``temperature`` is accepted and unused, so that both take the same settings).
  """
  del temperature
  guide = jax.lax.stop_gradient(guide)
  left_out = _gist_left_out(guide, margin_strategy, margin, contrast_anchors, contrast_positives)
  batch = guide.shape[0]
  # Diagonals not counted: the positive (anchor-positive block), each text against itself (anchor-anchor and
  # positive-positive blocks).
  not_counted = [left == right or (left, right) == (0, 1) for left, right in left_out.blocks]
  counted = ~jnp.concatenate([jnp.eye(batch, dtype=bool) & diagonal for diagonal in not_counted], axis=1)
  return jnp.sum(left_out.cells & counted) / jnp.maximum(jnp.sum(counted), 1)


def cosent_loss(z1: jax.Array, z2: jax.Array, labels: jax.Array, *, scale: float = 20.0) -> jax.Array:
  r"""sentence-transformers 6's ``CoSENTLoss`` on scored pairs.

  With ``s_i = scale * cos(z1[i], z2[i])`` and gold scores ``labels``::

    L = log(1 + sum over (i, j) with labels[i] < labels[j] of exp(s_i - s_j))

  so every pair scored lower than a pair with a higher gold score adds to the loss; ties add nothing, and only
  the order of the labels matters (any scale: 0..1, 0..5). s-t computes the same sum after sorting by label
  (``logcumsumexp``); this is the direct form, ``[batch, batch]`` differences (Su, 2022).

  Args:
    z1: first sentences, ``[batch, dim]``.
    z2: second sentences, ``[batch, dim]``.
    labels: ``[batch]`` gold similarity scores.
    scale: multiplies the cosines (s-t's default 20).

  Returns:
    A scalar.

  Example:
    >>> import jax.numpy as jnp
    >>> z1 = jnp.array([[1.0, 0.0], [1.0, 0.0]])
    >>> z2 = jnp.array([[1.0, 0.0], [0.0, 1.0]])  # Cosines 1 and 0 ...
    >>> # ... but the second pair is gold-scored higher: log(1 + e^(1 - 0)).
    >>> round(float(cosent_loss(z1, z2, jnp.array([0.0, 1.0]), scale=1.0)), 4)
    1.3133

  References:
    sentence-transformers 6.2.0, ``CoSENTLoss.compute_loss_from_embeddings``; Su, "CoSENT" (2022),
    https://kexue.fm/archives/8847.
  """
  if z1.ndim != 2 or z1.shape != z2.shape:
    raise ValueError(f"z1 and z2 must both be [batch, dim]; got {z1.shape} and {z2.shape}")
  if labels.shape != z1.shape[:1]:
    raise ValueError(f"labels must be [{z1.shape[0]}] (one score per pair); got {labels.shape}")
  # The cosines of losses.cosine_similarity_matrix's diagonal (norms clamped at 1e-8), without the [batch, batch].
  scores = scale * jnp.sum(unit_rows(z1) * unit_rows(z2), axis=-1)
  lower = labels[:, None] < labels[None, :]  # [i, j]: pair i is gold-scored below pair j.
  differences = jnp.where(lower, scores[:, None] - scores[None, :], -jnp.inf).reshape(-1)
  return jax.nn.logsumexp(jnp.concatenate([jnp.zeros((1,), differences.dtype), differences]))
