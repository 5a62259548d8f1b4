r"""Training: the loop around the jitted train step, with evaluation, checkpoints, resume and logging.

  python -m jaxcse.train --config configs/base.py --workdir DIR [--config.train.batch_size=32 ...]

``train_and_evaluate(config, workdir)`` trains per the config, resuming from
the workdir's latest checkpoint. The step itself (``train_step``) is pure and
jitted once with the state donated; the method's loss comes from the
``objectives`` registry; batches come from ``data`` by step, so a run resumed
from its latest checkpoint retraces the uninterrupted run exactly.

Several hosts run the same command, one process each (or one per GPU), with
``--coordinator_address/--num_processes/--process_id`` or ``--distributed``
(cluster auto-detection); see ``distributed``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
import shutil
import sys
import time
import zlib
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxcse import checkpoints, configuration, data as data_lib, distributed, embedder as embedder_lib, evaluate
from jaxcse import hub, loading, mlm, models, objectives, provenance, train_step as step_lib
from jaxcse.errors import USER_ERRORS, JaxcseError, report
from jaxcse.progress import Progress

log = logging.getLogger("jaxcse")


class NonFiniteLossError(JaxcseError, RuntimeError):
  """The loss or the parameters became NaN or infinite; the run stopped without saving past its last good checkpoint."""


class WorkdirError(JaxcseError, RuntimeError):
  """The workdir cannot be used as asked (another process trains in it, or it holds another run)."""


# --------------------------------------------------------------------------
# The workdir: one process at a time, resume from the newest good checkpoint, nothing stale.


def _lock(workdir: str):
  """An exclusive lock on the workdir, held while training (released by the OS if the process dies)."""
  import filelock

  lock = filelock.FileLock(os.path.join(workdir, checkpoints.LOCK_FILE))
  try:
    lock.acquire(timeout=0)
  except filelock.Timeout:
    raise WorkdirError(f"{workdir}: another process is training in this workdir (it holds "
                       f"{os.path.join(workdir, checkpoints.LOCK_FILE)}); wait for it to finish or use another "
                       "workdir") from None
  return lock


def _clear(workdir: str) -> None:
  """Removes a previous run's checkpoints, description, config and logs (``--restart``)."""
  for name in ("checkpoints", checkpoints.MODEL_DIR):
    shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
  for name in ("config.json", "metrics.jsonl", "summary.json"):
    if os.path.exists(os.path.join(workdir, name)):
      os.remove(os.path.join(workdir, name))


def _resume_point(config, workdir: str, latest, best) -> int | None:
  """The step to resume from (the newest good latest checkpoint), or None for a fresh start; removes stale state.

  Checkpoints that are incomplete or corrupt are set aside with a warning. Best checkpoints newer than the resume
  point (saved after the last latest checkpoint of a killed run) are deleted: the resumed run recomputes them, so
  the best checkpoint served is always the one this run reports. A fresh start on a workdir that holds another
  run's config is refused: ``--restart`` starts it over.
  """
  resume_step = None
  for step in sorted(latest.all_steps(), reverse=True):
    problem = checkpoints.verify(latest, step)
    if problem is None:
      resume_step = step
      break
    checkpoints.set_aside(latest, step, problem)
  saved_config = os.path.join(workdir, "config.json")
  if resume_step is None and os.path.exists(saved_config):
    saved = json.load(open(saved_config))
    if saved != json.loads(json.dumps(config.to_dict(), default=str)):
      raise WorkdirError(f"{workdir} holds another run (its config.json differs from this config) and no checkpoint "
                         "to resume: use another workdir, or pass --restart to start it over (deletes its "
                         "checkpoints and metrics)")
  stale = checkpoints.delete_after(best, resume_step)
  if stale:
    log.info("%s: deleted best checkpoints %s, newer than the resume point; the run recomputes them", workdir, stale)
  return resume_step


# --------------------------------------------------------------------------
# Set-up: the model, the data, the state.


