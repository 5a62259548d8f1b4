"""Deterministic, resumable batches of a corpus, addressable by step, tokenized ahead in a thread."""

from __future__ import annotations

import concurrent.futures
import copy
from collections.abc import Iterator

import numpy as np

from jaxcse.data import tokenization
from jaxcse.data.corpora import Corpus
from jaxcse.data.root import DataError


def prefetched(make_batch, start_step: int, end_step: int, prefetch: int, positions: np.ndarray | None
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
    # A copy of its own: `iterate` tokenizes in a thread while the caller (evaluation during training) may use
    # the original, and a Hugging Face fast tokenizer used by two threads at once fails ("Already borrowed").
    self.tokenizer = copy.deepcopy(tokenizer)
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

  def batch(self, step: int, positions: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The batch of ``step``, or only its rows ``positions`` (one process's shard in multi-host training).

    Rows are tokenized one by one to ``max_seq_len``, so a shard equals the
    same rows of the whole batch, whichever process reads it.
    """
    rows = self.indices(step) if positions is None else self.indices(step)[positions]
    ids, masks = [], []
    for column in self.corpus.columns.values():
      i, m = tokenization.tokenize_padded(self.tokenizer, [column[r] for r in rows], self.max_seq_len)
      ids.append(i)
      masks.append(m)
    return {"input_ids": np.stack(ids, axis=1), "attention_mask": np.stack(masks, axis=1)}

  def iterate(self, start_step: int, end_step: int, prefetch: int = 2, positions: np.ndarray | None = None
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

  def __init__(self, corpus: Corpus, tokenizer, *, batch_size: int, max_seq_len: int, seed: int,
               keep_last: bool = False):
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
      raise DataError(f"{corpus.path}: {len(self._layout(0))} packed sequences of {max_seq_len} tokens, fewer "
                      f"than one batch of {batch_size}")

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

  def iterate(self, start_step: int, end_step: int, prefetch: int = 2, positions: np.ndarray | None = None
              ) -> Iterator[dict[str, np.ndarray]]:
    """Batches (or their rows ``positions``) for steps ``start_step .. end_step - 1``, made ahead in a thread."""
    return prefetched(self.batch, start_step, end_step, prefetch, positions)
