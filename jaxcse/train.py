r"""Training: the loop around the jitted train step, with evaluation, checkpoints, resume and logging.

  python -m jaxcse.train --config configs/base.py --workdir DIR [--config.train.batch_size=32 ...]

``train_and_evaluate(config, workdir)`` trains per the config, resuming from
the workdir's newest good latest checkpoint (``_resume`` decides where a run
starts). The step itself (``train_step``) is pure and jitted once with the
state donated; the method's loss comes from the ``objectives`` registry;
batches come from ``data`` by step, so a run resumed from its latest checkpoint
retraces the uninterrupted run exactly. The evaluation during training and the
best-checkpoint selection are ``validation``'s; the command's flags are ``cli``'s.

Several hosts run the same command, one process each (or one per GPU), with
``--coordinator_address/--num_processes/--process_id`` or ``--distributed``
(cluster auto-detection); see ``distributed``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
import zlib
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxcse import data as data_lib, models
from jaxcse.core import errors, files, platforms, provenance
from jaxcse.core.errors import JaxcseError
from jaxcse.core.progress import Progress
from jaxcse.evaluation import dev_sets as dev_sets_lib, sts_data, validation
from jaxcse.storage import checkpoints
from jaxcse.training import cli, configuration, configured, distributed, objectives, train_step as step_lib

log = logging.getLogger("jaxcse")


class NonFiniteLossError(JaxcseError, RuntimeError):
  """The loss or the parameters became NaN or infinite; the run stopped without saving past its last good checkpoint."""


class WorkdirError(JaxcseError, RuntimeError):
  """The workdir cannot be used as asked (another process trains in it, or it holds another run)."""


class Interrupted(KeyboardInterrupt):
  """Ctrl-C (SIGINT) while training; the message says at which step, and how to resume."""


class _CtrlC:
  """Ctrl-C (SIGINT) while training, acted on only where the run can stop cleanly (``check``).

  Python raises ``KeyboardInterrupt`` wherever the main thread is when the signal arrives: inside jax's tracing and
  lowering (Python code that XLA's C++ calls back while it compiles), inside orbax's save or restore (whose threads
  go on writing). Unwinding through them leaves their native state half built, and the process then crashed as it
  exited ("Fatal Python error: Segmentation fault" after the interrupted line). So the handler only
  notes the request; the loop stops at its next safe point (before a step, after an evaluation or a save). A
  second Ctrl-C raises at once: the user insists, and gets Python's own behaviour.

  Installed only in the main thread over Python's default handler (another handler, e.g. a notebook's, is left
  alone, and then Ctrl-C behaves as that handler decides).
  """

  def __init__(self):
    self.requested = False
    self._previous = None

  def __enter__(self) -> "_CtrlC":
    if (
      threading.current_thread() is threading.main_thread()
      and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
      self._previous = signal.signal(signal.SIGINT, self._note)
    return self

  def _note(self, signum, frame) -> None:
    del signum, frame
    if self.requested:
      raise KeyboardInterrupt
    self.requested = True

  def check(self) -> None:
    """Raises ``KeyboardInterrupt`` if Ctrl-C was pressed: call it only where stopping leaves nothing half done."""
    if self.requested:
      raise KeyboardInterrupt

  def __exit__(self, *exc) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGINT, self._previous)


# --------------------------------------------------------------------------
# The workdir: one process at a time, resume from the newest good checkpoint, nothing stale.


def _lock(workdir: str):
  """An exclusive lock on the workdir, held while training (released by the OS if the process dies)."""
  import filelock

  lock = filelock.FileLock(os.path.join(workdir, checkpoints.LOCK_FILE))
  try:
    lock.acquire(timeout=0)
  except filelock.Timeout:
    raise WorkdirError(
      f"{workdir}: another process is training in this workdir (it holds "
      f"{os.path.join(workdir, checkpoints.LOCK_FILE)}); wait for it to finish or use another "
      "workdir"
    ) from None
  return lock


def _check_not_locked(workdir: str) -> None:
  """``WorkdirError`` if another process holds the workdir's lock; reads only (a workdir without the lock file, or
  none at all, has no run in progress). The lock itself is taken once the inputs are read (``_lock``)."""
  if os.path.isfile(os.path.join(workdir, checkpoints.LOCK_FILE)):
    _lock(workdir).release()


TENSORBOARD_DIR = "tensorboard"  # log.tensorboard's event files.
INPUTS_FILE = checkpoints.INPUTS_FILE  # The sha256 of the run's training corpus: a resume must read the same.


# What a run writes into its workdir: a fresh start overwrites these names and ``--restart`` removes them (``_clear``).
RUN_FOLDERS = ("checkpoints", checkpoints.MODEL_DIR, TENSORBOARD_DIR)
RUN_FILES = ("config.json", INPUTS_FILE, "metrics.jsonl", "summary.json")
# A jaxcse run's markers: the model description's jaxcse.json (a fresh start writes it before anything else) or a
# checkpoint folder. A Hugging Face model folder or another program's output also has config.json (or model/,
# metrics.jsonl, ...), never these.
RUN_MARKERS = (
  os.path.join(checkpoints.MODEL_DIR, models.JAXCSE_MODEL_FILE),
  checkpoints.LATEST_DIR,
  checkpoints.BEST_DIR,
  checkpoints.SET_ASIDE_DIR,
)


def _holds_run(workdir: str) -> bool:
  """Whether ``workdir`` holds a jaxcse run (one of ``RUN_MARKERS``), so that jaxcse may rewrite or remove its files."""
  return any(os.path.exists(os.path.join(workdir, marker)) for marker in RUN_MARKERS)


def _check_ours(workdir: str) -> None:
  """Refuses a folder that is not a jaxcse workdir but holds a name a run writes (``RUN_FOLDERS``, ``RUN_FILES``).

  A run would overwrite them, and ``--restart`` would delete them (``--workdir`` given a model folder): jaxcse
  touches only what it wrote. Reads only.
  """
  if not os.path.isdir(workdir) or _holds_run(workdir):
    return
  taken = [name for name in (*RUN_FOLDERS, *RUN_FILES) if os.path.exists(os.path.join(workdir, name))]
  if taken:
    raise WorkdirError(
      f"{workdir} is not a jaxcse workdir (it has {', '.join(taken)}, but no "
      f"{os.path.join(checkpoints.MODEL_DIR, models.JAXCSE_MODEL_FILE)} nor checkpoints), and a run "
      "would overwrite those files: jaxcse leaves this folder alone (--restart too); give --workdir "
      "a new or empty folder"
    )


def _clear(workdir: str) -> None:
  """Removes everything a previous run wrote: checkpoints, description, config, logs, TensorBoard (``--restart``).

  Only for a workdir that holds a jaxcse run (``_check_ours`` refuses any other before this is reached).
  """
  if not _holds_run(workdir):  # Nothing of a run's here: nothing to remove (and nothing else is ours to remove).
    return
  for name in RUN_FOLDERS:
    shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
  for name in RUN_FILES:
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
    raise WorkdirError(
      f"{workdir} holds another run (its config.json differs in {', '.join(changed)}, which "
      "change the result): rerun with its values to resume it, or pass --restart to start it over "
      "(deletes its checkpoints and metrics)"
    )
  if unknown:
    log.warning(
      "%s: config fields %s are on one side only (config.json there, this config here): another jaxcse "
      "version wrote it; resuming",
      workdir,
      ", ".join(unknown),
    )


@dataclasses.dataclass(frozen=True)
class StartPoint:
  """Where a run starts, as ``_start_point`` decided before anything is written."""

  step: int | None  # The newest latest checkpoint whose files match their record: resume there; None: fresh.
  # The newer latest checkpoints whose files do not, newest first, with why: set aside before the run writes.
  bad: tuple[tuple[int, str], ...] = ()

  @property
  def holds_checkpoints(self) -> bool:
    """Whether the workdir holds latest checkpoints, good or not: it holds a run (``_check_workdir``)."""
    return self.step is not None or bool(self.bad)


def _start_point(workdir: str, restart: bool) -> StartPoint:
  """The one decision between a fresh start and a resume, from the latest checkpoints' files; reads only.

  Resume from the newest latest checkpoint whose files match their record (``checkpoints.verify``); the newer
  ones are bad (``_resume`` sets them aside, each with a warning, before the run writes). Fresh with ``restart``
  (its checkpoints are deleted) or when none is good: the run starts from the configured model. Whether its
  arrays can be read, only orbax can tell: ``_resume`` restores them, falling back to an older checkpoint.
  """
  latest = os.path.join(workdir, checkpoints.LATEST_DIR)
  if restart or not os.path.isdir(latest):
    return StartPoint(None)
  # Listed, not through orbax's manager: it creates folders and removes temporary ones (a refused run must not).
  steps = sorted(
    (int(name) for name in os.listdir(latest) if name.isdigit() and os.path.isdir(os.path.join(latest, name))),
    reverse=True,
  )
  bad = []
  for step in steps:
    problem = checkpoints.verify_folder(os.path.join(latest, str(step)))
    if problem is None:
      return StartPoint(step, tuple(bad))
    bad.append((step, problem))
  return StartPoint(None, tuple(bad))


def _check_workdir(config, workdir: str, restart: bool, start: StartPoint) -> None:
  """Checks, reading only, that a run can use ``workdir`` (which ``start`` describes).

  Raises ``errors.OutputError`` if the path is not a folder or cannot be created or written, ``WorkdirError`` if
  its config.json is unreadable, or holds another run: any difference when it holds no checkpoint, a difference
  that changes the result (``_check_same_run``) when it does; never with ``restart``.
  """
  saved_config = os.path.join(workdir, "config.json")
  if not restart and os.path.isfile(saved_config):
    try:
      with open(saved_config) as f:
        saved = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
      raise WorkdirError(f"{saved_config}: unreadable ({e}); pass --restart to start the workdir over") from None
    if not start.holds_checkpoints and saved != json.loads(json.dumps(config.to_dict(), default=str)):
      raise WorkdirError(
        f"{workdir} holds another run (its config.json differs from this config) and no checkpoint "
        "to resume: use another workdir, or pass --restart to start it over (deletes its "
        "checkpoints and metrics)"
      )
    _check_same_run(config, workdir)


# --------------------------------------------------------------------------
# Set-up: the model and the data.


@dataclasses.dataclass
class _Inputs:
  """Everything a run reads, loaded and checked before it writes anything (``_read_inputs``)."""

  start: StartPoint  # Fresh or resume (``_start_point``), and the bad latest checkpoints to set aside.
  spec: models.ModelSpec  # The configured model's, or the workdir's description when the run resumes.
  params: Any  # The configured model's parameters; None when the run resumes (``_resume`` restores them).
  batches: Any  # data.Batches or data.PackedBatches over the training corpus.
  heldout: data_lib.Corpus | None  # The held-out part of the corpus (data.heldout_fraction), else None.
  dev_sets: dict[str, sts_data.PairSet]  # sts_data.load_dev_sets: STS-B dev (and SICK-R dev).
  own_dev_sets: dev_sets_lib.OwnDevSets  # The config's own dev sets (eval.pairs, eval.retrieval), maybe none.
  # The method's frozen complementary model (DCLR's, GISTEmbed's guide: ``configured.complementary``).
  complementary: tuple[models.ModelSpec | None, Any]
  augment_mlm: tuple[models.ModelSpec | None, Any]  # The frozen MLM of augment.mlm (``configured.augment_mlm``).
  corpus_digests: dict[str, str] | None  # sha256 of the training corpus (``_corpus_digests``); None: TFDS.


def _read_inputs(config: ml_collections.ConfigDict, workdir: str, restart: bool, mesh, train_data=None) -> _Inputs:
  """Checks the workdir and loads the model, corpus and dev sets; writes nothing.

  So a mistake (a missing or undecodable data file, an unknown model, a workdir that cannot be used) stops the
  run with the workdir exactly as it was, and the corrected command then starts cleanly. ``train_data``: a
  ``datasets.Dataset`` to train on instead of ``config.data.train``'s.
  """
  pair_data = train_data is not None or data_lib.is_pairs_source(_data_source(config), _csv_format(config))
  corpus = _corpus(config, train_data) if pair_data else None  # Its digest is of its content: read it first.
  corpus_digests = _corpus_digests(config, corpus)
  start = _start_point(workdir, restart)
  _check_workdir(config, workdir, restart, start)
  if start.holds_checkpoints:
    _check_same_corpus(workdir, corpus_digests)
  if start.step is not None:  # _resume restores the checkpoint's params.
    spec, params = _described_model(config, workdir), None
  else:
    built = configured.model(config)
    spec, params = built.spec, built.params
  batches, heldout = _batches(config, spec, corpus)
  dev_sets = sts_data.load_dev_sets(config.data.data_dir or None, sickr=config.eval.sickr_dev)
  # .get: a config.json from before these fields (a resumed older workdir) has none.
  own_dev_sets = dataclasses.replace(
    dev_sets_lib.OwnDevSets.load(
      config.eval.get("pairs", ""), config.eval.get("retrieval", ""), config.data.data_dir or None
    ),
    query_prompt=config.data.get("query_prompt", ""),
    document_prompt=config.data.get("document_prompt", ""),
  )
  replicated = NamedSharding(mesh, PartitionSpec())
  complementary = _frozen(configured.complementary(config, spec), replicated)
  augment_mlm = _frozen(configured.augment_mlm(config, spec), replicated)
  return _Inputs(
    start, spec, params, batches, heldout, dev_sets, own_dev_sets, complementary, augment_mlm, corpus_digests
  )


def _data_source(config: ml_collections.ConfigDict) -> str:
  """``config.data.train`` resolved under the data root where it is there (so a folder is seen as one), else as is."""
  source = config.data.train
  if source.startswith((data_lib.TFDS_PREFIX, data_lib.HF_PREFIX)):
    return source
  try:
    return data_lib.resolve(source, config.data.data_dir or None)
  except data_lib.DataError:
    return source  # The reader says what is missing.


def _corpus_digests(config: ml_collections.ConfigDict, corpus=None) -> dict[str, str] | None:
  """sha256 of the training corpus: of its files, by path relative to the corpus's folder (a file, or a
  ``save_to_disk`` folder); of its content for a hub dataset or a ``datasets.Dataset`` (``corpus``, read already);
  None for a TFDS dataset."""
  if corpus is not None and (not config.data.train or config.data.train.startswith(data_lib.HF_PREFIX)):
    return {corpus.path: corpus.content_sha256}
  if config.data.train.startswith(data_lib.TFDS_PREFIX):
    return None  # TFDS versions its datasets itself (the name holds the version).
  path = os.path.abspath(data_lib.resolve(config.data.train, config.data.data_dir or None))
  if not os.path.exists(path):
    return None  # The corpus reader says what is missing, naming the download.
  return provenance.data_digests([path], root=os.path.dirname(path))


def _check_same_corpus(workdir: str, corpus_digests: dict[str, str] | None) -> None:
  """Refuses to resume on a training corpus whose files differ from those the run started with (``INPUTS_FILE``).

  Batches are drawn by step from the corpus, so a changed file silently makes a resumed run another run. The
  record is written with the model description's own record (``models.DESCRIPTION_RECORD``): a workdir that has
  that one must have this one, and a record of ``null`` (a TFDS dataset's) must not stand for a corpus of files;
  either is refused, since the corpus can then not be checked. Only a workdir without both (an older jaxcse's) is
  not checked: the resumed run records the corpus it reads.
  """
  path = os.path.join(workdir, INPUTS_FILE)
  if not os.path.isfile(path):
    if os.path.isfile(os.path.join(workdir, checkpoints.MODEL_DIR, models.DESCRIPTION_RECORD)):
      raise WorkdirError(
        f"{path} is missing: this run recorded the sha256 of its training corpus there, and without "
        "it a resume cannot check that it reads the same corpus; put the file back, or pass "
        "--restart to start the run over (deletes its checkpoints and metrics)"
      )
    return
  try:
    with open(path) as f:
      recorded = json.load(f)["corpus_sha256"]
    if recorded is not None and not isinstance(recorded, dict):
      raise TypeError(f"corpus_sha256 is a {type(recorded).__name__}")
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise WorkdirError(
      f"{path}: unreadable ({type(e).__name__}: {e}); pass --restart to start the workdir over"
    ) from None
  if corpus_digests is None:
    return  # A TFDS dataset (its name holds its version), or no corpus at that path (the reader says so).
  if recorded is None:
    raise WorkdirError(
      f"{path} records no sha256 for the training corpus (null, as for a TFDS dataset), but "
      f"this run reads files ({', '.join(sorted(corpus_digests))}): a resume cannot check that they "
      "are the run's corpus; put the file back as it was, or pass --restart to start the run over"
    )
  if recorded != corpus_digests:
    changed = sorted(
      name for name in set(recorded) | set(corpus_digests) if recorded.get(name) != corpus_digests.get(name)
    )
    raise WorkdirError(
      f"{workdir} holds a run on another training corpus (the sha256 of {', '.join(changed)} differs "
      f"from the one in {path}: the resumed run would train on other batches): put the run's corpus "
      "back to resume it, or pass --restart to start it over (deletes its checkpoints and metrics)"
    )


def _record_corpus(workdir: str, corpus_digests: dict[str, str] | None) -> None:
  """Writes ``INPUTS_FILE``: the sha256 of the training corpus this run reads (``_check_same_corpus``)."""
  files.write_json(os.path.join(workdir, INPUTS_FILE), {"corpus_sha256": corpus_digests})


def _frozen(built: configured.Built | None, replicated) -> tuple[models.ModelSpec | None, Any]:
  """A frozen model of the step (``(spec, params replicated on every device)``), or ``(None, None)``.

  Through host memory: a restored checkpoint's arrays sit on this process's device, and JAX cannot copy a device
  array to other hosts' devices; from numpy, each process fills its own devices.
  """
  if built is None:
    return None, None
  return built.spec, jax.device_put(jax.device_get(built.params), replicated)


def _described_model(config: ml_collections.ConfigDict, workdir: str) -> models.ModelSpec:
  """The spec of the run a workdir holds, from its description (``_check_same_run``: the same config)."""
  return checkpoints.description(
    workdir, dtype=models.DTYPES[config.model.dtype], gradient_checkpointing=config.model.gradient_checkpointing
  )


def _save_start(
  config: ml_collections.ConfigDict, spec: models.ModelSpec, workdir: str, corpus_digests: dict[str, str] | None
) -> None:
  """Writes a fresh start's model description, the sha256 of its corpus and its resolved config into the workdir.

  Each file whole or not at all (a full disk is one error naming it); config.json last.
  """
  models.save_description(spec, os.path.join(workdir, checkpoints.MODEL_DIR))
  _record_corpus(workdir, corpus_digests)
  files.write_json(os.path.join(workdir, "config.json"), config.to_dict())


def _csv_format(config: ml_collections.ConfigDict) -> str:
  """``data.csv_format``; a config.json written before the field existed read its csv as SimCSE's."""
  return config.data.get("csv_format", "simcse")


def _corpus(config: ml_collections.ConfigDict, train_data=None):
  """The training corpus: ``train_data`` (a ``datasets.Dataset``) if given, else ``config.data.train``'s, checked
  against the method (``_check_labels``)."""
  corpus = data_lib.load_corpus(
    config.data.train if train_data is None else train_data,
    root=config.data.data_dir or None,
    skip_empty_lines=config.data.skip_empty_lines,
    tfds_text_feature=config.data.tfds_text_feature,
    tfds_data_dir=config.data.tfds_data_dir or None,
    csv_format=_csv_format(config),
  )
  _check_labels(config, corpus)
  _check_columns(config, corpus)
  return corpus


def _check_columns(config: ml_collections.ConfigDict, corpus) -> None:
  """Refuses a corpus with fewer text columns than the method reads (``objectives.Objective.min_columns``)."""
  columns = getattr(corpus, "text_columns", None) or tuple(corpus.columns)
  needed = objectives.get(config.method).min_columns
  if len(columns) < needed:
    raise data_lib.DataError(
      f"{corpus.path}: method {config.method} needs at least {needed} text columns (an anchor and its "
      f"positive, then any hard negatives); this data has {len(columns)} ({', '.join(columns)})"
    )


def _check_labels(config: ml_collections.ConfigDict, corpus) -> None:
  """Refuses labelled rows (scored pairs) for a method that does not read ``batch["labels"]``, and the reverse.

  A method reads the labels when its ``objectives.Objective`` says ``labels`` (CoSENT's); for any other, a score
  column would be silently ignored, and its pairs all trained as positives.
  """
  label = getattr(corpus, "label_column", None)
  uses_labels = objectives.get(config.method).labels
  if label and not uses_labels:
    raise data_lib.DataError(
      f"{corpus.path}: column {label!r} holds a label per row (scored pairs), which method "
      f"{config.method} does not use: train scored pairs with a method for them (cosent), or "
      "drop the column to train the pairs as positives"
    )
  if uses_labels and not label:
    raise data_lib.DataError(
      f"{corpus.path}: method {config.method} needs a label per row (a column named "
      f"{' or '.join(data_lib.LABEL_COLUMNS)})"
    )


def _batches(config: ml_collections.ConfigDict, spec: models.ModelSpec, corpus=None):
  """``(train batches, held-out corpus or None)`` for the configured corpus (``corpus``, if read already)."""
  if corpus is None:
    corpus = _corpus(config)
  heldout = None
  if isinstance(corpus, data_lib.PairCorpus) and (config.data.heldout_fraction > 0 or config.data.pack):
    raise data_lib.DataError(
      f"{corpus.path}: data.heldout_fraction and data.pack are for one-sentence-a-line "
      "corpora (.txt, tfds:), not pair data"
    )
  if config.data.heldout_fraction > 0:
    corpus, heldout = data_lib.split_heldout(corpus, config.data.heldout_fraction)
  if config.data.pack:
    batches = data_lib.PackedBatches(
      corpus, spec.tokenizer, batch_size=config.train.batch_size, max_seq_len=config.data.max_seq_len, seed=config.seed
    )
  else:
    batches = data_lib.Batches(
      corpus,
      spec.tokenizer,
      batch_size=config.train.batch_size,
      max_seq_len=config.data.max_seq_len,
      seed=config.seed,
      no_duplicates=config.data.no_duplicates,
      query_prompt=config.data.get("query_prompt", ""),
      document_prompt=config.data.get("document_prompt", ""),
    )
    if config.data.no_duplicates:
      report = batches.epoch_report(0)
      log.info(
        "%s: data.no_duplicates: epoch 0 has %d batches of %d examples with no text twice (plain batching: "
        "%d); %d examples were deferred to a later batch and %d left out of the epoch (plain: %d)",
        corpus.path,
        report.batches,
        config.train.batch_size,
        report.examples // config.train.batch_size,
        report.deferred,
        report.left_out,
        report.examples % config.train.batch_size,
      )
  return batches, heldout


def _tensorboard(config) -> bool:
  return bool(config.log.tensorboard)


def _total_steps(config, batches) -> int:
  if config.train.max_steps > 0:
    return config.train.max_steps
  return batches.total_steps(config.train.num_epochs)


def _agree_across_processes(config, corpus: data_lib.Corpus, resume_step: int | None, params) -> None:
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


# --------------------------------------------------------------------------
# Where the run starts: fresh, or from the newest good latest checkpoint.


@dataclasses.dataclass(frozen=True)
class Start:
  """What the loop starts from (``_resume``): the configured model's fresh state, or a latest checkpoint's."""

  step: int | None  # The latest checkpoint resumed from; None: a fresh start (its first step is 0).
  spec: models.ModelSpec  # The configured model's, or the workdir's description.
  batches: Any  # data.Batches or data.PackedBatches over the training corpus.
  heldout: data_lib.Corpus | None  # The held-out part of the corpus (data.heldout_fraction), else None.
  total_steps: int
  tx: Any  # The optimizer (optax), its schedule over total_steps.
  state: step_lib.TrainState  # Replicated on the mesh: fresh from the configured params, or the checkpoint's.
  best: validation.BestSoFar  # The model selection so far: the checkpoint's, or none yet.
  reevaluate: bool  # The run's best checkpoint is gone: evaluate the resume point again (``_resume``).
  probe: Any  # checkpoints.output_probe(spec): the check every saved checkpoint passes, compiled once.


def _resume(config, workdir: str, primary: bool, mesh, inputs: _Inputs, latest, best) -> Start:
  """Carries out ``inputs.start`` (``_start_point``'s decision): puts the workdir in order and builds the state.

  The bad latest checkpoints are set aside, each with a warning. Best checkpoints newer than the resume point
  (saved after the last latest checkpoint of a killed run; all of them for a fresh start) are set aside, intact,
  never deleted: the resumed run (``_check_same_run``: with the same config) evaluates those steps again, so the
  best checkpoint served is always the one this run reports; every best checkpoint left must be servable (bad
  ones are set aside). A fresh start writes its description and config. A resume restores the checkpoint (one
  that orbax cannot read is set aside too, and an older one restored). If the run's best checkpoint is gone, its
  best becomes the newest good one left (or none) and ``reevaluate`` asks the loop to evaluate the resume point
  again, so the run keeps serving the best it has.
  """
  replicated = NamedSharding(mesh, PartitionSpec())
  spec, batches, heldout, step = inputs.spec, inputs.batches, inputs.heldout, inputs.start.step
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
    if problem := checkpoints.verify(best, best_step) or _unservable(best, best_step, spec, probe, replicated):
      checkpoints.set_aside(best, best_step, problem)
  if step is None and primary:
    _save_start(config, spec, workdir, inputs.corpus_digests)
  elif primary and not os.path.isfile(os.path.join(workdir, INPUTS_FILE)):  # An older jaxcse's run: record it now.
    _record_corpus(workdir, inputs.corpus_digests)
  total_steps = _total_steps(config, batches)
  tx = step_lib.make_optimizer(config.train, total_steps)
  _agree_across_processes(config, batches.corpus, step, inputs.params)
  if step is None:
    # Loaded parameters may be committed to one local device (a jitted init of a fresh head): hand jit host
    # copies, which every process holds alike, so it places them on the (possibly multi-process) mesh itself.
    state = jax.jit(functools.partial(_fresh_state, tx=tx), out_shardings=replicated)(jax.device_get(inputs.params))
    return Start(
      None, spec, batches, heldout, total_steps, tx, state, validation.BestSoFar(), reevaluate=False, probe=probe
    )

  abstract = jax.eval_shape(functools.partial(_fresh_state, tx=tx), checkpoints.abstract_params(spec, replicated))
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), abstract)
  try:  # Unreadable although its files match their record: set aside, fall back to an older one.
    step, restored = checkpoints.newest_good(
      latest,
      lambda mngr, s: checkpoints.restore(mngr, s, params=abstract.params, opt_state=abstract.opt_state),
      set_aside_bad=True,
    )
  except checkpoints.CheckpointError:  # A fresh start needs the configured weights, which this run did not load.
    raise WorkdirError(
      f"{workdir}: no latest checkpoint could be read (each was set aside); run the same command "
      "again to start from the beginning"
    ) from None
  state = step_lib.TrainState(
    step=jax.device_put(jnp.int32(step), replicated), params=restored["params"], opt_state=restored["opt_state"]
  )
  log.info("resumed %s at step %d", workdir, step)
  if primary:  # An older jaxcse's description (no record): the checkpoint just restored fits it; vouch for it now.
    models.record_description(os.path.join(workdir, checkpoints.MODEL_DIR))
  # An unreadable latest checkpoint may have made the resume point older.
  checkpoints.set_aside_after(
    best, step, f"was saved after the resume point, step {step}: the resumed run evaluates that step again"
  )
  so_far = validation.BestSoFar.from_meta(restored["meta"])
  reevaluate = so_far.step is not None and so_far.step not in best.all_steps()
  if reevaluate:  # Set aside as damaged, or deleted: the best is now the newest good one left, or none.
    try:
      kept, meta = checkpoints.newest_good(best, checkpoints.restore_meta, set_aside_bad=True)
    except checkpoints.CheckpointError:
      kept, meta = None, {"metric": None}
    log.warning(
      "%s: the best checkpoint of this run, step %d, is gone (set aside or deleted); the best is now %s, "
      "and the resume point, step %d, is evaluated again",
      workdir,
      so_far.step,
      "none" if kept is None else f"step {kept}",
      step,
    )
    so_far = dataclasses.replace(so_far, step=kept, metric=meta["metric"])
  return Start(step, spec, batches, heldout, total_steps, tx, state, so_far, reevaluate, probe)