def _start_model(config: ml_collections.ConfigDict, workdir: str, resume: bool, primary: bool
                 ) -> tuple[models.ModelSpec, Any]:
  """``(spec, initial params)``: the configured start, or the workdir's description when resuming (params None)."""
  dtype = models.DTYPES[config.model.dtype]
  model_dir = os.path.join(workdir, checkpoints.MODEL_DIR)
  if resume:
    spec = models.from_description(model_dir, dtype=dtype, gradient_checkpointing=config.model.gradient_checkpointing)
    saved = json.load(open(os.path.join(workdir, "config.json")))
    if saved != json.loads(json.dumps(config.to_dict(), default=str)):
      log.warning("resuming %s with a config that differs from the saved config.json", workdir)
    return spec, None
  pooling = objectives.pooling_of(config)
  with_mlm_head = objectives.get(config.method).masked_lm or config.mlm.enabled
  if config.model.get("init", "pretrained") == "random":
    spec, params = models.build_random(
        _architecture(config), _tokenizer(config.model.tokenizer), pooling, seed=config.seed, dtype=dtype,
        gradient_checkpointing=config.model.gradient_checkpointing, with_mlm_head=with_mlm_head,
        source=f"random init ({config.model.tokenizer})")
  else:
    spec, params = models.load_pretrained(
        config.model.name, pooling, dropout=config.model.dropout, seed=config.seed, dtype=dtype,
        gradient_checkpointing=config.model.gradient_checkpointing, with_mlm_head=with_mlm_head,
        mlm_head=config.mlm.get("head", "tied") if config.mlm.enabled else "tied",
        revision=config.model.get("revision") or None)
    if spec.mlm is not None and not spec.mlm.pretrained:
      log.warning("%s has no masked-LM head; the MLM objective starts from a fresh one", config.model.name)
  if primary:
    models.save_description(spec, model_dir)
    checkpoints.write_json(os.path.join(workdir, "config.json"), config.to_dict())
  return spec, params


def _tokenizer(name: str):
  from transformers import AutoTokenizer

  return AutoTokenizer.from_pretrained(hub.resolve_model_path(name))


def _architecture(config: ml_collections.ConfigDict):
  """The Hugging Face config of a randomly initialised backbone: ``config.model.architecture``, vocab from the tokenizer."""
  from transformers import AutoConfig

  arch = dict(config.model.architecture)
  model_type = arch.pop("model_type", "bert")
  tokenizer = _tokenizer(config.model.tokenizer)
  return AutoConfig.for_model(model_type, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                              hidden_dropout_prob=config.model.dropout,
                              attention_probs_dropout_prob=config.model.dropout, **arch)


def _batches(config: ml_collections.ConfigDict, spec: models.ModelSpec):
  """``(train batches, held-out corpus or None)`` for the configured corpus."""
  corpus = data_lib.load_corpus(config.data.train, root=config.data.data_dir or None,
                                skip_empty_lines=config.data.skip_empty_lines,
                                tfds_text_feature=config.data.get("tfds_text_feature", "text"),
                                tfds_data_dir=config.data.get("tfds_data_dir") or None)
  heldout = None
  if config.data.get("heldout_fraction", 0.0) > 0:
    corpus, heldout = data_lib.split_heldout(corpus, config.data.heldout_fraction)
  if config.data.get("pack", False):
    batches = data_lib.PackedBatches(corpus, spec.tokenizer, batch_size=config.train.batch_size,
                                     max_seq_len=config.data.max_seq_len, seed=config.seed)
  else:
    batches = data_lib.Batches(corpus, spec.tokenizer, batch_size=config.train.batch_size,
                               max_seq_len=config.data.max_seq_len, seed=config.seed,
                               no_duplicates=config.data.no_duplicates)
  return batches, heldout


def _tensorboard(config) -> bool:
  return bool(config.get("log", {}).get("tensorboard", False))


def _total_steps(config, batches) -> int:
  if config.train.max_steps > 0:
    return config.train.max_steps
  return batches.total_steps(config.train.num_epochs)


