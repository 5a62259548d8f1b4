r"""Contrastive training of sentence encoders: one jitted step, data-parallel over all devices.

  python -m jaxcse.train --config configs/base.py --workdir DIR [--config.train.batch_size=32 ...]

The train step is a pure function of (state, batch), jitted once with the
state donated. Params are replicated and the global batch is sharded over a
1-axis ``data`` mesh, so the loss, written on the global batch, takes its
in-batch negatives from every device. Dropout masks come from
``fold_in(key(seed), step)`` and batches from ``data.Batches`` by step, so a
run resumed from its latest checkpoint retraces the uninterrupted run exactly.

Several hosts run the same command, one process each (or one per GPU), with
``--coordinator_address/--num_processes/--process_id`` or ``--distributed``
(cluster auto-detection): the mesh then spans every process's devices, and
each process tokenizes only its rows of each global batch.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import sys
import time
import zlib
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from jaxcse import checkpoints, data as data_lib, evaluate, losses, models


log = logging.getLogger("jaxcse")


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or infinite; the run stopped without saving past its last good checkpoint."""


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


# --------------------------------------------------------------------------
# Pure pieces: optimizer, loss, step.


def make_optimizer(cfg: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
  """AdamW with linear warmup and linear decay to 0 (HF Trainer's defaults, as SimCSE trains)."""
  schedule = optax.join_schedules(
      [
          optax.linear_schedule(0.0, cfg.learning_rate, max(cfg.warmup_steps, 1)),
          optax.linear_schedule(cfg.learning_rate, 0.0, max(total_steps - cfg.warmup_steps, 1)),
      ],
      [cfg.warmup_steps],
  ) if cfg.warmup_steps > 0 else optax.linear_schedule(cfg.learning_rate, 0.0, max(total_steps, 1))

  def decay_mask(params):  # HF excludes biases and LayerNorm weights from weight decay.
    flat = flax.traverse_util.flatten_dict(params)
    return flax.traverse_util.unflatten_dict(
        {k: not (k[-1] == "bias" or any("LayerNorm" in part for part in k)) for k in flat}
    )

  adamw = optax.adamw(schedule, b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps,
                      weight_decay=cfg.weight_decay, mask=decay_mask)
  if cfg.max_grad_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)
  return adamw


def _flat_views(batch: dict) -> tuple[jax.Array, jax.Array, int, int]:
  """``[batch * views, len]`` ids and mask; a one-column (unsupervised) batch becomes two views."""
  ids, mask = batch["input_ids"], batch["attention_mask"]
  if ids.shape[1] == 1:
    ids = jnp.repeat(ids, 2, axis=1)
    mask = jnp.repeat(mask, 2, axis=1)
  b, v, length = ids.shape
  # Rows of one example stay adjacent, so the reshape keeps the batch sharding.
  return ids.reshape(b * v, length), mask.reshape(b * v, length), b, v


def embed_views(module: models.SentenceEncoder, params, batch: dict, rng: jax.Array, *, train: bool = True
                ) -> jax.Array:
  """Embeds every sentence of the batch in one forward pass, with dropout when ``train``.

  ``batch`` holds ``[batch, columns, len]`` arrays. A one-column batch
  (unsupervised) is duplicated into two views, which get independent dropout
  masks because they are different rows of one forward pass (SimCSE's
  formulation). Returns ``[batch, views, hidden]``.
  """
  ids, mask, b, v = _flat_views(batch)
  z = module.apply({"params": params}, ids, mask, train=train, rngs={"dropout": rng} if train else {})
  return z.reshape(b, v, -1)


def training_scores(config: ml_collections.ConfigDict, z: jax.Array, rng: jax.Array) -> dict[str, jax.Array]:
  """Mean cosines of the step's own embeddings, the training dynamics of the MixCSE paper's Fig. 4a.

  * ``pos_score``: ``cos(z1[i], z2[i])`` averaged over ``i``, the two views of one sentence;
  * ``neg_score``: ``cos(z1[i], z2[j])`` averaged over ``i != j``, the in-batch negatives (a supervised batch's
    hard negatives are not counted);
  * ``mix_score`` (MixCSE only): each anchor against its own mixed negative, drawn with the loss's ``rng``
    (``losses.mixcse_mix_scores``).

  The paper plots these divided by the temperature; we log the cosines. Without gradient.

  Args:
    config: the run's config (method and MixCSE options).
    z: ``[batch, views, hidden]`` embeddings; views 0 and 1 are the anchor and its positive.
    rng: the key the loss got (MixCSE's random neighbours).

  Returns:
    Scalars by name.
  """
  z = jax.lax.stop_gradient(z)
  sim = losses.cosine_similarity_matrix(z[:, 0], z[:, 1])  # [batch, batch]
  batch = sim.shape[0]
  positive = jnp.trace(sim) / batch
  # The off-diagonal mean; 0 for a batch of one, which has no negatives.
  negative = (jnp.sum(sim) - jnp.trace(sim)) / max(batch * (batch - 1), 1)
  scores = {"pos_score": positive, "neg_score": negative}
  if config.method == "mixcse":
    m = config.mixcse
    scores["mix_score"] = losses.mixcse_mix_scores(z[:, 0], z[:, 1], mix_lambda=m.mix_lambda,
                                                   neighbour=m.neighbour, rng=rng).mean()
  return scores


