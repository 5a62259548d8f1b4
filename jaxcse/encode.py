r"""Using a trained encoder: embed files to numpy, and a Python API with exact top-k search.

  python -m jaxcse.encode --model PATH_OR_ID --input FILE --output OUT.npy \
      [--pooler P] [--normalize] [--batch_size N] [--max_seq_len L] [--column NAME] [--dtype float16]

Input: a text file (one sentence a line), or a ``.csv`` / ``.jsonl`` file with
the text in ``--column``. Row ``i`` of the output is always input row ``i``:
an empty line is embedded as the empty sentence (``[CLS] [SEP]``), never
skipped. The output is written through ``numpy.lib.format.open_memmap`` one
chunk at a time, so memory stays flat whatever the input size; an interrupted
run resumes at its last finished chunk and produces byte-identical output.
``OUT.json`` records the model, pooler, count, dim, dtype and normalisation.

  from jaxcse.encode import Encoder
  enc = Encoder.load("workdirs/quickstart")
  vectors = enc.encode(["A man plays a guitar.", "Someone is playing music."])
  enc.build_index(corpus_sentences)
  scores, ids = enc.search(["a person with an instrument"], top_k=5)
"""

from __future__ import annotations

import csv
import errno
import functools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxcse import data as data_lib, models
from jaxcse.core import errors, files, platforms, provenance
from jaxcse.core.errors import JaxcseError
from jaxcse.core.progress import Progress
from jaxcse.inference import embedder as embedder_lib
from jaxcse.models import poolers
from jaxcse.storage import loading

# --------------------------------------------------------------------------
# Streaming input.


def _text_rows(path: str) -> Iterator[str]:
  with open(path, "rb") as f:
    for lineno, line in enumerate(f, start=1):
      try:
        text = line.decode("utf-8-sig" if lineno == 1 else "utf-8")
      except UnicodeDecodeError as e:
        raise data_lib.DataError(
          f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start} of the line)"
        ) from None
      yield text.rstrip("\n").removesuffix("\r")


def _csv_rows(path: str, column: str) -> Iterator[str]:
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.reader(f, strict=True)
    header = next(reader, None)
    if header is None or column not in header:
      raise data_lib.DataError(f"{path}:1: no column {column!r} in the header {header}")
    index = header.index(column)
    while True:
      start = reader.line_num + 1
      try:
        row = next(reader)
      except StopIteration:
        return
      except (csv.Error, UnicodeDecodeError) as e:
        raise data_lib.DataError(f"{path}:{start}: malformed csv row ({e})") from None
      if len(row) != len(header):
        raise data_lib.DataError(f"{path}:{start}: expected {len(header)} fields, found {len(row)}")
      yield row[index]


def _jsonl_rows(path: str, column: str) -> Iterator[str]:
  with open(path, "rb") as f:
    for lineno, line in enumerate(f, start=1):
      try:
        record = json.loads(line)
      except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise data_lib.DataError(f"{path}:{lineno}: not a JSON object ({e})") from None
      if not isinstance(record, dict) or not isinstance(record.get(column), str):
        raise data_lib.DataError(f"{path}:{lineno}: no string field {column!r}")
      yield record[column]


def read_rows(path: str, column: str | None = None) -> Iterator[str]:
  """The input's sentences, one per row, streamed; ``column`` names the text field of a csv/jsonl file."""
  if not os.path.isfile(path):
    raise data_lib.DataError(f"{path}: no such file")
  if path.endswith((".csv", ".jsonl")):
    if not column:
      raise data_lib.DataError(f"{path}: a .csv or .jsonl input needs --column (the text field)")
    return _csv_rows(path, column) if path.endswith(".csv") else _jsonl_rows(path, column)
  return _text_rows(path)


def _chunks(rows: Iterable[str], size: int) -> Iterator[list[str]]:
  chunk = []
  for row in rows:
    chunk.append(row)
    if len(chunk) == size:
      yield chunk
      chunk = []
  if chunk:
    yield chunk


