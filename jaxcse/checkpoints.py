"""Workdir layout and orbax checkpoints.

A training workdir holds::

  config.json                 the resolved training config
  model/                      model description: HF config, tokenizer, jaxcse.json (poolers); no weights
  checkpoints/latest/<step>/  full train state (params, optimizer state, step) + progress metadata
  checkpoints/best/<step>/    params of the best evaluation so far + its metrics
  metrics.jsonl               one JSON object per logged step or evaluation
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from jaxcse import models

MODEL_DIR = "model"
LATEST_DIR = os.path.join("checkpoints", "latest")
BEST_DIR = os.path.join("checkpoints", "best")


def manager(directory: str, *, max_to_keep: int = 1, create: bool = True) -> ocp.CheckpointManager:
  """A checkpoint manager keeping the newest ``max_to_keep`` steps; writes are atomic (tmp dir + rename)."""
  return ocp.CheckpointManager(
      os.path.abspath(directory),
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=create),
  )


def save(mngr: ocp.CheckpointManager, step: int, *, meta: dict, **trees: Any) -> None:
  """Saves pytrees (e.g. ``params=..., opt_state=...``) and a JSON ``meta`` at ``step``, asynchronously."""
  items = {name: ocp.args.StandardSave(tree) for name, tree in trees.items()}
  mngr.save(step, args=ocp.args.Composite(meta=ocp.args.JsonSave(meta), **items))


def restore(mngr: ocp.CheckpointManager, step: int, **abstract_trees: Any) -> dict:
  """Restores ``meta`` and the named pytrees, shaped and sharded like ``abstract_trees``."""
  items = {name: ocp.args.StandardRestore(tree) for name, tree in abstract_trees.items()}
  restored = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore(), **items))
  return {name: restored[name] for name in ("meta", *abstract_trees)}


def abstract_params(spec: models.ModelSpec, sharding: jax.sharding.Sharding) -> Any:
  """Shapes, dtypes and placement of the params of ``spec``, without computing them."""
  shapes = jax.eval_shape(lambda: models.init_params(spec, 0))
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), shapes)


def find_workdir(path: str) -> str | None:
  """The training workdir that ``path`` is, or lies inside; None if it is not one."""
  path = os.path.abspath(path)
  while True:
    if os.path.isfile(os.path.join(path, MODEL_DIR, models.JAXCSE_MODEL_FILE)):
      return path
    parent = os.path.dirname(path)
    if parent == path:
      return None
    path = parent


def checkpoint_step(workdir: str, path: str, checkpoint: str) -> tuple[str, int]:
  """(manager directory, step) for a workdir and a choice best | latest | <step>, or a checkpoint folder."""
  path = os.path.abspath(path)
  base = os.path.basename(path)
  for sub in (BEST_DIR, LATEST_DIR):
    directory = os.path.join(workdir, sub)
    if os.path.dirname(path) == directory and base.isdigit():
      return directory, int(base)
  if checkpoint.isdigit():
    for sub in (BEST_DIR, LATEST_DIR):
      if os.path.isdir(os.path.join(workdir, sub, checkpoint)):
        return os.path.join(workdir, sub), int(checkpoint)
    raise FileNotFoundError(f"{workdir}: no checkpoint at step {checkpoint}")
  if checkpoint not in ("best", "latest"):
    raise ValueError(f"checkpoint must be best, latest or a step number, not {checkpoint!r}")
  order = (BEST_DIR, LATEST_DIR) if checkpoint == "best" else (LATEST_DIR,)
  for sub in order:
    directory = os.path.join(workdir, sub)
    steps = ocp.utils.checkpoint_steps(directory) if os.path.isdir(directory) else []
    if steps:
      return directory, max(steps)
  raise FileNotFoundError(f"{workdir}: no {checkpoint} checkpoint yet")


def write_json(path: str, obj: Any) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2, default=lambda o: o.tolist() if isinstance(o, jnp.ndarray) else str(o))
  os.replace(tmp, path)