def contrastive_loss(config: ml_collections.ConfigDict, z: jax.Array, rng: jax.Array,
                     complementary: jax.Array | None = None) -> tuple[jax.Array, dict]:
  """The configured objective on ``[batch, views, hidden]`` embeddings; returns (loss, extra metrics).

  ``complementary`` (DCLR only) holds the frozen complementary model's
  embeddings of the same batch, ``[batch, views, hidden]``. The extra metrics
  include ``training_scores`` of ``z``.
  """
  loss, extra = _objective(config, z, rng, complementary)
  return loss, {**training_scores(config, z, rng), **extra}


def _objective(config: ml_collections.ConfigDict, z: jax.Array, rng: jax.Array,
               complementary: jax.Array | None) -> tuple[jax.Array, dict]:
  z1, z2 = z[:, 0], z[:, 1]
  temperature = config.loss.temperature
  if config.method == "simcse":
    hard = z[:, 2] if z.shape[1] > 2 else None
    return losses.simcse_loss(z1, z2, hard, temperature=temperature,
                              hard_negative_weight=config.loss.hard_negative_weight), {}
  if config.method == "mixcse":
    m = config.mixcse
    return losses.mixcse_loss(z1, z2, temperature=temperature, mix_lambda=m.mix_lambda, neighbour=m.neighbour,
                              symmetric=m.symmetric, stop_gradient=m.stop_gradient, rng=rng), {}
  if config.method == "dclr":
    d = config.dclr
    num_noise = int(z1.shape[0] * d.noise_times)  # int() as the official code.
    noise = losses.dclr_initial_noise(rng, num_noise, z1.shape[-1], sigma=d.noise_std,
                                      dtype=jnp.promote_types(z1.dtype, jnp.float32))
    noise = losses.dclr_noise_negatives(z1, z2, noise, temperature=temperature, steps=d.ascent_steps,
                                        step_size=d.ascent_step_size)
    weights = losses.dclr_instance_weights(complementary[:, 0], complementary[:, 1], phi=d.phi)
    loss = losses.dclr_loss(z1, z2, noise, weights, temperature=temperature, form=d.loss_form)
    return loss, {"dclr/weight_zero_frac": 1.0 - weights.mean()}
  raise ValueError(f"unknown method {config.method!r}; choose simcse, mixcse or dclr")


def mask_tokens(rng: jax.Array, ids: jax.Array, attention_mask: jax.Array, *, mask_token_id: int,
                vocab_size: int, special_ids: tuple[int, ...], probability: float) -> tuple[jax.Array, jax.Array]:
  """BERT's masking (as HF's DataCollatorForLanguageModeling): returns (masked ids, labels; -100 = not predicted).

  Each non-special, non-padding token is chosen with ``probability``; a chosen
  token becomes [MASK] 80% of the time, a random token 10%, and stays 10%.
  """
  k_choose, k_how, k_token = jax.random.split(rng, 3)
  special = jnp.isin(ids, jnp.asarray(special_ids)) | (attention_mask == 0)
  chosen = (jax.random.uniform(k_choose, ids.shape) < probability) & ~special
  how = jax.random.uniform(k_how, ids.shape)
  random_tokens = jax.random.randint(k_token, ids.shape, 0, vocab_size, dtype=ids.dtype)
  masked = jnp.where(chosen & (how < 0.8), mask_token_id, jnp.where(chosen & (how < 0.9), random_tokens, ids))
  return masked, jnp.where(chosen, ids, -100)


def _mlm_targets(model: models.Model, batch: dict, rng: jax.Array, config: ml_collections.ConfigDict
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """BERT-masks every view of the batch: (masked ids, attention mask, labels), each ``[batch * views, len]``."""
  ids, mask, _, _ = _flat_views(batch)
  tok = model.tokenizer
  masked, labels = mask_tokens(rng, ids, mask, mask_token_id=tok.mask_token_id,
                               vocab_size=model.hf_config.vocab_size, special_ids=tuple(tok.all_special_ids),
                               probability=config.mlm.probability)
  return masked, mask, labels


def _mlm_cross_entropy_sum(model: models.Model, params, masked: jax.Array, mask: jax.Array, labels: jax.Array,
                           rng: jax.Array) -> jax.Array:
  """The summed cross-entropy over the chosen tokens (labels >= 0) of ``[rows, len]`` masked inputs."""
  logits = models.mlm_logits(model, params, masked, mask, train=True, rng=rng)
  chosen = labels >= 0
  # At least float32 (a bfloat16 model's logits are upcast), float64 when the model computes in float64.
  logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(chosen, labels, 0))
  return jnp.sum(ce * chosen)


