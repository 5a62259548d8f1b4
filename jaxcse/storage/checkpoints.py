"""Orbax checkpoints that are verified, never stale, and never half-written (the workdir's layout: ``workdir``).

Every save is synchronous and checked (orbax writes into a temporary folder
and renames it); then ``sha256.json`` inside the step folder records the
sha256 of every file orbax wrote. That record is the save's commit: a
checkpoint without it (killed between orbax's rename and the record, or the
record could not be written) or whose files do not match it (truncated,
flipped bits) is not complete. ``newest_good`` is the one search for the newest
good checkpoint: training sets a bad one aside with one warning naming it and
falls back to an older one; readers skip it with one warning.

A checkpoint is *good* when its files match the record, its parameters are
finite and the model's outputs on a fixed probe batch are finite
(``output_probe``): the trainer checks that before saving, and every reader
(``loading.load_model``: evaluate, encode, export) after restoring. A record
vouches only that a folder is whole, so each checkpoint's metadata also names
the run that saved it and the step it was saved as (``save``), and every read
of a workdir's checkpoint refuses one that names another run or another step
(``not_this_runs``): a folder copied in from another run is never served as
this run's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from jaxcse import models
from jaxcse.core import files
from jaxcse.core.errors import JaxcseError
from jaxcse.data import tokenization
from jaxcse.models import poolers

log = logging.getLogger("jaxcse")

SET_ASIDE_NAME = "set_aside"  # Beside the checkpoint folders (``workdir.SET_ASIDE_DIR``): checkpoints set aside.
CHECKSUMS = "sha256.json"
KEEP = 2  # Checkpoints kept per folder: one to fall back to if the newest is damaged.


class CheckpointError(JaxcseError, RuntimeError):
  """A checkpoint could not be written, or none that is complete and intact could be read."""


def manager(directory: str, *, max_to_keep: int = KEEP, create: bool = True) -> ocp.CheckpointManager:
  """A checkpoint manager keeping the newest ``max_to_keep`` steps; synchronous, atomic (tmp dir + rename)."""
  return ocp.CheckpointManager(
    os.path.abspath(directory),
    options=ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=create, enable_async_checkpointing=False, cleanup_tmp_directories=create
    ),
  )


def _step_dir(mngr: ocp.CheckpointManager, step: int) -> str:
  return os.path.join(str(mngr.directory), str(step))


def _file_digests(folder: str) -> dict[str, str]:
  """sha256 of every file under ``folder`` (but the checksum record itself), by relative path."""
  return files.folder_digests(folder, record=CHECKSUMS)


def _root_cause(e: BaseException) -> str:
  """The innermost error's message, one line: orbax wraps a failed write (e.g. a full disk) in several layers."""
  while e.__cause__ is not None or e.__context__ is not None:
    e = e.__cause__ or e.__context__
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0] if text else ''}"


