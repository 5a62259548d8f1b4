"""A training workdir: its layout, and the promises it keeps (one run at a time, a resume is the same run, nothing
that is not ours is touched).

A workdir holds::

  config.json                 the resolved training config
  model/                      model description: HF config, tokenizer, jaxcse.json (poolers), sha256.json (their
                              record, checked before anything reads them: ``description.check_description``); no weights
  inputs.json                 the sha256 of the training corpus (a resume must read the same) and the run's id, which
                              every checkpoint's metadata names with its step (a copied-in checkpoint is refused)
  checkpoints/latest/<step>/  full train state (params, optimizer state) + progress metadata; the newest two
  checkpoints/best/<step>/    params of the best evaluation so far + its metrics; the newest two
  checkpoints/set_aside/      checkpoints found corrupt or incomplete, or intact but no longer fitting the run
                              (newer than the resume point), moved out of the way, never deleted, never loaded
  metrics.jsonl               one JSON object per logged step or evaluation
  summary.json, tensorboard/  the finished run's summary; TensorBoard's events (log.tensorboard)
  .lock                       held by the training process: a second one on the same workdir refuses

``Workdir`` owns these names and every check made on them before a run writes: whether the folder holds a jaxcse
run at all (``holds_run``: only then may jaxcse rewrite or remove anything there), the lock, the start point
(``start_point``: fresh or resume, reading only), that a resume has the run's config and corpus (``check_config``,
``check_corpus``), what a fresh start writes (``save_start``), and which checkpoint a reader is served
(``checkpoint_choice``). Orbax I/O and the verification of each checkpoint are ``checkpoints``'.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import shutil
from typing import Any

import flax
import orbax.checkpoint as ocp

from jaxcse import models
from jaxcse.core import files
from jaxcse.core.errors import JaxcseError
from jaxcse.storage import checkpoints, description, hub

log = logging.getLogger("jaxcse")

CONFIG_FILE = hub.WORKDIR_CONFIG_FILE
MODEL_DIR = hub.WORKDIR_MODEL_DIR
INPUTS_FILE = "inputs.json"  # The sha256 of the training corpus; written with the description's record.
RUN_ID_KEY = "run_id"  # In INPUTS_FILE: the run's id, drawn at its fresh start (``new_run_id``).
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
TENSORBOARD_DIR = "tensorboard"
LATEST_DIR = os.path.join("checkpoints", "latest")
BEST_DIR = os.path.join("checkpoints", "best")
SET_ASIDE_DIR = os.path.join("checkpoints", checkpoints.SET_ASIDE_NAME)
LOCK_FILE = ".lock"

# What a run writes into its workdir: a fresh start overwrites these names and ``--restart`` removes them (``clear``).
RUN_FOLDERS = ("checkpoints", MODEL_DIR, TENSORBOARD_DIR)
RUN_FILES = (CONFIG_FILE, INPUTS_FILE, METRICS_FILE, SUMMARY_FILE)
# A jaxcse run's markers: the model description's jaxcse.json (a fresh start writes it before anything else) or a
# checkpoint folder. A Hugging Face model folder or another program's output also has config.json (or model/,
# metrics.jsonl, ...), never these.
RUN_MARKERS = (os.path.join(MODEL_DIR, description.JAXCSE_MODEL_FILE), LATEST_DIR, BEST_DIR, SET_ASIDE_DIR)

# Config fields that cannot change a run's result (its parameters, its evaluations, which checkpoint is best, what
# its model description says): a run may be resumed with other values for them. Every other field must equal the
# workdir's config.json. A prefix ending in "." covers a whole section.
# eval.batch_size is not one: the evaluation's padded shapes follow it (a batch's longest sentence sets its length
# bucket, its rows the kernels' blocking), which moves the logged scores by ~1e-7, enough to flip a near tie for
# best; and DCLR's released evaluation attends the padding, so its scores depend on which sentences share a batch.
RESUMABLE_CHANGES = (
  "train.log_every",  # How often metrics.jsonl gets a line.
  "checkpoint.every",  # When the latest state is saved: a resumed run retraces the same steps.
  "log.",  # Logging only (log.tensorboard).
)


# Config fields whose default changed, with the value every config.json written before they existed meant: a
# workdir whose config.json lacks one was trained with that value, so it is compared as if it held it (resumed
# with it, bit for bit, or refused with the flag that resumes it), never continued with the new default.
FORMER_DEFAULTS = {
  # One attention-dropout mask shared across the batch (flax's broadcast_dropout): jaxcse's BERT before the
  # field existed; the default is now per element, as PyTorch.
  "model.attention_dropout_per_element": False,
  # Padded batches: every run before packed rows existed.
  "train.packed": False,
  # No spread-out regulariser: every run before it existed.
  "gor.enabled": False,
}


class WorkdirError(JaxcseError, RuntimeError):
  """The workdir cannot be used as asked (another process trains in it, or it holds another run)."""


@dataclasses.dataclass(frozen=True)
class StartPoint:
  """Where a run starts, as ``Workdir.start_point`` decided before anything is written."""

  step: int | None  # The newest latest checkpoint whose files match their record: resume there; None: fresh.
  # The newer latest checkpoints whose files do not, newest first, with why: set aside before the run writes.
  bad: tuple[tuple[int, str], ...] = ()

  @property
  def holds_checkpoints(self) -> bool:
    """Whether the workdir holds latest checkpoints, good or not: it holds a run (``Workdir.check_config``)."""
    return self.step is not None or bool(self.bad)


def config_as_saved(config) -> dict:
  """A ConfigDict as its config.json reads back (JSON's types; values JSON cannot hold as strings)."""
  return json.loads(json.dumps(config.to_dict(), default=str))


def result_changes(config, saved: dict) -> tuple[list[str], list[str]]:
  """``(changed, unknown)`` fields of ``config`` against a workdir's saved config (``config.json``).

  ``changed``: fields on both sides, not in ``RESUMABLE_CHANGES``, whose values differ, as ``name (a there, b here)``.
  ``unknown``: fields on one side only (a newer or older jaxcse added or removed them), as names.
  """
  return _changes(config_as_saved(config), saved)


def with_former_defaults(saved: dict) -> dict:
  """A saved config (config.json) with each ``FORMER_DEFAULTS`` field it lacks set to the value it was trained with."""
  flat = flax.traverse_util.flatten_dict(saved, sep=".")
  missing = {name: value for name, value in FORMER_DEFAULTS.items() if name not in flat}
  return flax.traverse_util.unflatten_dict({**flat, **missing}, sep=".") if missing else saved


def _differences(here: dict, there: dict) -> dict[str, tuple]:
  """Every field (dotted name) whose value differs and changes the result: ``(there's, here's)``, a side missing
  as ``_MISSING``. ``there`` is a config.json, read with ``FORMER_DEFAULTS`` for fields it lacks."""
  here = flax.traverse_util.flatten_dict(here, sep=".")
  there = flax.traverse_util.flatten_dict(with_former_defaults(there), sep=".")
  return {
    name: (there.get(name, _MISSING), here.get(name, _MISSING))
    for name in sorted(set(here) | set(there))
    if not name.startswith(RESUMABLE_CHANGES) and here.get(name, _MISSING) != there.get(name, _MISSING)
  }


_MISSING = object()


def resume_flags(here: dict, there: dict) -> list[str]:
  """The ``--config.NAME=VALUE`` flags that give ``here`` the workdir's (``there``) values of its changed fields
  that a flag can write (numbers, booleans, strings: quoted for the shell where needed, ``''`` for an empty one);
  ``result_changes``' ``changed``, as flags."""
  flags = []
  for name, (value, mine) in _differences(here, there).items():
    if mine is not _MISSING and isinstance(value, (bool, int, float, str)):
      flags.append(f"--config.{name}={shlex.quote(value) if isinstance(value, str) else value}")
  return flags


def _changes(here: dict, there: dict) -> tuple[list[str], list[str]]:
  """``result_changes`` of two configs as config.json holds them."""
  changed, unknown = [], []
  for name, (theirs, mine) in _differences(here, there).items():
    if theirs is _MISSING or mine is _MISSING:
      unknown.append(name)
    else:
      changed.append(f"{name} ({theirs!r} there, {mine!r} here)")
  return changed, unknown


class Workdir:
  """A training run's folder (``path``): its layout and the checks made on it before a run writes."""

  def __init__(self, path: str):
    self.path = path

  def __repr__(self) -> str:
    return f"Workdir({self.path!r})"

  def join(self, *names: str) -> str:
    return os.path.join(self.path, *names)

  @classmethod
  def find(cls, path: str) -> Workdir | None:
    """The training workdir that ``path`` is, or lies inside; None if it is not one (``hub.workdir_root``)."""
    root = hub.workdir_root(path)
    return None if root is None else cls(root)

  # ------------------------------------------------------------------------
  # Whose folder is it: only a folder that holds a jaxcse run is ever rewritten or cleared.

  def holds_run(self) -> bool:
    """Whether the folder holds a jaxcse run (one of ``RUN_MARKERS``), so that jaxcse may rewrite or remove its files."""
    return any(os.path.exists(self.join(marker)) for marker in RUN_MARKERS)

  def check_ours(self) -> None:
    """Refuses a folder that is not a jaxcse workdir but holds a name a run writes (``RUN_FOLDERS``, ``RUN_FILES``).

    A run would overwrite them, and ``--restart`` would delete them (``--workdir`` given a model folder): jaxcse
    touches only what it wrote. Reads only.
    """
    if not os.path.isdir(self.path) or self.holds_run():
      return
    taken = [name for name in (*RUN_FOLDERS, *RUN_FILES) if os.path.exists(self.join(name))]
    if taken:
      raise WorkdirError(
        f"{self.path} is not a jaxcse workdir (it has {', '.join(taken)}, but no "
        f"{os.path.join(MODEL_DIR, description.JAXCSE_MODEL_FILE)} nor checkpoints), and a run "
        "would overwrite those files: jaxcse leaves this folder alone (--restart too); give --workdir "
        "a new or empty folder"
      )

  def clear(self) -> None:
    """Removes everything a previous run wrote: checkpoints, description, config, logs, TensorBoard (``--restart``).

    Only for a workdir that holds a jaxcse run (``check_ours`` refuses any other before this is reached).
    """
    if not self.holds_run():  # Nothing of a run's here: nothing to remove (and nothing else is ours to remove).
      return
    for name in RUN_FOLDERS:
      shutil.rmtree(self.join(name), ignore_errors=True)
    for name in RUN_FILES:
      if os.path.exists(self.join(name)):
        os.remove(self.join(name))

  # ------------------------------------------------------------------------
  # One process at a time.

  def lock(self):
    """An exclusive lock on the workdir, held while training (released by the OS if the process dies)."""
    import filelock

    lock = filelock.FileLock(self.join(LOCK_FILE))
    try:
      lock.acquire(timeout=0)
    except filelock.Timeout:
      raise WorkdirError(
        f"{self.path}: another process is training in this workdir (it holds {self.join(LOCK_FILE)}); wait for "
        "it to finish or use another workdir"
      ) from None
    return lock

  def check_not_locked(self) -> None:
    """``WorkdirError`` if another process holds the lock; reads only (a workdir without the lock file, or none at
    all, has no run in progress). The lock itself is taken once the inputs are read (``lock``)."""
    if os.path.isfile(self.join(LOCK_FILE)):
      self.lock().release()

  # ------------------------------------------------------------------------
  # A resume is the same run: where it starts, and that its config and corpus are the run's.

  def start_point(self, restart: bool) -> StartPoint:
    """The one decision between a fresh start and a resume, from the latest checkpoints' files; reads only.

    Resume from the newest latest checkpoint whose files match their record (``checkpoints.verify``); the newer
    ones are bad (the trainer sets them aside, each with a warning, before the run writes). Fresh with ``restart``
    (its checkpoints are deleted) or when none is good: the run starts from the configured model. Whether its
    arrays can be read, only orbax can tell: the trainer restores them, falling back to an older checkpoint.
    """
    latest = self.join(LATEST_DIR)
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

  def check_config(self, config, restart: bool, start: StartPoint) -> None:
    """Checks, reading only, that a run of ``config`` can use this workdir (which ``start`` describes).

    Raises ``WorkdirError`` if its config.json is unreadable, or holds another run: any difference when it holds no
    checkpoint; a difference that changes the result (any field but ``RESUMABLE_CHANGES``) when it does; never
    with ``restart``. A field on one side only (another jaxcse version) is a warning.
    """
    path = self.join(CONFIG_FILE)
    if restart or not os.path.isfile(path):
      return
    try:
      with open(path) as f:
        saved = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
      raise WorkdirError(f"{path}: unreadable ({e}); pass --restart to start the workdir over") from None
    here = config_as_saved(config)
    if not start.holds_checkpoints and with_former_defaults(saved) != here:
      raise WorkdirError(
        f"{self.path} holds another run (its config.json differs from this config) and no checkpoint "
        "to resume: use another workdir, or pass --restart to start it over (deletes its "
        "checkpoints and metrics)"
      )
    changed, unknown = _changes(here, saved)
    if changed:
      flags = " ".join(resume_flags(here, saved))
      raise WorkdirError(
        f"{self.path} holds another run (its config.json differs in {', '.join(changed)}, which "
        f"change the result): rerun with its values to resume it{f' ({flags})' if flags else ''}, "
        "or pass --restart to start it over (deletes its checkpoints and metrics)"
      )
    if unknown:
      log.warning(
        "%s: config fields %s are on one side only (config.json there, this config here): another jaxcse "
        "version wrote it; resuming",
        self.path,
        ", ".join(unknown),
      )

  def check_corpus(self, corpus_digests: dict[str, str] | None) -> None:
    """Refuses to resume on a training corpus whose files differ from those the run started with (``INPUTS_FILE``).

    Batches are drawn by step from the corpus, so a changed file silently makes a resumed run another run. The
    record is written with the model description's own record (``description.DESCRIPTION_RECORD``): a workdir that has
    that one must have this one, and a record of ``null`` (a TFDS dataset's) must not stand for a corpus of files;
    either is refused, since the corpus can then not be checked. Only a workdir without both (an older jaxcse's)
    is not checked: the resumed run records the corpus it reads.
    """
    path = self.join(INPUTS_FILE)
    if not os.path.isfile(path):
      if os.path.isfile(self.join(MODEL_DIR, description.DESCRIPTION_RECORD)):
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
        f"{self.path} holds a run on another training corpus (the sha256 of {', '.join(changed)} differs "
        f"from the one in {path}: the resumed run would train on other batches): put the run's corpus "
        "back to resume it, or pass --restart to start it over (deletes its checkpoints and metrics)"
      )

  # ------------------------------------------------------------------------
  # What a run writes besides checkpoints and logs.

  def record_corpus(self, corpus_digests: dict[str, str] | None, run_id: str | None = None) -> None:
    """Writes ``INPUTS_FILE``: the sha256 of the training corpus this run reads (``check_corpus``) and the run's id
    (``run_id``; None for a run an older jaxcse started, which is recorded without one)."""
    record = {"corpus_sha256": corpus_digests}
    if run_id is not None:
      record[RUN_ID_KEY] = run_id
    files.write_json(self.join(INPUTS_FILE), record)

  def save_start(self, config, spec: models.ModelSpec, corpus_digests: dict[str, str] | None, run_id: str) -> None:
    """Writes a fresh start's model description, the sha256 of its corpus with the run's id, and its resolved config.

    Each file whole or not at all (a full disk is one error naming it); config.json last.
    """
    description.save_description(spec, self.join(MODEL_DIR))
    self.record_corpus(corpus_digests, run_id)
    files.write_json(self.join(CONFIG_FILE), config.to_dict())

  def run_id(self) -> str | None:
    """The id of the run in this workdir (``INPUTS_FILE``'s), which its checkpoints' metadata names.

    None when there is none: a run an older jaxcse started, or no readable ``INPUTS_FILE`` (then every checkpoint
    that names a run is refused as another's: ``checkpoints.not_this_runs``).
    """
    try:
      with open(self.join(INPUTS_FILE)) as f:
        run_id = json.load(f).get(RUN_ID_KEY)
    except (OSError, ValueError, AttributeError):
      return None
    return run_id if isinstance(run_id, str) else None

  def has_summary(self) -> bool:
    """Whether ``SUMMARY_FILE`` is there and reads as JSON."""
    try:
      with open(self.join(SUMMARY_FILE)) as f:
        json.load(f)
    except (OSError, ValueError):
      return False
    return True

  # ------------------------------------------------------------------------
  # Reading the run back.

  def model_spec(self, **kwargs: Any) -> models.ModelSpec:
    """The spec of the run's model description (``description.from_description``, ``kwargs`` passed on), verified.

    A workdir with ``INPUTS_FILE`` was written by a jaxcse that records its description too: a missing record there
    is refused, never read unverified.
    """
    return description.from_description(
      self.join(MODEL_DIR), expect_record=os.path.isfile(self.join(INPUTS_FILE)), **kwargs
    )

  def prompts(self) -> dict[str, str]:
    """The prompts the run trained with (its config.json's data.query_prompt/document_prompt), by s-t's names."""
    with open(self.join(CONFIG_FILE)) as f:
      data = json.load(f).get("data", {})
    named = {"query": data.get("query_prompt") or "", "document": data.get("document_prompt") or ""}
    return {name: text for name, text in named.items() if text}

  def checkpoint_choice(self, path: str, checkpoint: str) -> tuple[str, list[int]]:
    """(manager directory, steps to try, newest first) for what ``path`` names inside this workdir.

    Exactly what was named, or an error: the workdir itself with ``checkpoint`` (``best | latest | <step>``;
    ``best`` tries the best checkpoints, then, with a warning, the latest ones, for a run that never evaluated);
    ``checkpoints/best`` or ``checkpoints/latest`` (their newest good one, or ``checkpoint``'s step there); or one
    of their step folders (that checkpoint alone). Any other folder inside a workdir (a set-aside checkpoint,
    ``model/``, ``checkpoints/``) is refused: a reader never serves another checkpoint than the one named.
    """
    path, workdir = os.path.abspath(path), os.path.abspath(self.path)
    rel = os.path.relpath(path, workdir)
    if rel in (BEST_DIR, LATEST_DIR):
      if checkpoint.isdigit():
        if not os.path.isdir(os.path.join(path, checkpoint)):
          raise FileNotFoundError(f"{path}: no checkpoint at step {checkpoint}")
        return path, [int(checkpoint)]
      if checkpoint not in ("best", os.path.basename(path)):  # "best" is the default: not a choice.
        raise checkpoints.CheckpointError(
          f"{path} names the {os.path.basename(path)} checkpoints; --checkpoint {checkpoint} "
          "names others: give the workdir, or leave --checkpoint out"
        )
      steps = ocp.utils.checkpoint_steps(path) if os.path.isdir(path) else []
      if not steps:
        raise FileNotFoundError(f"{path}: no checkpoint there")
      return path, sorted(steps, reverse=True)
    if os.path.dirname(rel) in (BEST_DIR, LATEST_DIR) and os.path.basename(rel).isdigit():
      if checkpoint not in ("best", "latest", os.path.basename(rel)):  # "best" is the default: not a choice.
        raise checkpoints.CheckpointError(
          f"{path} is checkpoint {os.path.basename(rel)}; --checkpoint {checkpoint} names another"
        )
      return os.path.dirname(path), [int(os.path.basename(rel))]
    if rel != ".":
      if os.path.dirname(rel) == SET_ASIDE_DIR or rel.startswith(SET_ASIDE_DIR + os.sep):
        raise checkpoints.CheckpointError(
          f"{path}: a set-aside checkpoint (moved out of the run {workdir}, damaged or no longer "
          "fitting it) is not served; give the workdir, or one of its checkpoints/best or "
          "checkpoints/latest folders"
        )
      raise checkpoints.CheckpointError(
        f"{path}: not a checkpoint of the workdir {workdir}; give the workdir, its "
        "checkpoints/best or checkpoints/latest folder, or one of their step folders"
      )
    if checkpoint.isdigit():
      for sub in (BEST_DIR, LATEST_DIR):
        if os.path.isdir(os.path.join(workdir, sub, checkpoint)):
          return os.path.join(workdir, sub), [int(checkpoint)]
      raise FileNotFoundError(f"{workdir}: no checkpoint at step {checkpoint}")
    if checkpoint not in ("best", "latest"):
      raise checkpoints.CheckpointError(f"--checkpoint must be best, latest or a step number, not {checkpoint!r}")
    order = (BEST_DIR, LATEST_DIR) if checkpoint == "best" else (LATEST_DIR,)
    for sub in order:
      directory = os.path.join(workdir, sub)
      steps = ocp.utils.checkpoint_steps(directory) if os.path.isdir(directory) else []
      if steps:
        if checkpoint == "best" and sub == LATEST_DIR:
          log.warning("%s has no best checkpoint (no evaluation ran); using its latest, step %d", workdir, max(steps))
        return directory, sorted(steps, reverse=True)
    raise FileNotFoundError(f"{workdir}: no {checkpoint} checkpoint yet")

  # ------------------------------------------------------------------------
  # Housekeeping.

  def prune_set_aside(self) -> str:
    """Removes the set-aside checkpoints, and nothing else; returns one line.

    They are never read by the run: removing them changes neither its resume nor what readers serve. Under the
    workdir's lock (not while a run trains there), and only in a workdir that holds a jaxcse run.

    Raises:
      WorkdirError: the folder holds no jaxcse run, or another process trains in it.
    """
    if not os.path.isdir(self.path) or not self.holds_run():
      raise WorkdirError(f"{self.path}: not a jaxcse workdir (no {RUN_MARKERS[0]} nor checkpoints); nothing removed")
    folder = self.join(SET_ASIDE_DIR)
    lock = self.lock()
    try:
      count = size = 0
      if os.path.isdir(folder):
        count = len(os.listdir(folder))
        size = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)
        shutil.rmtree(folder)
    finally:
      lock.release()
    if not count:
      return f"{folder}: no set-aside checkpoint; nothing removed"
    return (
      f"removed {count} set-aside checkpoint{'s' * (count != 1)} ({size / 1e6:.1f} MB) from {folder}; the run's "
      "checkpoints, description and logs are untouched"
    )