def mlm_loss(model: models.Model, params, batch: dict, rng: jax.Array, config: ml_collections.ConfigDict
             ) -> jax.Array:
  """SimCSE's auxiliary MLM loss: every view masked independently, mean cross-entropy over chosen tokens."""
  k_mask, k_drop = jax.random.split(rng)
  masked, mask, labels = _mlm_targets(model, batch, k_mask, config)
  return _mlm_cross_entropy_sum(model, params, masked, mask, labels, k_drop) / jnp.maximum((labels >= 0).sum(), 1)


def _to_chunks(tree, num_chunks: int):
  """``[batch, ...]`` leaves -> ``[num_chunks, batch / num_chunks, ...]``; chunk ``i`` holds rows ``i, i + n, ...``.

  Strided rather than contiguous: a batch sharded in contiguous blocks over the
  devices then puts ``chunk / devices`` rows of every chunk on every device, so
  each chunk's forward still runs on all devices, and which rows share a chunk
  (and a dropout key) does not depend on the device count.
  """
  return jax.tree.map(lambda x: jnp.swapaxes(x.reshape(x.shape[0] // num_chunks, num_chunks, *x.shape[1:]), 0, 1),
                      tree)


def _from_chunks(x: jax.Array) -> jax.Array:
  """The inverse of ``_to_chunks`` for one ``[num_chunks, chunk, ...]`` array: back to ``[batch, ...]`` in row order."""
  return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])


