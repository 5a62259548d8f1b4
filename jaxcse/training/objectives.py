"""Training objectives by name: what each method needs, its loss on the global batch, the scores it logs.

``train_step`` asks this registry for ``config.method`` and never tests
method names. Adding a method is one ``register(Objective(...))`` call:

    register(Objective(
        name="l2",
        loss=lambda settings, z, rng, complementary: (settings["weight"] * jnp.mean((z[:, 0] - z[:, 1]) ** 2), {}),
        settings=lambda config: {"weight": config.l2.weight},  # The fields it reads, resolved once per run.
    ))

An objective with a ``loss`` trains sentence embeddings: the step embeds
every view of the batch (``[batch, views, hidden]``; a one-column batch gets
two dropout views) and calls ``loss`` on them. SimCSE's auxiliary MLM loss
(``config.mlm.enabled``) is added to any of them. The ``mlm`` objective has no
sentence loss: it is BERT's masked-LM pretraining on token sequences.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from jaxcse import models
from jaxcse.core.registry import Registry
from jaxcse.training import dclr_losses, losses, rankcse, st_methods

# The fields of the config an objective's loss and scores read, by name: its ``settings(config)``, resolved once when
# the step is built, so that a loss never sees the whole config.
Settings = Mapping[str, Any]
# (settings, z [batch, views, hidden], rng, complementary [batch, views, hidden] | None) -> (loss, metrics); an
# objective with ``labels=True`` also gets ``labels=`` the batch's float labels ([batch, *a label's shape]).
SentenceLoss = Callable[[Settings, jax.Array, jax.Array, Any], tuple[jax.Array, dict]]


def contrastive_scores(settings: Settings, z: jax.Array, rng: jax.Array) -> dict[str, jax.Array]:
  """Mean cosines of the step's own embeddings (the MixCSE paper's Fig. 4a dynamics), without gradient.

  * ``pos_score``: ``cos(z1[i], z2[i])`` averaged over ``i``, the two views of one sentence;
  * ``neg_score``: ``cos(z1[i], z2[j])`` averaged over ``i != j``, the in-batch negatives (a supervised batch's
    hard negatives are not counted).

  The paper plots these divided by the temperature; we log the cosines.
  """
  del settings, rng
  z = jax.lax.stop_gradient(z)
  sim = losses.cosine_similarity_matrix(z[:, 0], z[:, 1])  # [batch, batch]
  batch = sim.shape[0]
  positive = jnp.trace(sim) / batch
  # The off-diagonal mean; 0 for a batch of one, which has no negatives.
  negative = (jnp.sum(sim) - jnp.trace(sim)) / max(batch * (batch - 1), 1)
  return {"pos_score": positive, "neg_score": negative}


@dataclasses.dataclass(frozen=True)
class EncoderNeeds:
  """What a method asks of the encoders beyond its loss, for one config (its ``Objective.encoder``).

  Attributes:
    attend_padding: the encoder attends to padding (a released code that passes no attention mask): the trained
      model, the complementary model and the evaluations during training.
    complementary: the step gets a frozen complementary model's embeddings of the same batch, its loss's
      ``complementary`` argument (DCLR's instance weighting; GISTEmbed's guide).
    complementary_dropout: the complementary model runs with dropout on.
    complementary_model: its name: a jaxcse workdir, a Hugging Face folder or hub id (``configured.complementary``
      loads it).
    complementary_revision: for a hub id, the branch, tag or commit ("" = main).
    complementary_field: the config field that names it, for messages (e.g. ``dclr.complementary_model``).
    complementary_embedding: which embedding of it the loss gets: ``training`` (DCLR's: a jaxcse workdir's training
      pooler, a Hugging Face folder's; a one-column batch embedded as its two views) or ``sentence`` (the model's
      sentence embedding, as it encodes: a workdir's test pooler, a folder's; the batch's columns as they are).
  """

  attend_padding: bool = False
  complementary: bool = False
  complementary_dropout: bool = False
  complementary_model: str = ""
  complementary_revision: str = ""
  complementary_field: str = ""
  complementary_embedding: str = "training"


@dataclasses.dataclass(frozen=True)
class Needs(EncoderNeeds):
  """What a run of ``config.method`` needs from the encoders and the step (``needs``: the one place it is resolved).

  Besides ``EncoderNeeds``:

  Attributes:
    sentence_loss: the step embeds the batch's views (a one-column batch twice, for two dropout views) and applies
      the method's loss; False for masked-LM pretraining, which has none.
    token_loss: the step's masked-LM term: ``"pretraining"`` (the ``masked_lm`` objective: the masked positions
      only, weight 1, the batch's rows as they are), ``"auxiliary"`` (SimCSE's ``config.mlm.enabled``: every
      position of every view, weight ``config.mlm.weight``) or None.
    two_views: a one-column batch is embedded as two views (``Objective.two_views``).
    regularizer: ``config.gor``'s settings when the spread-out regulariser is added to the method's loss
      (``gor.enabled``), else None.
  """

  sentence_loss: bool = True
  token_loss: str | None = None
  two_views: bool = True
  regularizer: Settings | None = None


@dataclasses.dataclass(frozen=True)
class Objective:
  """One training method.

  Attributes:
    name: the ``config.method`` that selects it.
    loss: its loss on the embeddings of the global batch (``SentenceLoss``);
      None for token-level pretraining (``masked_lm``).
    settings: the config fields its ``loss`` and ``scores`` read, as a mapping (``Settings``): they get this, not
      the config.
    masked_lm: the objective is BERT's masked-LM loss on token sequences
      (weight 1, output layer only at the masked positions), not a sentence loss.
    scores: extra metrics from the step's own embeddings, no gradient.
    check_config: raises ``ValueError`` for a config this method cannot run (called when the config is loaded).
    encoder: what the method asks of the encoders for a config (``EncoderNeeds``); read through ``needs``.
    labels: the loss reads a label per example: the batch's ``"labels"`` (float ``[batch, *label_shape]``: a gold
      score, or a teacher's scores or embeddings), passed to ``loss`` as ``labels=``.
    label_shapes: ``(text columns, embedding width) -> the shapes one row's label may have`` (``()``: a number;
      ``None`` in a shape: any size there, a teacher's own width); the trainer refuses data whose labels have
      another before it writes anything (``label_shape_allowed``).
    two_views: a one-column batch is embedded twice, SimCSE's two dropout views; False: once, as its one column
      (a loss that compares each text with its teacher, not with itself).
    min_columns: the fewest text columns its training data may have (2: an anchor and its positive; the trainer
      refuses a corpus with fewer before it writes anything); max_columns: the most (None: any).
    in_batch_negatives: every other text of the batch is a negative for each anchor, so a text twice in a batch is
      a false negative and ``data.no_duplicates`` applies; False for a loss that only compares the batch's own
      pairs with one another (CoSENT), which a repeated text does not mislead: its batches are plain.
    doc: one line for ``--help`` and errors.
  """

  name: str
  loss: SentenceLoss | None = None
  settings: Callable[[ml_collections.ConfigDict], Settings] = lambda config: {}
  masked_lm: bool = False
  scores: Callable[[Settings, jax.Array, jax.Array], dict] | None = contrastive_scores
  check_config: Callable[[ml_collections.ConfigDict], None] = lambda config: None
  encoder: Callable[[ml_collections.ConfigDict], EncoderNeeds] = lambda config: EncoderNeeds()
  labels: bool = False
  label_shapes: Callable[[int, int], tuple[tuple[int, ...], ...]] = lambda columns, dim: ((),)
  two_views: bool = True
  min_columns: int = 1
  max_columns: int | None = None
  in_batch_negatives: bool = True
  doc: str = ""

  def __post_init__(self):
    if (self.loss is None) == (not self.masked_lm):
      raise ValueError(f"objective {self.name!r}: give a sentence loss, or masked_lm=True, not both")


def label_shape_allowed(shape: tuple[int, ...], allowed) -> bool:
  """Whether a row's label ``shape`` is one of ``allowed`` (``Objective.label_shapes``; ``None``: any size)."""
  return any(
    len(shape) == len(pattern) and all(p is None or p == n for p, n in zip(pattern, shape)) for pattern in allowed
  )


