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

import contextlib
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

from jaxcse import checkpoints, configuration, data as data_lib, distributed, embedder as embedder_lib
from jaxcse import sts_data, sts_metrics
from jaxcse import errors, files, hub, loading, mlm, models, objectives, provenance, train_step as step_lib
from jaxcse.errors import USER_ERRORS, JaxcseError, command_name, report
from jaxcse.progress import Progress

log = logging.getLogger("jaxcse")


class NonFiniteLossError(JaxcseError, RuntimeError):
  """The loss or the parameters became NaN or infinite; the run stopped without saving past its last good checkpoint."""


class WorkdirError(JaxcseError, RuntimeError):
  """The workdir cannot be used as asked (another process trains in it, or it holds another run)."""


class Interrupted(KeyboardInterrupt):
  """Ctrl-C (SIGINT) while training; the message says at which step, and how to resume."""


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


# Config fields that cannot change a run's result (its parameters, its evaluations, which checkpoint is best, what
# its model description says): a run may be resumed with other values for them. Every other field must equal the
# workdir's config.json. A prefix ending in "." covers a whole section.
RESUMABLE_CHANGES = (
    "train.log_every",  # How often metrics.jsonl gets a line.
    "eval.batch_size",  # Sentences per forward pass of an evaluation: the same sentences and embeddings.
    "checkpoint.every",  # When the latest state is saved: a resumed run retraces the same steps.
    "log.",  # Logging only (log.tensorboard).
)


def _result_changes(config, saved: dict) -> tuple[list[str], list[str]]:
  """``(changed, unknown)`` fields of ``config`` against a workdir's saved config (``config.json``).

  ``changed``: fields on both sides, not in ``RESUMABLE_CHANGES``, whose values differ, as ``name (a there, b here)``.
  ``unknown``: fields on one side only (a newer or older jaxcse added or removed them), as names.
  """
  here = flax.traverse_util.flatten_dict(json.loads(json.dumps(config.to_dict(), default=str)), sep=".")
  there = flax.traverse_util.flatten_dict(saved, sep=".")
  changed, unknown = [], []
  for name in sorted(set(here) | set(there)):
    if name.startswith(RESUMABLE_CHANGES) or here.get(name) == there.get(name):
      continue
    if name in here and name in there:
      changed.append(f"{name} ({there[name]!r} there, {here[name]!r} here)")
    else:
      unknown.append(name)
  return changed, unknown


def _check_same_run(config, workdir: str) -> None:
  """Refuses a workdir whose config.json differs from ``config`` in a field that changes the result.

  Any field but ``RESUMABLE_CHANGES`` counts; ``--restart`` starts such a workdir over. Called before anything in
  the workdir changes. A field on one side only (another jaxcse version) is a warning.
  """
  saved_config = os.path.join(workdir, "config.json")
  if not os.path.exists(saved_config):
    return
  with open(saved_config) as f:
    changed, unknown = _result_changes(config, json.load(f))
  if changed:
    raise WorkdirError(f"{workdir} holds another run (its config.json differs in {', '.join(changed)}, which "
                       "change the result): rerun with its values to resume it, or pass --restart to start it over "
                       "(deletes its checkpoints and metrics)")
  if unknown:
    log.warning("%s: config fields %s are on one side only (config.json there, this config here): another jaxcse "
                "version wrote it; resuming", workdir, ", ".join(unknown))


def _resume_point(workdir: str, latest, best) -> int | None:
  """The step to resume from (the newest good latest checkpoint), or None for a fresh start; removes stale state.

  Checkpoints that are incomplete or corrupt, latest or best, are set aside with a warning. Best checkpoints newer
  than the resume point (saved after the last latest checkpoint of a killed run) are deleted: the resumed run
  (``_check_same_run``: with the same config) evaluates those steps again, so the best checkpoint served is always
  the one this run reports.
  """
  resume_step = None
  for step in sorted(latest.all_steps(), reverse=True):
    problem = checkpoints.verify(latest, step)
    if problem is None:
      resume_step = step
      break
    checkpoints.set_aside(latest, step, problem)
  stale = checkpoints.delete_after(best, resume_step)
  if stale:
    log.info("%s: deleted best checkpoints %s, saved after the resume point (%s); the run evaluates those steps "
             "again", workdir, stale, "none" if resume_step is None else f"step {resume_step}")
  for step in sorted(best.all_steps(), reverse=True):  # Every best checkpoint left must be servable.
    problem = checkpoints.verify(best, step)
    if problem:
      checkpoints.set_aside(best, step, problem)
  return resume_step