def make_train_step(config: ml_collections.ConfigDict, model: models.Model, tx: optax.GradientTransformation,
                    complementary: models.Model | None = None, *, cache_gradients: bool = True):
  """The pure train step ``(state, batch, complementary_params) -> (state, metrics)``.

  ``complementary_params`` (DCLR's frozen complementary model; None for other
  methods) is an input, not part of the state: it gets no gradient, no
  optimizer state, and is never saved in our checkpoints.

  With ``config.train.grad_cache_chunk = C > 0`` the step is GradCache's
  (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under
  Memory Limited Setup"): the batch is split into ``batch / C`` chunks, each
  embedded with its own dropout key (``split(key, num_chunks)[i]``) and no
  gradient; the loss and ``d loss / d embeddings`` are computed on the
  embeddings of the whole batch, so the negatives still span it; then each
  chunk is embedded again with the same key, so the same dropout masks, and
  its vector-Jacobian product with its slice of ``d loss / d embeddings`` is
  added to the gradient, inside one ``lax.scan``. Activation memory is that of
  one chunk (plus the ``[batch, views, hidden]`` embeddings), at the cost of a
  second forward pass. The MLM loss, a sum over sentences, is differentiated
  chunk by chunk in the same scan; DCLR's complementary model embeds chunk by
  chunk too. The masks differ from the plain step's (one key for the whole
  batch) only through the dropout keys; with dropout 0 the gradients are the
  plain step's up to float rounding.

  ``cache_gradients=False`` (with ``C > 0``) differentiates the same chunked
  embeddings, keys and loss as one graph instead, with full-batch memory: the
  reference the cached step must equal, used by the tests.
  """
  base_rng = jax.random.key(config.seed)
  module = model.train_module
  chunk = config.train.grad_cache_chunk
  mlm_enabled, mlm_weight = config.mlm.enabled, config.mlm.weight
  if config.method == "dclr" and complementary is None:
    raise ValueError("dclr needs a complementary model (config.dclr.complementary_model)")
  if chunk < 0:
    raise ValueError(f"config.train.grad_cache_chunk must be >= 0 (0 = off); got {chunk}")

  def embed_complementary(complementary_params, batch: dict, rng: jax.Array) -> jax.Array:
    return jax.lax.stop_gradient(embed_views(complementary.test_module, complementary_params, batch, rng,
                                             train=config.dclr.complementary_dropout))

  def plain_value_and_grad(params, batch, complementary_params, keys):
    k_drop, k_method, k_mlm, k_comp = keys
    comp = None if complementary is None else embed_complementary(complementary_params, batch, k_comp)

    def loss_fn(params):
      loss, extra = contrastive_loss(config, embed_views(module, params, batch, k_drop), k_method, comp)
      extra = {"contrastive_loss": loss, **extra}
      if mlm_enabled:
        extra["mlm_loss"] = mlm_loss(model, params, batch, k_mlm, config)
        loss = loss + mlm_weight * extra["mlm_loss"]
      return loss, extra

    return jax.value_and_grad(loss_fn, has_aux=True)(params)

  def chunked_value_and_grad(params, batch, complementary_params, keys):
    k_drop, k_method, k_mlm, k_comp = keys
    rows = batch["input_ids"].shape[0]
    # The loss's dtype: float32, or float64 for a float64 model (the tests' exact comparisons).
    float_dtype = jnp.promote_types(jax.tree.leaves(params)[0].dtype, jnp.float32)
    if rows % chunk:
      raise ValueError(f"the batch of {rows} is not a multiple of config.train.grad_cache_chunk={chunk}")
    n = rows // chunk
    # Per-chunk inputs of both passes: the sentences and the dropout key (the replayed masks), and the MLM inputs.
    xs = {"batch": _to_chunks(batch, n), "drop": jax.random.split(k_drop, n)}
    mlm_count = None
    if mlm_enabled:
      k_mask, k_mlm_drop = jax.random.split(k_mlm)
      # Masked on the whole batch (the same tokens as the plain step); the mean divides by the batch's count.
      masked, mask, labels = (x.reshape(rows, -1, x.shape[-1]) for x in _mlm_targets(model, batch, k_mask, config))
      xs["mlm"] = _to_chunks((masked, mask, labels), n)
      xs["mlm_drop"] = jax.random.split(k_mlm_drop, n)
      mlm_count = jnp.maximum((labels >= 0).sum(), 1)
    comp = None
    if complementary is not None:
      comp = _from_chunks(jax.lax.map(lambda a: embed_complementary(complementary_params, a[0], a[1]),
                                      (xs["batch"], jax.random.split(k_comp, n))))

    def chunk_forward(params, x):
      """One chunk: its embeddings ``[chunk, views, hidden]`` and its summed MLM cross-entropy (0 without MLM)."""
      z = embed_views(module, params, x["batch"], x["drop"])
      if not mlm_enabled:
        return z, jnp.zeros((), float_dtype)
      flat = [t.reshape(-1, t.shape[-1]) for t in x["mlm"]]
      return z, _mlm_cross_entropy_sum(model, params, *flat, x["mlm_drop"])

    def add_mlm(contrastive, extra, mlm_sum):
      """(total loss, metrics) from the contrastive loss and the batch's summed MLM cross-entropy."""
      extra = {"contrastive_loss": contrastive, **extra}
      if not mlm_enabled:
        return contrastive, extra
      extra["mlm_loss"] = mlm_sum / mlm_count
      return contrastive + mlm_weight * extra["mlm_loss"], extra

    if not cache_gradients:
      def loss_fn(params):
        z, mlm_sums = jax.lax.map(lambda x: chunk_forward(params, x), xs)
        return add_mlm(*contrastive_loss(config, _from_chunks(z), k_method, comp), mlm_sums.sum())

      return jax.value_and_grad(loss_fn, has_aux=True)(params)

    # Pass 1: embeddings of the whole batch, chunk by chunk, no gradient kept.
    z = _from_chunks(jax.lax.map(lambda x: embed_views(module, params, x["batch"], x["drop"]), xs))
    (contrastive, extra), dz = jax.value_and_grad(lambda z: contrastive_loss(config, z, k_method, comp),
                                                  has_aux=True)(z)
    xs["dz"] = _to_chunks(dz, n)
    # d loss / d (chunk's MLM sum), the same for every chunk.
    mlm_cotangent = jnp.asarray(mlm_weight / mlm_count if mlm_enabled else 0.0, float_dtype)

    # Pass 2: re-embed each chunk with the same key and pull its cached cotangent back to the params.
    def accumulate(grads, x):
      (_, mlm_sum), vjp = jax.vjp(lambda p: chunk_forward(p, x), params)
      (chunk_grads,) = vjp((x["dz"], mlm_cotangent))
      return jax.tree.map(jnp.add, grads, chunk_grads), mlm_sum

    grads, mlm_sums = jax.lax.scan(accumulate, jax.tree.map(jnp.zeros_like, params), xs)
    return add_mlm(contrastive, extra, mlm_sums.sum()), grads

  def train_step(state: TrainState, batch: dict, complementary_params=None) -> tuple[TrainState, dict]:
    keys = jax.random.split(jax.random.fold_in(base_rng, state.step), 4)  # dropout, method, MLM, complementary
    value_and_grad = chunked_value_and_grad if chunk else plain_value_and_grad
    (loss, extra), grads = value_and_grad(state.params, batch, complementary_params, keys)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **extra}
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def largest_angle_deg(x: np.ndarray) -> float:
  """The largest angle between any two rows of ``[n, hidden]`` embeddings (n >= 2), in degrees.

  The MixCSE paper's omega (Fig. 4b): the biggest angle between any two
  sentences' embeddings of STS-B, taken as the opening of the spherical cap the
  embeddings fill; contrastive training widens it.
  """
  x = np.asarray(x, np.float64)
  if x.ndim != 2 or len(x) < 2:
    raise ValueError(f"need [n >= 2, hidden] embeddings, got {x.shape}")
  unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  cos = unit @ unit.T  # [n, n]
  np.fill_diagonal(cos, np.inf)  # A row with itself is not a pair.
  return float(np.degrees(np.arccos(np.clip(cos.min(), -1.0, 1.0))))