def _complementary(config: ml_collections.ConfigDict, replicated) -> tuple[models.ModelSpec | None, Any]:
  """DCLR's frozen complementary model: ``(spec, params replicated on every device)``, or ``(None, None)``.

  Its embeddings are the representation its threshold phi was tuned for: the official code's complementary
  model is an unsupervised SimCSE checkpoint run through BERT's pooler layer, which in SimCSE's released
  checkpoints holds the trained MLP. So a Hugging Face folder is embedded with its ``cls`` (pooler layer), and
  a jaxcse workdir with its training pooler (``cls``: the MLP output), not its test pooler.
  """
  if not objectives.get(config.method).needs_complementary:
    return None, None
  loaded = loading.load_model(config.dclr.complementary_model)
  spec = loaded.spec
  if loaded.described:
    spec = dataclasses.replace(spec, pooling=models.PoolerSpec(spec.pooling.pooler))
  # Through host memory: a restored checkpoint's arrays sit on this process's device, and JAX cannot copy a
  # device array to other hosts' devices; from numpy, each process fills its own devices.
  return spec, jax.device_put(jax.device_get(loaded.params), replicated)


def _agree_across_processes(config, corpus: data_lib.Corpus, resume_step: int | None, params) -> None:
  """With several processes, fail fast unless they run the same config, data, checkpoint and initial weights."""
  if jax.process_count() == 1:
    return
  paths = {("data", "data_dir"), ("data", "train"), ("model", "name"), ("dclr", "complementary_model")}
  # Paths may differ from host to host; what they point to is compared instead (corpus, initial params).
  portable = {k: v for k, v in flax.traverse_util.flatten_dict(config.to_dict()).items() if k not in paths}
  distributed.check_processes_agree(
      config=zlib.crc32(json.dumps(sorted(portable.items()), default=str).encode()),
      corpus=zlib.crc32("\0".join(s for column in corpus.columns.values() for s in column).encode()),
      resume_step=0 if resume_step is None else resume_step + 1,
      initial_params=distributed.fingerprint(params) if resume_step is None else 0,
  )


# --------------------------------------------------------------------------
# Evaluation and logging.


class MetricsWriter:
  """Appends one JSON object per line to ``metrics.jsonl`` (and, if asked, TensorBoard scalars).

  A resumed run drops the lines past its checkpoint (and TensorBoard's events past it: ``purge_step``), so
  nothing is logged twice. Only process 0 writes (``enabled``); the others compute the same records.
  """

  def __init__(self, path: str, resume_step: int | None, enabled: bool = True, tensorboard_dir: str | None = None):
    self.path = path
    self.enabled = enabled
    if enabled and os.path.exists(path):  # Lines written after the checkpoint we resume from would be written again.
      kept = []
      if resume_step is not None:  # A fresh start keeps nothing.
        with open(path) as f:
          kept = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= resume_step]
      with open(path + ".tmp", "w") as f:
        f.writelines(kept)
      os.replace(path + ".tmp", path)
    self.tensorboard = None
    if enabled and tensorboard_dir:
      from tensorboardX import SummaryWriter

      self.tensorboard = SummaryWriter(tensorboard_dir, purge_step=None if resume_step is None else resume_step + 1)

  def write(self, record: dict) -> None:
    if not self.enabled:
      return
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    if self.tensorboard is not None:
      for key, value in record.items():
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
          self.tensorboard.add_scalar(key if "/" in key else f"train/{key}", value, record["step"])
      self.tensorboard.flush()

  def close(self) -> None:
    if self.tensorboard is not None:
      self.tensorboard.close()


class HeldoutMLM:
  """Masked-LM loss and accuracy on a held-out corpus: the same packed sequences and masks at every evaluation."""

  def __init__(self, config: ml_collections.ConfigDict, spec: models.ModelSpec, corpus: data_lib.Corpus):
    batches = data_lib.PackedBatches(corpus, spec.tokenizer, batch_size=config.eval.batch_size,
                                     max_seq_len=config.data.max_seq_len, seed=config.seed, keep_last=True)
    self.batches = [batches.batch(i)["input_ids"][:, 0] for i in range(batches.steps_per_epoch)]
    self.masks = [batches.batch(i)["attention_mask"][:, 0] for i in range(batches.steps_per_epoch)]
    tok = spec.tokenizer
    num_predictions = config.mlm.get("max_predictions", 0) or mlm.max_predictions(config.data.max_seq_len,
                                                                                  config.mlm.probability)
    masking = dict(mask_token_id=tok.mask_token_id, vocab_size=spec.hf_config.vocab_size,
                   special_ids=tuple(tok.all_special_ids), probability=config.mlm.probability,
                   num_predictions=num_predictions)

    def sums(params, ids, mask, key):
      masked, positions, labels, weights = mlm.mask_positions(key, ids, mask, **masking)
      logits = models.mlm_logits_at(spec, params, masked, mask, positions, train=False)
      ce, correct = mlm.cross_entropy_sums(logits, labels, weights)
      return ce, correct, weights.sum()

    self._sums = jax.jit(sums)
    self._key = jax.random.key(config.seed + 1)  # Fixed masks, apart from the training masks.

  def __call__(self, params) -> dict[str, float]:
    totals = np.zeros(3)
    for i, (ids, mask) in enumerate(zip(self.batches, self.masks)):
      totals += np.asarray(jax.device_get(self._sums(params, ids, mask, jax.random.fold_in(self._key, i))), np.float64)
    ce, correct, count = totals
    return {"heldout_mlm_loss": float(ce / count), "heldout_mlm_accuracy": float(correct / count),
            "heldout_mlm_tokens": int(count)}