class _DropOrbaxErrors(logging.Filter):
  """Drops the error logs of a failed orbax operation: ``CheckpointError`` says the cause once.

  Orbax logs a traceback per failed write thread; asyncio logs one per write future that orbax abandoned after
  the first failure ("Future exception was never retrieved"), when the future is garbage-collected.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno < logging.ERROR:
      return True
    if record.name == "asyncio":
      return "exception was never retrieved" not in record.getMessage()
    return f"{os.sep}orbax{os.sep}" not in record.pathname


_DROP_ORBAX_ERRORS = _DropOrbaxErrors()
_QUIETED_LOGGERS = ("absl", "asyncio")  # Orbax logs through absl.


def _drop_closed_loop_errors(previous):
  """An ``unraisablehook`` that drops tensorstore's late "Event loop is closed" callbacks, and passes on the rest.

  When one write of a save fails, orbax closes its event loop while tensorstore still completes the other writes;
  each completion then fails to reach the closed loop, and tensorstore reports it as an unraisable exception: dozens
  of ``RuntimeError: Event loop is closed`` tracebacks after the one real cause.
  """

  def hook(unraisable):
    if unraisable.exc_type is RuntimeError and str(unraisable.exc_value) == "Event loop is closed":
      return
    previous(unraisable)

  hook.jaxcse_drops_closed_loop_errors = True
  return hook


def _drop_unawaited_write_warnings() -> None:
  """After a failed save: no warning for each write coroutine that orbax created and never ran.

  The failed write stops orbax's event loop with other writes not yet started; Python warns of each such coroutine
  when it collects it (``RuntimeWarning: coroutine '...write_fragment' was never awaited``), whenever that is, up
  to the process's exit: lines after the one error the save raises. For the rest of the process, as the filters of
  ``_quiet_orbax`` stay after a failure.
  """
  warnings.filterwarnings("ignore", message=r"coroutine '.*' was never awaited", category=RuntimeWarning)


@contextlib.contextmanager
def _quiet_orbax() -> Iterator[None]:
  """While orbax reads or writes: its failures are reported once, by the ``CheckpointError`` raised after them.

  After a failure the filters stay: the failed operation's threads may still log or call back afterwards.
  """
  loggers = [logging.getLogger(name) for name in _QUIETED_LOGGERS]
  added_filter = [logger for logger in loggers if _DROP_ORBAX_ERRORS not in logger.filters]
  previous_hook = sys.unraisablehook
  added_hook = not getattr(previous_hook, "jaxcse_drops_closed_loop_errors", False)
  for logger in added_filter:
    logger.addFilter(_DROP_ORBAX_ERRORS)
  if added_hook:
    sys.unraisablehook = _drop_closed_loop_errors(previous_hook)
  yield  # An exception leaves both in place (see above).
  for logger in added_filter:
    logger.removeFilter(_DROP_ORBAX_ERRORS)
  if added_hook:
    sys.unraisablehook = previous_hook


def save(mngr: ocp.CheckpointManager, step: int, *, meta: dict, run_id: str | None, **trees: Any) -> None:
  """Saves pytrees (e.g. ``params=..., opt_state=...``) and a JSON ``meta`` at ``step``; then records checksums.

  The checksum record, written last (atomically), commits the checkpoint: until it exists, ``verify`` calls the
  checkpoint incomplete. ``meta`` gains ``SAVED_STEP_KEY`` (``step``) and, for a run that has one, ``RUN_KEY``
  (``run_id``: ``Workdir.run_id``; None for a run an older jaxcse started), which ``not_this_runs`` checks on
  every read.

  Raises:
    CheckpointError: orbax did not save (a step already there) or the write failed (disk full, permissions);
      the message names the folder and the cause. Nothing is left under the step's name.
  """
  path = _step_dir(mngr, step)
  meta = {**meta, SAVED_STEP_KEY: step}
  if run_id is not None:
    meta[RUN_KEY] = run_id
  content = content_sha256(trees)
  if content is not None:
    meta = {**meta, CONTENT_KEY: content}
  items = {name: ocp.args.StandardSave(tree) for name, tree in trees.items()}
  try:
    with _quiet_orbax():
      saved = mngr.save(step, args=ocp.args.Composite(meta=ocp.args.JsonSave(meta), **items))
      mngr.wait_until_finished()
  except Exception as e:  # Orbax raises many types for a failed write; all mean the same here.
    _drop_unawaited_write_warnings()
    raise CheckpointError(f"could not write checkpoint {path}: {_root_cause(e)}") from e
  if not saved:
    raise CheckpointError(f"orbax did not save step {step} in {mngr.directory} (steps there: {mngr.all_steps()})")
  if jax.process_index() == 0:
    record = os.path.join(path, CHECKSUMS)
    try:
      files.write_json(record, _file_digests(path))
    except OSError as e:
      with contextlib.suppress(Exception):  # Uncommitted: it would only be set aside later (and it takes space).
        mngr.delete(step)
      raise CheckpointError(f"could not write {record}: {e.strerror or e}") from None


CONTENT_KEY = "content_sha256"  # In a checkpoint's meta: ``content_sha256`` of what it holds (``set_aside``).
SAVED_STEP_KEY = "saved_step"  # In a checkpoint's meta: the step it was saved as (its folder's name then).
RUN_KEY = "run_id"  # In a checkpoint's meta: the id of the run that saved it (``Workdir.run_id``).


def not_this_runs(meta: dict, step: int, run_id: str | None) -> str | None:
  """Why a checkpoint whose metadata is ``meta``, found as ``step`` in a run whose id is ``run_id``, is another's.

  None when it is this run's checkpoint at this step. Its files may all match its own record (a folder copied
  from another run's workdir carries its record with it): only the metadata says whose it is. A run an older
  jaxcse started has no id (``run_id`` None) and wrote none into its checkpoints, so a checkpoint there that names
  a run is another's; the step is checked by ``SAVED_STEP_KEY`` or, in a best checkpoint an older jaxcse saved,
  by its ``step`` (its latest checkpoints named no step of their own: those are checked by run only).
  """
  saved = meta.get(SAVED_STEP_KEY, meta.get("step") if "metric" in meta else None)
  if saved is not None and saved != step:
    return f"its metadata says it was saved as step {saved}, not {step}: it was copied or renamed from elsewhere"
  theirs = meta.get(RUN_KEY)
  if theirs != run_id:
    whose = "names no run (an older jaxcse saved it)" if theirs is None else f"names run {theirs}"
    ours = (
      f"this workdir's run is {run_id}"
      if run_id is not None
      else "this workdir records no run id: an older jaxcse started it, or its inputs.json is missing or unreadable"
    )
    return f"it belongs to another run (its metadata {whose}; {ours}): it was copied from another workdir"
  return None


def content_sha256(trees: dict[str, Any]) -> str | None:
  """sha256 of named pytrees' paths, dtypes, shapes and array bytes: what a checkpoint holds, whatever orbax's files.

  Two saves of the same state write different files (orbax names its data files at random and times its
  metadata), so set-aside copies are compared by this, which their meta keeps. None when an array is not whole on
  this process (sharded across processes): nothing is then claimed.
  """
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_leaves_with_path(trees):
    if isinstance(leaf, jax.Array):
      if not (leaf.is_fully_addressable or leaf.is_fully_replicated):
        return None
      leaf = leaf if leaf.is_fully_addressable else leaf.addressable_data(0)
    array = np.ascontiguousarray(jax.device_get(leaf))
    digest.update(f"{jax.tree_util.keystr(path)} {array.dtype} {array.shape}\n".encode())
    digest.update(array.tobytes())
  return digest.hexdigest()


def verify(mngr: ocp.CheckpointManager, step: int) -> str | None:
  """Why checkpoint ``step`` is not complete and intact, or None if it is.

  A step folder without a checksum record was finalised by orbax but never committed: the process died (or the
  disk filled) between orbax's rename and the record, so nothing vouches for its files. It is incomplete, like
  one whose files do not match the record.
  """
  return verify_folder(_step_dir(mngr, step))


def verify_folder(path: str) -> str | None:
  """``verify`` of a checkpoint's folder, without a manager (which would create folders and remove temporary ones)."""
  if not os.path.isfile(os.path.join(path, CHECKSUMS)):
    return (
      f"no {CHECKSUMS}: the save did not finish (stopped between orbax's write and the checksum record, or "
      "an older jaxcse wrote it)"
    )
  return files.digest_mismatch(path, CHECKSUMS, _file_digests(path))