# --------------------------------------------------------------------------
# The Python API.


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
  ):
    check_truncate_dim(truncate_dim, spec.hidden_size)
    # Embeddings keep their first this many dims (a Matryoshka-trained model's smaller size); None: all of them.
    self.truncate_dim = truncate_dim
    self.spec = spec
    # Prompt name -> text put before each sentence encoded with ``prompt_name`` (the model's own: ``Encoder.load``).
    self.prompts = dict(prompts or {})
    self.embedder = embedder_lib.BucketedEmbedder(spec, pooler, batch_size=batch_size, max_seq_len=max_seq_len)
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
        self.spec, self.pooler, batch_size=batch_size, max_seq_len=self.embedder.max_seq_len
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
      for chunk in _chunks(sentences, chunk_size):
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


# --------------------------------------------------------------------------
# The command.


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


class EncodeError(JaxcseError, RuntimeError):
  """An encoding job that cannot go on as asked; the message says why and what to do."""


def sidecar_path(output_path: str) -> str:
  """The JSON written beside an output ``X.npy``: ``X.json`` (model, pooler, provenance of the rows)."""
  return os.path.splitext(output_path)[0] + ".json"


def check_not_overwriting(output_path: str, overwrite: bool) -> None:
  """Refuses an output, or its sidecar, that exists already, unless ``overwrite``: nothing is replaced unasked."""
  if overwrite:
    return
  for path, what in ((output_path, "the output"), (sidecar_path(output_path), "its sidecar")):
    if os.path.exists(path):
      raise EncodeError(
        f"{path} exists ({what}{' of ' + output_path if path != output_path else ''}); pass "
        "--overwrite to replace it, or choose another --output"
      )


def _empty_input(input_path: str, column: str | None) -> str:
  rows = f"rows with a {column!r} field" if column else "lines"
  return f"{input_path}: no {rows}, so there is nothing to encode (an empty line is encoded, an empty file is not)"