_REGISTRY: Registry[Objective] = Registry(
  "objective", lambda objective: objective.name, "unknown method {name!r}; choose one of {known}"
)
register, unregister, names, get = _REGISTRY.register, _REGISTRY.unregister, _REGISTRY.names, _REGISTRY.get


def pooling_of(config: ml_collections.ConfigDict) -> models.PoolerSpec:
  """The run's poolers, as ``config.model`` names them (every method: a method never replaces them)."""
  return models.PoolerSpec(
    config.model.pooler, config.model.mlp_only_train, config.model.test_pooler or None, config.model.dev_pooler or None
  )


def needs(config: ml_collections.ConfigDict) -> Needs:
  """What ``config``'s run needs from the encoders and the step: its method's ``encoder`` needs, its loss terms.

  The one place a method's needs are resolved from a config; the trainer, the step and ``jaxcse.compile`` read it.
  """
  objective = get(config.method)
  token_loss = "pretraining" if objective.masked_lm else "auxiliary" if config.mlm.enabled else None
  gor = config.get("gor")  # A config.json from before the block: no regulariser.
  return Needs(
    **dataclasses.asdict(objective.encoder(config)),
    sentence_loss=objective.loss is not None,
    token_loss=token_loss,
    two_views=objective.two_views,
    regularizer=st_methods.gor_settings(config) if gor is not None and gor.enabled else None,
  )