def dev_dynamics(table: dict[str, np.ndarray], stsb_dev: "evaluate.PairSet") -> dict[str, float]:
  """Geometry of the STS-B dev embeddings the dev evaluation computed (no second encoding).

  Returns ``omega_deg`` (``largest_angle_deg`` over its distinct sentences),
  ``alignment`` over its pairs with gold score >= 4 and ``uniformity`` over its
  distinct sentences (Wang & Isola, ``evaluate.alignment``/``uniformity``, as
  ``evaluate_align_uniform`` measures them on the test split).

  Args:
    table: ``{sentence: [hidden] vector}`` covering the STS-B dev sentences (other sentences are ignored).
    stsb_dev: the STS-B dev pairs.
  """
  sentences = list(dict.fromkeys((*stsb_dev.sent1, *stsb_dev.sent2)))
  everything = np.stack([table[s] for s in sentences])
  positive = np.flatnonzero(stsb_dev.gold >= evaluate.POSITIVE_MIN_SCORE)
  dynamics = {"omega_deg": largest_angle_deg(everything), "uniformity": evaluate.uniformity(everything)}
  if len(positive):  # A cut-down dev set may have no such pair; then there is no alignment to report.
    dynamics["alignment"] = evaluate.alignment(np.stack([table[stsb_dev.sent1[i]] for i in positive]),
                                               np.stack([table[stsb_dev.sent2[i]] for i in positive]))
  return dynamics


def make_mesh() -> jax.sharding.Mesh:
  """A 1-axis mesh over all devices of all processes: pure data parallelism."""
  return jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))


# --------------------------------------------------------------------------
# Several processes (hosts): JAX's own runtime, one program per process.


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None, *, auto: bool = False) -> None:
  """Joins a multi-process run through ``jax.distributed.initialize``; does nothing for a single process.

  Give all three of ``coordinator_address`` (``host:port`` of process 0),
  ``num_processes`` and ``process_id`` for plain multi-node GPU or several
  processes on one machine; or ``auto=True`` to let JAX detect them (Cloud TPU
  pods, SLURM, Open MPI, GKE), with any of the three as overrides. Must run
  before anything touches a device.
  """
  given = (coordinator_address, num_processes, process_id)
  if not auto and all(v is None for v in given):
    return
  if not auto and None in given:
    raise ValueError("multi-process training needs all of --coordinator_address, --num_processes and --process_id "
                     f"(got {given}), or --distributed to detect them (TPU pods, SLURM, Open MPI)")
  jax.distributed.initialize(coordinator_address, num_processes, process_id)
  log.info("process %d of %d; %d local of %d devices", jax.process_index(), jax.process_count(),
           jax.local_device_count(), jax.device_count())


def process_rows(sharding: jax.sharding.Sharding, batch_size: int) -> np.ndarray:
  """Positions in the global batch that this process's devices hold: ``[local rows]`` int.

  In the order ``jax.make_array_from_process_local_data`` reads local rows
  (ascending). Taken from the sharding rather than computed as ``process_index
  * rows``, so it stays right for meshes whose device order interleaves hosts.
  One process holds every row.
  """
  spans = sorted({(s.start or 0, batch_size if s.stop is None else s.stop)
                  for (s, *_) in sharding.addressable_devices_indices_map((batch_size,)).values()})
  return np.concatenate([np.arange(start, stop) for start, stop in spans])


def check_processes_agree(**values: int) -> None:
  """Fails fast, naming the value, when processes differ in what must be equal (config, data, workdir).

  A host with another config, corpus or checkpoint folder would otherwise
  train on a silently inconsistent global batch, or deadlock in a checkpoint.
  """
  if jax.process_count() == 1:
    return
  from jax.experimental import multihost_utils

  every = multihost_utils.process_allgather(np.asarray(list(values.values()), np.uint32))  # [processes, values]
  for column, name in enumerate(values):
    seen = every[:, column].tolist()
    if len(set(seen)) > 1:
      raise RuntimeError(f"the {jax.process_count()} processes disagree on {name} ({seen} by process index): every "
                         "host must run the same code and config, with the same data and model files, and one "
                         "workdir on storage that all hosts share")