def encode_file(
  encoder: Encoder,
  input_path: str,
  output_path: str,
  *,
  column: str | None = None,
  normalize: bool = False,
  dtype: str = "float32",
  chunk_size: int = 8192,
  model_name: str = "",
  progress: bool = True,
  overwrite: bool = False,
  prompt_name: str | None = None,
  prompt: str | None = None,
) -> dict:
  """Embeds every row of ``input_path`` into ``output_path`` (.npy), resuming a partial run; returns the sidecar.

  ``prompt_name``/``prompt``: as ``Encoder.encode``'s (the text put before every row is part of the job).

  A run resumes a partial output only if everything that determines its rows is the same: the input file, the
  model (its checkpoint step and a fingerprint of its parameters), pooler, dtype, normalisation, length and
  chunking; a partial output of another job is refused (``EncodeError``), never continued. An existing
  ``output_path`` or sidecar (``sidecar_path``) is refused unless ``overwrite``. An input without a row is an
  ``EncodeError`` (a 0-row array is almost always a wrong file, not a wanted result).
  """
  if dtype not in ("float32", "float16"):
    raise ValueError(f"dtype must be float32 or float16, not {dtype!r}")
  check_not_overwriting(output_path, overwrite)
  count = sum(1 for _ in read_rows(input_path, column))  # A first pass: the output's shape, and bad rows early.
  if count == 0:
    raise EncodeError(_empty_input(input_path, column))
  prefix = encoder.prompt(prompt_name, prompt)  # An unknown prompt name stops here, before anything is written.
  stat = os.stat(input_path)
  job = {
    "input": os.path.abspath(input_path),
    "input_size": stat.st_size,
    "input_mtime": stat.st_mtime,
    "model": model_name,
    "checkpoint_step": encoder.step,
    "params_sha256": encoder.fingerprint,
    "pooler": encoder.pooler,
    "count": count,
    "dim": encoder.dim,
    "dtype": dtype,
    "normalized": normalize,
    "column": column,
    "chunk_size": chunk_size,
    "max_seq_len": encoder.embedder.max_seq_len,
    "prompt": prefix,
  }
  partial, state_path = output_path + ".partial", output_path + ".progress.json"
  done = 0
  if os.path.exists(partial) and os.path.exists(state_path):
    with open(state_path) as f:
      saved = json.load(f)
    if saved.get("job") != job:
      differ = sorted(k for k in set(job) | set(saved.get("job", {})) if saved.get("job", {}).get(k) != job.get(k))
      raise EncodeError(
        f"{partial} holds a partial output of another job (it differs in {', '.join(differ)}); "
        f"rerun the same command to resume it, or delete {partial} and {state_path} to start over"
      )
    done = saved["rows_done"]
  elif os.path.exists(state_path):  # The progress of a partial output that is gone: nothing to resume.
    os.remove(state_path)
  os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)  # As evaluate and export do.
  out = None
  try:
    out = np.lib.format.open_memmap(
      partial, mode="r+" if done else "w+", dtype=np.dtype(dtype), shape=(count, encoder.dim)
    )
    _reserve(partial)
  except OSError as e:
    del out
    if not done:  # Nothing of this job written yet: leave nothing behind.
      for path in (partial, state_path):
        if os.path.exists(path):
          os.remove(path)
    if e.filename is None:  # numpy's own writes (the header, the map's last byte) name no file.
      raise OSError(e.errno, e.strerror or str(e), partial) from None
    raise
  bar = Progress(count, initial=done, unit="sent", desc=f"encode {os.path.basename(input_path)}", enabled=progress)
  rows = read_rows(input_path, column)
  for _ in range(done):
    next(rows)
  start = done
  try:
    for chunk in _chunks(rows, chunk_size):  # Chunks start at multiples of chunk_size, as in the first run.
      vectors = encoder.encode(chunk, normalize_embeddings=normalize, prompt=prefix)
      if not np.isfinite(vectors).all():
        bad = start + int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise EncodeError(
          f"the model gives non-finite embeddings (row {bad} of {input_path}); nothing was written to {output_path}"
        )
      out[start : start + len(chunk)] = vectors.astype(dtype)
      start += len(chunk)
      out.flush()
      files.write_json(state_path, {"job": job, "rows_done": start})
      bar.update(len(chunk))
  except BaseException as e:
    del out
    # A model that cannot embed a row makes the whole job void; with no finished chunk there is nothing to resume.
    # Otherwise (a kill, Ctrl-C, a full disk) the partial output and its progress stay, to resume.
    if isinstance(e, (EncodeError, embedder_lib.EmbeddingError)) or not os.path.exists(state_path):
      for path in (partial, state_path):
        if os.path.exists(path):
          os.remove(path)
    if isinstance(e, KeyboardInterrupt):
      kept = (
        f"{start} of {count} rows are in {partial}: rerun the same command to resume"
        if os.path.exists(state_path)
        else "nothing was written"
      )
      raise KeyboardInterrupt(f"interrupted; {kept}") from None
    raise
  bar.close()
  del out
  os.replace(partial, output_path)
  if os.path.exists(state_path):
    os.remove(state_path)
  sidecar = {
    k: job[k]
    for k in (
      "model",
      "checkpoint_step",
      "params_sha256",
      "pooler",
      "count",
      "dim",
      "dtype",
      "normalized",
      "max_seq_len",
      "prompt",
    )
  }
  sidecar["input"] = job["input"]
  sidecar["provenance"] = provenance.provenance(
    model=model_name,
    checkpoint_step=encoder.step,
    revision=encoder.spec.revision,
    data={os.path.basename(input_path): files.file_sha256(input_path)},
  )
  files.write_json(sidecar_path(output_path), sidecar)
  return sidecar