# --------------------------------------------------------------------------
# The methods.


def _simcse_settings(config) -> Settings:
  return {"temperature": config.loss.temperature, "hard_negative_weight": config.loss.hard_negative_weight}


def _simcse(settings, z, rng, complementary):
  del rng, complementary
  hard = z[:, 2] if z.shape[1] > 2 else None  # Supervised: a third column of hard negatives.
  return losses.simcse_loss(z[:, 0], z[:, 1], hard, **settings), {}


def _mixcse_settings(config) -> Settings:
  m = config.mixcse
  return {
    "temperature": config.loss.temperature,
    "mix_lambda": m.mix_lambda,
    "neighbour": m.neighbour,
    "symmetric": m.symmetric,
    "stop_gradient": m.stop_gradient,
  }


def _mixcse(settings, z, rng, complementary):
  del complementary
  return losses.mixcse_loss(z[:, 0], z[:, 1], **settings, rng=rng), {}


def _mixcse_scores(settings, z, rng):
  """``contrastive_scores`` and ``mix_score``: each anchor against its own mixed negative (drawn with the loss's rng)."""
  scores = contrastive_scores(settings, z, rng)
  z = jax.lax.stop_gradient(z)
  scores["mix_score"] = losses.mixcse_mix_scores(
    z[:, 0], z[:, 1], mix_lambda=settings["mix_lambda"], neighbour=settings["neighbour"], rng=rng
  ).mean()
  return scores


# DCLR's ablations (its Table 2): where the instance weights come from, and what the noise negatives are.
DCLR_INSTANCE_WEIGHTING = ("complementary", "self", "none")
DCLR_NOISE_NEGATIVES = ("ascent", "random", "none")


def _dclr_settings(config) -> Settings:
  """Its own block (``config.dclr``) and the temperature it shares with the other contrastive methods."""
  return {"temperature": config.loss.temperature, **config.dclr.to_dict()}


def _dclr(settings, z, rng, complementary):
  """DCLR's loss; ``dclr.noise_negatives`` and ``dclr.instance_weighting`` select the paper's ablations.

  Noise: ``ascent`` (N(0, noise_std^2), then ``ascent_steps`` normalised gradient-ascent steps), ``random`` (the
  same draws, no ascent: "random noise"), ``none`` (no noise columns). Weights: ``complementary`` (the frozen
  complementary model's cosines), ``self`` (the model's own embeddings of this step, under stop-gradient: "self
  instance weighting"), ``none`` (all ones).
  """
  z1, z2 = z[:, 0], z[:, 1]
  temperature, noise_negatives, weighting = (
    settings["temperature"],
    settings["noise_negatives"],
    settings["instance_weighting"],
  )
  noise = None
  if noise_negatives != "none":
    num_noise = int(z1.shape[0] * settings["noise_times"])  # int() as the official code.
    noise = dclr_losses.dclr_initial_noise(
      rng, num_noise, z1.shape[-1], sigma=settings["noise_std"], dtype=jnp.promote_types(z1.dtype, jnp.float32)
    )
    if noise_negatives == "ascent":
      noise = dclr_losses.dclr_noise_negatives(
        z1, z2, noise, temperature=temperature, steps=settings["ascent_steps"], step_size=settings["ascent_step_size"]
      )
  weights = None
  if weighting == "complementary":
    weights = dclr_losses.dclr_instance_weights(complementary[:, 0], complementary[:, 1], phi=settings["phi"])
  elif weighting == "self":
    weights = dclr_losses.dclr_instance_weights(
      jax.lax.stop_gradient(z1), jax.lax.stop_gradient(z2), phi=settings["phi"]
    )
  loss = dclr_losses.dclr_loss(z1, z2, noise, weights, temperature=temperature, form=settings["loss_form"])
  return loss, {"dclr/weight_zero_frac": 0.0 if weights is None else 1.0 - weights.mean()}