class Evaluator:
  """Runs the evaluation during training: STS-B/SICK-R dev (+ its dynamics), held-out MLM; keeps the best."""

  def __init__(self, config, spec: models.ModelSpec, heldout: data_lib.Corpus | None, metrics_log: MetricsWriter,
               best_manager, meta: dict):
    self.config = config
    self.dev_sets = evaluate.load_dev_sets(data_lib.data_dir(config.data.data_dir or None))
    self.embedder = embedder_lib.Embedder(spec, spec.pooling.dev_pooler, batch_size=config.eval.batch_size,
                                          attend_padding=objectives.get(config.method).attend_padding(config))
    self.heldout = HeldoutMLM(config, spec, heldout) if heldout is not None else None
    self.select = evaluate.SELECTION_METRICS[config.eval.metric]
    self.metrics_log, self.best, self.meta = metrics_log, best_manager, meta

  def __call__(self, step: int, params) -> float:
    t0 = time.time()
    scores, table = evaluate.dev_scores_and_embeddings(lambda s: self.embedder(s, params), self.dev_sets)
    # The training dynamics of the MixCSE paper (Fig. 4b) and Wang & Isola's map, from the same embeddings.
    dynamics = evaluate.dev_dynamics(table, self.dev_sets["stsb_dev"])
    if self.heldout is not None:
      scores.update(self.heldout(params))
    metric = self.select(scores)
    record = {"step": step, "eval/metric": metric, **{f"eval/{k}": v for k, v in scores.items()},
              **{f"eval/{k}": v for k, v in dynamics.items()}, "eval/seconds": round(time.time() - t0, 2)}
    self.metrics_log.write(record)
    log.info("step %d: %s", step, {k: round(v, 4) for k, v in scores.items()})
    if self.meta["first_eval"] is None:
      self.meta["first_eval"] = {"step": step, **scores}
    if self.meta["best_metric"] is None or metric > self.meta["best_metric"]:
      self.meta["best_metric"], self.meta["best_step"] = metric, step
      checkpoints.save(self.best, step, meta={"step": step, "metric": metric, **scores}, params=params)
    return metric


def _check_finite(step: int, metrics: dict, latest, workdir: str) -> dict[str, float]:
  """The step's metrics as floats; ``NonFiniteLossError`` if its loss or gradient norm is NaN or infinite."""
  values = {k: float(v) for k, v in jax.device_get(metrics).items()}
  if not math.isfinite(values["loss"]) or not math.isfinite(values["grad_norm"]):
    raise NonFiniteLossError(
        f"non-finite loss ({values['loss']}) at step {step}; stopped. The last good checkpoint is "
        f"{_last_good(latest)} in {os.path.join(workdir, checkpoints.LATEST_DIR)}")
  return values


def _last_good(latest) -> str:
  good = latest.latest_step()
  return "none" if good is None else f"step {good}"


# --------------------------------------------------------------------------
# The loop.


