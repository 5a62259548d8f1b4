"""Compares the word-deletion patch's words and counts with jaxcse's on a whole sentence file (no training).

check_second_views.py checks the patch itself, on the 192 second views a run records; this checks its definition
on every sentence of a file (e.g. a seed's 16,000 from ``jaxcse_sentences.py``), which reaches the rare rows the
first batches may lack (an [UNK]). Each sentence is tokenized as both codes tokenize it (truncation at 32); the
patch's words and count are computed by a copy of its lines (``simcse_word_deletion.patch``:
``delete_words_of_second_views``), jaxcse's by its own ``augment.words`` and ``augment.share_of_words``. Also
printed: the rows where a word_ids word count that keeps [UNK] (the crop patch's) differs from jaxcse's. Exit 1 if
any word or deletion count differs.

  PYTHONPATH=JAXCSE python check_word_counts.py SENTENCES.txt ENCODER [FRACTION]
"""

import math
import sys
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
import transformers

from jaxcse.training import augment

MAX_LEN = 32


def main(sentences: str, encoder: str, fraction: str = "0.1") -> None:
  tokenizer = transformers.AutoTokenizer.from_pretrained(encoder)
  pieces = augment.WordPieces.from_tokenizer(tokenizer)
  with open(sentences, encoding="utf-8") as f:
    lines = f.read().split("\n")[:-1]
  enc = tokenizer(lines, max_length=MAX_LEN, truncation=True, padding="max_length")
  ids, mask = np.asarray(enc["input_ids"]), np.asarray(enc["attention_mask"])
  _, _, num_words = augment.words(jnp.asarray(ids), jnp.asarray(mask), pieces)
  jax_n = np.asarray(num_words)
  jax_count = np.minimum(np.asarray(augment.share_of_words(float(fraction), num_words)), np.maximum(jax_n - 1, 0))
  special, share = set(tokenizer.all_special_ids), Fraction(fraction)
  patch_n, patch_count, with_unk = [], [], 0
  for row in range(len(lines)):
    word_of = enc.word_ids(row)
    # The patch's lines: words are word_ids, less those made only of special tokens.
    order = list(dict.fromkeys(w for w, i in zip(word_of, enc["input_ids"][row]) if w is not None and i not in special))
    n = len(order)
    patch_n.append(n)
    patch_count.append(min(math.floor(share * n + Fraction(1, 2)), n - 1) if n else 0)
    with_unk += len({w for w in word_of if w is not None}) != jax_n[row]
  patch_n, patch_count = np.asarray(patch_n), np.asarray(patch_count)
  words_equal, counts_equal = int((patch_n == jax_n).sum()), int((patch_count == jax_count).sum())
  print(
    f"{sentences}: {len(lines)} sentences; word counts equal {words_equal}, deletion counts ({fraction}) equal "
    f"{counts_equal}; jaxcse deletes {dict(enumerate(np.bincount(jax_count).tolist()))} words; "
    f"{with_unk} rows where word_ids with [UNK] (the crop patch's words) differ from jaxcse's"
  )
  if words_equal != len(lines) or counts_equal != len(lines):
    raise SystemExit("the patch's words or counts differ from jaxcse's")


if __name__ == "__main__":
  main(*sys.argv[1:])