def _check(mngr: ocp.CheckpointManager, step: int) -> None:
  """``newest_good``'s default read: ``CheckpointError`` unless checkpoint ``step``'s files match their record."""
  problem = verify(mngr, step)
  if problem:
    raise CheckpointError(f"checkpoint {_step_dir(mngr, step)}: {problem}")


def set_aside(mngr: ocp.CheckpointManager, step: int, reason: str, *, intact: bool = False) -> str:
  """Moves a checkpoint out of the manager's folder (so it is never loaded or overwritten); returns where.

  ``intact``: the checkpoint is good but no longer fits the run (``set_aside_after``); else it is bad. Either way
  one warning says which, why and where it went: jaxcse never deletes a checkpoint it did not just replace.
  """
  src = _step_dir(mngr, step)
  directory = str(mngr.directory)
  workdir_checkpoints = os.path.dirname(directory)
  set_aside_dir = os.path.join(workdir_checkpoints, SET_ASIDE_NAME)
  prefix = f"{os.path.basename(directory)}-{step}-"
  copy = _same_content(src, set_aside_dir, prefix)
  if copy is not None:  # Set aside before, byte for byte: one copy is kept, this one is not needed.
    if jax.process_index() == 0:
      shutil.rmtree(src)
    why = f"is intact but {reason}" if intact else f"is not usable ({reason})"
    log.warning(
      "checkpoint %s %s; the same arrays and metadata are already set aside in %s, so this copy was removed",
      src,
      why,
      copy,
    )
    mngr.reload()
    return copy
  dest = os.path.join(set_aside_dir, f"{prefix}{time.strftime('%Y%m%dT%H%M%S')}")
  taken = dest
  for n in range(2, 1000):  # Set aside twice within a second (the same step saved again, then set aside again).
    if not os.path.exists(dest):
      break
    dest = f"{taken}-{n}"
  if jax.process_index() == 0:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.move(src, dest)
  if intact:
    log.warning("checkpoint %s is intact but %s; moved to %s (kept, not deleted)", src, reason, dest)
  else:
    log.warning("checkpoint %s is not usable (%s); moved to %s", src, reason, dest)
  mngr.reload()
  return dest


