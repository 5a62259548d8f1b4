"""Deterministic, resumable batches of a corpus, addressable by step, tokenized ahead in a thread."""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
from collections.abc import Iterator

import numpy as np

from jaxcse.data import tokenization
from jaxcse.data.corpora import Corpus
from jaxcse.data.pairs import PairCorpus
from jaxcse.data.root import DataError


def corpus_texts(corpus: Corpus | PairCorpus, rows: np.ndarray) -> list[list[str]]:
  """The texts of ``rows`` of a corpus, one list per text column, in order."""
  if isinstance(corpus, PairCorpus):
    return corpus.texts(rows)
  return [[column[r] for r in rows.tolist()] for column in corpus.columns.values()]


def text_ids(corpus: Corpus | PairCorpus) -> np.ndarray:
  """``[examples, text columns]`` int64: equal ids where the texts are equal, in any column (exact, not hashed)."""
  import pyarrow as pa
  import pyarrow.compute as pc

  if isinstance(corpus, PairCorpus):
    columns = corpus.text_columns_arrow()
  else:
    columns = [pa.chunked_array([pa.array(column, pa.large_string())]) for column in corpus.columns.values()]
  everything = pa.chunked_array(
    [chunk.cast(pa.large_string()) for column in columns for chunk in column.chunks], pa.large_string()
  )
  ids = pc.index_in(everything, value_set=pc.unique(everything)).to_numpy().astype(np.int64)
  return ids.reshape(len(columns), len(corpus)).T


@dataclasses.dataclass(frozen=True)
class DistinctReport:
  """One epoch of ``no_duplicates`` batching, against plain batching's ``examples // batch_size`` batches."""

  examples: int  # In the corpus.
  batches: int  # Full batches of distinct texts.
  deferred: int  # Examples passed over at least once (a text already in the batch) and placed in a later batch.
  left_out: int  # Examples in no batch of the epoch (plain batching leaves out examples % batch_size).


def distinct_batches(order: np.ndarray, ids: np.ndarray, batch_size: int) -> tuple[np.ndarray, DistinctReport]:
  """``[batches, batch_size]`` rows of ``order`` with no text id twice in a batch, and what that cost.

  One pass of sentence-transformers 6's ``NoDuplicatesBatchSampler`` (``_iter_one_pass``, ``drop_last=True``):
  each batch walks the examples not yet placed, in ``order``, taking every one that shares no text with the batch
  until it is full; an example passed over waits for a later batch. A batch that cannot be filled is dropped (its
  examples left out) and the walk goes on while examples remain. ``ids`` is ``text_ids``'s matrix.
  """
  order = order.tolist()
  n = len(order)
  following = list(range(1, n + 1))  # A linked list over positions of ``order``: the examples not yet placed.
  following[-1] = -1
  passed_over = [False] * n
  head, batches, left_out, deferred = 0, [], 0, 0
  while head != -1:
    batch, positions, seen = [], [], set()
    current, previous = head, -1
    while current != -1:
      row = order[current]
      texts = ids[row].tolist()
      if not seen.isdisjoint(texts):
        passed_over[current] = True
        previous, current = current, following[current]
        continue
      batch.append(row)
      positions.append(current)
      if previous == -1:
        head = following[current]
      else:
        following[previous] = following[current]
      if len(batch) == batch_size:
        break
      seen.update(texts)
      current = following[current]
    if len(batch) == batch_size:
      batches.append(batch)
      deferred += sum(passed_over[p] for p in positions)
    else:
      left_out += len(batch)
  layout = np.asarray(batches, dtype=np.int64).reshape(len(batches), batch_size)
  return layout, DistinctReport(n, len(batches), deferred, left_out)


def prefetched(
  make_batch, start_step: int, end_step: int, prefetch: int, positions: np.ndarray | None
) -> Iterator[dict[str, np.ndarray]]:
  """``make_batch(step, positions)`` for each step, made ``prefetch`` steps ahead in a thread (off the host's path)."""
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    ahead = [pool.submit(make_batch, s, positions) for s in range(start_step, min(start_step + prefetch, end_step))]
    for step in range(start_step, end_step):
      batch = ahead.pop(0).result()
      if step + prefetch < end_step:
        ahead.append(pool.submit(make_batch, step + prefetch, positions))
      yield batch


