"""The user's sentence encoder in Python: a model's spec and params bound together; embeddings, similarities, and
exact top-k search over an index built from a corpus.

  from jaxcse import Encoder
  enc = Encoder.load("workdirs/quickstart")
  vectors = enc.encode(["A man plays a guitar.", "Someone is playing music."])
  enc.build_index(corpus_sentences)
  scores, ids = enc.search(["a person with an instrument"], top_k=5)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxcse import models
from jaxcse.core.errors import JaxcseError
from jaxcse.inference import embedder as embedder_lib
from jaxcse.storage import loading


class Encoder:
  """The user's sentence encoder: a model's spec and params bound together; embeddings, similarities, search.

  Uses the test-time pooler saved with a jaxcse model (or the one given).
  """

  def __init__(
    self,
    spec: models.ModelSpec,
    params,
    pooler: str | None = None,
    *,
    batch_size: int = 128,
    max_seq_len: int | None = None,
    step: int | None = None,
    prompts: dict[str, str] | None = None,
    truncate_dim: int | None = None,
    packed: bool = False,
  ):
    check_truncate_dim(truncate_dim, spec.hidden_size)
    # Embeddings keep their first this many dims (a Matryoshka-trained model's smaller size); None: all of them.
    self.truncate_dim = truncate_dim
    self.spec = spec
    # Prompt name -> text put before each sentence encoded with ``prompt_name`` (the model's own: ``Encoder.load``).
    self.prompts = dict(prompts or {})
    # packed: sentences packed end to end into rows (models.packing); False (the default): sorted padded batches.
    self.embedder = embedder_lib.BucketedEmbedder(
      spec, pooler, batch_size=batch_size, max_seq_len=max_seq_len, packed=packed
    )
    self.params = self.embedder.params_for_pooler(params)
    self.pooler = self.embedder.pooler
    self.step = step  # The checkpoint step of a workdir model; None for a Hugging Face folder.
    self._fingerprint: str | None = None
    self._embedders: dict[int, embedder_lib.BucketedEmbedder] = {}
    self._index = None  # [n, dim] unit rows: a device array (jax backend) or numpy (faiss).
    self._faiss = None

  @classmethod
  def load(
    cls, path: str, pooler: str | None = None, *, checkpoint: str = "best", revision: str | None = None, **kwargs
  ) -> "Encoder":
    """From a jaxcse workdir/checkpoint or a Hugging Face folder/hub id (see ``loading.load_model``)."""
    loaded = loading.load_model(path, checkpoint=checkpoint, pooler=pooler, revision=revision)
    kwargs.setdefault("prompts", loaded.prompts)
    kwargs.setdefault("truncate_dim", loaded.truncate_dim)  # A sentence-transformers folder's own.
    return cls(loaded.spec, loaded.params, pooler, step=loaded.step, **kwargs)

  def prompt(self, prompt_name: str | None = None, prompt: str | None = None) -> str:
    """The text put before each sentence: ``prompt`` if given, else the model's prompt ``prompt_name``, else ""."""
    if prompt is not None:
      return prompt
    if prompt_name is None:
      return ""
    if prompt_name not in self.prompts:
      known = ", ".join(repr(name) for name in self.prompts) or "none"
      raise PromptError(f"prompt_name {prompt_name!r} is not one of this model's prompts ({known})")
    return self.prompts[prompt_name]

  @property
  def fingerprint(self) -> str:
    """``models.params_fingerprint`` of the parameters this encoder embeds with: its identity."""
    if self._fingerprint is None:
      self._fingerprint = models.params_fingerprint(self.params)
    return self._fingerprint

  @property
  def dim(self) -> int:
    """The width of its embeddings: ``truncate_dim`` if set, else the model's."""
    return self.truncate_dim or self.spec.hidden_size

  def embed(
    self,
    sentences: Sequence[str],
    *,
    batch_size: int | None = None,
    progress=None,
    truncate_dim: int | None = None,
  ) -> np.ndarray:
    """float32 ``[len(sentences), dim]`` in input order, in one call (``encode`` streams in chunks); ``progress``
    (a ``progress.Progress``) counts the sentences as they are embedded; ``truncate_dim``: this call's, instead of
    the encoder's."""
    full = self._embedder(batch_size)(sentences, self.params, progress=progress)
    check_truncate_dim(truncate_dim, self.spec.hidden_size)
    keep = truncate_dim or self.truncate_dim
    return np.ascontiguousarray(full[:, :keep]) if keep else full

  def _embedder(self, batch_size: int | None) -> embedder_lib.BucketedEmbedder:
    """The embedder for a batch size (one per size: each compiles its own shapes once)."""
    if not batch_size or batch_size == self.embedder.batch_size:
      return self.embedder
    if batch_size not in self._embedders:
      self._embedders[batch_size] = embedder_lib.BucketedEmbedder(
        self.spec,
        self.pooler,
        batch_size=batch_size,
        max_seq_len=self.embedder.max_seq_len,
        packed=self.embedder.packed,
      )
    return self._embedders[batch_size]

  def encode(
    self,
    sentences: str | Iterable[str] | Iterable[dict],
    *,
    batch_size: int | None = None,
    normalize_embeddings: bool = False,
    show_progress_bar: bool | None = None,
    convert_to_numpy: bool = True,
    chunk_size: int | None = 8192,
    prompt_name: str | None = None,
    prompt: str | None = None,
    truncate_dim: int | None = None,
    **kwargs,
  ) -> np.ndarray:
    """float32 ``[n, dim]`` embeddings in input order (a single string gives ``[dim]``).

    The call shape of sentence-transformers' and MTEB's encoders: ``batch_size``, ``normalize_embeddings``,
    ``show_progress_bar``; other keywords MTEB passes (``task_name``, ``prompt_type``, ...) are accepted and
    ignored, and so is ``convert_to_numpy`` (the result is always a numpy array). ``sentences`` may also be an
    iterable of batches ``{"text": [...]}`` (MTEB 2's data loaders).

    Args:
      sentences: the texts.
      batch_size: sentences per forward pass (default: the encoder's).
      normalize_embeddings: L2-normalise every row.
      show_progress_bar: a bar over the sentences (None: on a terminal, for more than one chunk).
      chunk_size: sentences tokenized and embedded at a time (memory stays at one chunk).
      prompt_name: one of the model's ``prompts`` (e.g. ``"query"``), put before every sentence, as
        sentence-transformers does; an unknown name is a ``PromptError``.
      prompt: a text to put before every sentence instead (wins over ``prompt_name``).
      truncate_dim: keep the first this many dims of each embedding (before ``normalize_embeddings``), as
        sentence-transformers does; default: the encoder's ``truncate_dim``.
    """
    del convert_to_numpy, kwargs
    if isinstance(sentences, str):
      return self.encode(
        [sentences],
        batch_size=batch_size,
        normalize_embeddings=normalize_embeddings,
        prompt_name=prompt_name,
        prompt=prompt,
        truncate_dim=truncate_dim,
      )[0]
    prefix = self.prompt(prompt_name, prompt)
    sentences = _texts(sentences)
    if prefix:
      sentences = [prefix + sentence for sentence in sentences]
    chunk_size = chunk_size or 8192
    from tqdm.auto import tqdm

    show = (len(sentences) > chunk_size or None) if show_progress_bar is None else show_progress_bar
    parts = []
    with tqdm(total=len(sentences), unit="sent", disable=not show, dynamic_ncols=True) as bar:
      for chunk in chunks(sentences, chunk_size):
        parts.append(self.embed(chunk, batch_size=batch_size, truncate_dim=truncate_dim))
        bar.update(len(chunk))
    out = np.concatenate(parts) if parts else np.zeros((0, truncate_dim or self.dim), np.float32)
    return embedder_lib.normalize_rows(out) if normalize_embeddings else out

  def mteb(self, name: str | None = None, **kwargs):
    """This encoder as an MTEB 2 model, for ``mteb.evaluate`` (``pip install mteb``; see docs/mteb.md)."""
    from jaxcse.inference.mteb_model import MtebEncoder

    return MtebEncoder(self, name=name, **kwargs)

  def similarity(self, a: str | Sequence[str] | np.ndarray, b: str | Sequence[str] | np.ndarray) -> np.ndarray:
    """Cosine similarities ``[len(a), len(b)]`` between sentences or embeddings."""
    ea = embedder_lib.normalize_rows(
      np.atleast_2d(a if isinstance(a, np.ndarray) else self.encode([a] if isinstance(a, str) else a))
    )
    eb = embedder_lib.normalize_rows(
      np.atleast_2d(b if isinstance(b, np.ndarray) else self.encode([b] if isinstance(b, str) else b))
    )
    return ea @ eb.T

  def build_index(self, corpus: Sequence[str] | np.ndarray, *, backend: str = "jax") -> None:
    """Indexes sentences (embedded here) or precomputed embeddings for cosine search.

    ``backend="jax"``: exact search, a matmul and ``jax.lax.top_k`` per block
    of the index; the unit-normalised index is put on the device once and
    stays there between queries. ``backend="faiss"``: exact inner-product
    search with FAISS (``IndexFlatIP``; ``pip install faiss-cpu``).
    """
    vectors = embedder_lib.normalize_rows(
      np.asarray(corpus if isinstance(corpus, np.ndarray) else self.encode(corpus), np.float32)
    )
    self._faiss = None
    if backend == "faiss":
      try:
        import faiss
      except ImportError:
        raise ImportError("backend='faiss' needs FAISS: pip install faiss-cpu") from None
      self._faiss = faiss.IndexFlatIP(vectors.shape[1])
      self._faiss.add(vectors)
      self._index = vectors
    elif backend == "jax":
      self._index = jax.device_put(vectors)
    else:
      raise ValueError(f"backend must be 'jax' or 'faiss', not {backend!r}")

  def search(
    self, queries: str | Sequence[str] | np.ndarray, top_k: int = 10, *, block_size: int = 65536
  ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k cosine search: ``(scores, indices)``, each ``[n_queries, top_k]``, best first."""
    if self._index is None:
      raise RuntimeError("call build_index first")
    q = queries if isinstance(queries, np.ndarray) else self.encode([queries] if isinstance(queries, str) else queries)
    q = embedder_lib.normalize_rows(np.atleast_2d(np.asarray(q, np.float32)))
    k = min(top_k, len(self._index))
    if self._faiss is not None:
      scores, ids = self._faiss.search(q, k)
      return scores, ids.astype(np.int64)
    q = jax.device_put(q)
    best_scores = jnp.full((len(q), 0), -jnp.inf, jnp.float32)
    best_ids = jnp.zeros((len(q), 0), jnp.int32)
    for start in range(0, len(self._index), block_size):  # Memory stays at one block of scores.
      block = self._index[start : start + block_size]
      best_scores, best_ids = _merge_top_k(q, block, best_scores, best_ids, start, min(k, len(block)), k)
    return np.asarray(best_scores), np.asarray(best_ids).astype(np.int64)


@functools.partial(jax.jit, static_argnames=("block_k", "k"))
def _merge_top_k(q, block, best_scores, best_ids, start, block_k: int, k: int):
  """The running top ``k`` merged with one index block's top ``block_k`` (ties keep the earlier row)."""
  scores, ids = jax.lax.top_k(q @ block.T, block_k)
  scores = jnp.concatenate([best_scores, scores], axis=1)
  ids = jnp.concatenate([best_ids, ids.astype(jnp.int32) + start], axis=1)
  top, where = jax.lax.top_k(scores, min(k, scores.shape[1]))
  return top, jnp.take_along_axis(ids, where, axis=1)


def _texts(sentences: Iterable[str] | Iterable[dict]) -> list[str]:
  """A list of strings from texts, or from MTEB-style batches ``{"text": [...]}``."""
  items = list(sentences)
  if items and isinstance(items[0], dict):
    return [t for batch in items for t in batch["text"]]
  return items


class PromptError(JaxcseError, ValueError):
  """A prompt name the model does not have."""


class TruncateDimError(JaxcseError, ValueError):
  """A ``truncate_dim`` the model's embeddings cannot be cut to."""


def check_truncate_dim(truncate_dim: int | None, width: int) -> None:
  """``TruncateDimError`` unless ``truncate_dim`` is None or an integer in ``[1, width]``."""
  if truncate_dim is None:
    return
  if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or not 1 <= truncate_dim <= width:
    raise TruncateDimError(f"truncate_dim must be an integer in [1, {width}] (the model's width), not {truncate_dim!r}")


def chunks(rows: Iterable[str], size: int) -> Iterator[list[str]]:
  """``rows`` in lists of ``size`` (the last one shorter), read lazily."""
  chunk = []
  for row in rows:
    chunk.append(row)
    if len(chunk) == size:
      yield chunk
      chunk = []
  if chunk:
    yield chunk