def _reserve(path: str) -> None:
  """Allocates every block of ``path`` on disk now, so that a full disk is an ``OSError`` naming it here.

  The output is written through a memory map of a sparse file; a page that the disk has no room for is then
  SIGBUS, which kills the process with no message. Where the file system cannot allocate ahead (no
  ``posix_fallocate``), nothing is reserved.
  """
  if not hasattr(os, "posix_fallocate"):
    return
  fd = os.open(path, os.O_RDWR)
  try:
    os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
  except OSError as e:
    if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # The file system cannot: write as before.
      return
    raise OSError(e.errno, f"{e.strerror or e} (reserving the output's {os.fstat(fd).st_size} bytes)", path) from None
  finally:
    os.close(fd)


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.encode"), description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="HF folder or hub id, or a jaxcse workdir or checkpoint folder")
  parser.add_argument("--input", required=True, help="text file (a sentence a line), or .csv/.jsonl with --column")
  parser.add_argument("--output", required=True, help="the .npy file to write (its folders are created)")
  parser.add_argument("--column", default=None, help="text field of a .csv/.jsonl input")
  parser.add_argument("--pooler", choices=poolers.names(), default=None, help="default: the model's test pooler")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step")
  parser.add_argument("--revision", default=None, help="for a hub id: the branch, tag or commit (default: main)")
  parser.add_argument("--normalize", action="store_true", help="L2-normalise every embedding")
  parser.add_argument("--batch_size", type=int, default=128, help="sentences per forward pass (at least 1)")
  parser.add_argument("--max_seq_len", type=int, default=None, help="cut sentences to this many tokens (at least 3)")
  parser.add_argument("--dtype", choices=("float32", "float16"), default="float32")
  parser.add_argument("--chunk_size", type=int, default=8192, help="rows embedded and written at a time")
  parser.add_argument(
    "--overwrite",
    action="store_true",
    help="replace an existing --output and its sidecar (OUTPUT.json); without it they are refused",
  )
  parser.add_argument(
    "--prompt_name", default=None, help="one of the model's prompts (e.g. query, document), put before every row"
  )
  parser.add_argument("--prompt", default=None, help="a text put before every row instead of a named prompt")
  parser.add_argument(
    "--truncate_dim",
    type=int,
    default=None,
    help="keep the first this many dims of each embedding (a Matryoshka-trained model's smaller size; before "
    "--normalize); default: the model's own (a sentence-transformers folder's truncate_dim), else all",
  )
  args = parser.parse_args(argv)
  platforms.use_compilation_cache()
  # The cheap checks before the model loads (encode_file reads the whole input before it writes anything).
  if not args.output.endswith(".npy"):
    parser.error("--output must end in .npy")
  embedder_lib.check_settings(args.batch_size, args.max_seq_len)
  if args.chunk_size < 1:
    raise EncodeError(f"chunk_size must be >= 1, not {args.chunk_size}")
  errors.check_output(args.output, folder=False)
  check_not_overwriting(args.output, args.overwrite)
  if next(iter(read_rows(args.input, args.column)), None) is None:
    raise EncodeError(_empty_input(args.input, args.column))
  encoder = Encoder.load(
    args.model,
    args.pooler,
    checkpoint=args.checkpoint,
    revision=args.revision,
    batch_size=args.batch_size,
    max_seq_len=args.max_seq_len,
    **({"truncate_dim": args.truncate_dim} if args.truncate_dim is not None else {}),
  )
  sidecar = encode_file(
    encoder,
    args.input,
    args.output,
    column=args.column,
    normalize=args.normalize,
    dtype=args.dtype,
    chunk_size=args.chunk_size,
    model_name=args.model,
    overwrite=args.overwrite,
    prompt_name=args.prompt_name,
    prompt=args.prompt,
  )
  print(
    f"wrote {args.output}: {sidecar['count']} x {sidecar['dim']} {sidecar['dtype']} (pooler {sidecar['pooler']}) "
    f"and its sidecar {sidecar_path(args.output)}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