def _check_workdir(config, workdir: str, restart: bool) -> bool:
  """Checks, reading only, that a run can use ``workdir``; returns whether it holds checkpoints to resume from.

  Raises ``errors.OutputError`` if the path is not a folder or cannot be created or written, ``WorkdirError`` if
  its config.json is unreadable, or holds another run: any difference when there is no checkpoint to resume, a
  difference that changes the result (``_check_same_run``) when there is; never with ``restart``.
  """
  errors.check_output(workdir, folder=True)
  latest = os.path.join(workdir, checkpoints.LATEST_DIR)
  has_checkpoints = os.path.isdir(latest) and any(
      name.isdigit() and os.path.isdir(os.path.join(latest, name)) for name in os.listdir(latest))
  saved_config = os.path.join(workdir, "config.json")
  if not restart and os.path.isfile(saved_config):
    try:
      with open(saved_config) as f:
        saved = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
      raise WorkdirError(f"{saved_config}: unreadable ({e}); pass --restart to start the workdir over") from None
    if not has_checkpoints and saved != json.loads(json.dumps(config.to_dict(), default=str)):
      raise WorkdirError(f"{workdir} holds another run (its config.json differs from this config) and no checkpoint "
                         "to resume: use another workdir, or pass --restart to start it over (deletes its "
                         "checkpoints and metrics)")
    _check_same_run(config, workdir)
  return has_checkpoints and not restart


# --------------------------------------------------------------------------
# Set-up: the model, the data, the state.


@dataclasses.dataclass
class _Inputs:
  """Everything a run reads, loaded and checked before it writes anything (``_read_inputs``)."""

  spec: models.ModelSpec  # The configured model's, or the workdir's description when it holds checkpoints.
  params: Any  # The configured start's parameters; None when the run is to resume from the workdir.
  batches: Any  # data.Batches or data.PackedBatches over the training corpus.
  heldout: data_lib.Corpus | None  # The held-out part of the corpus (data.heldout_fraction), else None.
  dev_sets: dict[str, sts_data.PairSet]  # sts_data.load_dev_sets: STS-B dev (and SICK-R dev).
  complementary: tuple[models.ModelSpec | None, Any]  # DCLR's complementary model (``_complementary``).
  augment_mlm: tuple[models.ModelSpec | None, Any]  # The frozen MLM of augment.mlm (``_augment_mlm``).


def _read_inputs(config: ml_collections.ConfigDict, workdir: str, restart: bool, mesh) -> _Inputs:
  """Checks the workdir and loads the model, corpus and dev sets; writes nothing.

  So a mistake (a missing or undecodable data file, an unknown model, a workdir that cannot be used) stops the
  run with the workdir exactly as it was, and the corrected command then starts cleanly.
  """
  resumable = _check_workdir(config, workdir, restart)
  spec, params = _start_model(config, workdir, resume=resumable)
  batches, heldout = _batches(config, spec)
  dev_sets = sts_data.load_dev_sets(config.data.data_dir or None, sickr=config.eval.sickr_dev)
  replicated = NamedSharding(mesh, PartitionSpec())
  complementary = _complementary(config, replicated)
  augment_mlm = _augment_mlm(config, spec, replicated)
  return _Inputs(spec, params, batches, heldout, dev_sets, complementary, augment_mlm)


