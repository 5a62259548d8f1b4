"""Workdir layout and orbax checkpoints that are verified, never stale, and never half-written.

A training workdir holds::

  config.json                 the resolved training config
  model/                      model description: HF config, tokenizer, jaxcse.json (poolers); no weights
  checkpoints/latest/<step>/  full train state (params, optimizer state) + progress metadata; the newest two
  checkpoints/best/<step>/    params of the best evaluation so far + its metrics; the newest two
  checkpoints/set_aside/      checkpoints found corrupt or incomplete, moved out of the way (never loaded)
  metrics.jsonl               one JSON object per logged step or evaluation
  .lock                       held by the training process: a second one on the same workdir refuses

Every save is synchronous and checked (orbax writes into a temporary folder
and renames it); then ``sha256.json`` inside the step folder records the
sha256 of every file orbax wrote. A checkpoint without that record (killed
while saving) or whose files do not match it (truncated, flipped bits) is not
complete: ``restore_newest`` sets it aside with a warning naming it and falls
back to the newest good one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from jaxcse import models
from jaxcse.errors import JaxcseError

log = logging.getLogger("jaxcse")

MODEL_DIR = "model"
LATEST_DIR = os.path.join("checkpoints", "latest")
BEST_DIR = os.path.join("checkpoints", "best")
SET_ASIDE_DIR = os.path.join("checkpoints", "set_aside")
CHECKSUMS = "sha256.json"
LOCK_FILE = ".lock"
KEEP = 2  # Checkpoints kept per folder: one to fall back to if the newest is damaged.


class CheckpointError(JaxcseError, RuntimeError):
  """A checkpoint could not be written, or none that is complete and intact could be read."""


def manager(directory: str, *, max_to_keep: int = KEEP, create: bool = True) -> ocp.CheckpointManager:
  """A checkpoint manager keeping the newest ``max_to_keep`` steps; synchronous, atomic (tmp dir + rename)."""
  return ocp.CheckpointManager(
      os.path.abspath(directory),
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=create, enable_async_checkpointing=False,
                                           cleanup_tmp_directories=create),
  )


def _step_dir(mngr: ocp.CheckpointManager, step: int) -> str:
  return os.path.join(str(mngr.directory), str(step))


def _file_digests(folder: str) -> dict[str, str]:
  """sha256 of every file under ``folder`` (but the checksum record itself), by relative path."""
  digests = {}
  for root, _, files in os.walk(folder):
    for name in sorted(files):
      path = os.path.join(root, name)
      rel = os.path.relpath(path, folder)
      if rel == CHECKSUMS:
        continue
      digest = hashlib.sha256()
      with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
          digest.update(block)
      digests[rel] = digest.hexdigest()
  return digests


def _root_cause(e: BaseException) -> str:
  """The innermost error's message, one line: orbax wraps a failed write (e.g. a full disk) in several layers."""
  while e.__cause__ is not None or e.__context__ is not None:
    e = e.__cause__ or e.__context__
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0] if text else ''}"


def save(mngr: ocp.CheckpointManager, step: int, *, meta: dict, **trees: Any) -> None:
  """Saves pytrees (e.g. ``params=..., opt_state=...``) and a JSON ``meta`` at ``step``; then records checksums.

  Raises:
    CheckpointError: orbax did not save (a step already there) or the write failed (disk full, permissions);
      the message names the folder and the cause. Nothing is left under the step's name.
  """
  path = _step_dir(mngr, step)
  items = {name: ocp.args.StandardSave(tree) for name, tree in trees.items()}
  try:
    saved = mngr.save(step, args=ocp.args.Composite(meta=ocp.args.JsonSave(meta), **items))
    mngr.wait_until_finished()
  except Exception as e:  # Orbax raises many types for a failed write; all mean the same here.
    raise CheckpointError(f"could not write checkpoint {path}: {_root_cause(e)}") from e
  if not saved:
    raise CheckpointError(f"orbax did not save step {step} in {mngr.directory} (steps there: {mngr.all_steps()})")
  if jax.process_index() == 0:
    try:
      write_json(os.path.join(path, CHECKSUMS), _file_digests(path))
    except OSError as e:
      raise CheckpointError(f"could not write {os.path.join(path, CHECKSUMS)}: {e.strerror}") from e


