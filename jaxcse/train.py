r"""Training: the loop around the jitted train step, with evaluation, checkpoints, resume and logging.

  python -m jaxcse.train --config configs/base.py --workdir DIR [--config.train.batch_size=32 ...]

``train_and_evaluate(config, workdir)`` trains per the config, resuming from the workdir's newest good latest
checkpoint if there is one. What it builds on, each in its place:

- ``storage.workdir``: the workdir's layout and promises (the lock, the start-or-resume decision, that a resume has
  the run's config and corpus, what a fresh start writes);
- ``training.inputs``: everything the run reads, checked before it writes anything;
- ``training.start``: the start point carried out (bad checkpoints set aside) and the train state built;
- ``training.train_step``: the step itself, pure and jitted once with the state donated, the method's loss from
  the ``objectives`` registry; batches come from ``data`` by step, so a resumed run retraces the uninterrupted one;
- ``evaluation.validation``: the dev evaluation and the best-checkpoint selection;
- ``training.run_log``: metrics.jsonl and TensorBoard; ``training.cli``: the command's flags.

Several hosts run the same command, one process each (or one per GPU), with
``--coordinator_address/--num_processes/--process_id`` or ``--distributed``
(cluster auto-detection); see ``distributed``.
"""

from __future__ import annotations

if __name__ == "__main__":  # python -m jaxcse.train: Ctrl-C while JAX and the rest import is one line too.
  from jaxcse.core import interrupts as _interrupts

  _interrupts.quiet_at_the_end()
  _interrupts.ExitAtOnce("interrupted as the command started; nothing was written").install()

import contextlib
import os
import sys
import time
from collections.abc import Callable

import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxcse import data as data_lib
from jaxcse.core import errors, files, interrupts, platforms, provenance
from jaxcse.core.interrupts import DeferredCtrlC, ExitAtOnce
from jaxcse.core.progress import Progress
from jaxcse.evaluation import sts_metrics, validation
from jaxcse.storage import checkpoints
from jaxcse.storage.workdir import (
  BEST_DIR,
  LATEST_DIR,
  METRICS_FILE,
  SUMMARY_FILE,
  TENSORBOARD_DIR,
  Workdir,
  WorkdirError,
)
from jaxcse.training import (
  cli,
  configuration,
  distributed,
  inputs as inputs_lib,
  start as start_lib,
  train_step as step_lib,
  views,
)
from jaxcse.training.run_log import MetricsWriter, NonFiniteLossError, StepLog, last_good, stopped


class Interrupted(KeyboardInterrupt):
  """Ctrl-C (SIGINT) while training; the message says at which step, and how to resume."""


# A second Ctrl-C ends the process where it is, as SIGKILL would (``interrupts.stop_at_once``): a checkpoint being
# written has no record yet and is set aside by the resume, which starts from the newest whole one.
INTERRUPTED_AGAIN = "interrupted again: stopped at once; rerun the same command to resume from its newest checkpoint"
# Before the run starts (flags, config file) nothing is written; once the command has its config, Ctrl-C outside
# the run (an instant before it starts, or after it finished) leaves a workdir the same command resumes or finds done.
NOTHING_WRITTEN = "interrupted before the run started; nothing was written"
OUTSIDE_THE_RUN = "interrupted; rerun the same command to resume"

# Ctrl-C saves the latest state where it stops, unless the newest latest checkpoint is younger than this: a save
# takes about a second, and a resume then redoes at most this much work.
INTERRUPT_SAVE_AFTER_S = 5.0


def _save_interrupted(latest, step: int, state, best_so_far, step_log: "StepLog", probe, run_id: str | None) -> None:
  """Saves state ``step`` as a latest checkpoint when Ctrl-C stops the run before step ``step + 1``.

  Only a state every regular save would keep: the last step's loss finite (its metrics line is written, so the
  resumed run logs from there), the parameters finite and the output probe passing; otherwise nothing is saved and
  the run stops at its previous checkpoint, as without this save. With several processes nothing is saved: a save
  is collective, and Ctrl-C reaches one process.
  """
  if jax.process_count() > 1:
    return
  try:
    step_log.settle()
    if step_log.last_step < step:
      step_log.flush(step)
  except NonFiniteLossError:
    return
  if not checkpoints.all_finite(state.params) or probe(state.params):
    return
  checkpoints.save(
    latest, step, meta=best_so_far.to_meta(), run_id=run_id, params=state.params, opt_state=state.opt_state
  )


