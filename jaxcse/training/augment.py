"""Discrete augmentations of token ids (SimCSE's Table 1), as pure functions on fixed-shape, jittable batches.

SimCSE compares its dropout views with discrete augmentations of the second view
(Gao et al., 2021, Table 1; Table 2 of arXiv v1): crop, word deletion, delete one
word, and MLM replacement. Here they work on what the train step holds: WordPiece
ids ``[rows, len]`` with their attention mask, each row ``[CLS] t1 ... tn [SEP]``
then padding. Every function returns arrays of the same shapes, re-packed
left-aligned (padding id after the last kept token, mask 1 exactly on the kept
tokens), so the step compiles once.

Words: a *word* is a run of WordPiece tokens, a token not starting with ``##``
followed by its ``##`` continuation pieces (``WordPieces``); deleting or replacing a
word takes all its pieces. Special tokens ([CLS], [SEP], [PAD], ...) and padding are
never deleted or replaced.

Counts: ``k%`` of a row's ``n`` words is ``floor(k * n + 1/2)`` words (round half up,
``k`` taken to 3 decimals, computed in integers so that it is exact), so a short row
may be left unchanged by a small ``k``; deletions always leave at least one word.

* ``crop``: keep a random contiguous span of ``n - round(k n)`` words (SimCSE: "keep
  100-k% of the length", "a continuous span"), dropping the words before and after it.
* ``delete_words``: delete ``min(round(k n), n - 1)`` words chosen uniformly without
  replacement (SimCSE's "word deletion k%"); with ``count=1``, "delete one word".
* ``mlm_replace``: choose ``round(k n)`` words the same way, set all their pieces to
  [MASK], and replace each masked piece by a sample from a masked-language model's
  prediction there (SimCSE: "use BERT-base to replace k% of words"); special tokens
  are never sampled, nor ``##`` pieces at a word's first piece (so a replaced word
  stays a word of its own). The model is a function ``logits_fn(ids, mask) ->
  [rows, len, vocab]`` (the step passes a frozen MLM).

Punctuation marks are pieces of their own in BERT's vocabulary, so they count as words.

``truncate`` cuts rows to a shorter length the way the tokenizer cuts a sentence (its first tokens, then [SEP]), so
a crop can act on the whole sentence before the views are cut to the encoder's length
(``augment.crop_before_truncation``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

# (masked ids [rows, len], attention mask [rows, len]) -> vocabulary logits [rows, len, vocab].
LogitsFn = Callable[[jax.Array, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class WordPieces:
  """What the augmentations need to know of a WordPiece vocabulary.

  Attributes:
    continuation: ``[vocab]`` bool, True for pieces that continue a word (``##...``).
    special_ids: ids never deleted, replaced or sampled ([CLS], [SEP], [PAD], [MASK], [UNK]).
    pad_id: the padding id written after a row's last kept token.
    mask_id: the [MASK] id (MLM replacement).
  """

  continuation: np.ndarray
  special_ids: tuple[int, ...]
  pad_id: int
  mask_id: int

  @classmethod
  def from_tokenizer(cls, tokenizer) -> "WordPieces":
    """From a Hugging Face WordPiece (BERT) tokenizer; a ValueError for any other kind."""
    vocab = tokenizer.get_vocab()
    if not any(token.startswith("##") for token in vocab):
      raise ValueError(
        f"the discrete augmentations need a WordPiece vocabulary (pieces marked '##'); "
        f"{type(tokenizer).__name__} has none"
      )
    continuation = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, index in vocab.items():
      continuation[index] = token.startswith("##")
    return cls(
      continuation,
      tuple(int(i) for i in tokenizer.all_special_ids),
      int(tokenizer.pad_token_id),
      int(tokenizer.mask_token_id),
    )


def _per_mille(fraction: float) -> int:
  per_mille = round(fraction * 1000)
  if not 0 <= per_mille <= 1000:
    raise ValueError(f"a fraction of the words must be in [0, 1], not {fraction}")
  return per_mille


def share_of_words(fraction: float, num_words: jax.Array) -> jax.Array:
  """``floor(fraction * num_words + 1/2)`` in int32, exactly: ``fraction`` is taken to 3 decimals (per mille)."""
  return (_per_mille(fraction) * num_words + 500) // 1000


def words(ids: jax.Array, mask: jax.Array, pieces: WordPieces) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The word structure of ``[rows, len]`` ids.

  Returns:
    ``(content [rows, len] bool, word [rows, len] int32, num_words [rows] int32)``: content marks the real,
    non-special tokens; ``word`` is the index of the word a content token belongs to (0-based, in order; -1
    before the first word); a word starts at a content token that is not a ``##`` piece following another
    content token.
  """
  content = (mask != 0) & ~jnp.isin(ids, jnp.asarray(pieces.special_ids, ids.dtype))
  continues = jnp.asarray(pieces.continuation)[ids]
  after_content = jnp.pad(content[:, :-1], ((0, 0), (1, 0)))
  starts = content & ~(continues & after_content)
  word = jnp.cumsum(starts, axis=1, dtype=jnp.int32) - 1
  return content, word, starts.sum(axis=1, dtype=jnp.int32)


def repack(ids: jax.Array, mask: jax.Array, keep: jax.Array, *, pad_id: int) -> tuple[jax.Array, jax.Array]:
  """Moves the kept real tokens of each row to its front, in order; padding (``pad_id``, mask 0) after them."""
  keep = keep & (mask != 0)
  position = jnp.where(keep, jnp.cumsum(keep, axis=1) - 1, ids.shape[1])  # Dropped tokens go out of bounds.
  rows = jnp.arange(ids.shape[0])[:, None]
  packed = jnp.full_like(ids, pad_id).at[rows, position].set(ids, mode="drop")
  kept = keep.sum(axis=1, keepdims=True)
  return packed, (jnp.arange(ids.shape[1])[None, :] < kept).astype(mask.dtype)


def _choose_words(key: jax.Array, num_words: jax.Array, count: jax.Array, length: int) -> jax.Array:
  """``[rows, length]`` bool over word indices: ``count[r]`` of row r's ``num_words[r]`` words, uniformly at random."""
  slots = jnp.arange(length)[None, :]
  # Real words get a uniform score, the empty slots 2: the lowest `count` scores are a uniform sample of the words.
  score = jnp.where(slots < num_words[:, None], jax.random.uniform(key, (num_words.shape[0], length)), 2.0)
  rank = jnp.argsort(jnp.argsort(score, axis=1), axis=1)
  return rank < count[:, None]


def _of_word(per_word: jax.Array, word: jax.Array) -> jax.Array:
  """Each token's entry of a ``[rows, len]`` per-word array (index ``word``; tokens before any word get slot 0)."""
  return jnp.take_along_axis(per_word, jnp.maximum(word, 0), axis=1)


def crop(
  key: jax.Array, ids: jax.Array, mask: jax.Array, *, fraction: float, pieces: WordPieces
) -> tuple[jax.Array, jax.Array]:
  """Keeps a random contiguous span of ``n - round(fraction n)`` of each row's ``n`` words (at least one)."""
  content, word, num_words = words(ids, mask, pieces)
  keep_words = jnp.maximum(num_words - share_of_words(fraction, num_words), jnp.minimum(num_words, 1))
  starts = num_words - keep_words + 1  # Possible first words of the span.
  first = jnp.minimum(jnp.floor(jax.random.uniform(key, num_words.shape) * starts).astype(jnp.int32), starts - 1)
  inside = (word >= first[:, None]) & (word < (first + keep_words)[:, None])
  return repack(ids, mask, ~content | inside, pad_id=pieces.pad_id)


def truncate(ids: jax.Array, mask: jax.Array, length: int, *, sep_id: int, pad_id: int) -> tuple[jax.Array, jax.Array]:
  """Cuts rows to ``length`` tokens as a tokenizer truncating to ``length`` would.

  Args:
    ids: ``[rows, n]`` token ids, ``n >= length``, each row ``[CLS] t1 ... tm [SEP]`` then padding (its real tokens
      first: the mask a prefix of ones).
    mask: ``[rows, n]`` attention mask.
    length: the tokens kept, special tokens included (at least 2).
    sep_id: the [SEP] id, the last token of a cut row.
    pad_id: the id written at every position the mask leaves out.

  Returns:
    ``(ids, mask)``, ``[rows, length]``, same dtypes: a row of at most ``length`` real tokens unchanged (its padding
    shortened); a longer row's first ``length - 1`` tokens then [SEP], mask all ones. For a sentence tokenized to
    ``n`` tokens this is the sentence tokenized to ``length`` (BERT's ``truncation=True, max_length=length``).
  """
  if not 2 <= length <= ids.shape[1]:
    raise ValueError(
      f"truncate: rows of {ids.shape[1]} tokens cannot be cut to {length} (2 <= length <= {ids.shape[1]})"
    )
  cut = mask.sum(axis=1) > length
  ids, mask = ids[:, :length], mask[:, :length]
  last = jnp.arange(length)[None, :] == length - 1
  ids = jnp.where(cut[:, None] & last, jnp.asarray(sep_id, ids.dtype), ids)
  return jnp.where(mask != 0, ids, jnp.asarray(pad_id, ids.dtype)), mask


def delete_words(
  key: jax.Array,
  ids: jax.Array,
  mask: jax.Array,
  *,
  pieces: WordPieces,
  fraction: float | None = None,
  count: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Deletes ``round(fraction n)`` (or ``count``) words of each row, at random, never its last word."""
  if (fraction is None) == (count is None):
    raise ValueError("give fraction or count")
  content, word, num_words = words(ids, mask, pieces)
  wanted = share_of_words(fraction, num_words) if fraction is not None else jnp.full_like(num_words, count)
  deleted = _choose_words(key, num_words, jnp.clip(wanted, 0, jnp.maximum(num_words - 1, 0)), ids.shape[1])
  return repack(ids, mask, ~(content & _of_word(deleted, word)), pad_id=pieces.pad_id)


def mlm_replace(
  key: jax.Array, ids: jax.Array, mask: jax.Array, *, fraction: float, pieces: WordPieces, logits_fn: LogitsFn
) -> tuple[jax.Array, jax.Array]:
  """Replaces ``round(fraction n)`` words of each row by an MLM's samples at their masked pieces; same mask."""
  k_choose, k_sample = jax.random.split(key)
  content, word, num_words = words(ids, mask, pieces)
  chosen = _choose_words(k_choose, num_words, share_of_words(fraction, num_words), ids.shape[1])
  replaced = content & _of_word(chosen, word)
  logits = logits_fn(jnp.where(replaced, pieces.mask_id, ids), mask).astype(jnp.float32)
  vocab = logits.shape[-1]
  # Never sampled: special tokens, ids past the tokenizer's vocabulary (a model's padded embedding rows), and
  # '##' pieces at the first piece of a word (which would glue the replacement to the word before it).
  banned = (jnp.arange(vocab) >= pieces.continuation.shape[0]).at[jnp.asarray(pieces.special_ids)].set(True)
  continuation = jnp.zeros(vocab, bool).at[: pieces.continuation.shape[0]].set(jnp.asarray(pieces.continuation[:vocab]))
  first_piece = content & (word != jnp.pad(word[:, :-1], ((0, 0), (1, 0)), constant_values=-1))
  banned = banned | (first_piece[..., None] & continuation)
  sampled = jax.random.categorical(k_sample, jnp.where(banned, -jnp.inf, logits), axis=-1).astype(ids.dtype)
  return jnp.where(replaced, sampled, ids), mask


@dataclasses.dataclass(frozen=True)
class SecondView:
  """The discrete augmentations of a second view, applied in this order (each off at 0/False).

  Attributes:
    crop: keep a random contiguous span of (1 - crop) of the words.
    word_deletion: delete this share of the words.
    delete_one_word: delete one word.
    mlm: replace this share of the words by samples of a masked-language model.
  """

  crop: float = 0.0
  word_deletion: float = 0.0
  delete_one_word: bool = False
  mlm: float = 0.0

  @property
  def active(self) -> bool:
    return bool(self.crop or self.word_deletion or self.delete_one_word or self.mlm)

  def __call__(
    self, key: jax.Array, ids: jax.Array, mask: jax.Array, pieces: WordPieces, logits_fn: LogitsFn | None = None
  ) -> tuple[jax.Array, jax.Array]:
    """The augmented ``(ids, mask)``. Each operation has its own key (``split(key, 4)[i]``, in the order above),
    so e.g. "crop + MLM" draws the same MLM choices as "MLM" would on the cropped rows' words."""
    k_crop, k_deletion, k_one, k_mlm = jax.random.split(key, 4)
    if self.crop:
      ids, mask = crop(k_crop, ids, mask, fraction=self.crop, pieces=pieces)
    if self.word_deletion:
      ids, mask = delete_words(k_deletion, ids, mask, fraction=self.word_deletion, pieces=pieces)
    if self.delete_one_word:
      ids, mask = delete_words(k_one, ids, mask, count=1, pieces=pieces)
    if self.mlm:
      if logits_fn is None:
        raise ValueError("MLM replacement needs logits_fn (a masked-language model)")
      ids, mask = mlm_replace(k_mlm, ids, mask, fraction=self.mlm, pieces=pieces, logits_fn=logits_fn)
    return ids, mask