def _unservable(best, step: int, spec: models.ModelSpec, probe, sharding) -> str | None:
  """Why verified best checkpoint ``step`` cannot embed anything (as every reader would find), or None.

  Its files match their record, but its parameters may still be non-finite or overflow (an exploded model saved by
  an older jaxcse): readers refuse it (``loading.load_model``), so the trainer sets it aside and evaluates again.
  """
  try:
    params = checkpoints.restore(best, step, params=checkpoints.abstract_params(spec, sharding))["params"]
  except checkpoints.CheckpointError as e:
    return str(e).split(": ", 1)[-1]
  if not checkpoints.all_finite(params):
    return "its parameters are not finite (NaN or infinity)"
  return probe(params)


def _fresh_state(params, tx) -> step_lib.TrainState:
  return step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


# --------------------------------------------------------------------------
# Logging.


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


class StepLog:
  """Averages the step metrics between log lines and writes them; reads a step's metrics one step late.

  ``add(step, metrics)`` keeps the device arrays of the step just dispatched and checks the previous one, so the
  host never waits for the device; ``flush`` writes one record (mean over the steps since the last line).
  """

  def __init__(
    self, metrics_log: MetricsWriter, latest, workdir: str, steps_per_epoch: int, start_step: int, schedule=None
  ):
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
    record = {
      "step": step,
      **{k: float(np.mean([m[k] for m in self.values])) for k in self.values[0]},
      "steps_per_sec": round((step - self.last_step) / (time.time() - self.t_last), 4),
      "epoch": round(step / self.steps_per_epoch, 4),
    }  # Nominal with no_duplicates or packing.
    if self.schedule is not None:  # The rate of the last update of the interval (step - 1: counts start at 0).
      record["learning_rate"] = float(self.schedule(step - 1))
    self.metrics_log.write(record)
    self.values, self.t_last, self.last_step = [], time.time(), step
    return record