def verify(mngr: ocp.CheckpointManager, step: int) -> str | None:
  """Why checkpoint ``step`` is not intact, or None if it is (or cannot be checked: then a warning).

  A step folder without a checksum record was finalised by orbax (its writes are atomic) but not recorded: an
  older jaxcse wrote it, or the process died between the two. It is restored unverified, with a warning; a
  failed restore then sets it aside like a corrupt one.
  """
  path = _step_dir(mngr, step)
  record = os.path.join(path, CHECKSUMS)
  if not os.path.isfile(record):
    log.warning("checkpoint %s has no checksum record (an older jaxcse wrote it, or the run stopped before "
                "recording it); it is used unverified", path)
    return None
  try:
    with open(record) as f:
      expected = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    return f"unreadable checksum record ({e})"
  actual = _file_digests(path)
  for rel, digest in expected.items():
    if rel not in actual:
      return f"{rel} is missing"
    if actual[rel] != digest:
      return f"{rel} does not match its sha256 (truncated or corrupted)"
  return None


def set_aside(mngr: ocp.CheckpointManager, step: int, reason: str) -> str:
  """Moves a bad checkpoint out of the manager's folder (so it is never loaded or overwritten); returns where."""
  src = _step_dir(mngr, step)
  directory = str(mngr.directory)
  workdir_checkpoints = os.path.dirname(directory)
  dest = os.path.join(workdir_checkpoints, os.path.basename(SET_ASIDE_DIR),
                      f"{os.path.basename(directory)}-{step}-{time.strftime('%Y%m%dT%H%M%S')}")
  if jax.process_index() == 0:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.move(src, dest)
  log.warning("checkpoint %s is not usable (%s); moved to %s", src, reason, dest)
  mngr.reload()
  return dest


def restore(mngr: ocp.CheckpointManager, step: int, **abstract_trees: Any) -> dict:
  """Restores ``meta`` and the named pytrees of a verified checkpoint, shaped and sharded like ``abstract_trees``.

  Raises:
    CheckpointError: the checkpoint is incomplete, corrupt, or cannot be read; the message names it.
  """
  problem = verify(mngr, step)
  if problem:
    raise CheckpointError(f"checkpoint {_step_dir(mngr, step)}: {problem}")
  items = {name: ocp.args.StandardRestore(tree) for name, tree in abstract_trees.items()}
  try:
    restored = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore(), **items))
  except Exception as e:  # Orbax/tensorstore raise many types for unreadable data.
    raise CheckpointError(f"checkpoint {_step_dir(mngr, step)}: cannot be read ({_root_cause(e)})") from e
  return {name: restored[name] for name in ("meta", *abstract_trees)}


def restore_newest(mngr: ocp.CheckpointManager, *, set_aside_bad: bool = True, **abstract_trees: Any
                   ) -> tuple[int | None, dict | None]:
  """``(step, restored)`` of the newest complete and intact checkpoint, or ``(None, None)`` if there is none.

  Newer ones that fail are set aside (or, with ``set_aside_bad=False``, only skipped), each with a warning.
  """
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      return step, restore(mngr, step, **abstract_trees)
    except CheckpointError as e:
      if set_aside_bad:
        set_aside(mngr, step, str(e).split(": ", 1)[-1])
      else:
        log.warning("%s; falling back to an older checkpoint", e)
  return None, None


def delete_after(mngr: ocp.CheckpointManager, step: int | None) -> list[int]:
  """Deletes the checkpoints newer than ``step`` (all for None): a resumed run recomputes them. Returns them."""
  stale = [s for s in mngr.all_steps() if step is None or s > step]
  for s in stale:
    mngr.delete(s)
  return stale


