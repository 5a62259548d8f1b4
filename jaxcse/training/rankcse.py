"""RankCSE (Liu et al., 2023) as a method: unsupervised SimCSE plus the two views' ranking consistency plus listwise
ranking distillation from a teacher's in-batch similarity lists (``rankcse_losses``).

The teacher's embeddings of each row's text are the row's label, computed once before training (any model
``Encoder`` loads; its own tokenizer, pooler and prompts): ``[D]`` for one teacher, ``[2, D]`` for two (the narrower
one zero-padded to the wider's width: a cosine is unchanged by zeros appended to both vectors). The released code
runs its teachers in the loop on the same two copies of each text, in eval mode, so both copies' teacher embeddings
are one: a precomputed label is that embedding.

Loss, as released: ``InfoNCE(z1, z2; temp) + consistency_weight * consistency(cos(z1, z2) / temp, cos(z2, z1) /
temp) + gamma * distillation(cos(z1, z2) / tau2, teacher lists / tau2)``.
"""

from __future__ import annotations

import ml_collections

from jaxcse.training import losses, rankcse_losses, ranking_losses

DISTILLATIONS = ("listnet", "listmle")


def settings(config: ml_collections.ConfigDict) -> dict:
  r = config.rankcse
  return {
    "temperature": config.loss.temperature,
    "distillation": r.distillation,
    "tau2": r.tau2,
    "gamma": r.gamma,
    "alpha": r.alpha,
    "consistency": r.consistency,
    "consistency_weight": r.consistency_weight,
  }


def loss(settings, z, rng, complementary, *, labels):
  """``z`` ``[batch, 2, dim]`` (the two dropout views); ``labels`` ``[batch, D]`` or ``[batch, 2, D]``."""
  del rng, complementary
  z1, z2 = z[:, 0], z[:, 1]
  temperature, tau2 = settings["temperature"], settings["tau2"]
  infonce = losses.simcse_loss(z1, z2, None, temperature=temperature, hard_negative_weight=0.0)
  consistency = rankcse_losses.consistency_loss(
    rankcse_losses.cosine_scores(z1, z2, temperature),
    rankcse_losses.cosine_scores(z2, z1, temperature),
    form=settings["consistency"],
  )
  teachers = (labels,) if labels.ndim == 2 else (labels[:, 0], labels[:, 1])
  teacher = rankcse_losses.teacher_scores(*teachers, temperature=tau2, alpha=settings["alpha"])
  kernel = rankcse_losses.listnet_loss if settings["distillation"] == "listnet" else rankcse_losses.listmle_loss
  distillation = kernel(rankcse_losses.cosine_scores(z1, z2, tau2), teacher)
  total = infonce + settings["consistency_weight"] * consistency + settings["gamma"] * distillation
  return total, {"infonce": infonce, "consistency": consistency, "distillation": distillation}


def label_shapes(columns: int, dim: int) -> tuple[tuple[int | None, ...], ...]:
  """One teacher's embedding of any width, or two teachers' (one width, the narrower zero-padded)."""
  del columns, dim
  return ((None,), (2, None))


def check(config: ml_collections.ConfigDict) -> None:
  r = config.rankcse
  if r.distillation not in DISTILLATIONS:
    raise ValueError(f"rankcse.distillation must be one of {', '.join(DISTILLATIONS)}, not {r.distillation!r}")
  if r.consistency not in rankcse_losses.CONSISTENCY_FORMS:
    raise ValueError(
      f"rankcse.consistency must be one of {', '.join(rankcse_losses.CONSISTENCY_FORMS)}, not {r.consistency!r}"
    )
  ranking_losses.check_temperature("rankcse.tau2", r.tau2)
  for field in ("gamma", "consistency_weight"):
    ranking_losses.check_multiplier(f"rankcse.{field}", r[field], zero=True)
  alpha = r.alpha
  if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and 0.0 <= alpha <= 1.0):
    raise ValueError(f"rankcse.alpha must be a number in [0, 1] (the first teacher's share), not {alpha!r}")