def _fingerprint(params: Any) -> int:
  """crc32 of a pytree's array bytes, in tree order."""
  crc = 0
  for leaf in jax.tree.leaves(params):
    crc = zlib.crc32(np.asarray(leaf).tobytes(), crc)
  return crc


# --------------------------------------------------------------------------
# The loop.


def _dtype(name: str):
  return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[name]


def _total_steps(config, batches: data_lib.Batches) -> int:
  if config.train.max_steps > 0:
    return config.train.max_steps
  return batches.total_steps(config.train.num_epochs)


class MetricsWriter:
  """Appends one JSON object per line to ``metrics.jsonl``; a resumed run drops lines past its checkpoint.

  Only process 0 writes (``enabled``); the others compute the same records.
  """

  def __init__(self, path: str, resume_step: int, enabled: bool = True):
    self.path = path
    self.enabled = enabled
    if enabled and os.path.exists(path):  # Lines written after the checkpoint we resume from would be written again.
      with open(path) as f:
        kept = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= resume_step]
      with open(path, "w") as f:
        f.writelines(kept)

  def write(self, record: dict) -> None:
    if not self.enabled:
      return
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains per ``config`` in ``workdir``, resuming from its latest checkpoint if there is one.

  Returns a summary: steps, best evaluation and its step, first evaluation.

  With several processes (``initialize_distributed`` first), every process
  runs this same call: each tokenizes only its rows of every global batch,
  all take part in every checkpoint save and restore (orbax coordinates them),
  and all run the dev evaluation as one replicated program on the replicated
  params, so they reach the same scores and the same best-checkpoint
  decisions. Process 0 alone writes config.json, the model description,
  metrics.jsonl and summary.json. ``workdir`` must be one folder that every
  process sees (a shared filesystem).
  """
  primary = jax.process_index() == 0
  os.makedirs(workdir, exist_ok=True)
  data_root = config.data.data_dir or None
  model_dir = os.path.join(workdir, checkpoints.MODEL_DIR)
  latest = checkpoints.manager(os.path.join(workdir, checkpoints.LATEST_DIR))
  best = checkpoints.manager(os.path.join(workdir, checkpoints.BEST_DIR))
  resume_step = latest.latest_step()
  pooling = models.PoolerSpec(config.model.pooler, config.model.mlp_only_train, config.model.test_pooler or None)
  dtype = _dtype(config.model.dtype)

  if resume_step is None:
    model = models.load_pretrained(config.model.name, pooling, dropout=config.model.dropout, seed=config.seed,
                                   dtype=dtype, gradient_checkpointing=config.model.gradient_checkpointing,
                                   with_mlm_head=config.mlm.enabled)
    if model.mlm is not None and not model.mlm.pretrained:
      log.warning("%s has no masked-LM head; the MLM objective starts from a fresh one", config.model.name)
    if primary:
      models.save_description(model, model_dir)
      checkpoints.write_json(os.path.join(workdir, "config.json"), config.to_dict())
  else:
    model = models.from_description(model_dir, dtype=dtype,
                                    gradient_checkpointing=config.model.gradient_checkpointing)
    saved = json.load(open(os.path.join(workdir, "config.json")))
    if saved != json.loads(json.dumps(config.to_dict(), default=str)):
      log.warning("resuming %s with a config that differs from the saved config.json", workdir)

  corpus = data_lib.load_corpus(config.data.train, root=data_root, skip_empty_lines=config.data.skip_empty_lines,
                                tfds_text_feature=config.data.get("tfds_text_feature", "text"),
                                tfds_data_dir=config.data.get("tfds_data_dir") or None)
  batches = data_lib.Batches(corpus, model.tokenizer, batch_size=config.train.batch_size,
                             max_seq_len=config.data.max_seq_len, seed=config.seed,
                             no_duplicates=config.data.no_duplicates)
  total_steps = _total_steps(config, batches)
  tx = make_optimizer(config.train, total_steps)

  mesh = make_mesh()
  if config.train.batch_size % mesh.size:
    raise ValueError(f"batch_size {config.train.batch_size} must be divisible by the {mesh.size} devices")
  replicated = NamedSharding(mesh, PartitionSpec())
  batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
  # This process tokenizes only its rows of each global batch; which examples form the global batch, and in
  # what order, depends on the step alone, never on the number of processes.
  local_rows = process_rows(batch_sharding, config.train.batch_size)
  if jax.process_count() > 1:
    paths = {("data", "data_dir"), ("data", "train"), ("model", "name"), ("dclr", "complementary_model")}
    # Paths may differ from host to host; what they point to is compared instead (corpus, initial params).
    portable = {k: v for k, v in flax.traverse_util.flatten_dict(config.to_dict()).items() if k not in paths}
    check_processes_agree(
        config=zlib.crc32(json.dumps(sorted(portable.items()), default=str).encode()),
        corpus=zlib.crc32("\0".join(s for column in corpus.columns.values() for s in column).encode()),
        resume_step=0 if resume_step is None else resume_step + 1,
        initial_params=_fingerprint(model.params) if resume_step is None else 0,
    )

  def global_batch(host_batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """The ``[batch, columns, len]`` global batch, sharded over ``data``, from this process's rows of it."""
    return {k: jax.make_array_from_process_local_data(batch_sharding, v, (config.train.batch_size, *v.shape[1:]))
            for k, v in host_batch.items()}

  def fresh_state(params):
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))

  meta = {"best_metric": None, "best_step": None, "first_eval": None}
  if resume_step is None:
    state = jax.jit(fresh_state, out_shardings=replicated)(model.params)
    start_step = 0
  else:
    abstract = jax.eval_shape(fresh_state, checkpoints.abstract_params(model, replicated))
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), abstract)
    restored = checkpoints.restore(latest, resume_step, params=abstract.params, opt_state=abstract.opt_state)
    state = TrainState(step=jax.device_put(jnp.int32(resume_step), replicated), params=restored["params"],
                       opt_state=restored["opt_state"])
    meta, start_step = restored["meta"], resume_step
    log.info("resumed %s at step %d", workdir, start_step)
  model.params = None  # The train state owns the params from here on (its buffers are donated).

  complementary, complementary_params = None, None
  if config.method == "dclr":
    # Frozen: a jit input replicated on every device, never in the train state or our checkpoints.
    complementary, _ = checkpoints.load_model(config.dclr.complementary_model)
    # Through host memory: a restored checkpoint's arrays sit on this process's device, and JAX cannot copy a
    # device array to other hosts' devices; from numpy, each process fills its own devices.
    complementary_params = jax.device_put(jax.device_get(complementary.params), replicated)
    complementary.params = None
  train_step = jax.jit(make_train_step(config, model, tx, complementary), donate_argnums=0,
                       out_shardings=(replicated, replicated))

  dev_sets = evaluate.load_dev_sets(data_lib.data_dir(data_root))
  embedder = models.Embedder(model, model.pooling.dev_pooler, batch_size=config.eval.batch_size)
  metrics_log = MetricsWriter(os.path.join(workdir, "metrics.jsonl"), start_step, enabled=primary)

  def run_eval(step: int, params) -> float:
    t0 = time.time()
    scores, table = evaluate.dev_scores_and_embeddings(lambda s: embedder(s, params), dev_sets)
    # The training dynamics of the MixCSE paper (Fig. 4b) and Wang & Isola's map, from the same embeddings.
    dynamics = dev_dynamics(table, dev_sets["stsb_dev"])
    if config.eval.metric == "stsb_dev":
      metric = scores["stsb_dev"]
    elif config.eval.metric == "stsb_sickr_dev":
      metric = (scores["stsb_dev"] + scores["sickr_dev"]) / 2
    else:
      raise ValueError(f"unknown eval.metric {config.eval.metric!r}")
    record = {"step": step, "eval/metric": metric, **{f"eval/{k}": v for k, v in scores.items()},
              **{f"eval/{k}": v for k, v in dynamics.items()}, "eval/seconds": round(time.time() - t0, 2)}
    metrics_log.write(record)
    log.info("step %d: %s", step, {k: round(v, 4) for k, v in scores.items()})
    if meta["first_eval"] is None:
      meta["first_eval"] = {"step": step, **scores}
    if meta["best_metric"] is None or metric > meta["best_metric"]:
      meta["best_metric"], meta["best_step"] = metric, step
      checkpoints.save(best, step, meta={"step": step, "metric": metric, **scores}, params=params)
    return metric

  if start_step == 0 and config.eval.at_start:
    run_eval(0, state.params)

  progress = _progress_bar(total_steps, start_step, enabled=primary)
  log_losses, t_log, prev = [], time.time(), None
  last_logged_step = start_step

  def check(step: int, metrics: dict) -> dict[str, float]:
    values = {k: float(v) for k, v in jax.device_get(metrics).items()}
    loss = values["loss"]
    if not math.isfinite(loss) or not math.isfinite(values["grad_norm"]):
      good = latest.latest_step()
      raise NonFiniteLossError(
          f"non-finite loss ({loss}) at step {step}; stopped. The last good checkpoint is "
          f"{'step ' + str(good) if good is not None else 'none'} in {os.path.join(workdir, checkpoints.LATEST_DIR)}"
      )
    return values

  try:
    for step, host_batch in enumerate(batches.iterate(start_step, total_steps, positions=local_rows),
                                      start=start_step):
      batch = global_batch(host_batch)
      state, metrics = train_step(state, batch, complementary_params)
      # Read the previous step's loss while this one runs: the host never waits for the device here.
      if prev is not None:
        log_losses.append(check(*prev))
      done = step + 1
      prev = (done, metrics)  # Labelled like checkpoints: step n is the update that produces state n.
      progress.update(1)
      if done % config.train.log_every == 0 or done == total_steps or done % config.eval.every == 0 \
          or done % config.checkpoint.every == 0:
        log_losses.append(check(*prev))
        prev = None
        if log_losses:
          elapsed = time.time() - t_log
          record = {"step": done, **{k: float(np.mean([m[k] for m in log_losses])) for k in log_losses[0]},
                    "steps_per_sec": round((done - last_logged_step) / elapsed, 4),
                    "epoch": round(done / batches.steps_per_epoch, 4)}  # Nominal with no_duplicates.
          metrics_log.write(record)
          progress.set_postfix(loss=f"{record['loss']:.4f}")
          log_losses, t_log, last_logged_step = [], time.time(), done
      if done % config.eval.every == 0 or (config.eval.at_end and done == total_steps):
        run_eval(done, state.params)
      if done % config.checkpoint.every == 0 or done == total_steps:
        checkpoints.save(latest, done, meta=copy.deepcopy(meta), params=state.params, opt_state=state.opt_state)
    if prev is not None:
      check(*prev)
  finally:
    progress.close()
    latest.wait_until_finished()
    best.wait_until_finished()
    latest.close()
    best.close()

  summary = {"steps": total_steps, "best_step": meta["best_step"], "best_metric": meta["best_metric"],
             "first_eval": meta["first_eval"], "workdir": workdir}
  if primary:
    checkpoints.write_json(os.path.join(workdir, "summary.json"), summary)
  return summary


