"""Proves that the official code's crop or word deletion made the second views jaxcse's definition asks for.

jaxcse's definition (``jaxcse/training/augment.py``): a row's words are runs of WordPiece tokens (a piece not
continuing a word, then its ``##`` pieces; special tokens, [UNK] included, are never words), ``round(k n)`` of a
row's ``n`` words is ``augment.share_of_words``; crop keeps a contiguous span of ``max(n - round(k n), 1)`` words,
word deletion deletes ``min(round(k n), n - 1)`` words. This script takes the words and counts from jaxcse's own
functions (run it with jaxcse on the path), applied to jaxcse's loader's rows (``jaxcse_sentences.py``'s .npz),
and requires every second view the official code received (``official_launch.py``'s recorded batches) to be its
first view with exactly that many whole words removed (word deletion: any words; crop: the words before and after
one span), every other token kept in order. Which words go is random on both sides and is not compared.

The crop patch (``simcse_crop.patch``, written before this check) counts an [UNK] as a word, jaxcse does not, so a
crop row holding an [UNK] (about 0.03% of the corpus' rows) is skipped and counted, not failed. The word-deletion
patch excludes [UNK] as jaxcse does: every row is checked. Exit 1 on any difference.

  PYTHONPATH=JAXCSE python check_second_views.py JAXCSE.npz OFFICIAL.npz ENCODER {crop,word_deletion} FRACTION
"""

import collections
import sys

import jax.numpy as jnp
import numpy as np
import transformers

from jaxcse.training import augment


def units_of(ids: np.ndarray, content: np.ndarray, word: np.ndarray) -> list[tuple[tuple[int, ...], bool]]:
  """The row as ``(tokens, is_word)`` units: a word's pieces together, every other real token alone."""
  units: list[tuple[tuple[int, ...], bool]] = []
  for i, token in enumerate(ids):
    if content[i] and i > 0 and content[i - 1] and word[i] == word[i - 1]:
      units[-1] = (units[-1][0] + (int(token),), True)
    else:
      units.append(((int(token),), bool(content[i])))
  return units


def deletion_counts(units, target: tuple[int, ...]) -> set[int]:
  """Every number of words whose removal from ``units`` (other tokens all kept) leaves exactly ``target``."""
  reach = {0: {0}}  # tokens of target matched -> numbers of words deleted so far
  for tokens, is_word in units:
    nxt: dict[int, set[int]] = collections.defaultdict(set)
    for at, deleted in reach.items():
      if target[at : at + len(tokens)] == tokens:
        nxt[at + len(tokens)] |= deleted
      if is_word:
        nxt[at] |= {d + 1 for d in deleted}
    reach = nxt
  return reach.get(len(target), set())


def is_crop(units, target: tuple[int, ...], keep: int) -> bool:
  """Whether ``target`` is ``units`` with all words but one contiguous span of ``keep`` of them removed."""
  word_at = [i for i, (_, is_word) in enumerate(units) if is_word]
  for first in range(len(word_at) - keep + 1):
    kept = set(word_at[first : first + keep])
    if tuple(t for i, (tokens, is_word) in enumerate(units) if not is_word or i in kept for t in tokens) == target:
      return True
  return False


def main(jaxcse_npz: str, official_npz: str, encoder: str, op: str, fraction: str) -> None:
  if op not in ("crop", "word_deletion"):
    raise SystemExit(f"op: crop or word_deletion, not {op!r}")
  pieces = augment.WordPieces.from_tokenizer(transformers.AutoTokenizer.from_pretrained(encoder))
  jax_b, off_b = np.load(jaxcse_npz), np.load(official_npz)
  steps = len([k for k in off_b.files if k.startswith("input_ids_")])
  if steps == 0 or steps > len(jax_b["input_ids"]):
    raise SystemExit(f"{official_npz}: {steps} recorded batches, jaxcse's file has {len(jax_b['input_ids'])}")
  removed, skipped, problems = collections.Counter(), 0, []
  for k in range(steps):
    j_ids, j_mask = jax_b["input_ids"][k][:, 0], jax_b["attention_mask"][k][:, 0]
    content, word, num_words = (np.asarray(a) for a in augment.words(jnp.asarray(j_ids), jnp.asarray(j_mask), pieces))
    share = np.asarray(augment.share_of_words(float(fraction), jnp.asarray(num_words)))
    ids, mask = off_b[f"input_ids_{k}"], off_b[f"attention_mask_{k}"]
    for r in range(len(j_ids)):
      on = j_mask[r] != 0
      units = units_of(j_ids[r][on], content[r][on], word[r][on])
      first = tuple(int(t) for t in ids[r, 0][mask[r, 0] != 0])
      second = tuple(int(t) for t in ids[r, 1][mask[r, 1] != 0])
      if first != tuple(t for tokens, _ in units for t in tokens):
        problems.append(f"batch {k} row {r}: the first view is not jaxcse's row")
        continue
      n = int(num_words[r])
      if op == "word_deletion":
        want = min(int(share[r]), max(n - 1, 0))
        got = deletion_counts(units, second)
        ok = want in got
      else:
        if any(not is_word for _, is_word in units[1:-1]):
          skipped += 1  # a special token between [CLS] and [SEP], an [UNK]: the crop patch counts it as a word
          continue
        want = n - max(n - int(share[r]), min(n, 1))
        ok = is_crop(units, second, n - want)
        got = {want} if ok else set()
      if ok:
        removed[want] += 1
      else:
        fits = sorted(got) or "no count"
        problems.append(f"batch {k} row {r}: {n} words, jaxcse's {op} removes {want}; the official view fits {fits}")
  checked = sum(removed.values())
  print(
    f"{op} {fraction}: {checked} second views of {steps} batches equal their first view less jaxcse's number of "
    f"whole words ({', '.join(f'{c} removed: {removed[c]}' for c in sorted(removed))})"
    + (f"; {skipped} crop rows with an [UNK] skipped" if skipped else "")
  )
  if problems:
    raise SystemExit(f"{len(problems)} second views differ:\n" + "\n".join(problems[:20]))


if __name__ == "__main__":
  main(*sys.argv[1:])