def _check_mixcse(config):
  if config.mixcse.neighbour not in ("roll", "random", "hardest"):
    raise ValueError(f"mixcse.neighbour must be roll, random or hardest, not {config.mixcse.neighbour!r}")


def _dclr_encoder(config) -> EncoderNeeds:
  """The released code passes no attention mask (so attends to padding) and runs its complementary model with
  dropout on (``dclr.as_released``); the complementary model is used only to weight instances by it."""
  released = bool(config.dclr.as_released)
  return EncoderNeeds(
    attend_padding=released,
    complementary=config.dclr.instance_weighting == "complementary",
    complementary_dropout=bool(config.dclr.complementary_dropout) or released,
    complementary_model=config.dclr.complementary_model,
    complementary_field="dclr.complementary_model",
  )


# DCLR's released code trains on BERT's pooler layer + a fresh MLP, selects on the pooler layer and tests on [CLS]:
# configs/dclr_as_released.py sets these model fields, and dclr.as_released refuses any other choice.
DCLR_RELEASED_POOLING = {
  "pooler": "bert_pooler_mlp",
  "mlp_only_train": False,
  "test_pooler": "cls_before_pooler",
  "dev_pooler": "bert_pooler",
}


def _check_dclr(config):
  d = config.dclr
  weighting, noise = config.dclr.instance_weighting, d.noise_negatives
  if d.as_released and (
    differ := [f"model.{k}={config.model[k]!r}" for k, v in DCLR_RELEASED_POOLING.items() if config.model[k] != v]
  ):
    raise ValueError(
      f"dclr.as_released pools as the released code ("
      f"{', '.join(f'model.{k}={v!r}' for k, v in DCLR_RELEASED_POOLING.items())}), not "
      f"{', '.join(differ)}: use configs/dclr_as_released.py, or drop dclr.as_released"
    )
  if weighting not in DCLR_INSTANCE_WEIGHTING:
    raise ValueError(f"dclr.instance_weighting must be one of {', '.join(DCLR_INSTANCE_WEIGHTING)}, not {weighting!r}")
  if noise not in DCLR_NOISE_NEGATIVES:
    raise ValueError(f"dclr.noise_negatives must be one of {', '.join(DCLR_NOISE_NEGATIVES)}, not {noise!r}")
  if weighting == "complementary" and not d.complementary_model:
    raise ValueError("method dclr needs config.dclr.complementary_model (a jaxcse workdir or HF folder/hub id)")
  if d.loss_form not in ("official", "infonce"):
    raise ValueError(f"dclr.loss_form must be official or infonce, not {d.loss_form!r}")
  if noise != "none" and int(config.train.batch_size * d.noise_times) < 1:
    raise ValueError(
      f"dclr.noise_times={d.noise_times} gives int(train.batch_size x noise_times) = 0 noise "
      "negatives; for none, set dclr.noise_negatives=none"
    )
  if noise == "ascent" and d.ascent_steps < 1:
    raise ValueError(
      f"dclr.ascent_steps={d.ascent_steps} takes no ascent step; for random noise negatives without "
      "gradient ascent, set dclr.noise_negatives=random"
    )


def _check_mlm(config):
  if config.mlm.enabled:
    raise ValueError(
      "method mlm is masked-LM pretraining itself; leave mlm.enabled False (that adds SimCSE's "
      "auxiliary MLM loss to a contrastive method)"
    )
  if config.train.grad_cache_chunk:
    raise ValueError("method mlm has no in-batch negatives: use a smaller batch instead of train.grad_cache_chunk")


def _gist_encoder(config) -> EncoderNeeds:
  """The guide: ``gist.guide_model``, else the starting model (``model.name`` at ``model.revision``), frozen and
  without dropout (s-t's guide runs under ``no_grad`` in eval mode), embedding as it encodes."""
  guide = config.gist.guide_model
  return EncoderNeeds(
    complementary=True,
    complementary_model=guide or config.model.name,
    complementary_revision="" if guide else config.model.revision,
    complementary_field="gist.guide_model",
    complementary_embedding="sentence",
  )