def _start_model(config: ml_collections.ConfigDict, workdir: str, resume: bool) -> tuple[models.ModelSpec, Any]:
  """``(spec, initial params)``: the configured start, or the workdir's description when resuming (params None).

  Reads only; ``_save_start`` writes the description and config of a fresh start.
  """
  dtype = models.DTYPES[config.model.dtype]
  model_dir = os.path.join(workdir, checkpoints.MODEL_DIR)
  if resume:
    spec = models.from_description(model_dir, dtype=dtype, gradient_checkpointing=config.model.gradient_checkpointing)
    return spec, None  # _resume_point checked that config.json holds this run.
  pooling = objectives.pooling_of(config)
  with_mlm_head = objectives.get(config.method).masked_lm or config.mlm.enabled
  if config.model.init == "random":
    spec, params = models.build_random(
        _architecture(config), _tokenizer(config.model.tokenizer), pooling, seed=config.seed, dtype=dtype,
        gradient_checkpointing=config.model.gradient_checkpointing, with_mlm_head=with_mlm_head,
        source=f"random init ({config.model.tokenizer})")
  else:
    spec, params = models.load_pretrained(
        config.model.name, pooling, dropout=config.model.dropout, seed=config.seed, dtype=dtype,
        gradient_checkpointing=config.model.gradient_checkpointing, with_mlm_head=with_mlm_head,
        mlm_head=config.mlm.head if config.mlm.enabled else "tied",
        revision=config.model.revision or None)
    if spec.mlm is not None and not spec.mlm.pretrained:
      log.warning("%s has no masked-LM head; the MLM objective starts from a fresh one", config.model.name)
  return spec, params


def _save_start(config: ml_collections.ConfigDict, spec: models.ModelSpec, workdir: str) -> None:
  """Writes a fresh start's model description and resolved config into the workdir."""
  models.save_description(spec, os.path.join(workdir, checkpoints.MODEL_DIR))
  files.write_json(os.path.join(workdir, "config.json"), config.to_dict())


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
                                tfds_text_feature=config.data.tfds_text_feature,
                                tfds_data_dir=config.data.tfds_data_dir or None)
  heldout = None
  if config.data.heldout_fraction > 0:
    corpus, heldout = data_lib.split_heldout(corpus, config.data.heldout_fraction)
  if config.data.pack:
    batches = data_lib.PackedBatches(corpus, spec.tokenizer, batch_size=config.train.batch_size,
                                     max_seq_len=config.data.max_seq_len, seed=config.seed)
  else:
    batches = data_lib.Batches(corpus, spec.tokenizer, batch_size=config.train.batch_size,
                               max_seq_len=config.data.max_seq_len, seed=config.seed,
                               no_duplicates=config.data.no_duplicates)
  return batches, heldout


def _tensorboard(config) -> bool:
  return bool(config.log.tensorboard)


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
  if not objectives.get(config.method).needs_complementary(config):
    return None, None
  loaded = loading.load_model(config.dclr.complementary_model)
  spec = loaded.spec
  if loaded.described:
    spec = dataclasses.replace(spec, pooling=models.PoolerSpec(spec.pooling.pooler))
  # Through host memory: a restored checkpoint's arrays sit on this process's device, and JAX cannot copy a
  # device array to other hosts' devices; from numpy, each process fills its own devices.
  return spec, jax.device_put(jax.device_get(loaded.params), replicated)


def _augment_mlm(config: ml_collections.ConfigDict, spec: models.ModelSpec, replicated
                 ) -> tuple[models.ModelSpec | None, Any]:
  """The frozen masked LM of ``config.augment.mlm`` (SimCSE's "MLM k%"): ``(spec, params replicated)``, or Nones.

  ``augment.mlm_model``, else ``model.name``: the starting encoder (not the params being trained) with its own
  pretrained MLM head. An input of the step, like DCLR's complementary model: no gradient, not saved.
  """
  if not config.augment.mlm:
    return None, None
  name = config.augment.mlm_model or config.model.name
  mlm_spec, params = models.load_pretrained(name, models.PoolerSpec("avg"), dtype=models.DTYPES[config.model.dtype],
                                            with_mlm_head=True, mlm_head="tied",
                                            revision=None if config.augment.mlm_model else
                                            config.model.revision or None)
  if not mlm_spec.mlm.pretrained:
    raise configuration.ConfigError(f"augment.mlm: {name} has no pretrained masked-LM head to sample replacements "
                                    "from (set augment.mlm_model to a model that has one)")
  if mlm_spec.tokenizer.get_vocab() != spec.tokenizer.get_vocab():
    raise configuration.ConfigError(f"augment.mlm: {name}'s vocabulary is not the trained model's: its samples "
                                    "would be other tokens")
  return mlm_spec, jax.device_put(jax.device_get(params), replicated)


