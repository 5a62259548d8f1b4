"""Loading a model for inference from anything a user may point at.

``load_model(path)`` takes a jaxcse workdir (its best checkpoint by
default), one of its checkpoint folders, a Hugging Face model folder, an
exported sentence-transformers folder, a hub id, or an offline-package name,
and returns ``(spec, params, described)``. A model is returned only if it is
good: a checkpoint's files match its checksum record, and the parameters and
the model's outputs on a probe batch are finite (``checkpoints.output_probe``);
a workdir checkpoint that is not falls back to an older one with one warning.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax

from jaxcse import models
from jaxcse.core.errors import JaxcseError
from jaxcse.storage import checkpoints, hub, st_format
from jaxcse.storage.workdir import BEST_DIR, Workdir

log = logging.getLogger("jaxcse")


class LoadError(JaxcseError, ValueError):
  """The model named cannot be loaded; the message says what was looked for and why it failed."""


@dataclasses.dataclass(frozen=True)
class Loaded:
  """A model ready for inference: its spec, its params, and whether its test pooler was saved with it."""

  spec: models.ModelSpec
  params: Any
  described: bool  # True: the test pooler comes from a saved jaxcse description (not a guess).
  step: int | None = None  # The checkpoint step of a workdir model; None for a Hugging Face folder.
  checkpoints: str | None = None  # Which of a workdir's checkpoints it came from: "best" or "latest"; else None.
  # Prompt name -> text put before a sentence encoded with that name: a workdir's data.query_prompt/document_prompt
  # ("query", "document"), a sentence-transformers folder's config_sentence_transformers.json "prompts".
  prompts: dict[str, str] = dataclasses.field(default_factory=dict)
  # A sentence-transformers folder's truncate_dim: its embeddings are cut to their first this many dims; None: all.
  truncate_dim: int | None = None


def load_model(
  path: str, *, checkpoint: str = "best", pooler: str | None = None, revision: str | None = None
) -> Loaded:
  """Loads a model for inference from a jaxcse workdir/checkpoint or a HF folder/hub id.

  Args:
    path: a workdir, a folder under ``checkpoints/best`` or ``checkpoints/latest``, a Hugging Face (or
      exported sentence-transformers) folder, a hub id, or an offline-package name.
    checkpoint: for a workdir: ``best`` (falls back to ``latest`` when no evaluation ran), ``latest`` or a step.
    pooler: for a Hugging Face folder: the pooler to build it with; default: the one its sentence-transformers
      modules compute (read from the hub snapshot too), else ``cls`` (its own pooler layer, as SimCSE's
      evaluation.py) with a warning. For a workdir the saved test pooler is always the model's own; pass
      ``pooler`` to the ``BucketedEmbedder``/``Encoder`` to override.
    revision: for a hub id, the branch, tag or commit (through ``huggingface_hub``; default main).
  """
  try:
    resolved = hub.resolve(path, revision)
  except (hub.NoSuchModelFolder, hub.RevisionOfALocalFolder):  # Its own message (and suggestion) says it all.
    raise
  except OSError as e:  # A hub id that cannot be had: no network, no such repository or revision.
    raise LoadError(f"{path}: cannot load a model (not a jaxcse workdir; {e})") from None
  if resolved.workdir is None:
    folder, commit = resolved.folder, resolved.commit
    try:
      chosen = pooler or st_format.read_pooler(folder)
      spec, params = models.load_pretrained(folder, models.PoolerSpec(chosen or "cls"), mlp_from_backbone_pooler=True)
    except (OSError, ValueError) as e:  # No model files there, an unknown model type.
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise LoadError(f"{path}: cannot load a model (not a jaxcse workdir; {first})") from None
    problem = _not_finite(spec, params)
    if problem:
      raise LoadError(f"{path}: {problem}; it cannot embed anything")
    if chosen is None:  # Said once the model is known to load: a folder refused is one line, not two.
      log.warning(
        "%s: no sentence-transformers pooling config says how to pool it; using pooler 'cls' (its "
        "pooler layer's output, as SimCSE's evaluation.py); pass --pooler to choose",
        path,
      )
    try:
      prompts, truncate_dim = st_format.read_prompts(folder), st_format.read_truncate_dim(folder)
    except ValueError as e:  # A damaged config_sentence_transformers.json: its message names the file.
      raise LoadError(str(e)) from None
    return Loaded(
      dataclasses.replace(spec, source=path, revision=commit),
      params,
      described=False,
      prompts=prompts,
      truncate_dim=truncate_dim,
    )
  workdir = Workdir(resolved.workdir)
  spec = workdir.model_spec()
  directory, steps = workdir.checkpoint_choice(path, checkpoint)
  # This process's own device: in a multi-process run jax.devices()[0] belongs to process 0.
  abstract = checkpoints.abstract_params(spec, jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))

  probe = checkpoints.output_probe(spec)
  run_id = workdir.run_id()

  def restore_finite(mngr, step):
    params = checkpoints.restore(mngr, step, run_id=run_id, params=abstract)["params"]
    problem = _not_finite(spec, params, probe)
    if problem:
      raise checkpoints.CheckpointError(
        f"checkpoint {os.path.join(directory, str(step))}: {problem}; it cannot embed anything"
      )
    return params

  mngr = checkpoints.manager(directory, create=False)
  try:
    step, params = checkpoints.newest_good(mngr, restore_finite, steps=steps, set_aside_bad=False)
  except checkpoints.CheckpointError as e:
    if os.path.basename(directory) != os.path.basename(BEST_DIR):
      raise
    raise checkpoints.CheckpointError(
      f"{e}; no best checkpoint is usable: rerun the training command (it sets them "
      "aside and evaluates its latest checkpoint again), or pass --checkpoint latest"
    ) from None
  finally:
    mngr.close()
  return Loaded(
    spec,
    params,
    described=True,
    step=step,
    checkpoints=os.path.basename(os.path.normpath(directory)),
    prompts=workdir.prompts(),
  )


def _not_finite(spec: models.ModelSpec, params: Any, probe=None) -> str | None:
  """Why ``params`` cannot embed anything (NaN or infinite parameters or outputs, or a collapsed model), or None."""
  if not checkpoints.all_finite(params):
    return "its parameters are not finite (NaN or infinity)"
  return (probe or checkpoints.output_probe(spec))(params, distinct=True)