class StepLog:
  """Averages the step metrics between log lines and writes them; reads a step's metrics one step late.

  ``add(step, metrics)`` keeps the device arrays of the step just dispatched and checks the previous one, so the
  host never waits for the device; ``flush`` writes one record (mean over the steps since the last line).
  """

  def __init__(self, metrics_log: MetricsWriter, latest, workdir: str, steps_per_epoch: int, start_step: int,
               schedule=None):
    self.metrics_log, self.latest, self.workdir = metrics_log, latest, workdir
    self.steps_per_epoch = steps_per_epoch
    self.schedule = schedule
    self.values, self.pending = [], None
    self.t_last, self.last_step = time.time(), start_step

  def add(self, step: int, metrics: dict) -> None:
    if self.pending is not None:
      self.values.append(_check_finite(*self.pending, self.latest, self.workdir))
    self.pending = (step, metrics)

  def settle(self) -> None:
    """Checks the last dispatched step (waits for it)."""
    if self.pending is not None:
      self.values.append(_check_finite(*self.pending, self.latest, self.workdir))
      self.pending = None

  def flush(self, step: int) -> dict:
    self.settle()
    record = {"step": step, **{k: float(np.mean([m[k] for m in self.values])) for k in self.values[0]},
              "steps_per_sec": round((step - self.last_step) / (time.time() - self.t_last), 4),
              "epoch": round(step / self.steps_per_epoch, 4)}  # Nominal with no_duplicates or packing.
    if self.schedule is not None:  # The rate of the last update of the interval (step - 1: counts start at 0).
      record["learning_rate"] = float(self.schedule(step - 1))
    self.metrics_log.write(record)
    self.values, self.t_last, self.last_step = [], time.time(), step
    return record


def _initial_state(spec: models.ModelSpec, params, tx, latest, resume_step: int | None, replicated, workdir: str):
  """``(train state, run metadata, first step)``: fresh from ``params``, or restored from the latest checkpoint."""

  def fresh_state(params):
    return step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))

  meta = {"best_metric": None, "best_step": None, "first_eval": None}
  if resume_step is None:
    # Loaded parameters may be committed to one local device (a jitted init of a fresh head): hand jit host
    # copies, which every process holds alike, so it places them on the (possibly multi-process) mesh itself.
    params = jax.device_get(params)
    return jax.jit(fresh_state, out_shardings=replicated)(params), meta, 0
  abstract = jax.eval_shape(fresh_state, checkpoints.abstract_params(spec, replicated))
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), abstract)
  try:
    restored = checkpoints.restore(latest, resume_step, params=abstract.params, opt_state=abstract.opt_state)
  except checkpoints.CheckpointError as e:  # Unreadable although it looked complete: set aside; start again.
    checkpoints.set_aside(latest, resume_step, str(e).split(": ", 1)[-1])
    raise WorkdirError(f"{e}; it was set aside: run the same command again to resume from the previous "
                       "checkpoint") from None
  state = step_lib.TrainState(step=jax.device_put(jnp.int32(resume_step), replicated),
                              params=restored["params"], opt_state=restored["opt_state"])
  log.info("resumed %s at step %d", workdir, resume_step)
  return state, restored["meta"], resume_step


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *, restart: bool = False) -> dict:
  """Trains per ``config`` in ``workdir``, resuming from its newest good checkpoint if there is one.

  Returns a summary: steps, best evaluation and its step, first evaluation. ``restart`` deletes a previous run's
  checkpoints and logs first (without it, a workdir holding another run's config and no checkpoint is refused).

  With several processes (``distributed.initialize_distributed`` first), every
  process runs this same call: each tokenizes only its rows of every global
  batch, all take part in every checkpoint save and restore (orbax coordinates
  them), and all run the dev evaluation as one replicated program on the
  replicated params, so they reach the same scores and the same
  best-checkpoint decisions. Process 0 alone writes config.json, the model
  description, metrics.jsonl and summary.json. ``workdir`` must be one folder
  that every process sees (a shared filesystem).
  """
  configuration.validate(config)
  primary = jax.process_index() == 0
  mesh = distributed.make_mesh()
  if config.train.batch_size % mesh.size:
    raise configuration.ConfigError(f"train.batch_size {config.train.batch_size} must be divisible by the "
                                    f"{mesh.size} devices")
  os.makedirs(workdir, exist_ok=True)
  lock = _lock(workdir) if primary else None
  try:
    return _train(config, workdir, primary, mesh, restart)
  finally:
    if lock is not None:
      lock.release()


