"""A jaxcse encoder as an MTEB 2 model: ``mteb.evaluate(encoder.mteb(), tasks)``.

``MtebEncoder`` wraps an ``inference.encoder.Encoder`` and implements MTEB's ``EncoderProtocol``
(``mteb.models.models_protocols``): ``encode`` takes the data loaders MTEB builds (batches
``{"text": [...]}``) and returns float32 ``[n, dim]``; ``similarity`` and ``similarity_pairwise`` are
cosine; ``mteb_model_meta`` is an ``mteb.models.model_meta.ModelMeta`` whose revision is the params'
fingerprint (``Encoder.fingerprint``), so results of different weights never share a cache entry.

MTEB is optional (``pip install mteb``): jaxcse's other modules never import this one, and this one
imports mteb only where it builds the ModelMeta. The data loaders MTEB hands over are torch's; they are
only iterated here, torch is never imported. This module does not import ``inference.encoder`` (whose
``Encoder.mteb`` imports it): it takes the encoder it is given, and loads none itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import jax
import numpy as np

from jaxcse.inference import embedder as embedder_lib

NAME_PREFIX = "jaxcse"  # MTEB wants model names as "organization/name".


def default_name(encoder) -> str:
  """``jaxcse/<basename of the spec's source>``: the folder or hub id a Hugging Face model was loaded from.

  For a jaxcse workdir the spec's source is the pretrained model it started from (an ``Encoder`` does not keep
  the workdir's path), so the checkpoint step is added (``jaxcse/bert-base-uncased-step125``); pass a name to
  say which run it is.
  """
  base = os.path.basename(os.path.normpath(encoder.spec.source)) if encoder.spec.source else "encoder"
  return f"{NAME_PREFIX}/{base}" + (f"-step{encoder.step}" if encoder.step is not None else "")


def _count(params: Any) -> tuple[int, int]:
  """(number of parameters, bytes) of a params pytree."""
  leaves = jax.tree_util.tree_leaves(params)
  return sum(int(np.size(x)) for x in leaves), sum(int(np.size(x)) * np.dtype(x.dtype).itemsize for x in leaves)


def _embedding_count(params: Any) -> int | None:
  """Parameters of the token embedding tables (the leaves under a ``*embeddings`` node), None if there are none."""
  total, found = 0, False
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    keys = [str(getattr(k, "key", k)) for k in path]
    if any(k.endswith("word_embeddings") or k == "tok_embeddings" for k in keys):
      total, found = total + int(np.size(leaf)), True
  return total if found else None


def _rows(x: Any) -> np.ndarray:
  """``[n, dim]`` float32 (a single ``[dim]`` vector becomes one row); torch tensors come through ``np.asarray``."""
  return np.atleast_2d(np.asarray(x, np.float32))


class MtebEncoder:
  """An ``Encoder`` as MTEB 2's ``EncoderProtocol``: ``Encoder.mteb()`` or ``MtebEncoder(encoder)``.

  The arguments follow the protocol's ``(model_name, revision, *, device)``, with the encoder in place of a name:
  this adapter loads no model itself (``Encoder.load`` does), so its ModelMeta has no loader and MTEB's command
  line cannot build one.

  Args:
    model_name: the ``Encoder``.
    revision: the ``Encoder.fingerprint`` it must have (None: not checked).
    device: ignored: JAX runs on its default device.
    name: the ModelMeta's name, ``organization/name`` (default ``default_name``).
    use_mteb_batch_size: embed with the ``batch_size`` MTEB passes to ``encode`` (its default is 32) rather
      than the encoder's own; each batch size compiles its own shapes, and changes the float rounding only.
  """

  def __init__(
    self,
    model_name,
    revision: str | None = None,
    *,
    device: str | None = None,
    name: str | None = None,
    use_mteb_batch_size: bool = True,
    **kwargs: Any,
  ):
    del device, kwargs  # Keywords MTEB may pass to a model's constructor; none applies to a loaded encoder.
    if not all(hasattr(model_name, a) for a in ("encode", "fingerprint", "params", "embedder", "spec")):
      raise TypeError(
        f"MtebEncoder wraps a jaxcse encoder, not {model_name!r}: load it first, jaxcse.Encoder.load(path).mteb()"
      )
    self.encoder = model_name
    if revision is not None and revision != self.encoder.fingerprint:
      raise ValueError(
        f"the encoder's params fingerprint is {self.encoder.fingerprint}, not the revision {revision} asked for"
      )
    self.name = name or default_name(self.encoder)
    self.use_mteb_batch_size = use_mteb_batch_size
    self._meta = None

  # -- EncoderProtocol.

  def encode(
    self,
    inputs: Iterable[dict],
    *,
    task_metadata: Any = None,
    hf_split: str | None = None,
    hf_subset: str | None = None,
    prompt_type: Any = None,
    **kwargs: Any,
  ) -> np.ndarray:
    """float32 ``[n, dim]``: the embeddings of every batch's ``"text"``, in order. ``batch_size`` (MTEB's
    ``encode_kwargs``) sets the forward-pass size. By prompt type, as MTEB's sentence-transformers wrapper: the
    model's prompt named after it (``"query"`` for queries, ``"document"`` for the corpus) is put before every
    text when the model has one; otherwise none."""
    del task_metadata, hf_split, hf_subset
    prompt_name = prompt_name_for(prompt_type, self.encoder.prompts)
    texts = []
    for batch in inputs:
      if "text" not in batch:
        raise ValueError(f"a jaxcse encoder embeds text; this batch holds {sorted(batch)}")
      texts.extend(str(t) for t in batch["text"])
    batch_size = kwargs.get("batch_size") if self.use_mteb_batch_size else None
    if not texts:
      return np.zeros((0, self.encoder.dim), np.float32)
    return self.encoder.encode(
      texts, batch_size=batch_size, show_progress_bar=kwargs.get("show_progress_bar"), prompt_name=prompt_name
    )

  def similarity(self, embeddings1: Any, embeddings2: Any) -> np.ndarray:
    """Cosine similarities ``[n1, n2]``."""
    return embedder_lib.normalize_rows(_rows(embeddings1)) @ embedder_lib.normalize_rows(_rows(embeddings2)).T

  def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> np.ndarray:
    """Cosine similarity of each row of ``embeddings1`` with the same row of ``embeddings2``: ``[n]``."""
    a, b = embedder_lib.normalize_rows(_rows(embeddings1)), embedder_lib.normalize_rows(_rows(embeddings2))
    if a.shape != b.shape:
      raise ValueError(f"pairwise similarity needs two arrays of one shape, got {a.shape} and {b.shape}")
    return np.sum(a * b, axis=1)

  @property
  def mteb_model_meta(self):
    """The ``ModelMeta`` MTEB files results under: name, revision (= params fingerprint), dims, counts."""
    if self._meta is None:
      self._meta = build_model_meta(self.encoder, self.name)
    return self._meta

  @mteb_model_meta.setter
  def mteb_model_meta(self, meta) -> None:  # MTEB may set it (ModelMeta.load_model does on what it loads).
    self._meta = meta


def build_model_meta(encoder, name: str):
  """An ``mteb.models.model_meta.ModelMeta`` for ``encoder``, with what is known and None for what is not.

  ``experiment_kwargs`` records the pooler and the token limit: they change the embeddings without changing
  the params (the revision), so MTEB's result cache keeps their results apart.
  """
  from mteb.models.model_meta import ModelMeta

  n_params, n_bytes = _count(encoder.params)
  base = encoder.spec.source if encoder.step is not None and encoder.spec.source else None  # A workdir's start.
  return ModelMeta(
    loader=None,  # This module loads no model (see MtebEncoder).
    name=name,
    revision=encoder.fingerprint,
    release_date=None,
    languages=None,
    n_parameters=n_params,
    n_embedding_parameters=_embedding_count(encoder.params),
    memory_usage_mb=round(n_bytes / 2**20, 2),
    max_tokens=encoder.embedder.max_seq_len,
    embed_dim=encoder.dim,
    license=None,
    open_weights=True,
    public_training_code=None,
    public_training_data=None,
    framework=["JAX"],
    similarity_fn_name="cosine",
    use_instructions=False,
    training_datasets=None,
    adapted_from=base,
    modalities=["text"],
    model_type=["dense"],
    experiment_kwargs={
      "pooler": encoder.pooler,
      "max_seq_len": encoder.embedder.max_seq_len,
      **({"truncate_dim": encoder.truncate_dim} if encoder.truncate_dim else {}),
    },
  )


def prompt_name_for(prompt_type: Any, prompts: dict[str, str]) -> str | None:
  """The model's prompt for an MTEB ``PromptType`` (``query``/``document``, by its value), or None."""
  if prompt_type is None:
    return None
  name = getattr(prompt_type, "value", prompt_type)
  return name if isinstance(name, str) and name in prompts else None