def _same_content(src: str, set_aside_dir: str, prefix: str) -> str | None:
  """The set-aside folder named ``prefix...`` that holds what ``src`` holds, or None.

  Both must be intact (their files match their records) and their meta must agree, the ``CONTENT_KEY`` included
  (``save`` writes it): the same arrays and the same metadata. A damaged checkpoint is never matched: it is kept.
  """
  if not os.path.isdir(set_aside_dir):
    return None
  meta = _read_meta(src)
  if meta is None or CONTENT_KEY not in meta or verify_folder(src) is not None:
    return None
  for name in sorted(os.listdir(set_aside_dir)):
    other = os.path.join(set_aside_dir, name)
    if name.startswith(prefix) and os.path.isdir(other) and _read_meta(other) == meta and verify_folder(other) is None:
      return other
  return None


def _read_meta(folder: str) -> dict | None:
  """A checkpoint folder's JSON ``meta`` as orbax wrote it (``meta/metadata``), or None if it cannot be read."""
  try:
    with open(os.path.join(folder, "meta", "metadata")) as f:
      meta = json.load(f)
  except (OSError, ValueError):
    return None
  return meta if isinstance(meta, dict) else None


def restore(mngr: ocp.CheckpointManager, step: int, *, run_id: str | None, **abstract_trees: Any) -> dict:
  """Restores ``meta`` and the named pytrees of a verified checkpoint of run ``run_id`` (``Workdir.run_id``),
  shaped and sharded like ``abstract_trees``.

  Raises:
    CheckpointError: the checkpoint is incomplete, corrupt, cannot be read, or is another run's or another step's
      (``not_this_runs``); the message names it.
  """
  meta = restore_meta(mngr, step, run_id=run_id)
  items = {name: ocp.args.StandardRestore(tree) for name, tree in abstract_trees.items()}
  try:
    with _quiet_orbax():
      restored = mngr.restore(step, args=ocp.args.Composite(**items))
  except Exception as e:  # Orbax/tensorstore raise many types for unreadable data.
    raise CheckpointError(f"checkpoint {_step_dir(mngr, step)}: cannot be read ({_root_cause(e)})") from e
  return {"meta": meta, **{name: restored[name] for name in abstract_trees}}


def restore_meta(mngr: ocp.CheckpointManager, step: int, *, run_id: str | None) -> dict:
  """The JSON ``meta`` of a verified checkpoint of run ``run_id`` (e.g. a best checkpoint's step and metric),
  without its arrays.

  Raises:
    CheckpointError: the checkpoint is incomplete, corrupt, cannot be read, or is another run's or another step's
      (``not_this_runs``); the message names it.
  """
  _check(mngr, step)
  try:
    with _quiet_orbax():
      meta = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
  except Exception as e:  # Orbax raises many types for unreadable data.
    raise CheckpointError(f"checkpoint {_step_dir(mngr, step)}: cannot be read ({_root_cause(e)})") from e
  problem = not_this_runs(meta, step, run_id)
  if problem:
    raise CheckpointError(f"checkpoint {_step_dir(mngr, step)}: {problem}")
  return meta


def newest_good(
  mngr: ocp.CheckpointManager,
  read: Callable[[ocp.CheckpointManager, int], Any] | None = None,
  *,
  steps: list[int] | None = None,
  set_aside_bad: bool,
) -> tuple[int, Any]:
  """The newest good checkpoint: ``(step, read(mngr, step))`` for the newest of ``steps`` that ``read`` reads.

  The one search for the newest good checkpoint, for the trainer (resume, the best checkpoint it keeps, the step
  its messages name) and for every reader (``loading.load_model``). ``read`` raises ``CheckpointError`` for a
  checkpoint that is not good; by default it only checks the files against their record (``verify``) and returns
  None. ``steps`` defaults to all of ``mngr``'s.

  Each newer checkpoint that fails is set aside with one warning (``set_aside_bad``: the trainer, which must never
  read it again), or else only skipped with one warning (readers leave the workdir as it is).

  Raises:
    CheckpointError: none is good; the message names each checkpoint tried and why it failed.
  """
  steps = sorted(mngr.all_steps() if steps is None else steps, reverse=True)
  problems = []
  for i, step in enumerate(steps):
    try:
      return step, (read or _check)(mngr, step)
    except CheckpointError as e:
      problems.append(str(e))
      if set_aside_bad:
        set_aside(mngr, step, str(e).split(": ", 1)[-1])
      elif i + 1 < len(steps):
        log.warning("%s; trying an older one", e)
  raise CheckpointError("; ".join(problems) or f"no checkpoint in {mngr.directory}")


