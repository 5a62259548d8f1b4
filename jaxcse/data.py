"""Training data: reading corpora strictly, and deterministic, resumable batches.

Formats:
  * ``.txt``: one sentence per line (SimCSE's ``wiki1m_for_simcse.txt``),
    UTF-8. A line with only whitespace is skipped and counted
    (``skip_empty_lines=True``, the default) or is an error.
  * ``.csv``: a header naming the columns (``sent0,sent1[,hard_neg]``; a
    single ``sent0`` or ``text`` column is read as unsupervised text). Every
    row must have every column, non-empty.

Anything else wrong (a missing file, undecodable bytes, a malformed row) is a
``DataError`` naming the file and line; nothing is dropped silently.

Data root: relative paths are looked up under the data directory, which is
``--data_dir``/``config.data.data_dir`` or else ``$JAXCSE_DATA_DIR``, laid out
like SentEval's and SimCSE's: ``senteval/downstream/...``, ``corpora/...``.
"""

from __future__ import annotations

import codecs
import concurrent.futures
import csv
import dataclasses
import io
import logging
import os
from collections.abc import Iterator

import numpy as np

from jaxcse import models

DATA_DIR_ENV = "JAXCSE_DATA_DIR"


class DataError(ValueError):
  """Bad or missing input data; the message names the file and line."""


def data_dir(explicit: str | None = None) -> str:
  """The data root: ``explicit`` if given, else ``$JAXCSE_DATA_DIR``."""
  root = explicit or os.environ.get(DATA_DIR_ENV)
  if not root:
    raise DataError(
        f"no data directory: pass --data_dir (config.data.data_dir) or set ${DATA_DIR_ENV} to a folder "
        "laid out as senteval/downstream/... and corpora/..."
    )
  if not os.path.isdir(root):
    raise DataError(f"data directory {root!r} does not exist")
  return root


def resolve(path: str, root: str | None = None) -> str:
  """``path`` as given if it exists, else under the data root."""
  if os.path.isabs(path) or os.path.exists(path):
    return path
  candidate = os.path.join(data_dir(root), path)
  if not os.path.exists(candidate):
    raise DataError(f"{path}: no such file (looked in the current directory and in {candidate})")
  return candidate


@dataclasses.dataclass
class Corpus:
  """Training examples as columns of equal length: ``sent0`` always, ``sent1``/``hard_neg`` when present."""

  path: str
  columns: dict[str, list[str]]
  skipped_empty_lines: list[int] = dataclasses.field(default_factory=list)

  def __len__(self) -> int:
    return len(self.columns["sent0"])


def read_text_lines(path: str, *, skip_empty_lines: bool = True) -> Corpus:
  """Reads one sentence per line (``\\n`` or ``\\r\\n`` endings; a last line without one counts)."""
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(f"{path}: cannot read ({e.strerror})") from e
  lines = raw.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()  # The file's final newline ends the last line; it does not start an empty one.
  sentences, skipped = [], []
  for lineno, line in enumerate(lines, start=1):
    try:
      text = line.decode("utf-8-sig" if lineno == 1 else "utf-8")  # A BOM is not part of the first sentence.
    except UnicodeDecodeError as e:
      raise DataError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start} of the line)") from None
    text = text.removesuffix("\r")
    if not text.strip():
      if not skip_empty_lines:
        raise DataError(f"{path}:{lineno}: empty line (set data.skip_empty_lines=True to skip and count them)")
      skipped.append(lineno)
      continue
    sentences.append(text)
  if not sentences:
    raise DataError(f"{path}: no sentences")
  return Corpus(path, {"sent0": sentences}, skipped)


CSV_COLUMNS = ("sent0", "sent1", "hard_neg")


def read_csv(path: str) -> Corpus:
  """Reads a csv with a header: ``sent0[,sent1[,hard_neg]]`` (or one ``text`` column)."""
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(f"{path}: cannot read ({e.strerror})") from e
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    offset = e.start + (len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0)  # e.start skips the BOM.
    lineno = raw.count(b"\n", 0, offset) + 1
    raise DataError(f"{path}:{lineno}: not valid UTF-8 ({e.reason})") from None
  reader = csv.reader(io.StringIO(text, newline=""), strict=True)
  try:
    header = next(reader)
  except StopIteration:
    raise DataError(f"{path}: empty csv (expected a header such as sent0,sent1,hard_neg)") from None
  header = [h.strip() for h in header]
  if header == ["text"]:
    header = ["sent0"]
  if header != list(CSV_COLUMNS[: len(header)]):  # An unknown or misplaced column must not be dropped.
    raise DataError(f"{path}:1: header {','.join(header)}: expected sent0[,sent1[,hard_neg]] (or text)")
  names = header
  index = {name: i for i, name in enumerate(names)}
  columns: dict[str, list[str]] = {name: [] for name in names}
  while True:
    start_line = reader.line_num + 1
    try:
      row = next(reader)
    except StopIteration:
      break
    except csv.Error as e:
      raise DataError(f"{path}:{start_line}: malformed csv row ({e})") from None
    if len(row) != len(header):
      raise DataError(f"{path}:{start_line}: expected {len(header)} fields ({','.join(header)}), found {len(row)}")
    for name, i in index.items():
      if not row[i].strip():
        raise DataError(f"{path}:{start_line}: empty {name}")
      columns[name].append(row[i])
  if not columns["sent0"]:
    raise DataError(f"{path}: no rows after the header")
  return Corpus(path, columns)


