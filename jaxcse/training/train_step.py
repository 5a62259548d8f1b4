"""The pure train step: embed the views, apply the objective, take gradients, update. Jitted once by the loop.

Read top to bottom: ``StepLoss`` is the step's objective, composed in one
screen (the method's loss on the embedded views + the optional masked-LM term,
``MaskedLMTerm``) of ``StepInputs`` (the batch's ``Rows``, their keys and
masked tokens); ``value_and_grad`` differentiates it plainly or through
GradCache (the same parts, chunk by chunk); ``make_train_step``'s
``train_step`` strings them together in a dozen lines.

``make_train_step(config, spec, tx, complementary, augment_mlm=...)`` returns
``(state, batch, complementary_params=None, augment_params=None) -> (state,
metrics)``; ``jit_train_step(..., mesh, augment_mlm=...)`` jits it as it runs:
the one place both the trainer and ``jaxcse.compile`` (ahead of time, for TPUs
and GPUs) get the jitted step from, so what is compiled is what trains.
Dropout masks come from ``fold_in(key(seed), step)``, so a resumed run
retraces the uninterrupted one exactly. ``complementary_params`` (DCLR's or
GISTEmbed's frozen model) and ``augment_params`` (the frozen masked-LM that
samples the "MLM k%" augmentation's replacements) are inputs, not part of the
state: no gradient, no optimizer state, never saved.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from jaxcse import models
from jaxcse.training import augment, distributed, gradcache, matryoshka as matryoshka_lib, objectives, st_methods
from jaxcse.training.masked_lm import MaskedLMTerm, MaskedPositions, MaskedViews, TokenSums
from jaxcse.training.views import embed_views, flat_views  # noqa: F401  (train_step.embed_views)


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def make_schedule(cfg: ml_collections.ConfigDict, total_steps: int) -> optax.Schedule:
  """Learning rate by step: linear warmup, then linear decay to 0 (HF Trainer's defaults, as SimCSE trains)."""
  if cfg.warmup_steps <= 0:
    return optax.linear_schedule(cfg.learning_rate, 0.0, max(total_steps, 1))
  return optax.join_schedules(
    [
      optax.linear_schedule(0.0, cfg.learning_rate, max(cfg.warmup_steps, 1)),
      optax.linear_schedule(cfg.learning_rate, 0.0, max(total_steps - cfg.warmup_steps, 1)),
    ],
    [cfg.warmup_steps],
  )


def make_optimizer(cfg: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
  """AdamW on ``make_schedule`` (+ global-norm clipping); HF's weight-decay exclusions."""
  schedule = make_schedule(cfg, total_steps)

  def decay_mask(params):  # HF excludes biases and LayerNorm weights from weight decay.
    flat = flax.traverse_util.flatten_dict(params)
    return flax.traverse_util.unflatten_dict(
      {k: not (k[-1] == "bias" or any("LayerNorm" in part for part in k)) for k in flat}
    )

  adamw = optax.adamw(
    schedule, b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps, weight_decay=cfg.weight_decay, mask=decay_mask
  )
  if cfg.max_grad_norm <= 0:
    return adamw
  world = cfg.official_world_size
  # A multi-GPU reference run clips the per-GPU mean, i.e. the full gradient / world (see configs/simcse_sup.py).
  scale = [optax.scale(1.0 / world)] if world > 1 else []
  return optax.chain(*scale, optax.clip_by_global_norm(cfg.max_grad_norm), adamw)


class _Keys(NamedTuple):
  """The step's random keys, one per use: split from ``fold_in(key(seed), step)`` in this order."""

  dropout: jax.Array
  method: jax.Array
  mlm: jax.Array
  complementary: jax.Array


# The key of the second view's discrete augmentations: fold_in(step key, this tag), apart from the four keys above
# (which stay as they were, so runs without augmentation are unchanged bit for bit). A large tag, not 4: under
# JAX's partitionable threefry, split(key, n)[i] is fold_in(key, i), so a small tag would be a future split key.
_AUGMENT_KEY_TAG = 0x61756731  # "aug1"
# Matryoshka's draw of dims (matryoshka.n_dims_per_step): fold_in(method key, this tag), for the same reason.
MATRYOSHKA_STREAM = 0x6D617431  # "mat1"


def _second_view(config, spec: models.ModelSpec, augment_mlm: models.ModelSpec | None):
  """The second view's discrete augmentations (``config.augment``), or None: ``(batch, key, mlm_params) -> batch``.

  The second view is column 1 of the batch, or, for a one-column (unsupervised) batch, the copy of its sentence
  that the step would otherwise embed twice: the batch gets that column, transformed
  (``augment.SecondView``, fixed shapes). Everything the step computes from the batch (the views, DCLR's
  complementary model, the MLM term) then sees the transformed view.

  With ``augment.crop_before_truncation`` = N the batch is one column of N-token rows: the crop acts on them, then
  both views are cut to ``data.max_seq_len`` (``augment.truncate``), so the batch leaves as ``[batch, 2,
  max_seq_len]``, its first view the sentence as tokenized to ``max_seq_len``.
  """
  settings = config.augment
  view = augment.SecondView(
    crop=settings.crop, word_deletion=settings.word_deletion, delete_one_word=settings.delete_one_word, mlm=settings.mlm
  )
  before = settings.get("crop_before_truncation", 0)  # .get: an older workdir's config.json has none.
  if before and not view.crop:
    raise ValueError(f"augment.crop_before_truncation={before} needs augment.crop > 0")
  if not view.active:
    return None
  if view.mlm and augment_mlm is None:
    raise ValueError("augment.mlm needs its masked-LM model (make_train_step's augment_mlm)")
  pieces = augment.WordPieces.from_tokenizer(spec.tokenizer)
  length, sep_id = config.data.max_seq_len, spec.tokenizer.sep_token_id

  def cut(ids, mask):
    return augment.truncate(ids, mask, length, sep_id=sep_id, pad_id=pieces.pad_id)

  def apply(batch, key, mlm_params):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    second = 0 if ids.shape[1] == 1 else 1
    if before and ids.shape[1:] != (1, before):
      raise ValueError(
        f"augment.crop_before_truncation={before} needs one-column batches of {before} tokens "
        f"([batch, 1, {before}]), not {list(ids.shape)}"
      )

    def logits_fn(masked_ids, attention_mask):  # The frozen MLM, deterministic (no dropout).
      return jax.lax.stop_gradient(models.mlm_logits(augment_mlm, mlm_params, masked_ids, attention_mask, train=False))

    new_ids, new_mask = view(key, ids[:, second], mask[:, second], pieces, logits_fn if view.mlm else None)
    if before:  # Both views cut as the tokenizer cuts: the first is then the sentence tokenized to `length`.
      (first_ids, first_mask), (new_ids, new_mask) = cut(ids[:, 0], mask[:, 0]), cut(new_ids, new_mask)
      return {
        **batch,
        "input_ids": jnp.stack([first_ids, new_ids], axis=1),
        "attention_mask": jnp.stack([first_mask, new_mask], axis=1),
      }
    if second == 0:  # [sentence, its transformed copy]; the batch's other arrays (labels) as they are.
      return {
        **batch,
        "input_ids": jnp.stack([ids[:, 0], new_ids], axis=1),
        "attention_mask": jnp.stack([mask[:, 0], new_mask], axis=1),
      }
    return {**batch, "input_ids": ids.at[:, 1].set(new_ids), "attention_mask": mask.at[:, 1].set(new_mask)}

  return apply


# --------------------------------------------------------------------------
# The step's loss. What it reads (``StepInputs``: ``Rows`` of the batch, their keys, the masked tokens; the masked-LM
# term's parts are ``masked_lm``'s), then ``StepLoss``: the objective, composed in one screen.


class SentenceTerm(NamedTuple):
  """The method's loss on the whole batch's embeddings, and its metrics (its scores, ``contrastive_loss``)."""

  loss: jax.Array
  metrics: dict


class Rows(NamedTuple):
  """What the step's loss reads of some rows of the batch besides the params; every array rows first.

  So ``chunks`` cuts all of it for GradCache; the random keys, one per forward pass, become one per chunk.
  """

  batch: dict  # [rows, columns, len] int32 arrays.
  dropout_key: jax.Array  # The encoder's dropout masks of these rows.
  tokens: MaskedPositions | MaskedViews | None = None  # The masked-LM term's targets of these rows, or None.
  tokens_dropout_key: jax.Array | None = None  # The dropout of the masked-LM forward pass.

  def chunks(self, num_chunks: int) -> Rows:
    """``[num_chunks, ...]`` leaves (``gradcache.to_chunks``), chunk ``i`` with key ``split(key, num_chunks)[i]``."""
    split = lambda key: None if key is None else jax.random.split(key, num_chunks)  # noqa: E731
    return Rows(
      gradcache.to_chunks(self.batch, num_chunks),
      split(self.dropout_key),
      gradcache.to_chunks(self.tokens, num_chunks),
      split(self.tokens_dropout_key),
    )


class StepInputs(NamedTuple):
  """The step loss's inputs: the batch's ``Rows`` and, with a masked-LM term, the whole batch's token count."""

  rows: Rows
  token_count: jax.Array | None = None  # Predicted tokens in the whole batch (at least 1): never cut into chunks.


@dataclasses.dataclass(frozen=True)
class StepLoss:
  """The step's objective. Read top to bottom (``__call__``, the whole batch at once)::

    rows --embed--> [batch, views, hidden] --the method's loss--> SentenceTerm (loss, metrics)
    rows --the masked-LM term--> TokenSums / token count = mlm_loss, mlm_accuracy
    loss = SentenceTerm.loss + weight * mlm_loss;  metrics = its metrics, mlm_loss, mlm_accuracy   (``total``)

  GradCache (``value_and_grad``) evaluates the same parts chunk by chunk: ``embed`` and ``token_sums`` per chunk,
  ``sentence`` on the whole batch's embeddings, ``total`` once. Built once from the config (``from_config``); pure.
  """

  objective: objectives.Objective
  settings: objectives.Settings  # What the objective's loss and scores read (``Objective.settings``).
  needs: objectives.Needs
  same_dropout_mask: bool  # config.augment.same_dropout_mask: both views of a sentence share one dropout mask.
  module: models.PooledBackbone  # The trained model, with the run's pooler and the method's padding.
  tokens: MaskedLMTerm | None
  # The method's loss over nested prefixes of the embeddings (config.matryoshka), or None: over the whole.
  matryoshka: matryoshka_lib.Matryoshka | None = None

  @classmethod
  def from_config(
    cls, config: ml_collections.ConfigDict, spec: models.ModelSpec, needs: objectives.Needs | None = None
  ) -> StepLoss:
    """``needs``: ``objectives.needs(config)`` when the caller has it already."""
    needs = needs or objectives.needs(config)
    objective = objectives.get(config.method)
    module = spec.module_for(spec.pooling.pooler, attend_padding=needs.attend_padding)
    return cls(
      objective,
      objective.settings(config),
      needs,
      bool(config.augment.same_dropout_mask),
      module,
      MaskedLMTerm.from_config(config, spec, needs.token_loss),
      matryoshka_lib.Matryoshka.from_config(config) if needs.sentence_loss else None,
    )

  def inputs(self, batch: dict, dropout_key: jax.Array, mlm_key: jax.Array) -> StepInputs:
    """The step's inputs; the MLM tokens masked once, on the whole batch (the same whatever the chunking)."""
    if self.tokens is None:
      return StepInputs(Rows(batch, dropout_key))
    k_mask, k_dropout = jax.random.split(mlm_key)
    targets, count = self.tokens.targets(batch, k_mask)
    return StepInputs(Rows(batch, dropout_key, targets, k_dropout), count)

  def __call__(self, params, x: StepInputs, method_key: jax.Array, complementary: jax.Array | None):
    """The objective on the whole batch: (loss, metrics)."""
    sentence = None
    if self.needs.sentence_loss:
      sentence = self.sentence(self.embed(params, x.rows), method_key, complementary, x.rows.batch.get("labels"))
    tokens = self.token_sums(params, x.rows) if self.tokens is not None else None
    return self.total(sentence, tokens, x.token_count)

  def embed(self, params, rows: Rows) -> jax.Array:
    """``[rows, views, hidden]`` embeddings of ``rows``, with dropout."""
    return embed_views(
      self.module,
      params,
      rows.batch,
      rows.dropout_key,
      same_dropout_mask=self.same_dropout_mask,
      two_views=self.needs.two_views,
    )

  def sentence(
    self, z: jax.Array, method_key: jax.Array, complementary: jax.Array | None, labels: jax.Array | None = None
  ) -> SentenceTerm:
    """The method's loss on the whole batch's ``[batch, views, hidden]`` embeddings, and its metrics.

    In at least float32: a bfloat16 model's pooled embeddings are upcast first (as PyTorch's autocast runs
    cosines and the cross-entropy in float32), else a loss near 0 rounds to exactly 0. ``labels``: the whole
    batch's labels (the batch's ``"labels"``, ``[batch, *label shape]``), for an objective that reads them.
    """
    z = z.astype(jnp.promote_types(z.dtype, jnp.float32))
    if self.objective.labels and labels is None:
      raise ValueError(
        f'method {self.objective.name} needs a label per row: a batch with "labels" '
        "(a data file with a label or score column)"
      )
    keywords = {"labels": labels.astype(z.dtype)} if self.objective.labels else {}

    def method_loss(embeddings: jax.Array) -> tuple[jax.Array, dict]:
      loss, extra = self.objective.loss(self.settings, embeddings, method_key, complementary, **keywords)
      if self.needs.regularizer is not None:  # gor.enabled: s-t's loss terms summed, as its trainer sums them.
        spread, terms = st_methods.gor_terms(self.needs.regularizer, embeddings)
        loss, extra = loss + spread, {**extra, **terms}
      return loss, extra

    if self.matryoshka is None:
      loss, extra = method_loss(z)
    else:  # Its own draw of dims: the method's key stays the one it gets without Matryoshka.
      loss, extra = self.matryoshka.loss(method_loss, z, jax.random.fold_in(method_key, MATRYOSHKA_STREAM))
    scores = self.objective.scores(self.settings, z, method_key) if self.objective.scores else {}
    return SentenceTerm(loss, {"contrastive_loss": loss, **scores, **extra})

  def token_sums(self, params, rows: Rows) -> TokenSums:
    """The masked-LM term of ``rows``, summed over their predicted tokens."""
    return self.tokens.sums(params, rows.tokens, rows.tokens_dropout_key)

  def total(self, sentence: SentenceTerm | None, tokens: TokenSums | None, token_count: jax.Array | None):
    """(loss, metrics) of the whole batch from its ``SentenceTerm`` and its summed ``TokenSums``."""
    loss, metrics = sentence if sentence is not None else (0.0, {})
    if tokens is not None:
      metrics = {
        **metrics,
        "mlm_loss": tokens.cross_entropy / token_count,
        "mlm_accuracy": tokens.correct / token_count,
      }
      loss = loss + self.tokens.weight * metrics["mlm_loss"]
    return loss, metrics


def value_and_grad(
  loss: StepLoss,
  params,
  x: StepInputs,
  method_key: jax.Array,
  complementary: jax.Array | None,
  *,
  num_chunks: int = 0,
  cache: bool = True,
):
  """``((loss, metrics), grads)`` of ``loss``: plain (``num_chunks`` 0), or GradCache's over ``num_chunks`` chunks.

  GradCache (``gradcache.value_and_grad``) is the same objective in chunks: ``embed`` chunk by chunk, ``sentence``
  on the whole batch's embeddings, the masked-LM term chunk by chunk (its sum weighted by ``weight / token_count``,
  the whole batch's), ``total`` once. ``cache=False`` differentiates the same chunked computation as one graph (the
  reference the tests compare with).
  """
  if not num_chunks:
    return jax.value_and_grad(loss, has_aux=True)(params, x, method_key, complementary)
  sentence, tokens = loss.needs.sentence_loss, loss.tokens is not None
  (_, parts), grads = gradcache.value_and_grad(
    params,
    x.rows.chunks(num_chunks),
    embed=loss.embed if sentence else None,
    batch_loss=(lambda z: loss.sentence(z, method_key, complementary, x.rows.batch.get("labels")))
    if sentence
    else None,
    chunk_loss=loss.token_sums if tokens else None,
    chunk_weight=loss.tokens.weight / x.token_count if tokens else 1.0,
    cache=cache,
  )
  return loss.total(
    SentenceTerm(parts.batch_loss, parts.batch_aux) if sentence else None,
    TokenSums(parts.chunk_sum, parts.chunk_aux) if tokens else None,
    x.token_count,
  ), grads


def _complementary_embeddings(complementary: models.ModelSpec, needs: objectives.Needs):
  """The method's frozen complementary model (DCLR's, GISTEmbed's guide): ``(params, batch, key, num_chunks) ->
  [batch, views, hidden]``, no gradient.

  A one-column batch is embedded as its two views for DCLR (``complementary_embedding`` ``training``), as one
  column for a guide (``sentence``: the texts as they are). With GradCache it embeds chunk by chunk (chunk ``i``
  with ``split(key, num_chunks)[i]``), in one chunk's memory.
  """
  module = complementary.module_for(complementary.pooling.test_pooler, attend_padding=needs.attend_padding)
  dropout = needs.complementary_dropout
  two_views = needs.complementary_embedding == "training"

  def embed(params, batch, key):
    return jax.lax.stop_gradient(embed_views(module, params, batch, key, train=dropout, two_views=two_views))

  def apply(params, batch, key, num_chunks):
    if not num_chunks:
      return embed(params, batch, key)
    return gradcache.from_chunks(
      jax.lax.map(
        lambda c: embed(params, *c), (gradcache.to_chunks(batch, num_chunks), jax.random.split(key, num_chunks))
      )
    )

  return apply


def _num_chunks(batch: dict, chunk: int) -> int:
  """GradCache's number of chunks of ``batch`` (0: no GradCache)."""
  rows = batch["input_ids"].shape[0]
  if chunk and rows % chunk:
    raise ValueError(f"the batch of {rows} is not a multiple of config.train.grad_cache_chunk={chunk}")
  return rows // chunk if chunk else 0


def make_train_step(
  config: ml_collections.ConfigDict,
  spec: models.ModelSpec,
  tx: optax.GradientTransformation,
  complementary: models.ModelSpec | None = None,
  *,
  cache_gradients: bool = True,
  augment_mlm: models.ModelSpec | None = None,
  needs: objectives.Needs | None = None,
):
  """The pure train step ``(state, batch, complementary_params=None, augment_params=None) -> (state, metrics)``.

  ``complementary`` is the method's frozen complementary model (DCLR's, when its
  instance weighting uses one; GISTEmbed's guide), ``augment_mlm`` the frozen
  masked-LM (with its MLM head) that samples the replacements of
  ``config.augment.mlm``; the step takes their params as its third and fourth
  arguments. With ``config.augment`` set, the second view is transformed first
  (``_second_view``) with the key
  ``fold_in(fold_in(key(seed), step), _AUGMENT_KEY_TAG)``.

  With ``config.train.grad_cache_chunk = C > 0`` the gradient is GradCache's
  (``value_and_grad``): chunk ``i`` of ``batch / C`` gets its own dropout key
  (``split(key, num_chunks)[i]``) in both passes; the MLM tokens are masked on
  the whole batch; DCLR's complementary model embeds chunk by chunk. With
  dropout 0 the gradients are the plain step's up to float rounding.
  ``cache_gradients=False`` differentiates the same chunked computation as one
  graph (the reference the tests compare with). ``needs``: ``objectives.needs(config)`` when the caller has it.
  """
  needs = needs or objectives.needs(config)
  if needs.complementary and complementary is None:
    raise ValueError(f"{config.method} needs a complementary model (config.{needs.complementary_field})")
  # None when the config uses none (e.g. DCLR without instance weighting, or weighting by the model itself).
  embed_complementary = _complementary_embeddings(complementary, needs) if needs.complementary else None
  loss = StepLoss.from_config(config, spec, needs)
  second_view = _second_view(config, spec, augment_mlm)
  chunk = config.train.grad_cache_chunk
  base_rng = jax.random.key(config.seed)

  def train_step(
    state: TrainState, batch: dict, complementary_params=None, augment_params=None
  ) -> tuple[TrainState, dict]:
    step_key = jax.random.fold_in(base_rng, state.step)
    keys = _Keys(*jax.random.split(step_key, 4))
    if second_view is not None:
      batch = second_view(batch, jax.random.fold_in(step_key, _AUGMENT_KEY_TAG), augment_params)
    num_chunks = _num_chunks(batch, chunk)
    inputs = loss.inputs(batch, keys.dropout, keys.mlm)
    comp = None
    if embed_complementary is not None:
      comp = embed_complementary(complementary_params, batch, keys.complementary, num_chunks)
    (value, metrics), grads = value_and_grad(
      loss, state.params, inputs, keys.method, comp, num_chunks=num_chunks, cache=cache_gradients
    )
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": value, "grad_norm": optax.tree.norm(grads), **metrics}
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def jit_train_step(
  config: ml_collections.ConfigDict,
  spec: models.ModelSpec,
  tx: optax.GradientTransformation,
  complementary: models.ModelSpec | None,
  mesh: jax.sharding.Mesh,
  *,
  augment_mlm: models.ModelSpec | None = None,
  needs: objectives.Needs | None = None,
):
  """``make_train_step`` jitted as the trainer runs it on ``mesh`` (``distributed.make_mesh``'s 1-axis ``data``).

  Called as ``step(state, batch, complementary_params, augment_params)`` (each frozen model's params, or None when
  the config uses none). The train state and the frozen models' params are replicated on every device, the batch
  (``{"input_ids", "attention_mask"}``, int32 ``[batch, columns, len]``) is split along its first axis, the metrics
  come back replicated, and the state's buffers are donated (updated in place). ``jaxcse.compile`` lowers this same
  object with abstract arguments for a TPU slice or GPU that is not present.
  """
  replicated, batch = distributed.data_shardings(mesh)
  return jax.jit(
    make_train_step(config, spec, tx, complementary, augment_mlm=augment_mlm, needs=needs),
    in_shardings=(replicated, batch, replicated, replicated),
    out_shardings=(replicated, replicated),
    donate_argnums=0,
  )
