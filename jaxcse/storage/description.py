"""A model's description: what a workdir's ``model/`` folder holds (the Hugging Face config, the tokenizer and
``jaxcse.json``: the poolers, the MLM head, the source; no weights), written whole and vouched for by its record.

``save_description`` writes it at a run's fresh start; ``from_description`` builds the ``ModelSpec`` back, after
``check_description`` has matched every file against ``DESCRIPTION_RECORD``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any

import jax.numpy as jnp

from jaxcse.core import files
from jaxcse.core.errors import JaxcseError
from jaxcse.models import ModelSpec, PoolerSpec, build_spec, quiet_transformers
from jaxcse.storage import hub

log = logging.getLogger("jaxcse")

JAXCSE_MODEL_FILE = hub.MODEL_DESCRIPTION_FILE
# The sha256 of every other file of a model description, written last: it vouches for the description as a
# checkpoint's record vouches for its weights (a changed config.json would make intact checkpoints unreadable).
DESCRIPTION_RECORD = "sha256.json"


class DescriptionError(JaxcseError, ValueError):
  """A workdir's model description is missing, unreadable, changed since it was written, or cannot be written."""


def from_description(
  folder: str,
  *,
  dtype: Any = jnp.float32,
  gradient_checkpointing: bool = False,
  attention_dropout_per_element: bool = True,
  expect_record: bool = False,
) -> ModelSpec:
  """Builds a ``ModelSpec`` from a folder written by ``save_description``, verified first (``check_description``).

  ``dtype``, ``gradient_checkpointing`` and ``attention_dropout_per_element`` (``build_spec``'s) are how the model
  computes, not what it is: the description does not hold them, a resumed run passes its config's."""
  from transformers import AutoConfig, AutoTokenizer

  info_path = os.path.join(folder, JAXCSE_MODEL_FILE)
  if not os.path.isfile(info_path):
    raise DescriptionError(f"{info_path}: not a jaxcse model description (no {JAXCSE_MODEL_FILE})")
  check_description(folder, expect_record=expect_record)
  try:
    with open(info_path) as f:
      info = json.load(f)
    pooling = PoolerSpec(
      pooler=info["pooler"],
      mlp_only_train=info["mlp_only_train"],
      test_pooler_override=info.get("test_pooler_override"),
      dev_pooler_override=info.get("dev_pooler_override"),
    )
  except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
    raise DescriptionError(f"{info_path}: unreadable model description ({type(e).__name__}: {e})") from None
  try:
    with quiet_transformers():
      hf_config = AutoConfig.from_pretrained(folder)
      tokenizer = AutoTokenizer.from_pretrained(folder)
    head = info.get("mlm_head")
    return build_spec(
      hf_config,
      tokenizer,
      pooling,
      dtype=dtype,
      gradient_checkpointing=gradient_checkpointing,
      attention_dropout_per_element=attention_dropout_per_element,
      with_mlm_head=bool(head),
      mlm_head="tied" if info.get("mlm_head_tied", True) else "untied_fresh",
      mlm_pretrained=head == "pretrained",
      source=info.get("source", folder),
      revision=info.get("revision"),
    )
  except (OSError, ValueError, TypeError) as e:
    raise DescriptionError(
      f"{folder}: the model description is incomplete or unreadable "
      f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    ) from None


# jaxcse.json's format_version. 2: the description was written with its DESCRIPTION_RECORD, which must be there.
DESCRIPTION_FORMAT = 2