class Batches:
  """Deterministic batches of a corpus, addressable by step, for exact resume.

  Epoch ``e`` visits the examples in the order
  ``np.random.default_rng([seed, e]).permutation(n)``, cut into batches of
  ``batch_size``; step ``s`` is batch ``s % steps_per_epoch`` of epoch
  ``s // steps_per_epoch``. The last ``n % batch_size`` examples of each
  epoch's order are left out of that epoch (fixed shapes; they differ from
  epoch to epoch). So a run resumed at step ``s`` sees exactly the batches the
  uninterrupted run saw.

  With ``no_duplicates=True`` no batch holds the same text twice in any of its
  columns (a repeated sentence would be a false negative), as
  sentence-transformers' ``BatchSamplers.NO_DUPLICATES`` defines it: the
  batches are those of one pass of its ``NoDuplicatesBatchSampler`` with
  ``drop_last=True`` over the epoch's order (``distinct_batches``). A batch is
  the global batch, so this holds across every device and host. Epochs then
  may have a few batches fewer; ``epoch_report`` says how many examples each
  epoch deferred and left out.

  A batch is ``{"input_ids", "attention_mask"}``, int32 ``[batch, columns,
  max_seq_len]``, where columns are the corpus's text columns in order
  (``sent0[, sent1[, hard_neg]]``; a ``PairCorpus``'s anchor, positive,
  negatives), and ``"labels"``, float32 ``[batch]``, when the corpus has a
  label column (scored pairs). ``query_prompt`` is put before the first
  column's texts and ``document_prompt`` before every other column's.
  """

  def __init__(
    self,
    corpus: Corpus,
    tokenizer,
    *,
    batch_size: int,
    max_seq_len: int,
    seed: int,
    no_duplicates: bool = False,
    query_prompt: str = "",
    document_prompt: str = "",
  ):
    if batch_size > len(corpus):
      raise DataError(f"{corpus.path}: {len(corpus)} examples, fewer than one batch of {batch_size}")
    self.corpus = corpus
    # A copy of its own: `iterate` tokenizes in a thread while the caller (evaluation during training) may use
    # the original, and a Hugging Face fast tokenizer used by two threads at once fails ("Already borrowed").
    self.tokenizer = copy.deepcopy(tokenizer)
    self.batch_size = batch_size
    self.max_seq_len = max_seq_len
    self.seed = seed
    self.no_duplicates = no_duplicates
    # Put before the first column's texts and every other column's: a text's identity (no_duplicates) is its own.
    self.query_prompt, self.document_prompt = query_prompt, document_prompt
    self._layouts: dict[int, np.ndarray] = {}
    self._epoch_steps: dict[int, int] = {}
    self._reports: dict[int, DistinctReport] = {}
    self._text_ids: np.ndarray | None = None

  @property
  def steps_per_epoch(self) -> int:
    """Batches in epoch 0 (every epoch has this many unless ``no_duplicates``)."""
    return self.steps_in_epoch(0)

  def steps_in_epoch(self, epoch: int) -> int:
    if not self.no_duplicates:
      return len(self.corpus) // self.batch_size
    if epoch not in self._epoch_steps:  # Kept apart from the layouts: locating a late step counts every epoch.
      self._epoch_steps[epoch] = len(self._layout(epoch))
    return self._epoch_steps[epoch]

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
        layout, self._reports[epoch] = self._distinct_batches(order)
      else:
        nb = len(order) // self.batch_size
        layout = order[: nb * self.batch_size].reshape(nb, self.batch_size)
      if len(self._layouts) > 4:  # Resume and prefetch only look near the current epoch.
        self._layouts.pop(min(self._layouts))
      self._layouts[epoch] = layout
    return layout

  def _distinct_batches(self, order: np.ndarray) -> tuple[np.ndarray, DistinctReport]:
    if self._text_ids is None:
      self._text_ids = text_ids(self.corpus)
    layout, report = distinct_batches(order, self._text_ids, self.batch_size)
    if not len(layout):
      raise DataError(f"{self.corpus.path}: cannot fill one batch of {self.batch_size} distinct sentences")
    return layout, report

  def epoch_report(self, epoch: int) -> DistinctReport:
    """What ``no_duplicates`` did to ``epoch``: examples deferred to a later batch, and left out of the epoch."""
    if not self.no_duplicates:
      n = len(self.corpus)
      return DistinctReport(n, n // self.batch_size, 0, n % self.batch_size)
    if epoch not in self._reports:
      self._layout(epoch)
    return self._reports[epoch]

  def indices(self, step: int) -> np.ndarray:
    epoch, k = self.locate(step)
    return self._layout(epoch)[k]

  def batch(self, step: int, positions: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The batch of ``step``, or only its rows ``positions`` (one process's shard in multi-host training).

    Rows are tokenized one by one to ``max_seq_len``, so a shard equals the
    same rows of the whole batch, whichever process reads it.
    """
    rows = self.indices(step) if positions is None else self.indices(step)[positions]
    ids, masks = [], []
    for column, texts in enumerate(corpus_texts(self.corpus, rows)):
      prompt = self.document_prompt if column else self.query_prompt
      if prompt:
        texts = [prompt + text for text in texts]
      i, m = tokenization.tokenize_padded(self.tokenizer, texts, self.max_seq_len)
      ids.append(i)
      masks.append(m)
    batch = {"input_ids": np.stack(ids, axis=1), "attention_mask": np.stack(masks, axis=1)}
    labels = getattr(self.corpus, "labels", None)
    if labels is not None:
      batch["labels"] = labels[rows].astype(np.float32)
    return batch

  def iterate(
    self, start_step: int, end_step: int, prefetch: int = 2, positions: np.ndarray | None = None
  ) -> Iterator[dict[str, np.ndarray]]:
    """Batches (or their rows ``positions``) for steps ``start_step .. end_step - 1``, made ahead in a thread."""
    return prefetched(self.batch, start_step, end_step, prefetch, positions)


class PackedBatches:
  """Sentences packed into full-length token sequences, for masked-LM pretraining; deterministic by step.

  Each sequence is ``[CLS] s1 [SEP] s2 [SEP] ...``: epoch ``e`` walks the
  corpus in the order ``np.random.default_rng([seed, e]).permutation(n)`` and
  appends sentences to the current sequence while they fit in
  ``max_seq_len`` tokens (a sentence longer than ``max_seq_len - 2`` tokens
  fills a sequence alone, cut). Nearly every position is then a real token
  (a batch of single sentences would be ~60% padding at length 64 on
  Wikipedia lines), so a step trains on ~2x the tokens for the same compute.
  Step ``s`` is a batch of consecutive sequences of the epoch it falls in;
  the epoch's last partial batch is left out unless ``keep_last`` (then it is
  filled with empty sequences, all padding, which predict nothing).

  A batch is ``{"input_ids", "attention_mask"}``, int32 ``[batch, 1, max_seq_len]``.
  """

  def __init__(
    self, corpus: Corpus, tokenizer, *, batch_size: int, max_seq_len: int, seed: int, keep_last: bool = False
  ):
    if list(corpus.columns) != ["sent0"]:
      raise DataError(f"{corpus.path}: packing is for one-column (text) corpora, not {list(corpus.columns)}")
    self.corpus = corpus
    self.batch_size = batch_size
    self.max_seq_len = max_seq_len
    self.seed = seed
    self.keep_last = keep_last
    ids = tokenizer(corpus.columns["sent0"], add_special_tokens=False)["input_ids"]
    self._lengths = np.array([min(len(x), max_seq_len - 2) for x in ids], np.int64)
    self._offsets = np.concatenate([[0], np.cumsum([len(x) for x in ids])])
    self._tokens = np.fromiter((t for x in ids for t in x), np.int32, count=int(self._offsets[-1]))
    self._cls, self._sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    self._pad = tokenizer.pad_token_id or 0
    self._layouts: dict[int, list[np.ndarray]] = {}
    self._epoch_steps: list[int] = []
    if self.steps_in_epoch(0) == 0:
      raise DataError(
        f"{corpus.path}: {len(self._layout(0))} packed sequences of {max_seq_len} tokens, fewer "
        f"than one batch of {batch_size}"
      )

  def _layout(self, epoch: int) -> list[np.ndarray]:
    """The sentence indices of each packed sequence of ``epoch``, in order."""
    layout = self._layouts.get(epoch)
    if layout is None:
      order = np.random.default_rng([self.seed, epoch]).permutation(len(self._lengths))
      need = self._lengths[order] + 1  # The sentence and its [SEP].
      layout, start, used = [], 0, 0
      budget = self.max_seq_len - 1  # After [CLS].
      for i, n in enumerate(need.tolist()):
        if used + n > budget and i > start:
          layout.append(order[start:i])
          start, used = i, 0
        used += n
      layout.append(order[start:])
      if len(self._layouts) > 4:  # Resume and prefetch only look near the current epoch.
        self._layouts.pop(min(self._layouts))
      self._layouts[epoch] = layout
    return layout

  def steps_in_epoch(self, epoch: int) -> int:
    while len(self._epoch_steps) <= epoch:
      sequences = len(self._layout(len(self._epoch_steps)))
      steps = -(-sequences // self.batch_size) if self.keep_last else sequences // self.batch_size
      self._epoch_steps.append(steps)
    return self._epoch_steps[epoch]

  @property
  def steps_per_epoch(self) -> int:
    """Batches in epoch 0 (other epochs pack a little differently and may have one more or less)."""
    return self.steps_in_epoch(0)

  def total_steps(self, num_epochs: int) -> int:
    return sum(self.steps_in_epoch(e) for e in range(num_epochs))

  def locate(self, step: int) -> tuple[int, int]:
    """(epoch, batch within the epoch) of a step."""
    epoch = 0
    while step >= self.steps_in_epoch(epoch):
      step -= self.steps_in_epoch(epoch)
      epoch += 1
    return epoch, step

  def sequence(self, sentences: np.ndarray) -> np.ndarray:
    """The token ids ``[CLS] s1 [SEP] s2 [SEP] ...`` of one packed sequence (unpadded)."""
    parts = [np.asarray([self._cls], np.int32)]
    for s in sentences.tolist():
      start = self._offsets[s]
      parts.append(self._tokens[start : start + self._lengths[s]])
      parts.append(np.asarray([self._sep], np.int32))
    return np.concatenate(parts)[: self.max_seq_len]

  def batch(self, step: int, positions: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The batch of ``step``, or only its rows ``positions`` (one process's shard in multi-host training)."""
    epoch, k = self.locate(step)
    sequences = self._layout(epoch)[k * self.batch_size : (k + 1) * self.batch_size]
    rows = range(self.batch_size) if positions is None else positions.tolist()
    ids = np.full((len(rows), 1, self.max_seq_len), self._pad, np.int32)
    mask = np.zeros((len(rows), 1, self.max_seq_len), np.int32)
    for i, r in enumerate(rows):
      if r < len(sequences):  # Past the end: an empty sequence filling the last batch (keep_last).
        tokens = self.sequence(sequences[r])
        ids[i, 0, : len(tokens)] = tokens
        mask[i, 0, : len(tokens)] = 1
    return {"input_ids": ids, "attention_mask": mask}

  def iterate(
    self, start_step: int, end_step: int, prefetch: int = 2, positions: np.ndarray | None = None
  ) -> Iterator[dict[str, np.ndarray]]:
    """Batches (or their rows ``positions``) for steps ``start_step .. end_step - 1``, made ahead in a thread."""
    return prefetched(self.batch, start_step, end_step, prefetch, positions)