def _agree_across_processes(config, corpus: data_lib.Corpus, resume_step: int | None, params) -> None:
  """With several processes, fail fast unless they run the same config, data, checkpoint and initial weights."""
  if jax.process_count() == 1:
    return
  paths = {("data", "data_dir"), ("data", "train"), ("model", "name"), ("dclr", "complementary_model"),
           ("augment", "mlm_model")}
  # Paths may differ from host to host; what they point to is compared instead (corpus, initial params).
  portable = {k: v for k, v in flax.traverse_util.flatten_dict(config.to_dict()).items() if k not in paths}
  distributed.check_processes_agree(
      config=zlib.crc32(json.dumps(sorted(portable.items()), default=str).encode()),
      corpus=zlib.crc32("\0".join(s for column in corpus.columns.values() for s in column).encode()),
      resume_step=0 if resume_step is None else resume_step + 1,
      initial_params=int(models.params_fingerprint(params)[:8], 16) if resume_step is None else 0,
  )


# --------------------------------------------------------------------------
# Evaluation and logging.


class MetricsWriter:
  """Appends one JSON object per line to ``metrics.jsonl`` (and, if asked, TensorBoard scalars).

  A resumed run drops the lines past its checkpoint (and TensorBoard's events past it: ``purge_step``), so
  nothing is logged twice. Only process 0 writes (``enabled``); the others compute the same records. Every line
  is appended whole or not at all (``files.append_line``); a torn last line (a write cut short) is dropped
  with a warning on resume.
  """

  def __init__(self, path: str, resume_step: int | None, enabled: bool = True, tensorboard_dir: str | None = None):
    self.path = path
    self.enabled = enabled
    if enabled and os.path.exists(path):  # Lines written after the checkpoint we resume from would be written again.
      kept = []
      if resume_step is not None:  # A fresh start keeps nothing.
        kept = [r for r in files.read_jsonl(path) if r.get("step", 0) <= resume_step]
      files.write_text_atomically(path, "".join(json.dumps(r) + "\n" for r in kept))
    self.tensorboard = None
    if enabled and tensorboard_dir:
      from tensorboardX import SummaryWriter

      self.tensorboard = SummaryWriter(tensorboard_dir, purge_step=None if resume_step is None else resume_step + 1)

  def write(self, record: dict) -> None:
    if not self.enabled:
      return
    files.append_line(self.path, json.dumps(record))
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
    num_predictions = config.mlm.max_predictions or mlm.max_predictions(config.data.max_seq_len,
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
               best_manager, meta: dict, dev_sets: dict[str, sts_data.PairSet]):
    self.config = config
    self.dev_sets = dev_sets  # sts_data.load_dev_sets, read before the run wrote anything.
    self.embedder = embedder_lib.Embedder(spec, spec.pooling.dev_pooler, batch_size=config.eval.batch_size,
                                          attend_padding=objectives.get(config.method).attend_padding(config))
    self.heldout = HeldoutMLM(config, spec, heldout) if heldout is not None else None
    self.select = sts_metrics.SELECTION_METRICS[config.eval.metric]
    self.metrics_log, self.best, self.meta = metrics_log, best_manager, meta

  def __call__(self, step: int, params, *, log_record: bool = True) -> float:
    """Evaluates ``params`` as of ``step``; saves them as the best checkpoint if they are; returns the metric.

    ``log_record=False`` (a re-evaluation of a resume point) leaves metrics.jsonl alone: its lines are the run's
    scheduled evaluations.
    """
    t0 = time.time()
    scores, table = sts_metrics.dev_scores_and_embeddings(lambda s: self.embedder(s, params), self.dev_sets)
    # The training dynamics of the MixCSE paper (Fig. 4b) and Wang & Isola's map, from the same embeddings.
    dynamics = sts_metrics.dev_dynamics(table, self.dev_sets["stsb_dev"])
    if self.heldout is not None:
      scores.update(self.heldout(params))
    metric = self.select(scores)
    record = {"step": step, "eval/metric": metric, **{f"eval/{k}": v for k, v in scores.items()},
              **{f"eval/{k}": v for k, v in dynamics.items()}, "eval/seconds": round(time.time() - t0, 2)}
    if log_record:
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
  good = checkpoints.newest_committed(latest)
  return "none" if good is None else f"step {good}"