def _check_finite(step: int, metrics: dict, latest, workdir: str) -> dict[str, float]:
  """The step's metrics as floats; ``NonFiniteLossError`` if its loss or gradient norm is NaN or infinite."""
  values = {k: float(v) for k, v in jax.device_get(metrics).items()}
  if not math.isfinite(values["loss"]) or not math.isfinite(values["grad_norm"]):
    raise NonFiniteLossError(f"non-finite loss ({values['loss']}) at step {step}; {_stopped(latest, workdir)}")
  return values


# Ctrl-C saves the latest state where it stops, unless the newest latest checkpoint is younger than this: a save
# takes about a second, and a resume then redoes at most this much work.
INTERRUPT_SAVE_AFTER_S = 5.0


def _save_interrupted(latest, step: int, state, best_so_far, step_log: "StepLog", probe) -> None:
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
  checkpoints.save(latest, step, meta=best_so_far.to_meta(), params=state.params, opt_state=state.opt_state)


def _interrupted(step: int, latest) -> str:
  """The one line of a run stopped by Ctrl-C: at which step, and where the same command resumes from."""
  good = _last_good(latest)
  return f"interrupted at step {step}; rerun the same command to resume (" + (
    "from the start: no checkpoint yet)" if good is None else f"from its checkpoint at step {good})"
  )