def load_corpus(path: str, *, root: str | None = None, skip_empty_lines: bool = True) -> Corpus:
  """Reads a training file by its extension (``.csv`` or text)."""
  full = resolve(path, root)
  corpus = read_csv(full) if full.endswith(".csv") else read_text_lines(full, skip_empty_lines=skip_empty_lines)
  if corpus.skipped_empty_lines:
    first = ", ".join(map(str, corpus.skipped_empty_lines[:5]))
    logging.warning("%s: skipped %d empty line(s) (lines %s%s)", full, len(corpus.skipped_empty_lines), first,
                    ", ..." if len(corpus.skipped_empty_lines) > 5 else "")
  return corpus


class Batches:
  """Deterministic batches of a corpus, addressable by step, for exact resume.

  Epoch ``e`` visits the examples in the order
  ``np.random.default_rng([seed, e]).permutation(n)``, cut into batches of
  ``batch_size``; step ``s`` is batch ``s % steps_per_epoch`` of epoch
  ``s // steps_per_epoch``. The last ``n % batch_size`` examples of each
  epoch's order are left out of that epoch (fixed shapes; they differ from
  epoch to epoch). So a run resumed at step ``s`` sees exactly the batches the
  uninterrupted run saw.

  With ``no_duplicates=True`` no batch holds the same text twice in any column
  (a repeated sentence would be a false negative): walking the epoch's order,
  an example whose text is already in the batch being filled is deferred to the
  next batch that has room for it. Epochs then may have a few batches fewer,
  and whatever cannot be placed at the end of an epoch is left out of it.

  A batch is ``{"input_ids", "attention_mask"}``, int32 ``[batch, columns,
  max_seq_len]``, where columns are the corpus's sentence columns in order
  (``sent0[, sent1[, hard_neg]]``).
  """

  def __init__(self, corpus: Corpus, tokenizer, *, batch_size: int, max_seq_len: int, seed: int,
               no_duplicates: bool = False):
    if batch_size > len(corpus):
      raise DataError(f"{corpus.path}: {len(corpus)} examples, fewer than one batch of {batch_size}")
    self.corpus = corpus
    self.tokenizer = tokenizer
    self.batch_size = batch_size
    self.max_seq_len = max_seq_len
    self.seed = seed
    self.no_duplicates = no_duplicates
    self._layouts: dict[int, np.ndarray] = {}

  @property
  def steps_per_epoch(self) -> int:
    """Batches in epoch 0 (every epoch has this many unless ``no_duplicates``)."""
    return self.steps_in_epoch(0)

  def steps_in_epoch(self, epoch: int) -> int:
    if not self.no_duplicates:
      return len(self.corpus) // self.batch_size
    return len(self._layout(epoch))

  def total_steps(self, num_epochs: int) -> int:
    return sum(self.steps_in_epoch(e) for e in range(num_epochs))

  def locate(self, step: int) -> tuple[int, int]:
    """(epoch, batch within the epoch) of a step."""
    if not self.no_duplicates:
      return divmod(step, self.steps_per_epoch)
    epoch = 0
    while step >= self.steps_in_epoch(epoch):
      step -= self.steps_in_epoch(epoch)
      epoch += 1
    return epoch, step

  def _layout(self, epoch: int) -> np.ndarray:
    """``[batches, batch_size]`` example indices of one epoch."""
    layout = self._layouts.get(epoch)
    if layout is None:
      order = np.random.default_rng([self.seed, epoch]).permutation(len(self.corpus))
      if self.no_duplicates:
        layout = self._distinct_batches(order)
      else:
        nb = len(order) // self.batch_size
        layout = order[: nb * self.batch_size].reshape(nb, self.batch_size)
      if len(self._layouts) > 4:  # Resume and prefetch only look near the current epoch.
        self._layouts.pop(min(self._layouts))
      self._layouts[epoch] = layout
    return layout

  def _distinct_batches(self, order: np.ndarray) -> np.ndarray:
    columns = list(self.corpus.columns.values())
    texts = [frozenset(col[r] for col in columns) for r in range(len(self.corpus))]
    batches, deferred, rest = [], [], iter(order.tolist())
    while True:
      batch, seen, still_deferred = [], set(), []
      for r in deferred:  # Deferred examples go first, in the order they were deferred.
        if len(batch) < self.batch_size and seen.isdisjoint(texts[r]):
          batch.append(r)
          seen.update(texts[r])
        else:
          still_deferred.append(r)
      deferred = still_deferred
      for r in rest if len(batch) < self.batch_size else ():
        if seen.isdisjoint(texts[r]):
          batch.append(r)
          seen.update(texts[r])
          if len(batch) == self.batch_size:
            break
        else:
          deferred.append(r)
      if len(batch) < self.batch_size:
        break
      batches.append(batch)
    if not batches:
      raise DataError(f"{self.corpus.path}: cannot fill one batch of {self.batch_size} distinct sentences")
    return np.asarray(batches, dtype=np.int64)

  def indices(self, step: int) -> np.ndarray:
    epoch, k = self.locate(step)
    return self._layout(epoch)[k]

  def batch(self, step: int) -> dict[str, np.ndarray]:
    rows = self.indices(step)
    ids, masks = [], []
    for column in self.corpus.columns.values():
      i, m = models.tokenize_padded(self.tokenizer, [column[r] for r in rows], self.max_seq_len)
      ids.append(i)
      masks.append(m)
    return {"input_ids": np.stack(ids, axis=1), "attention_mask": np.stack(masks, axis=1)}

  def iterate(self, start_step: int, end_step: int, prefetch: int = 2) -> Iterator[dict[str, np.ndarray]]:
    """Batches for steps ``start_step .. end_step - 1``, tokenized ahead in a background thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      ahead = [pool.submit(self.batch, s) for s in range(start_step, min(start_step + prefetch, end_step))]
      for step in range(start_step, end_step):
        batch = ahead.pop(0).result()
        if step + prefetch < end_step:
          ahead.append(pool.submit(self.batch, step + prefetch))
        yield batch