def _interrupted(step: int, latest) -> str:
  """The one line of a run stopped by Ctrl-C: at which step, and where the same command resumes from."""
  good = last_good(latest)
  return f"interrupted at step {step}; rerun the same command to resume (" + (
    "from the start: no checkpoint yet)" if good is None else f"from its checkpoint at step {good})"
  )


# --------------------------------------------------------------------------
# The run.


def _packed_rows(packed: views.PackedViews, host_batch: dict, mesh, batch_sharding, chunks: int = 1) -> dict:
  """The step's ``batch["packed"]``: this process's views laid out in rows, one block of rows a device (each device
  packs its own examples, so it pools them from its own rows) and, with GradCache, a block a chunk within it, as
  global arrays split over the data axis like the batch. Every device gets the same number of rows: the most any
  (device, chunk) needs, agreed between the processes."""
  if mesh.size == 1 and chunks == 1:
    return packed.lay_out(host_batch)
  shards = len(mesh.local_devices)
  parts = packed.parts(host_batch, shards, chunks)
  rows = packed.rows_for(parts)
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils

    rows = int(multihost_utils.process_allgather(np.int32(rows)).max())
  local = packed.pack_parts(parts, chunks=chunks, rows=rows)
  return jax.tree.map(
    lambda a: jax.make_array_from_process_local_data(
      batch_sharding, a, (a.shape[0] // shards * mesh.size, *a.shape[1:])
    ),
    local,
  )


def train_and_evaluate(
  config: ml_collections.ConfigDict,
  workdir: str,
  *,
  restart: bool = False,
  train_data=None,
  on_evaluation: Callable[[dict], None] | None = None,
) -> dict:
  """Trains per ``config`` in ``workdir``, resuming from its newest good checkpoint if there is one.

  ``train_data``, a ``datasets.Dataset`` built in Python, is trained on instead of a file (``config.data.train``
  must then be empty): its columns read as a pair file's (``jaxcse.data.pairs``), its content's sha256 recorded in
  ``inputs.json``, so a resume must pass the same rows.

  ``on_evaluation``, if given, is called with each evaluation's record as it is made (the line metrics.jsonl gets:
  ``step``, ``eval/metric``, ``eval/<score>``), on every process; an exception it raises stops the run there, as a
  crash would (the checkpoints saved so far resume).

  Returns the summary that ``summary.json`` holds: ``steps``; ``best_step``, ``best_metric`` (the selection metric,
  ``eval.metric``) and ``best_eval`` (that evaluation's scores); ``first_eval`` and ``first_metric`` (the first
  evaluation, step 0's with ``eval.at_start``); ``best_is_untrained`` (the best checkpoint, which evaluate, encode
  and export serve, is step 0's: no trained step beat the starting model); ``workdir``. ``restart`` deletes a previous run's
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
  inputs_lib.check_training_data(config, train_data)
  run_dir = Workdir(workdir)
  # From here on, Ctrl-C stops the run only at a safe point (``DeferredCtrlC``); a second one at once.
  with DeferredCtrlC(again=INTERRUPTED_AGAIN) as ctrl_c:
    primary = jax.process_index() == 0
    mesh = distributed.make_mesh()
    if config.train.batch_size % mesh.size:
      raise configuration.ConfigError(
        f"train.batch_size {config.train.batch_size} must be divisible by the {mesh.size} devices"
      )
    errors.check_output(workdir, folder=True)
    run_dir.check_ours()
    with contextlib.ExitStack() as held:  # The lock, then the checkpoint managers: released in reverse.
      inputs = _read_under_lock(config, run_dir, restart, mesh, train_data, primary, ctrl_c, held)
      started = time.time()
      if restart and primary:
        run_dir.clear()
      latest = _managed(held, checkpoints.manager(run_dir.join(LATEST_DIR)))
      best = _managed(held, checkpoints.manager(run_dir.join(BEST_DIR)))
      start = start_lib.build(config, run_dir, primary, mesh, inputs, latest, best)
      if ctrl_c.requested:  # Pressed while the workdir was put in order for the run: stop before training.
        raise Interrupted(_interrupted(start.step or 0, latest))
      evaluations = {}  # This run's evaluation records by step.
      best_so_far = _train(
        config, run_dir, primary, mesh, inputs, start, latest, best, ctrl_c, _recording(evaluations, on_evaluation)
      )
      summary = _summary(config, run_dir, best_so_far, start.total_steps, evaluations, workdir)
      # A finished run run again trains and evaluates nothing: its summary.json, the record of the run that did
      # the work (its wall time, when it was made), stays as it is.
      finished_before = (start.step or 0) == start.total_steps and not start.reevaluate
      if primary and not (finished_before and run_dir.has_summary()):
        _write_summary(config, run_dir, summary, start, inputs, started)
    if ctrl_c.requested:  # Pressed while the finished run wrote its summary: it is complete, say so.
      raise Interrupted(f"interrupted as the run finished; {workdir} is complete (nothing to resume)")
    return summary


def _recording(evaluations: dict, on_evaluation):
  """What an evaluation does with its record besides writing it: kept in ``evaluations`` by step, and passed on."""

  def record(evaluation: dict) -> None:
    evaluations[evaluation["step"]] = evaluation
    if on_evaluation is not None:
      on_evaluation(dict(evaluation))

  return record


def _summary(config, run_dir: Workdir, best_so_far, steps: int, evaluations: dict, workdir: str) -> dict:
  """The run's summary (``train_and_evaluate``'s value): the best evaluation's scores from this run's records, or,
  for a step evaluated before a resume, from metrics.jsonl (which a resume keeps up to its checkpoint)."""
  best_eval = None
  if best_so_far.step is not None:
    record = evaluations.get(best_so_far.step)
    if record is None and os.path.exists(run_dir.join(METRICS_FILE)):
      found = [r for r in files.read_jsonl(run_dir.join(METRICS_FILE)) if r.get("step") == best_so_far.step]
      record = next((r for r in reversed(found) if "eval/metric" in r), None)
    if record is not None:
      best_eval = {"step": best_so_far.step, **{k[len("eval/") :]: v for k, v in record.items() if k[:5] == "eval/"}}
      best_eval.pop("seconds", None)
  first = best_so_far.first_eval
  first_metric = None
  if first is not None:
    first_metric = sts_metrics.SELECTION_METRICS[config.eval.metric]({k: v for k, v in first.items() if k != "step"})
  return {
    "steps": steps,
    "best_step": best_so_far.step,
    "best_metric": best_so_far.metric,
    "best_eval": best_eval,
    "first_eval": first,
    "first_metric": first_metric,
    # Step 0 is the starting model: when nothing trained beats it, the run serves the model it started from.
    "best_is_untrained": best_so_far.step == 0 and steps > 0,
    "workdir": workdir,
  }


def _read_under_lock(config, run_dir: Workdir, restart: bool, mesh, train_data, primary: bool, ctrl_c, held):
  """The run's inputs (``inputs.read``), with the workdir locked (the lock's release registered with ``held``).

  The start point is read under the lock, so that no other run changes the workdir between the decision and the
  acts on it. A folder that holds no run yet (or does not exist) is locked only once the inputs are read, so that
  a refused run leaves it as it was (no folder, no .lock); that it still holds none is then checked under the
  lock. A run starting there already (it holds the lock) is refused before the slow reading.
  """
  holds_run = run_dir.holds_run()
  if primary and not holds_run:
    run_dir.check_not_locked()
  if primary and holds_run:
    held.callback(run_dir.lock().release)
  with data_lib.notes_held():  # A refusal while reading is the only line; the shipped-data note follows.
    inputs = inputs_lib.read(config, run_dir, restart, mesh, train_data)  # Before anything is written.
  if ctrl_c.requested:  # Nothing written yet: stop before the workdir changes.
    raise Interrupted("interrupted before the run started; the workdir is as it was")
  if not holds_run:
    os.makedirs(run_dir.path, exist_ok=True)
    if primary:
      held.callback(run_dir.lock().release)
      # The primary alone: it holds the lock, and in a multi-process run it writes the run's files, which the
      # other processes may already see here.
      if run_dir.holds_run():
        raise WorkdirError(
          f"{run_dir.path}: another process started a run in this workdir while this one read its "
          "inputs; run the command again"
        )
  return inputs


def _managed(held: contextlib.ExitStack, mngr):
  """``mngr``, closed when ``held`` exits, on every path (a refusal too: orbax's threads would print tracebacks at
  interpreter shutdown), never hiding the error that ends the run."""

  def close():
    with contextlib.suppress(Exception):
      mngr.close()

  held.callback(close)
  return mngr


def _train(
  config, run_dir: Workdir, primary, mesh, inputs, start, latest, best, ctrl_c, recorded
) -> validation.BestSoFar:
  """The loop: steps from ``start`` to the last, evaluating and saving as configured; returns the best so far.

  ``recorded`` gets each evaluation's record after metrics.jsonl."""
  batches, total_steps, state, best_so_far, probe = (
    start.batches,
    start.total_steps,
    start.state,
    start.best,
    start.probe,
  )
  first_step = start.step or 0
  batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
  # This process tokenizes only its rows of each global batch; which examples form the global batch, and in
  # what order, depends on the step alone, never on the number of processes.
  local_rows = distributed.process_rows(batch_sharding, config.train.batch_size)
  packed = None  # train.packed: the views' PackedViews, sized from the first batch's shape (every batch's).
  chunk = config.train.grad_cache_chunk
  chunks = config.train.batch_size // chunk if chunk else 1  # GradCache's: each packed in rows of its own.
  (complementary, complementary_params), (augment_mlm, augment_params) = inputs.complementary, inputs.augment_mlm
  train_step = step_lib.jit_train_step(
    config, start.spec, start.tx, complementary, mesh, augment_mlm=augment_mlm, needs=inputs.needs
  )
  metrics_log = MetricsWriter(
    run_dir.join(METRICS_FILE),
    start.step,
    enabled=primary,
    tensorboard_dir=run_dir.join(TENSORBOARD_DIR) if config.log.tensorboard else None,
  )
  evaluate = validation.Evaluator(
    config,
    start.spec,
    attend_padding=inputs.needs.attend_padding,
    heldout=start.heldout,
    dev_sets=inputs.dev_sets,
    own=inputs.own_dev_sets,
    best_manager=best,
    run_id=start.run_id,
    write=lambda record: (metrics_log.write(record), recorded(record)),
  )
  if start.step is None and config.eval.at_start:
    best_so_far = evaluate(0, state.params, best_so_far)
  if start.reevaluate:
    best_so_far = evaluate(first_step, state.params, best_so_far, log_record=False)
  schedule = step_lib.make_schedule(config.train, total_steps)
  step_log = StepLog(metrics_log, latest, run_dir.path, batches.steps_per_epoch, first_step, schedule)
  progress = Progress(total_steps, initial=first_step, unit="step", desc="train", enabled=primary)
  saved = (first_step, time.time())  # The newest latest checkpoint's step (or the start), and when.
  try:
    for step, host_batch in enumerate(batches.iterate(first_step, total_steps, positions=local_rows), start=first_step):
      if ctrl_c.requested and step > saved[0] and time.time() - saved[1] >= INTERRUPT_SAVE_AFTER_S:
        _save_interrupted(latest, step, state, best_so_far, step_log, probe, start.run_id)
      ctrl_c.check()  # Before a step: the last one, its evaluation and its save are whole.
      batch = {
        k: jax.make_array_from_process_local_data(batch_sharding, v, (config.train.batch_size, *v.shape[1:]))
        for k, v in host_batch.items()
      }  # The global batch, from this process's rows of it.
      if configuration.packed(config):
        if packed is None:
          pad_id = start.spec.tokenizer.pad_token_id or 0
          packed = views.PackedViews.for_batches(
            *host_batch["input_ids"].shape, pad_id=pad_id, two_views=inputs.needs.two_views
          )
        batch["packed"] = _packed_rows(packed, host_batch, mesh, batch_sharding, chunks)
      state, metrics = train_step(state, batch, complementary_params, augment_params)
      done = step + 1  # Labelled like checkpoints: step n is the update that produces state n.
      step_log.add(done, metrics)
      evaluate_now = done % config.eval.every == 0 or (config.eval.at_end and done == total_steps)
      save_now = done % config.checkpoint.every == 0 or done == total_steps
      if done % config.train.log_every == 0 or done == total_steps or evaluate_now or save_now:
        record = step_log.flush(done)
        progress.set(loss=f"{record['loss']:.4g}", lr=f"{record['learning_rate']:.3g}", at=done)
      progress.update(1)  # After the step's values are set: a progress line names the step they are of.
      if evaluate_now or save_now:
        _check_model(state.params, probe, done, latest, run_dir)
      if evaluate_now:
        best_so_far = evaluate(done, state.params, best_so_far)
      if save_now:
        checkpoints.save(
          latest, done, meta=best_so_far.to_meta(), run_id=start.run_id, params=state.params, opt_state=state.opt_state
        )
        saved = (done, time.time())
    step_log.settle()
    ctrl_c.check()  # Pressed during the last step, evaluation or save.
  except KeyboardInterrupt:
    with contextlib.suppress(Exception):  # Let the dispatched step finish: no device work left running at exit.
      jax.block_until_ready(state)
    raise Interrupted(_interrupted(progress.done, latest)) from None
  finally:
    progress.close()
    metrics_log.close()
  return best_so_far