def _best_lost(best, meta: dict, resume_step: int | None, workdir: str) -> bool:
  """After a resume: whether the best checkpoint the run recorded is gone (set aside as damaged, or deleted).

  If it is, ``meta``'s best becomes the newest intact best checkpoint at or before the resume point (its metric
  read from it), or none; the caller then evaluates the resume point again, so that the run keeps serving the
  best of what it still has. Best checkpoints newer than the resume point are deleted (stale).
  """
  if resume_step is None:
    return False
  checkpoints.delete_after(best, resume_step)  # The resume point may be older than _resume_point chose.
  if meta["best_step"] is None or meta["best_step"] in best.all_steps():
    return False
  lost = meta["best_step"]
  meta["best_metric"] = meta["best_step"] = None
  for step in sorted(best.all_steps(), reverse=True):
    try:
      meta["best_metric"], meta["best_step"] = checkpoints.restore_meta(best, step)["metric"], step
      break
    except checkpoints.CheckpointError as e:
      checkpoints.set_aside(best, step, str(e).split(": ", 1)[-1])
  log.warning("%s: the best checkpoint of this run, step %d, is gone (set aside or deleted); the best is now %s, "
              "and the resume point, step %d, is evaluated again", workdir, lost,
              "none" if meta["best_step"] is None else f"step {meta['best_step']}", resume_step)
  return True


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
  # Unreadable although its files match their record (it was verified): set aside, fall back to an older one.
  resume_step, restored = checkpoints.restore_newest(latest, params=abstract.params, opt_state=abstract.opt_state)
  if resume_step is None:  # A fresh start needs the configured model's weights, which a resuming run did not load.
    raise WorkdirError(f"{workdir}: no latest checkpoint could be read (each was set aside); run the same command "
                       "again to start from the beginning")
  state = step_lib.TrainState(step=jax.device_put(jnp.int32(resume_step), replicated),
                              params=restored["params"], opt_state=restored["opt_state"])
  log.info("resumed %s at step %d", workdir, resume_step)
  return state, restored["meta"], resume_step


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *, restart: bool = False) -> dict:
  """Trains per ``config`` in ``workdir``, resuming from its newest good checkpoint if there is one.

  Returns a summary: steps, best evaluation and its step, first evaluation. ``restart`` deletes a previous run's
  checkpoints and logs first (without it, a workdir holding another run's config and no checkpoint is refused).
  Every input (workdir state, model, corpus, dev sets) is read and checked before anything is written, so a
  mistake leaves the workdir as it was.

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
  inputs = _read_inputs(config, workdir, restart, mesh)  # Before anything is written.
  os.makedirs(workdir, exist_ok=True)
  lock = _lock(workdir) if primary else None
  try:
    return _train(config, workdir, primary, mesh, restart, inputs)
  finally:
    if lock is not None:
      lock.release()


def _train(config, workdir: str, primary: bool, mesh, restart: bool, inputs: _Inputs) -> dict:
  """``train_and_evaluate`` once the config and inputs are checked and the workdir locked."""
  started = time.time()
  if restart and primary:
    _clear(workdir)
  latest = checkpoints.manager(os.path.join(workdir, checkpoints.LATEST_DIR))
  best = checkpoints.manager(os.path.join(workdir, checkpoints.BEST_DIR))
  try:
    return _train_with(config, workdir, primary, mesh, latest, best, started, inputs)
  finally:  # On every path, a refusal too: orbax's threads would print tracebacks at interpreter shutdown.
    for mngr in (latest, best):
      with contextlib.suppress(Exception):  # Never hide the error that ends the run.
        mngr.close()


def _train_with(config, workdir: str, primary: bool, mesh, latest, best, started: float, inputs: _Inputs) -> dict:
  """``_train`` with the checkpoint managers open."""
  resume_step = _resume_point(workdir, latest, best)
  spec, params, batches, heldout = inputs.spec, inputs.params, inputs.batches, inputs.heldout
  if resume_step is None and params is None:  # Its checkpoints were all set aside: a fresh start after all.
    spec, params = _start_model(config, workdir, resume=False)
    batches, heldout = _batches(config, spec)
  if resume_step is None and primary:
    _save_start(config, spec, workdir)
  total_steps = _total_steps(config, batches)
  tx = step_lib.make_optimizer(config.train, total_steps)
  replicated = NamedSharding(mesh, PartitionSpec())
  batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
  # This process tokenizes only its rows of each global batch; which examples form the global batch, and in
  # what order, depends on the step alone, never on the number of processes.
  local_rows = distributed.process_rows(batch_sharding, config.train.batch_size)
  _agree_across_processes(config, batches.corpus, resume_step, params)
  state, meta, start_step = _initial_state(spec, params, tx, latest, resume_step, replicated, workdir)
  resume_step = start_step or None  # An unreadable checkpoint may have made it an older one.
  del params  # The train state owns the params from here on (its buffers are donated).

  complementary, complementary_params = inputs.complementary
  augment_mlm, augment_params = inputs.augment_mlm
  train_step = step_lib.jit_train_step(config, spec, tx, complementary, mesh, augment_mlm=augment_mlm)
  metrics_log = MetricsWriter(os.path.join(workdir, "metrics.jsonl"), resume_step, enabled=primary,
                              tensorboard_dir=os.path.join(workdir, "tensorboard") if _tensorboard(config) else None)
  run_eval = Evaluator(config, spec, heldout, metrics_log, best, meta, inputs.dev_sets)
  if start_step == 0 and config.eval.at_start:
    run_eval(0, state.params)
  if _best_lost(best, meta, resume_step, workdir):
    run_eval(start_step, state.params, log_record=False)
  probe = checkpoints.output_probe(spec)
  step_log = StepLog(metrics_log, latest, workdir, batches.steps_per_epoch, start_step,
                     step_lib.make_schedule(config.train, total_steps))
  progress = Progress(total_steps, initial=start_step, unit="step", desc="train", enabled=primary)
  try:
    for step, host_batch in enumerate(batches.iterate(start_step, total_steps, positions=local_rows),
                                      start=start_step):
      batch = {k: jax.make_array_from_process_local_data(batch_sharding, v, (config.train.batch_size, *v.shape[1:]))
               for k, v in host_batch.items()}  # The global batch, from this process's rows of it.
      state, metrics = train_step(state, batch, complementary_params, augment_params)
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
      if (evaluate_now or save_now) and (problem := probe(state.params)):  # Finite weights may still overflow.
        raise NonFiniteLossError(f"after step {done} the model's {problem.removeprefix('its ')} (its parameters "
                                 f"overflow); stopped. The last good checkpoint is {_last_good(latest)} in "
                                 f"{os.path.join(workdir, checkpoints.LATEST_DIR)}")
      if evaluate_now:
        run_eval(done, state.params)
      if save_now:
        checkpoints.save(latest, done, meta=copy.deepcopy(meta), params=state.params, opt_state=state.opt_state)
    step_log.settle()
  except KeyboardInterrupt:
    good = checkpoints.newest_committed(latest)
    raise Interrupted(f"interrupted at step {progress.done}; rerun the same command to resume (" +
                      ("from the start: no checkpoint yet)" if good is None else f"from its checkpoint at step {good})")
                      ) from None
  finally:
    progress.close()
    metrics_log.close()

  summary = {"steps": total_steps, "best_step": meta["best_step"], "best_metric": meta["best_metric"],
             "first_eval": meta["first_eval"], "workdir": workdir}
  if primary:
    corpus = data_lib.resolve(config.data.train, config.data.data_dir or None) \
        if not config.data.train.startswith(data_lib.TFDS_PREFIX) else None
    record = {**summary, "provenance": provenance.provenance(
        config=config.to_dict(), model=config.model.name or spec.source, revision=spec.revision,
        data=provenance.data_digests([corpus]) if corpus else None, wall_seconds=time.time() - started)}
    files.write_json(os.path.join(workdir, "summary.json"), record)
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
  except KeyboardInterrupt as e:  # Ctrl-C: one line, no traceback; 130 is the shell's code for SIGINT.
    print(e if isinstance(e, Interrupted) else "interrupted; rerun the same command to resume",
          file=sys.stderr)
    sys.exit(130)
  if jax.process_index() != 0:
    return
  first = summary["first_eval"]
  if first is not None and first["step"] == 0:
    print(f"STS-B dev Spearman before training: {first['stsb_dev'] * 100:.2f}")
  if summary["best_metric"] is not None:
    print(f"best {cfg.eval.metric} x100: {summary['best_metric'] * 100:.2f} at step {summary['best_step']}")
  evaluate_it = command_name("jaxcse.train").replace("train", "evaluate")
  if data_lib.given_root(cfg.data.data_dir or None) is None:  # The full benchmark is not shipped: name its download.
    print(f"evaluate it: {evaluate_it.replace('evaluate', 'data')} download senteval --data_dir DIR, then "
          f"{evaluate_it} --model {workdir} --tasks sts --data_dir DIR")
  else:
    print(f"evaluate it: {evaluate_it} --model {workdir} --tasks sts")


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


_HELP = """\
usage: {prog} --config NAME|FILE.py --workdir DIR [--config.FIELD=VALUE ...] [--data_dir DIR] [--restart]

