"""Where a run starts: the start point carried out, the workdir put in order for it, and the train state built
(fresh from the configured model, or restored from the newest good latest checkpoint)."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import uuid
import zlib
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from jaxcse import data as data_lib, models
from jaxcse.evaluation import validation
from jaxcse.storage import checkpoints, description
from jaxcse.storage.workdir import INPUTS_FILE, MODEL_DIR, Workdir, WorkdirError
from jaxcse.training import distributed, inputs as inputs_lib, train_step as step_lib

log = logging.getLogger("jaxcse")


@dataclasses.dataclass(frozen=True)
class Start:
  """What the loop starts from (``build``): the configured model's fresh state, or a latest checkpoint's."""

  step: int | None  # The latest checkpoint resumed from; None: a fresh start (its first step is 0).
  spec: models.ModelSpec  # The configured model's, or the workdir's description.
  batches: Any  # data.Batches or data.PackedBatches over the training corpus.
  heldout: data_lib.Corpus | None  # The held-out part of the corpus (data.heldout_fraction), else None.
  total_steps: int
  tx: Any  # The optimizer (optax), its schedule over total_steps.
  state: step_lib.TrainState  # Replicated on the mesh: fresh from the configured params, or the checkpoint's.
  best: validation.BestSoFar  # The model selection so far: the checkpoint's, or none yet.
  reevaluate: bool  # The run's best checkpoint is gone: evaluate the resume point again (``build``).
  probe: Any  # checkpoints.output_probe(spec): the check every saved checkpoint passes, compiled once.
  run_id: str | None  # Workdir.run_id: named in every checkpoint this run saves; None for an older jaxcse's run.


def build(config, workdir: Workdir, primary: bool, mesh, inputs: inputs_lib.Inputs, latest, best) -> Start:
  """Carries out ``inputs.start`` (``Workdir.start_point``'s decision): puts the workdir in order and builds the state.

  The bad latest checkpoints are set aside, each with a warning. Best checkpoints newer than the resume point
  (saved after the last latest checkpoint of a killed run; all of them for a fresh start) are set aside, intact,
  never deleted: the resumed run (``Workdir.check_config``: with the same config) evaluates those steps again, so the
  best checkpoint served is always the one this run reports; every best checkpoint left must be servable (bad
  ones are set aside). A fresh start writes its description and config. A resume restores the checkpoint (one
  that orbax cannot read is set aside too, and an older one restored). If the run's best checkpoint is gone, its
  best becomes the newest good one left (or none) and ``reevaluate`` asks the loop to evaluate the resume point
  again, so the run keeps serving the best it has.
  """
  replicated = NamedSharding(mesh, PartitionSpec())
  spec, batches, heldout, step = inputs.spec, inputs.batches, inputs.heldout, inputs.start.step
  run_id = workdir.run_id()  # A resume's; a fresh start draws its own below.
  for bad_step, problem in inputs.start.bad:
    checkpoints.set_aside(latest, bad_step, problem)
  if step is None:
    checkpoints.set_aside_after(
      best,
      None,
      "this run starts over (no latest checkpoint is usable to resume from), "
      "so its best checkpoints will be saved again under these step names",
    )
  else:
    checkpoints.set_aside_after(
      best, step, f"was saved after the resume point, step {step}: the resumed run evaluates that step again"
    )
  probe = checkpoints.output_probe(spec)  # Compiled on its first call: not at all for a fresh start.
  for best_step in sorted(best.all_steps(), reverse=True):  # Every best checkpoint left must be servable.
    if problem := checkpoints.verify(best, best_step) or unservable(best, best_step, spec, probe, replicated, run_id):
      checkpoints.set_aside(best, best_step, problem)
  if step is None:
    run_id = new_run_id()
  if step is None and primary:
    workdir.save_start(config, spec, inputs.corpus_digests, run_id)
  elif primary and not os.path.isfile(workdir.join(INPUTS_FILE)):  # An older jaxcse's run: record it now.
    workdir.record_corpus(inputs.corpus_digests)
  total_steps = inputs_lib.count_steps(config, batches)
  tx = step_lib.make_optimizer(config.train, total_steps)
  agree_across_processes(config, batches.corpus, step, inputs.params)
  if step is None:
    # Loaded parameters may be committed to one local device (a jitted init of a fresh head): hand jit host
    # copies, which every process holds alike, so it places them on the (possibly multi-process) mesh itself.
    state = jax.jit(functools.partial(fresh_state, tx=tx), out_shardings=replicated)(jax.device_get(inputs.params))
    return Start(
      None,
      spec,
      batches,
      heldout,
      total_steps,
      tx,
      state,
      validation.BestSoFar(),
      reevaluate=False,
      probe=probe,
      run_id=run_id,
    )

  abstract = jax.eval_shape(functools.partial(fresh_state, tx=tx), checkpoints.abstract_params(spec, replicated))
  abstract = checkpoints.placed(abstract, replicated)
  try:  # Unreadable although its files match their record: set aside, fall back to an older one.
    step, restored = checkpoints.newest_good(
      latest,
      lambda mngr, s: checkpoints.restore(mngr, s, run_id=run_id, params=abstract.params, opt_state=abstract.opt_state),
      set_aside_bad=True,
    )
  except checkpoints.CheckpointError:  # A fresh start needs the configured weights, which this run did not load.
    raise WorkdirError(
      f"{workdir.path}: no latest checkpoint could be read (each was set aside); run the same command "
      "again to start from the beginning"
    ) from None
  state = step_lib.TrainState(
    step=jax.device_put(jnp.int32(step), replicated), params=restored["params"], opt_state=restored["opt_state"]
  )
  log.info("resumed %s at step %d", workdir.path, step)
  if primary:  # An older jaxcse's description (no record): the checkpoint just restored fits it; vouch for it now.
    description.record_description(workdir.join(MODEL_DIR))
  # An unreadable latest checkpoint may have made the resume point older.
  checkpoints.set_aside_after(
    best, step, f"was saved after the resume point, step {step}: the resumed run evaluates that step again"
  )
  so_far = validation.BestSoFar.from_meta(restored["meta"])
  reevaluate = so_far.step is not None and so_far.step not in best.all_steps()
  if reevaluate:  # Set aside as damaged, or deleted: the best is now the newest good one left, or none.
    try:
      kept, meta = checkpoints.newest_good(
        best, lambda mngr, s: checkpoints.restore_meta(mngr, s, run_id=run_id), set_aside_bad=True
      )
    except checkpoints.CheckpointError:
      kept, meta = None, {"metric": None}
    log.warning(
      "%s: the best checkpoint of this run, step %d, is gone (set aside or deleted); the best is now %s, "
      "and the resume point, step %d, is evaluated again",
      workdir.path,
      so_far.step,
      "none" if kept is None else f"step {kept}",
      step,
    )
    so_far = dataclasses.replace(so_far, step=kept, metric=meta["metric"])
  return Start(step, spec, batches, heldout, total_steps, tx, state, so_far, reevaluate, probe, run_id)


def new_run_id() -> str:
  """A fresh start's run id (random), the same on every process (process 0's): checkpoints name it."""
  drawn = np.frombuffer(uuid.uuid4().bytes, np.uint32)
  if jax.process_count() > 1:
    drawn = np.asarray(multihost_utils.broadcast_one_to_all(drawn), np.uint32)
  return drawn.tobytes().hex()


def unservable(best, step: int, spec: models.ModelSpec, probe, sharding, run_id: str | None) -> str | None:
  """Why verified best checkpoint ``step`` cannot embed anything (as every reader would find), or None.

  Its files match their record, but it may be another run's or another step's (copied in), or its parameters may
  be non-finite or overflow (an exploded model saved by an older jaxcse): readers refuse it
  (``loading.load_model``), so the trainer sets it aside and evaluates again.
  """
  try:
    params = checkpoints.restore(best, step, run_id=run_id, params=checkpoints.abstract_params(spec, sharding))[
      "params"
    ]
  except checkpoints.CheckpointError as e:
    return str(e).split(": ", 1)[-1]
  if not checkpoints.all_finite(params):
    return "its parameters are not finite (NaN or infinity)"
  return probe(params)


def fresh_state(params, tx) -> step_lib.TrainState:
  return step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def agree_across_processes(config, corpus: data_lib.Corpus, resume_step: int | None, params) -> None:
  """With several processes, fail fast unless they run the same config, data, checkpoint and initial weights."""
  if jax.process_count() == 1:
    return
  paths = {
    ("data", "data_dir"),
    ("data", "train"),
    ("model", "name"),
    ("dclr", "complementary_model"),
    ("gist", "guide_model"),
    ("augment", "mlm_model"),
  }
  # Paths may differ from host to host; what they point to is compared instead (corpus, initial params).
  portable = {k: v for k, v in flax.traverse_util.flatten_dict(config.to_dict()).items() if k not in paths}
  distributed.check_processes_agree(
    config=zlib.crc32(json.dumps(sorted(portable.items()), default=str).encode()),
    corpus=int(corpus.content_sha256[:8], 16)
    if isinstance(corpus, data_lib.PairCorpus)
    else zlib.crc32("\0".join(s for column in corpus.columns.values() for s in column).encode()),
    resume_step=0 if resume_step is None else resume_step + 1,
    initial_params=int(models.params_fingerprint(params)[:8], 16) if resume_step is None else 0,
  )