def _check_model(params, probe, step: int, latest, run_dir: Workdir) -> None:
  """``NonFiniteLossError`` unless the parameters after ``step`` are finite and their outputs too (finite weights
  may still overflow): checked before each evaluation and save, so no checkpoint holds a broken model."""
  if not checkpoints.all_finite(params):
    raise NonFiniteLossError(f"non-finite parameters after step {step}; {stopped(latest, run_dir.path)}")
  if problem := probe(params):
    raise NonFiniteLossError(
      f"after step {step} the model's {problem.removeprefix('its ')} (its parameters "
      f"overflow); {stopped(latest, run_dir.path)}"
    )


def _write_summary(config, run_dir: Workdir, summary: dict, start, inputs, started: float) -> None:
  """Writes ``summary.json``: the summary, what the model card reports of the data, and the run's provenance."""
  corpus = start.batches.corpus
  if isinstance(corpus, data_lib.PairCorpus):
    digests = inputs.corpus_digests
  else:
    path = (
      data_lib.resolve(config.data.train, config.data.data_dir or None)
      if not config.data.train.startswith(data_lib.TFDS_PREFIX)
      else None
    )
    digests = provenance.data_digests([path]) if path else None
  # What the model card reports of the data (model_card.py): its size, and for pair data its columns in order.
  data_shape = {"train_examples": len(corpus)}
  if isinstance(corpus, data_lib.PairCorpus):
    data_shape["train_columns"] = list(corpus.text_columns)
  record = {
    **summary,
    **data_shape,
    "provenance": provenance.provenance(
      config=config.to_dict(),
      model=config.model.name or start.spec.source,
      revision=start.spec.revision,
      data=digests,
      wall_seconds=time.time() - started,
    ),
  }
  files.write_json(run_dir.join(SUMMARY_FILE), record)