Train a sentence encoder as a config says (unsupervised or supervised SimCSE, MixCSE, DCLR, or masked-LM
pretraining), scoring STS-B dev as it goes and keeping the best checkpoint in the workdir. Run the same command
again to resume an interrupted run. Without a data root, the quickstart's data shipped with jaxcse is used.

  --config NAME          a config shipped with jaxcse, or a config file (FILE.py); shipped:
{configs}
  --config.FIELD=VALUE   override one field of the config, e.g. --config.train.max_steps=100 (the config file
                         lists every field with a comment)

example: {prog} --config quickstart --workdir workdirs/quickstart
"""


def print_help(full: bool) -> None:
  """``--help``: what the command does, its usage and its own flags; ``--helpfull``: every flag absl knows."""
  from absl import flags

  import textwrap

  configs = textwrap.fill(", ".join(shipped_configs()), width=116, initial_indent=" " * 25,
                          subsequent_indent=" " * 25)
  print(_HELP.format(prog=command_name("jaxcse.train"), configs=configs))
  if full:
    print("flags (all):" + flags.FLAGS.get_help())
  else:
    own = flags.FLAGS.module_help(flags.FLAGS.find_module_defining_flag("workdir")).strip().split("\n", 1)[1]
    print("flags:\n" + own + "\n\n(--helpfull: also the flags of absl, jax and the libraries)")


def parse_flags(argv: list[str], module: str = "jaxcse.train", help_printer=None) -> list[str]:
  """absl's flag parsing, with a mistake reported as one line (exit 2) instead of a traceback.

  ``--config NAME`` selects a config shipped with jaxcse (``base``, ``quickstart``, ``dclr``, ...). ``--help``
  and ``--helpfull`` print the help (``help_printer(full)``, default ``print_help``) and exit 0, whatever else is
  on the line. ``module`` names the command a mistake's message points to (``jaxcse.compile`` parses the same
  config flags).
  """
  from absl import flags

  argv = list(argv)
  for arg in argv[1:]:
    if arg == "--":
      break
    if arg.split("=", 1)[0] in ("--help", "-help", "-h", "--helpshort", "-helpshort", "-?", "--helpfull", "-helpfull"):
      try:
        (help_printer or print_help)(full="helpfull" in arg)
        sys.stdout.flush()
      except BrokenPipeError:  # `jaxcse-train --help | head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
      sys.exit(0)
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
    inner = e.args[0] if e.args and isinstance(e.args[0], BaseException) else e  # AttributeError(KeyError("'x'")).
    missing = str(inner.args[0] if inner.args else inner).strip("'\"")
    fields = [a.split("=")[0].lstrip("-") for a in argv if a.startswith("--config.")]
    named = [f for f in fields if missing in f.split(".")[1:]] or fields  # The override(s) that name it.
    print(f"error: unknown config field {missing!r} in {', '.join(named)} (the config file lists every field)",
          file=sys.stderr)
    sys.exit(2)
  except (flags.Error, OSError, SyntaxError, TypeError, ValueError) as e:
    message = str(e).strip().splitlines()[-1].strip() if str(e).strip() else type(e).__name__
    print(f"error: {message} ({command_name(module)} --help lists the flags; shipped configs: "
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
