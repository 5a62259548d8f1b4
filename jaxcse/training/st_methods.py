"""sentence-transformers 6's losses as jaxcse methods: each one's settings read from its config block, its config
check, and its loss on the step's ``[batch, columns, dim]`` embeddings (``objectives`` registers them by name).

Ranking: ``mnrl`` (MultipleNegativesRankingLoss), ``cosent`` (CoSENTLoss), ``gist`` (GISTEmbedLoss). Learning from a
teacher, whose embeddings or scores the data holds as each row's ``label`` (sentence-transformers' convention):
``embed_distill`` (EmbedDistillLoss; MSELoss with ``distill.distance=mse``), ``margin_mse`` (MarginMSELoss),
``distill_kl_div`` (DistillKLDivLoss). Spreading out: ``gor`` (GlobalOrthogonalRegularizationLoss) alone, or added
to any method's loss with ``gor.enabled`` (``StepLoss`` adds it). The losses themselves are ``ranking_losses`` and
``distill_losses``, pure functions.
"""

from __future__ import annotations

import jax

from jaxcse.training import distill_losses, matryoshka, ranking_losses


def mnrl_directions(value) -> tuple[str, ...]:
  """``mnrl.directions`` as a tuple: a comma-separated string (``"query_to_doc,doc_to_query"``) or a sequence."""
  if isinstance(value, str):
    return tuple(d.strip() for d in value.split(",") if d.strip())
  return tuple(value)


def mnrl_settings(config) -> dict:
  m = config.mnrl
  return dict(
    scale=m.scale,
    directions=mnrl_directions(m.directions),
    partition_mode=m.partition_mode,
    hardness_mode=m.hardness_mode,
    hardness_strength=m.hardness_strength,
  )


def mnrl(settings, z, rng, complementary):
  """sentence-transformers 6's MultipleNegativesRankingLoss: columns anchor, positive, hard negatives 1..k."""
  del rng, complementary
  return ranking_losses.mnrl_loss(z, **settings), {}


def check_mnrl(config):
  if "mnrl" not in config:
    raise ValueError(
      "method mnrl needs the config block mnrl (scale, directions, partition_mode, hardness_mode, "
      "hardness_strength): configs/base.py has it"
    )
  ranking_losses.check_mnrl_settings(**mnrl_settings(config), prefix="mnrl.")


def cosent(settings, z, rng, complementary, *, labels):
  """sentence-transformers 6's CoSENTLoss on (sentence1, sentence2) pairs and their gold scores."""
  del rng, complementary
  if z.shape[1] != 2:
    raise ValueError(
      f"method cosent scores pairs: a batch of 2 sentence columns and a score per row, not {z.shape[1]} columns"
    )
  return ranking_losses.cosent_loss(z[:, 0], z[:, 1], labels, **settings), {}


def check_cosent(config):
  if "cosent" not in config:
    raise ValueError("method cosent needs the config block cosent (scale): configs/base.py has it")
  ranking_losses.check_multiplier("cosent.scale", config.cosent.scale)


def gist_settings(config) -> dict:
  g = config.gist
  return dict(
    temperature=g.temperature,
    margin_strategy=g.margin_strategy,
    margin=g.margin,
    contrast_anchors=g.contrast_anchors,
    contrast_positives=g.contrast_positives,
  )


def gist(settings, z, rng, complementary):
  """sentence-transformers 6's GISTEmbedLoss: columns anchor, positive, hard negatives 1..k; ``complementary`` the
  guide's embeddings of the batch's columns (``[batch, columns, guide_dim]``)."""
  del rng
  if complementary.shape[1] < 2:
    raise ValueError(
      f"method gist trains on pairs (anchor, positive, hard negatives): this batch has {complementary.shape[1]} "
      "text column (jaxcse-compile: pass --columns 2 or more)"
    )
  left_out = ranking_losses.gist_left_out_share(complementary, **settings)
  return ranking_losses.gist_loss(z, complementary, **settings), {"gist/left_out_frac": left_out}


def check_gist(config):
  if "gist" not in config:
    raise ValueError(
      "method gist needs the config block gist (guide_model, temperature, margin_strategy, margin, "
      "contrast_anchors, contrast_positives): configs/base.py has it"
    )
  ranking_losses.check_gist_settings(**gist_settings(config), prefix="gist.")
  if not config.gist.guide_model and config.model.init != "pretrained":
    raise ValueError(
      "gist.guide_model is empty, which means the starting model (model.name), and model.init="
      f"{config.model.init} has none: name a guide (a jaxcse workdir, Hugging Face folder or hub id)"
    )


# --------------------------------------------------------------------------
# Learning from a teacher: its embeddings or scores are the rows' labels.


def embed_distill_settings(config) -> dict:
  return {"distance": config.distill.distance}