def _train(config, workdir: str, primary: bool, mesh, restart: bool) -> dict:
  """``train_and_evaluate`` once the config is valid and the workdir locked."""
  started = time.time()
  if restart and primary:
    _clear(workdir)
  latest = checkpoints.manager(os.path.join(workdir, checkpoints.LATEST_DIR))
  best = checkpoints.manager(os.path.join(workdir, checkpoints.BEST_DIR))
  resume_step = _resume_point(config, workdir, latest, best)
  spec, params = _start_model(config, workdir, resume_step is not None, primary)
  batches, heldout = _batches(config, spec)
  total_steps = _total_steps(config, batches)
  tx = step_lib.make_optimizer(config.train, total_steps)
  replicated = NamedSharding(mesh, PartitionSpec())
  batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
  # This process tokenizes only its rows of each global batch; which examples form the global batch, and in
  # what order, depends on the step alone, never on the number of processes.
  local_rows = distributed.process_rows(batch_sharding, config.train.batch_size)
  _agree_across_processes(config, batches.corpus, resume_step, params)
  state, meta, start_step = _initial_state(spec, params, tx, latest, resume_step, replicated, workdir)
  del params  # The train state owns the params from here on (its buffers are donated).

  complementary, complementary_params = _complementary(config, replicated)
  train_step = step_lib.jit_train_step(config, spec, tx, complementary, mesh)
  metrics_log = MetricsWriter(os.path.join(workdir, "metrics.jsonl"), resume_step, enabled=primary,
                              tensorboard_dir=os.path.join(workdir, "tensorboard") if _tensorboard(config) else None)
  run_eval = Evaluator(config, spec, heldout, metrics_log, best, meta)
  if start_step == 0 and config.eval.at_start:
    run_eval(0, state.params)
  step_log = StepLog(metrics_log, latest, workdir, batches.steps_per_epoch, start_step,
                     step_lib.make_schedule(config.train, total_steps))
  progress = Progress(total_steps, initial=start_step, unit="step", desc="train", enabled=primary)
  try:
    for step, host_batch in enumerate(batches.iterate(start_step, total_steps, positions=local_rows),
                                      start=start_step):
      batch = {k: jax.make_array_from_process_local_data(batch_sharding, v, (config.train.batch_size, *v.shape[1:]))
               for k, v in host_batch.items()}  # The global batch, from this process's rows of it.
      state, metrics = train_step(state, batch, complementary_params)
      done = step + 1  # Labelled like checkpoints: step n is the update that produces state n.
      step_log.add(done, metrics)
      progress.update(1)
      evaluate_now = done % config.eval.every == 0 or (config.eval.at_end and done == total_steps)
      save_now = done % config.checkpoint.every == 0 or done == total_steps
      if done % config.train.log_every == 0 or done == total_steps or evaluate_now or save_now:
        record = step_log.flush(done)
        progress.set(loss=f"{record['loss']:.4g}", lr=f"{record['learning_rate']:.3g}")
      if (evaluate_now or save_now) and not checkpoints.all_finite(state.params):
        raise NonFiniteLossError(f"non-finite parameters after step {done}; stopped. The last good checkpoint is "
                                 f"{_last_good(latest)} in {os.path.join(workdir, checkpoints.LATEST_DIR)}")
      if evaluate_now:
        run_eval(done, state.params)
      if save_now:
        checkpoints.save(latest, done, meta=copy.deepcopy(meta), params=state.params, opt_state=state.opt_state)
    step_log.settle()
  finally:
    progress.close()
    metrics_log.close()
    for mngr in (latest, best):
      mngr.wait_until_finished()
      mngr.close()

  summary = {"steps": total_steps, "best_step": meta["best_step"], "best_metric": meta["best_metric"],
             "first_eval": meta["first_eval"], "workdir": workdir}
  if primary:
    corpus = data_lib.resolve(config.data.train, config.data.data_dir or None) \
        if not config.data.train.startswith(data_lib.TFDS_PREFIX) else None
    record = {**summary, "provenance": provenance.provenance(
        config=config.to_dict(), model=config.model.name or spec.source, revision=spec.revision,
        data=provenance.data_digests([corpus]) if corpus else None, wall_seconds=time.time() - started)}
    checkpoints.write_json(os.path.join(workdir, "summary.json"), record)
  return summary