def _progress_bar(total: int, initial: int, enabled: bool = True):
  from tqdm.auto import tqdm

  # disable=None: shown on a terminal only.
  return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, disable=None if enabled else True)


def main(argv: list[str]) -> None:
  del argv
  from absl import flags
  from absl import logging as absl_logging

  # Orbax logs every save at INFO through absl; keep the console for our own progress lines.
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("jaxcse").setLevel(logging.INFO)

  cfg = flags.FLAGS.config
  workdir = flags.FLAGS.workdir
  if flags.FLAGS.data_dir:
    cfg.data.data_dir = flags.FLAGS.data_dir
  initialize_distributed(flags.FLAGS.coordinator_address, flags.FLAGS.num_processes, flags.FLAGS.process_id,
                         auto=flags.FLAGS.distributed)
  try:
    summary = train_and_evaluate(cfg, workdir)
  except (NonFiniteLossError, data_lib.DataError) as e:
    log.error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  if jax.process_index() != 0:
    return
  first = summary["first_eval"]
  if first is not None and first["step"] == 0:
    print(f"STS-B dev Spearman before training: {first['stsb_dev'] * 100:.2f}")
  if summary["best_metric"] is not None:
    print(f"best {cfg.eval.metric} x100: {summary['best_metric'] * 100:.2f} at step {summary['best_step']}")
  print(f"evaluate it: python -m jaxcse.evaluate --model {workdir} --tasks sts")