register(
  Objective(
    "simcse",
    loss=_simcse,
    settings=_simcse_settings,
    doc="SimCSE: InfoNCE over in-batch negatives (+ hard negatives from a sent0,sent1,hard_neg csv)",
  )
)
register(
  Objective(
    "mixcse",
    loss=_mixcse,
    settings=_mixcse_settings,
    scores=_mixcse_scores,
    check_config=_check_mixcse,
    doc="MixCSE: SimCSE + mixed hard negatives under stop-gradient",
  )
)
register(
  Objective(
    "dclr",
    loss=_dclr,
    settings=_dclr_settings,
    check_config=_check_dclr,
    encoder=_dclr_encoder,
    doc="DCLR: noise negatives by gradient ascent + instance weights from a complementary model",
  )
)
register(
  Objective(
    "mnrl",
    loss=st_methods.mnrl,
    settings=st_methods.mnrl_settings,
    check_config=st_methods.check_mnrl,
    doc="sentence-transformers' MultipleNegativesRankingLoss: anchor, positive, k >= 0 hard negatives",
  )
)
register(
  Objective(
    "cosent",
    loss=st_methods.cosent,
    settings=lambda config: {"scale": config.cosent.scale},
    check_config=st_methods.check_cosent,
    labels=True,
    in_batch_negatives=False,
    doc="sentence-transformers' CoSENTLoss: sentence pairs with a gold similarity score",
  )
)
register(
  Objective(
    "gist",
    loss=st_methods.gist,
    settings=st_methods.gist_settings,
    check_config=st_methods.check_gist,
    encoder=_gist_encoder,
    min_columns=2,
    doc="GISTEmbed (sentence-transformers' GISTEmbedLoss): in-batch and hard negatives a frozen guide model scores "
    "above the positive left out",
  )
)
register(
  Objective(
    "embed_distill",
    loss=st_methods.embed_distill,
    settings=st_methods.embed_distill_settings,
    check_config=st_methods.check_distill,
    scores=None,
    labels=True,
    label_shapes=st_methods.embed_distill_label_shapes,
    two_views=False,
    in_batch_negatives=False,
    doc="sentence-transformers' EmbedDistillLoss (MSELoss with distill.distance=mse): each text's embedding "
    "against its teacher embedding, the row's label",
  )
)
register(
  Objective(
    "margin_mse",
    loss=st_methods.margin_mse,
    settings=lambda config: {"similarity": config.distill.similarity},
    check_config=st_methods.check_distill,
    labels=True,
    label_shapes=st_methods.margin_mse_label_shapes,
    min_columns=3,
    in_batch_negatives=False,
    doc="sentence-transformers' MarginMSELoss: query, positive, negatives; the teacher's score margins as the label",
  )
)
register(
  Objective(
    "distill_kl_div",
    loss=st_methods.distill_kl_div,
    settings=st_methods.distill_kl_div_settings,
    check_config=st_methods.check_distill,
    labels=True,
    label_shapes=st_methods.distill_kl_div_label_shapes,
    min_columns=3,
    in_batch_negatives=False,
    doc="sentence-transformers' DistillKLDivLoss: query and candidates; the teacher's score of each as the label",
  )
)
register(
  Objective(
    "gor",
    loss=st_methods.gor,
    settings=st_methods.gor_settings,
    scores=None,
    two_views=False,
    doc="sentence-transformers' GlobalOrthogonalRegularizationLoss alone: the batch's embeddings spread out "
    "(gor.enabled adds it to any other method)",
  )
)
register(
  Objective(
    "rankcse",
    loss=rankcse.loss,
    settings=rankcse.settings,
    check_config=rankcse.check,
    labels=True,
    label_shapes=rankcse.label_shapes,
    max_columns=1,
    doc="RankCSE: SimCSE + the two views' ranking consistency + ListNet/ListMLE distillation of a teacher's "
    "in-batch similarity lists (its embeddings, the rows' labels)",
  )
)
register(
  Objective(
    "mlm",
    masked_lm=True,
    scores=None,
    check_config=_check_mlm,
    doc="BERT's masked-LM pretraining (15% of tokens, output layer at the masked positions only)",
  )
)