def _last_good(latest) -> int | None:
  """The step of the newest good latest checkpoint, for a message (nothing is set aside); None if there is none."""
  try:
    return checkpoints.newest_good(latest, set_aside_bad=False)[0]
  except checkpoints.CheckpointError:
    return None


def _stopped(latest, workdir: str) -> str:
  """The end of the message of a run stopped by a non-finite loss or model: where it can be resumed from."""
  good = _last_good(latest)
  return (
    f"stopped. The last good checkpoint is {'none' if good is None else f'step {good}'} in "
    f"{os.path.join(workdir, checkpoints.LATEST_DIR)}"
  )


# --------------------------------------------------------------------------
# The loop.


def train_and_evaluate(
  config: ml_collections.ConfigDict, workdir: str, *, restart: bool = False, train_data=None
) -> dict:
  """Trains per ``config`` in ``workdir``, resuming from its newest good checkpoint if there is one.

  ``train_data``, a ``datasets.Dataset`` built in Python, is trained on instead of a file (``config.data.train``
  must then be empty): its columns read as a pair file's (``jaxcse.data.pairs``), its content's sha256 recorded in
  ``inputs.json``, so a resume must pass the same rows.

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
  _check_training_data(config, train_data)
  with _CtrlC() as ctrl_c:  # From here on, Ctrl-C stops the run only at a safe point (``_CtrlC``).
    primary = jax.process_index() == 0
    mesh = distributed.make_mesh()
    if config.train.batch_size % mesh.size:
      raise configuration.ConfigError(
        f"train.batch_size {config.train.batch_size} must be divisible by the {mesh.size} devices"
      )
    errors.check_output(workdir, folder=True)
    _check_ours(workdir)
    # The start point is read under the lock, so that no other run changes the workdir between the decision and
    # the acts on it. A folder that holds no run yet (or does not exist) is locked only once the inputs are read,
    # so that a refused run leaves it as it was (no folder, no .lock); that it still holds none is then checked
    # under the lock. A run starting there already (it holds the lock) is refused before the slow reading.
    holds_run = _holds_run(workdir)
    if primary and not holds_run:
      _check_not_locked(workdir)
    lock = _lock(workdir) if primary and holds_run else None
    try:
      with data_lib.notes_held():  # A refusal while reading is the only line; the shipped-data note follows.
        inputs = _read_inputs(config, workdir, restart, mesh, train_data)  # Before anything is written.
      if ctrl_c.requested:  # Nothing written yet: stop before the workdir changes.
        raise Interrupted("interrupted before the run started; the workdir is as it was")
      if not holds_run:
        os.makedirs(workdir, exist_ok=True)
        lock = _lock(workdir) if primary else None
        # The primary alone: it holds the lock, and in a multi-process run it writes the run's files, which the
        # other processes may already see here.
        if primary and _holds_run(workdir):
          raise WorkdirError(
            f"{workdir}: another process started a run in this workdir while this one read its "
            "inputs; run the command again"
          )
      summary = _train(config, workdir, primary, mesh, restart, inputs, ctrl_c)
    finally:
      if lock is not None:
        lock.release()
    if ctrl_c.requested:  # Pressed while the finished run wrote its summary: it is complete, say so.
      raise Interrupted(f"interrupted as the run finished; {workdir} is complete (nothing to resume)")
    return summary


def _check_training_data(config: ml_collections.ConfigDict, train_data) -> None:
  """Exactly one source of training data: ``config.data.train``, or ``train_data``, a ``datasets.Dataset``."""
  if train_data is None:
    if not config.data.train:
      raise configuration.ConfigError(
        "data.train is empty: give the training data (a file, a save_to_disk folder, "
        "hf:NAME[:CONFIG[:SPLIT]] or tfds:NAME), or pass train_data=a datasets.Dataset"
      )
    return
  import datasets

  if not isinstance(train_data, datasets.Dataset):
    raise configuration.ConfigError(
      f"train_data must be a datasets.Dataset (one split), not a {type(train_data).__name__}"
    )
  if config.data.train:
    raise configuration.ConfigError(
      f"train_data is given, and data.train is {config.data.train!r} too: set "
      "config.data.train = '' to train on train_data"
    )


def _train(config, workdir: str, primary: bool, mesh, restart: bool, inputs: _Inputs, ctrl_c: _CtrlC) -> dict:
  """``train_and_evaluate`` once the config and inputs are checked and the workdir locked."""
  started = time.time()
  if restart and primary:
    _clear(workdir)
  latest = checkpoints.manager(os.path.join(workdir, checkpoints.LATEST_DIR))
  best = checkpoints.manager(os.path.join(workdir, checkpoints.BEST_DIR))
  try:
    return _train_with(config, workdir, primary, mesh, latest, best, started, inputs, ctrl_c)
  finally:  # On every path, a refusal too: orbax's threads would print tracebacks at interpreter shutdown.
    for mngr in (latest, best):
      with contextlib.suppress(Exception):  # Never hide the error that ends the run.
        mngr.close()


def _train_with(
  config, workdir: str, primary: bool, mesh, latest, best, started: float, inputs: _Inputs, ctrl_c: _CtrlC
) -> dict:
  """``_train`` with the checkpoint managers open: the loop."""
  start = _resume(config, workdir, primary, mesh, inputs, latest, best)
  if ctrl_c.requested:  # Pressed while the workdir was put in order for the run (_resume): stop before training.
    raise Interrupted(_interrupted(start.step or 0, latest))
  spec, batches, total_steps, state, best_so_far = start.spec, start.batches, start.total_steps, start.state, start.best
  first_step = start.step or 0
  batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
  # This process tokenizes only its rows of each global batch; which examples form the global batch, and in
  # what order, depends on the step alone, never on the number of processes.
  local_rows = distributed.process_rows(batch_sharding, config.train.batch_size)
  complementary, complementary_params = inputs.complementary
  augment_mlm, augment_params = inputs.augment_mlm
  train_step = step_lib.jit_train_step(config, spec, start.tx, complementary, mesh, augment_mlm=augment_mlm)
  metrics_log = MetricsWriter(
    os.path.join(workdir, "metrics.jsonl"),
    start.step,
    enabled=primary,
    tensorboard_dir=os.path.join(workdir, TENSORBOARD_DIR) if _tensorboard(config) else None,
  )
  evaluate = validation.Evaluator(
    config,
    spec,
    attend_padding=objectives.needs(config).attend_padding,
    heldout=start.heldout,
    dev_sets=inputs.dev_sets,
    own=inputs.own_dev_sets,
    best_manager=best,
    write=metrics_log.write,
  )
  if start.step is None and config.eval.at_start:
    best_so_far = evaluate(0, state.params, best_so_far)
  if start.reevaluate:
    best_so_far = evaluate(first_step, state.params, best_so_far, log_record=False)
  probe = start.probe
  step_log = StepLog(
    metrics_log, latest, workdir, batches.steps_per_epoch, first_step, step_lib.make_schedule(config.train, total_steps)
  )
  progress = Progress(total_steps, initial=first_step, unit="step", desc="train", enabled=primary)
  saved = (first_step, time.time())  # The newest latest checkpoint's step (or the start), and when.
  try:
    for step, host_batch in enumerate(batches.iterate(first_step, total_steps, positions=local_rows), start=first_step):
      if ctrl_c.requested and step > saved[0] and time.time() - saved[1] >= INTERRUPT_SAVE_AFTER_S:
        _save_interrupted(latest, step, state, best_so_far, step_log, probe)
      ctrl_c.check()  # Before a step: the last one, its evaluation and its save are whole.
      batch = {
        k: jax.make_array_from_process_local_data(batch_sharding, v, (config.train.batch_size, *v.shape[1:]))
        for k, v in host_batch.items()
      }  # The global batch, from this process's rows of it.
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
        raise NonFiniteLossError(f"non-finite parameters after step {done}; {_stopped(latest, workdir)}")
      if (evaluate_now or save_now) and (problem := probe(state.params)):  # Finite weights may still overflow.
        raise NonFiniteLossError(
          f"after step {done} the model's {problem.removeprefix('its ')} (its parameters "
          f"overflow); {_stopped(latest, workdir)}"
        )
      if evaluate_now:
        best_so_far = evaluate(done, state.params, best_so_far)
      if save_now:
        checkpoints.save(latest, done, meta=best_so_far.to_meta(), params=state.params, opt_state=state.opt_state)
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

  summary = {
    "steps": total_steps,
    "best_step": best_so_far.step,
    "best_metric": best_so_far.metric,
    "first_eval": best_so_far.first_eval,
    "workdir": workdir,
  }
  # A finished run run again trains and evaluates nothing: its summary.json, the record of the run that did the
  # work (its wall time, when it was made), stays as it is.
  finished_before = first_step == total_steps and not start.reevaluate
  if primary and not (finished_before and _readable_json(os.path.join(workdir, "summary.json"))):
    if isinstance(batches.corpus, data_lib.PairCorpus):
      digests = inputs.corpus_digests
    else:
      corpus = (
        data_lib.resolve(config.data.train, config.data.data_dir or None)
        if not config.data.train.startswith(data_lib.TFDS_PREFIX)
        else None
      )
      digests = provenance.data_digests([corpus]) if corpus else None
    # What the model card reports of the data (model_card.py): its size, and for pair data its columns in order.
    data_shape = {"train_examples": len(batches.corpus)}
    if isinstance(batches.corpus, data_lib.PairCorpus):
      data_shape["train_columns"] = list(batches.corpus.text_columns)
    record = {
      **summary,
      **data_shape,
      "provenance": provenance.provenance(
        config=config.to_dict(),
        model=config.model.name or spec.source,
        revision=spec.revision,
        data=digests,
        wall_seconds=time.time() - started,
      ),
    }
    files.write_json(os.path.join(workdir, "summary.json"), record)
  return summary


def _readable_json(path: str) -> bool:
  try:
    with open(path) as f:
      json.load(f)
  except (OSError, ValueError):
    return False
  return True


# --------------------------------------------------------------------------
# The command.


def prune_set_aside(workdir: str) -> str:
  """Removes a workdir's set-aside checkpoints, and nothing else (``checkpoints.prune_set_aside``); returns one line.

  Under the workdir's lock (not while a run trains there), and only in a workdir that holds a jaxcse run.

  Raises:
    WorkdirError: ``workdir`` holds no jaxcse run, or another process trains in it.
  """
  if not os.path.isdir(workdir) or not _holds_run(workdir):
    raise WorkdirError(f"{workdir}: not a jaxcse workdir (no {RUN_MARKERS[0]} nor checkpoints); nothing removed")
  lock = _lock(workdir)
  try:
    count, size = checkpoints.prune_set_aside(workdir)
  finally:
    lock.release()
  folder = os.path.join(workdir, checkpoints.SET_ASIDE_DIR)
  if not count:
    return f"{folder}: no set-aside checkpoint; nothing removed"
  return (
    f"removed {count} set-aside checkpoint{'s' * (count != 1)} ({size / 1e6:.1f} MB) from {folder}; the run's "
    "checkpoints, description and logs are untouched"
  )


def main(argv: list[str]) -> None:
  """The train command: its flags' config and workdir, ``train_and_evaluate``, the result's lines (``cli``)."""
  del argv
  from absl import flags

  if flags.FLAGS.prune_set_aside:
    with cli.one_line_errors():
      print(prune_set_aside(flags.FLAGS.workdir))
    return
  platforms.use_compilation_cache()
  with cli.one_line_errors():
    try:
      config, workdir, restart = cli.train_flags()
    except KeyboardInterrupt:
      raise Interrupted("interrupted before the run started; nothing was written") from None
    summary = train_and_evaluate(config, workdir, restart=restart)
  if jax.process_index() == 0:
    cli.print_train_summary(config, workdir, summary)


def run() -> None:
  """``python -m jaxcse.train`` (and the ``jaxcse-train`` console script)."""
  try:
    from absl import app

    cli.define_train_flags()
    app.run(main, flags_parser=cli.parse_flags)
  except KeyboardInterrupt as e:  # While the flags and the config file load (main handles its own).
    print(str(e) or "interrupted before the run started; nothing was written", file=sys.stderr)
    sys.exit(errors.INTERRUPTED)


if __name__ == "__main__":
  run()