def embed_distill(settings, z, rng, complementary, *, labels):
  """EmbedDistillLoss: each text column's embeddings against the teacher's (a label ``[dim]`` or ``[columns, dim]``
  per row)."""
  del rng, complementary
  return distill_losses.embed_distill_loss(z, labels, **settings), {}


def embed_distill_label_shapes(columns: int, dim: int) -> tuple[tuple[int, ...], ...]:
  return ((dim,), (columns, dim))


def margin_mse(settings, z, rng, complementary, *, labels):
  """MarginMSELoss: columns query, positive, negatives; a label per row of the teacher's margins or scores."""
  del rng, complementary
  return distill_losses.margin_mse_loss(z, labels, similarity=settings["similarity"]), {}


def margin_mse_label_shapes(columns: int, dim: int) -> tuple[tuple[int, ...], ...]:
  del dim
  negatives = columns - 2  # A scalar per row only with one negative (s-t reads it as [batch, 1]).
  return ((negatives,), (negatives + 1,)) + (((),) if negatives == 1 else ())


def distill_kl_div_settings(config) -> dict:
  d = config.distill
  return {
    "similarity": d.similarity,
    "student_temperature": d.student_temperature,
    "teacher_temperature": d.teacher_temperature,
  }


def distill_kl_div(settings, z, rng, complementary, *, labels):
  """DistillKLDivLoss: columns query then candidates; a label per row of the teacher's score of each candidate."""
  del rng, complementary
  return distill_losses.distill_kl_div_loss(z, labels, **settings), {}


def distill_kl_div_label_shapes(columns: int, dim: int) -> tuple[tuple[int, ...], ...]:
  del dim
  return ((columns - 1,),)


def check_distill(config):
  d = config.distill
  if d.distance not in distill_losses.DISTANCES:
    raise ValueError(f"distill.distance must be one of {', '.join(distill_losses.DISTANCES)}, not {d.distance!r}")
  if d.similarity not in distill_losses.SIMILARITIES:
    raise ValueError(
      f"distill.similarity must be one of {', '.join(distill_losses.SIMILARITIES)}, not {d.similarity!r}"
    )
  if config.method == "embed_distill" and matryoshka.Matryoshka.from_config(config):
    raise ValueError(
      "matryoshka.dims: method embed_distill compares each whole embedding with its teacher's, which a prefix "
      "is not (margin_mse and distill_kl_div compare scores, and take Matryoshka)"
    )
  if config.method == "distill_kl_div":
    ranking_losses.check_temperature("distill.student_temperature", d.student_temperature)
    ranking_losses.check_temperature("distill.teacher_temperature", d.teacher_temperature)


# --------------------------------------------------------------------------
# The spread-out regulariser, alone or added to a method's loss.


def gor_settings(config) -> dict:
  """``config.gor``'s terms as ``distill_losses.global_orthogonal_regularization``'s keywords."""
  g = config.gor
  return {
    "mean_weight": g.mean_weight,
    "second_moment_weight": g.second_moment_weight,
    "aggregation": g.aggregation,
    "similarity": g.similarity,
  }


def gor_terms(settings, z) -> tuple[jax.Array, dict]:
  """The regulariser's two terms summed, and each as a metric (s-t's loss names: ``gor_mean``,
  ``gor_second_moment``)."""
  mean, second_moment = distill_losses.global_orthogonal_regularization(z, **settings)
  return mean + second_moment, {"gor_mean": mean, "gor_second_moment": second_moment}


def gor(settings, z, rng, complementary):
  """GlobalOrthogonalRegularizationLoss alone: the batch's embeddings of each column spread out."""
  del rng, complementary
  return gor_terms(settings, z)


def check_gor(config):
  """``config.gor`` (read by method ``gor``, and by any method with ``gor.enabled``)."""
  g = config.get("gor")  # A config.json from before the block: no regulariser.
  if g is None or not (config.method == "gor" or g.enabled):
    return
  for field in ("mean_weight", "second_moment_weight"):
    ranking_losses.check_multiplier(f"gor.{field}", g[field], zero=True)
  if not (g.mean_weight or g.second_moment_weight):
    raise ValueError("gor.mean_weight and gor.second_moment_weight are both 0: the regulariser would add nothing")
  if g.aggregation not in distill_losses.AGGREGATIONS:
    raise ValueError(f"gor.aggregation must be one of {', '.join(distill_losses.AGGREGATIONS)}, not {g.aggregation!r}")
  if g.similarity not in distill_losses.SIMILARITIES:
    raise ValueError(f"gor.similarity must be one of {', '.join(distill_losses.SIMILARITIES)}, not {g.similarity!r}")
  if config.method == "gor" and g.enabled:
    raise ValueError("method gor is the regulariser alone: leave gor.enabled False (that adds it to another method)")