# --------------------------------------------------------------------------
# The command.


def main(argv: list[str]) -> None:
  del argv
  from absl import flags
  from absl import logging as absl_logging

  # Orbax logs every save at INFO through absl; keep the console for our own progress lines.
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("jaxcse").setLevel(logging.INFO)
  cfg, workdir = flags.FLAGS.config, flags.FLAGS.workdir
  if flags.FLAGS.data_dir:
    cfg.data.data_dir = flags.FLAGS.data_dir
  distributed.initialize_distributed(flags.FLAGS.coordinator_address, flags.FLAGS.num_processes,
                                     flags.FLAGS.process_id, auto=flags.FLAGS.distributed)
  try:
    summary = train_and_evaluate(cfg, workdir, restart=flags.FLAGS.restart)
  except USER_ERRORS as e:
    sys.exit(report(e))
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

  config_flags.DEFINE_config_file("config", None, "Training config: a file (configs/base.py) or the name of a config "
                                  "shipped with jaxcse (base, quickstart, simcse_sup, mixcse, dclr, pretrain_mlm, ...).",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and the model description.")
  flags.DEFINE_string("data_dir", None, f"Data root (default: config.data.data_dir, then ${data_lib.DATA_DIR_ENV}).")
  flags.DEFINE_bool("restart", False, "Start over in a workdir that holds a previous run (deletes its checkpoints, "
                    "description and metrics) instead of resuming it.")
  # Several processes (hosts); see distributed.initialize_distributed. Defaults come from the environment so that a
  # launcher can set them per process.
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


CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def resolve_config(value: str) -> str:
  """``--config``'s file: ``value`` when it is a path, else the config shipped with jaxcse of that name (``dclr``)."""
  path = value.split(":", 1)[0]  # ml_collections passes ``file.py:args`` on to the config's get_config.
  if os.path.exists(path) or path.endswith(".py") or os.sep in path:
    return value
  packaged = os.path.join(CONFIGS_DIR, f"{path}.py")
  return packaged + value[len(path):] if os.path.isfile(packaged) else value


def shipped_configs() -> list[str]:
  return sorted(f[:-3] for f in os.listdir(CONFIGS_DIR) if f.endswith(".py") and not f.startswith("_"))


def parse_flags(argv: list[str], command: str = "jaxcse.train") -> list[str]:
  """absl's flag parsing, with a mistake reported as one line (exit 2) instead of a traceback.

  ``--config NAME`` selects a config shipped with jaxcse (``base``, ``quickstart``, ``dclr``, ...). ``command``
  names the module whose ``--help`` the message points to (``jaxcse.compile`` parses the same flags).
  """
  from absl import flags

  argv = list(argv)
  for i, arg in enumerate(argv):
    if arg == "--config" and i + 1 < len(argv):
      argv[i + 1] = resolve_config(argv[i + 1])
    elif arg.startswith("--config="):
      argv[i] = "--config=" + resolve_config(arg[len("--config="):])
  try:
    rest = flags.FLAGS(argv)
    if flags.FLAGS.config is not None:  # None: not given (jaxcse.compile --list_targets needs none).
      flags.FLAGS.config.to_dict()  # A config file that failed to load (missing, broken) raises here.
  except (KeyError, AttributeError) as e:  # ml_collections: --config.<field> names no field of the config.
    fields = [a.split("=")[0].lstrip("-") for a in argv if a.startswith("--config.")]
    print(f"error: unknown config field {e.args[0] if e.args else e!r} in {', '.join(fields)} (the config file lists every field)",
          file=sys.stderr)
    sys.exit(2)
  except (flags.Error, OSError, SyntaxError, TypeError, ValueError) as e:
    message = str(e).strip().splitlines()[-1].strip() if str(e).strip() else type(e).__name__
    print(f"error: {message} (python -m {command} --help lists the flags; shipped configs: "
          f"{', '.join(shipped_configs())})", file=sys.stderr)
    sys.exit(2)
  return rest


def run() -> None:
  """``python -m jaxcse.train`` (and the ``jaxcse-train`` console script)."""
  from absl import app

  _define_flags()
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  run()