def set_aside_after(mngr: ocp.CheckpointManager, step: int | None, reason: str) -> list[int]:
  """Sets aside (``set_aside``, intact) the checkpoints newer than ``step`` (all for None); returns their steps.

  What a resumed run will write again under the same step names (a killed run's best checkpoints saved after its
  last latest one) must leave the folder, and a checkpoint cannot always be recomputed (a run that starts over
  may not reach the same best), so it is moved, never deleted. ``reason`` completes "is intact but ...".
  """
  newer = sorted(s for s in mngr.all_steps() if step is None or s > step)
  for s in newer:
    set_aside(mngr, s, reason, intact=True)
  return newer


def placed(tree: Any, sharding: jax.sharding.Sharding) -> Any:
  """``tree``'s shapes and dtypes as ``jax.ShapeDtypeStruct`` leaves placed by ``sharding``: what a restore fills in,
  and what an ahead-of-time compile lowers for."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def abstract_params(spec: models.ModelSpec, sharding: jax.sharding.Sharding) -> Any:
  """Shapes, dtypes and placement of the params of ``spec``, without computing them."""
  return placed(jax.eval_shape(lambda: models.init_params(spec, 0)), sharding)


def all_finite(tree: Any) -> bool:
  """Whether every float leaf of a pytree is finite (one reduction on the device)."""
  leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
  return bool(_all_finite(leaves))


@jax.jit
def _all_finite(leaves):
  return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in leaves]))


# The probe batch: a short, an empty and a long sentence, cut to PROBE_LENGTH tokens. Finite parameters can still
# overflow in the forward pass (weights near 1e30 after an exploding update); any such model gives non-finite
# outputs on these, since every token goes through the same weights.
PROBE_SENTENCES = (
  "A man is playing a guitar.",
  "",
  "The quick brown fox jumps over the lazy dog, twice, near the old river bank at dawn.",
)
PROBE_LENGTH = 32


# A collapsed encoder embeds every probe sentence as the same vector: their distances are within this fraction of the
# embeddings' norm. Rounding alone (one vector pooled over other lengths) stays near float32's 1e-7; sentences as
# unlike as the probe's, from any model that tells sentences apart, lie far above it (a cosine of 0.98, as an
# untrained BERT's, is a relative distance of 0.2).
COLLAPSE_TOLERANCE = 1e-4


def output_probe(spec: models.ModelSpec) -> Callable[..., str | None]:
  """``probe(params, distinct=False)``: why the model's outputs fail on ``PROBE_SENTENCES``, or None if they pass.

  Checks every output the model is used for: the sentence embedding of each of its poolers (training, dev and
  test) and, with an MLM head, its logits, are finite. With ``distinct`` (what readers serve), also that the test
  pooler does not embed every probe sentence as the same vector (``COLLAPSE_TOLERANCE``): such a model embeds
  nothing. Build it once per spec and call it per params (one compilation).
  """
  names = sorted({spec.pooling.pooler, spec.pooling.dev_pooler, spec.pooling.test_pooler})
  ids, mask = tokenization.tokenize_padded(spec.tokenizer, PROBE_SENTENCES, min(PROBE_LENGTH, spec.max_positions))

  @jax.jit
  def check(params):
    ok, spread = {}, None
    for name in names:
      has_mlp = poolers.get(name).has_mlp
      if has_mlp and "mlp" not in params:
        continue  # A Hugging Face folder loaded with another pooler has no MLP head to check.
      used = {k: v for k, v in params.items() if k == "backbone" or (k == "mlp" and has_mlp)}
      embeddings = spec.module_for(name).apply({"params": used}, ids, mask, train=False)
      ok[f"pooler {name}"] = jnp.all(jnp.isfinite(embeddings))
      if name == spec.pooling.test_pooler:
        e = embeddings.astype(jnp.float32)
        distance = jnp.max(jnp.linalg.norm(e - e[:1], axis=-1))
        spread = distance / jnp.maximum(jnp.max(jnp.linalg.norm(e, axis=-1)), jnp.finfo(jnp.float32).tiny)
    if spec.mlm is not None and "mlm_head" in params:
      ok["masked-LM logits"] = jnp.all(jnp.isfinite(models.mlm_logits(spec, params, ids, mask, train=False)))
    return ok, spread

  def probe(params, distinct: bool = False) -> str | None:
    ok, spread = jax.device_get(check(params))
    bad = [name for name, good in ok.items() if not good]
    if bad:
      return f"its outputs ({', '.join(bad)}) are not finite on a probe batch"
    if distinct and spread is not None and spread <= COLLAPSE_TOLERANCE:
      return (
        f"it embeds every sentence of a probe batch as the same vector (pooler {spec.pooling.test_pooler}: "
        f"distances {float(spread):.1e} of the norm; a collapsed model)"
      )
    return None

  return probe