def check_description(folder: str, *, expect_record: bool = False) -> None:
  """Raises ``DescriptionError`` naming the file if a description's files do not match its ``DESCRIPTION_RECORD``.

  Checked before anything reads the description. The record must list every file and match them all
  (``files.digest_mismatch``). A description without the record is read unverified, with a warning, only if
  it was written by a jaxcse before it kept one: ``format_version`` 1 in its jaxcse.json, and ``expect_record``
  false (the caller knows nothing else of its workdir that says a record was written); the trainer records it
  when it resumes such a workdir. Otherwise a missing record is refused: nothing vouches for the files.
  """
  if not os.path.isfile(os.path.join(folder, DESCRIPTION_RECORD)):
    version = _format_version(folder)
    if expect_record or version is None or version >= DESCRIPTION_FORMAT:
      raise DescriptionError(
        f"{os.path.join(folder, DESCRIPTION_RECORD)} is missing: this model description was "
        "written with its sha256 record, so nothing vouches for its files now; put the record "
        "back as it was (or start the run over with --restart)"
      )
    log.warning(
      "%s: no %s (an older jaxcse wrote this model description): its files are read unverified",
      folder,
      DESCRIPTION_RECORD,
    )
    return
  problem = files.digest_mismatch(folder, DESCRIPTION_RECORD)
  if problem:
    raise DescriptionError(
      f"{os.path.join(folder, problem)}: the model description changed after training wrote "
      "it, and the checkpoints need it as it was; put the file back as it was (or start the run "
      "over with --restart)"
    )


def _format_version(folder: str) -> int | None:
  """The ``format_version`` of a description's jaxcse.json; None if it cannot be read (then nothing is assumed)."""
  try:
    with open(os.path.join(folder, JAXCSE_MODEL_FILE)) as f:
      version = json.load(f).get("format_version")
  except (OSError, ValueError, AttributeError):
    return None
  return version if isinstance(version, int) and not isinstance(version, bool) else None


def record_description(folder: str) -> None:
  """Writes the ``DESCRIPTION_RECORD`` of a description that has none (an older jaxcse's), vouching for it as it is."""
  if not os.path.isfile(os.path.join(folder, DESCRIPTION_RECORD)):
    files.record_digests(folder, DESCRIPTION_RECORD)


def save_description(spec: ModelSpec, folder: str) -> None:
  """Writes the model's config, tokenizer and poolers (no weights) and their ``DESCRIPTION_RECORD`` to ``folder``.

  Whole or not at all: everything goes into a temporary folder that then replaces ``folder``, so a full disk or a
  kill never leaves a description that is half written, nor one without its record.

  Raises:
    DescriptionError: a write failed (a full disk, a missing permission); ``folder`` is as it was.
  """
  folder = os.path.normpath(folder)
  tmp, old = folder + ".tmp", folder + ".old"
  shutil.rmtree(tmp, ignore_errors=True)  # A killed earlier write's.
  try:
    os.makedirs(tmp)
    spec.hf_config.save_pretrained(tmp)
    spec.tokenizer.save_pretrained(tmp)
    _write_description_info(spec, tmp)
    files.record_digests(tmp, DESCRIPTION_RECORD)
  except Exception as e:  # The tokenizer's writer raises a plain Exception for a full disk.
    shutil.rmtree(tmp, ignore_errors=True)
    raise DescriptionError(f"{folder}: could not write the model description ({_first_line(e)})") from None
  shutil.rmtree(old, ignore_errors=True)
  if os.path.exists(folder):
    os.rename(folder, old)
  os.rename(tmp, folder)
  shutil.rmtree(old, ignore_errors=True)  # What it describes is the config's model, written again just now.


def _first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _write_description_info(spec: ModelSpec, folder: str) -> None:
  """``jaxcse.json``: what the HF config and tokenizer do not say (poolers, MLM head, source)."""
  info = {
    "format_version": DESCRIPTION_FORMAT,
    "pooler": spec.pooling.pooler,
    "mlp_only_train": spec.pooling.mlp_only_train,
    "test_pooler": spec.pooling.test_pooler,
    "test_pooler_override": spec.pooling.test_pooler_override,
    "dev_pooler_override": spec.pooling.dev_pooler_override,
    "source": spec.source,
    "revision": spec.revision,
    # The params hold an MLM head: "pretrained" or "fresh" at the start; null: none.
    "mlm_head": None if spec.mlm is None else ("pretrained" if spec.mlm.pretrained else "fresh"),
    "mlm_head_tied": None if spec.mlm is None else spec.mlm.tied,
  }
  files.write_json(os.path.join(folder, JAXCSE_MODEL_FILE), info)
