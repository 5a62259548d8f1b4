"""Tokenization shared by training (fixed-length batches) and encoding (length buckets).

A leaf module: Hugging Face tokenizers in, int32 numpy arrays out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Padded lengths of encoding batches. Steps of 4 up to 64 tokens, where most sentences are: sorted batches
# then compute on ~1.13x their real tokens (STS, wiki lines with MiniLM's tokenizer) against ~1.5x with
# powers of two, for at most 12 more compilations, each paid once per BucketedEmbedder.
LENGTH_BUCKETS = (*range(4, 65, 4), *range(80, 129, 16), *range(160, 257, 32), *range(320, 513, 64))


def bucket(length: int, limit: int) -> int:
  """The smallest bucket length that holds ``length`` tokens, at most ``limit``."""
  for b in LENGTH_BUCKETS:
    if length <= b:
      return min(b, limit)
  return limit


def tokenize(tokenizer, sentences: Sequence[str], max_len: int) -> list[list[int]]:
  """Token ids with special tokens, each cut to ``max_len``."""
  return tokenizer(list(sentences), add_special_tokens=True, truncation=True, max_length=max_len)["input_ids"]


def tokenize_padded(tokenizer, sentences: Sequence[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
  """int32 ``(input_ids, attention_mask)``, each ``[len(sentences), max_len]``: cut and padded to ``max_len``."""
  enc = tokenizer(
    list(sentences),
    add_special_tokens=True,
    truncation=True,
    max_length=max_len,
    padding="max_length",
    return_tensors="np",
  )
  return enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)