# --------------------------------------------------------------------------
# The command.


def main(argv: list[str], at_once: ExitAtOnce | None = None) -> int:
  """The train command: its flags' config and workdir, ``train_and_evaluate``, the result's lines (``cli``).

  ``at_once``, the command's start-up Ctrl-C handler (``run``), is told what to say from here on; Ctrl-C is
  Python's own for ``--prune_set_aside`` (it removes files: a ``KeyboardInterrupt`` stops it between two).
  """
  args = cli.parse_train_arguments(argv)
  if args.prune_set_aside:
    interrupts.python_default()
    with cli.one_line_errors():
      print(Workdir(args.workdir).prune_set_aside())
    return 0
  platforms.use_compilation_cache()
  with cli.one_line_errors():
    try:
      config, workdir, restart = cli.train_flags(args)
    except KeyboardInterrupt:
      raise Interrupted(NOTHING_WRITTEN) from None
    if at_once:
      at_once.message = OUTSIDE_THE_RUN
    summary = train_and_evaluate(config, workdir, restart=restart)
  if jax.process_index() == 0:
    cli.print_train_summary(config, workdir, summary)
  return 0


def run() -> None:
  """``python -m jaxcse.train`` (and the ``jaxcse-train`` console script).

  Ctrl-C is one line and exit status 130 at any moment: ``ExitAtOnce`` until the run starts and after it ends,
  ``DeferredCtrlC`` during it (``train_and_evaluate``). ``ExitAtOnce`` stays installed as the process exits (it
  always does, in ``sys.exit``): JAX's and orbax's exit handlers take a second or more, and Python's own handler
  raised inside them (a traceback from ``atexit``). A crash in native code prints the Python stack
  (``faulthandler``).
  """
  import faulthandler

  faulthandler.enable()
  at_once = ExitAtOnce(NOTHING_WRITTEN).install()
  try:
    status = main(sys.argv[1:], at_once)
  except KeyboardInterrupt as e:  # Where ExitAtOnce could not be installed (another handler) and Python's raised.
    print(str(e) or NOTHING_WRITTEN, file=sys.stderr)
    sys.exit(errors.INTERRUPTED)
  sys.exit(status)


if __name__ == "__main__":
  run()