def abstract_params(spec: models.ModelSpec, sharding: jax.sharding.Sharding) -> Any:
  """Shapes, dtypes and placement of the params of ``spec``, without computing them."""
  shapes = jax.eval_shape(lambda: models.init_params(spec, 0))
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), shapes)


def all_finite(tree: Any) -> bool:
  """Whether every float leaf of a pytree is finite (one reduction on the device)."""
  leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
  return bool(_all_finite(leaves))


@jax.jit
def _all_finite(leaves):
  return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in leaves]))


def find_workdir(path: str) -> str | None:
  """The training workdir that ``path`` is, or lies inside; None if it is not one."""
  path = os.path.abspath(path)
  while True:
    if os.path.isfile(os.path.join(path, MODEL_DIR, models.JAXCSE_MODEL_FILE)) or \
        os.path.isfile(os.path.join(path, "config.json")) and os.path.isdir(os.path.join(path, "checkpoints")):
      return path
    parent = os.path.dirname(path)
    if parent == path:
      return None
    path = parent


def checkpoint_choice(workdir: str, path: str, checkpoint: str) -> tuple[str, list[int]]:
  """(manager directory, steps to try, newest first) for a workdir and ``best | latest | <step>`` or a step folder.

  ``best`` tries the best checkpoints, then, with a warning, the latest ones (a run that never evaluated).
  """
  path = os.path.abspath(path)
  base = os.path.basename(path)
  for sub in (BEST_DIR, LATEST_DIR):
    directory = os.path.join(workdir, sub)
    if os.path.dirname(path) == directory and base.isdigit():
      return directory, [int(base)]
  if checkpoint.isdigit():
    for sub in (BEST_DIR, LATEST_DIR):
      if os.path.isdir(os.path.join(workdir, sub, checkpoint)):
        return os.path.join(workdir, sub), [int(checkpoint)]
    raise FileNotFoundError(f"{workdir}: no checkpoint at step {checkpoint}")
  if checkpoint not in ("best", "latest"):
    raise CheckpointError(f"--checkpoint must be best, latest or a step number, not {checkpoint!r}")
  order = (BEST_DIR, LATEST_DIR) if checkpoint == "best" else (LATEST_DIR,)
  for sub in order:
    directory = os.path.join(workdir, sub)
    steps = ocp.utils.checkpoint_steps(directory) if os.path.isdir(directory) else []
    if steps:
      if checkpoint == "best" and sub == LATEST_DIR:
        log.warning("%s has no best checkpoint (no evaluation ran); using its latest, step %d", workdir, max(steps))
      return directory, sorted(steps, reverse=True)
  raise FileNotFoundError(f"{workdir}: no {checkpoint} checkpoint yet")


def restore_for_inference(directory: str, steps: list[int], restore_fn: Callable[[ocp.CheckpointManager, int], Any]
                          ) -> tuple[int, Any]:
  """``(step, restore_fn(mngr, step))`` for the first of ``steps`` that restores; warns naming each bad one.

  Raises:
    CheckpointError: none of them restores (the message names each and why).
  """
  mngr = manager(directory, create=False)
  problems = []
  try:
    for step in steps:
      try:
        result = restore_fn(mngr, step)
      except CheckpointError as e:
        problems.append(str(e))
        if len(steps) > 1:
          log.warning("%s; trying an older one", e)
        continue
      return step, result
  finally:
    mngr.close()
  raise CheckpointError("; ".join(problems))


def write_json(path: str, obj: Any) -> None:
  """Writes JSON atomically (a temporary file renamed over ``path``): never a half-written file."""
  tmp = path + ".tmp"
  try:
    with open(tmp, "w") as f:
      json.dump(obj, f, indent=2, default=lambda o: o.tolist() if isinstance(o, jnp.ndarray) else str(o))
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