def _define_flags():
  from absl import flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file("config", None, "Training config file (see configs/).", lock_config=True)
  flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and the model description.")
  flags.DEFINE_string("data_dir", None, f"Data root (default: config.data.data_dir, then ${data_lib.DATA_DIR_ENV}).")
  # Several processes (hosts); see initialize_distributed. Defaults come from the environment so that a launcher
  # can set them per process.
  flags.DEFINE_bool("distributed", os.environ.get("JAXCSE_DISTRIBUTED", "") not in ("", "0"),
                    "Join a multi-process run, letting JAX detect the cluster (Cloud TPU pods, SLURM, Open MPI, "
                    "GKE); env JAXCSE_DISTRIBUTED=1.")
  flags.DEFINE_string("coordinator_address", os.environ.get("JAX_COORDINATOR_ADDRESS"),
                      "host:port of process 0, the same for every process; env JAX_COORDINATOR_ADDRESS.")
  flags.DEFINE_integer("num_processes", _env_int("JAX_NUM_PROCESSES"),
                       "Number of processes in the run; env JAX_NUM_PROCESSES.")
  flags.DEFINE_integer("process_id", _env_int("JAX_PROCESS_ID"),
                       "This process's index, 0 .. num_processes - 1; env JAX_PROCESS_ID.")
  flags.mark_flags_as_required(["config", "workdir"])


def _env_int(name: str) -> int | None:
  value = os.environ.get(name)
  if value is None or value == "":
    return None
  try:
    return int(value)
  except ValueError:
    raise SystemExit(f"error: environment variable {name}={value!r} is not an integer") from None


if __name__ == "__main__":
  from absl import app

  _define_flags()
  app.run(main)
