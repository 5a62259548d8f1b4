"""The discrete augmentations of jaxcse.training.augment: golden outputs, a plain-Python reference, and invariants."""

from __future__ import annotations

import fractions

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse.training import augment

# A toy vocabulary: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], 5-9 words, 10-11 '##' pieces.
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
CONTINUATION = np.zeros(12, bool)
CONTINUATION[[10, 11]] = True
PIECES = augment.WordPieces(CONTINUATION, (PAD, UNK, CLS, SEP, MASK), PAD, MASK)

# Row 0: [CLS] a ##x b c ##y ##x d [SEP] (words: a##x, b, c##y##x, d); row 1: one word; row 2: nine words, full.
IDS = jnp.array(
  [[2, 5, 10, 6, 7, 11, 10, 8, 3, 0, 0], [2, 9, 3, 0, 0, 0, 0, 0, 0, 0, 0], [2, 5, 6, 7, 8, 9, 5, 6, 7, 8, 3]],
  jnp.int32,
)
MASK_ROWS = (jnp.arange(11)[None, :] < jnp.array([[9], [3], [11]])).astype(jnp.int32)


def _to_words(ids, mask):
  """Plain-Python word lists of one row: [[piece, ...], ...] of its content tokens."""
  out = []
  for token, m in zip(np.asarray(ids).tolist(), np.asarray(mask).tolist()):
    if not m or token in PIECES.special_ids:
      continue
    if CONTINUATION[token] and out:
      out[-1].append(token)
    else:
      out.append([token])
  return out


def _row(words, length):
  """Ids and mask of ``[CLS] words [SEP]`` padded to ``length``."""
  tokens = [CLS, *[t for w in words for t in w], SEP]
  return tokens + [PAD] * (length - len(tokens)), [1] * len(tokens) + [0] * (length - len(tokens))


def _round_half_up(fraction, n):
  return int(fractions.Fraction(fraction).limit_denominator(1000) * n + fractions.Fraction(1, 2))


def test_word_structure():
  content, word, num_words = augment.words(IDS, MASK_ROWS, PIECES)
  np.testing.assert_array_equal(num_words, [4, 1, 9])
  np.testing.assert_array_equal(word[0, 1:8], [0, 0, 1, 2, 2, 2, 3])
  np.testing.assert_array_equal(content[0], [0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0])
  np.testing.assert_array_equal(content[1], [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0])


def test_share_of_words_rounds_half_up_exactly():
  n = jnp.arange(0, 41)
  for fraction in (0.0, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0):
    expected = [_round_half_up(fraction, int(k)) for k in n]
    np.testing.assert_array_equal(augment.share_of_words(fraction, n), expected, err_msg=str(fraction))


# Exact outputs for fixed keys (checked against the reference below and by hand: e.g. crop 30% of row 0's 4
# words keeps round(4 - 1.2) = 3 contiguous words, here b, c##y##x, d).
GOLDEN = {
  "crop": (
    lambda: augment.crop(jax.random.key(0), IDS, MASK_ROWS, fraction=0.3, pieces=PIECES),
    [[2, 6, 7, 11, 10, 8, 3, 0, 0, 0, 0], [2, 9, 3, 0, 0, 0, 0, 0, 0, 0, 0], [2, 6, 7, 8, 9, 5, 6, 3, 0, 0, 0]],
  ),
  "word_deletion": (
    lambda: augment.delete_words(jax.random.key(1), IDS, MASK_ROWS, fraction=0.3, pieces=PIECES),
    [[2, 5, 10, 6, 7, 11, 10, 3, 0, 0, 0], [2, 9, 3, 0, 0, 0, 0, 0, 0, 0, 0], [2, 5, 6, 8, 9, 6, 8, 3, 0, 0, 0]],
  ),
  "delete_one_word": (
    lambda: augment.delete_words(jax.random.key(1), IDS, MASK_ROWS, count=1, pieces=PIECES),
    [[2, 5, 10, 6, 7, 11, 10, 3, 0, 0, 0], [2, 9, 3, 0, 0, 0, 0, 0, 0, 0, 0], [2, 5, 6, 8, 9, 5, 6, 7, 8, 3, 0]],
  ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_outputs(name):
  run, expected = GOLDEN[name]
  ids, mask = run()
  np.testing.assert_array_equal(ids, expected)
  np.testing.assert_array_equal(mask, np.asarray(expected) != PAD)


def _peaked_logits(ids, mask):
  """A fake MLM: [CLS] is its favourite (never sampled), then the piece ##x (not at a word's first piece), then
  token 9, all far ahead of the rest: a replaced word of k pieces becomes 9 ##x ... ##x."""
  del mask
  return sum(
    value * jax.nn.one_hot(jnp.full(ids.shape, token), 12) for token, value in ((CLS, 50.0), (10, 40.0), (9, 30.0))
  )


def test_mlm_replace_golden_and_what_the_model_sees():
  seen = {}

  def logits_fn(ids, mask):
    seen["ids"] = ids
    return _peaked_logits(ids, mask)

  ids, mask = augment.mlm_replace(jax.random.key(2), IDS, MASK_ROWS, fraction=0.5, pieces=PIECES, logits_fn=logits_fn)
  # Row 0: 2 of 4 words (a##x and c##y##x), every piece masked, then sampled as 9 ##x ...; the mask is unchanged.
  np.testing.assert_array_equal(seen["ids"][0], [2, 4, 4, 6, 4, 4, 4, 8, 3, 0, 0])
  np.testing.assert_array_equal(ids[0], [2, 9, 10, 6, 9, 10, 10, 8, 3, 0, 0])
  np.testing.assert_array_equal(np.asarray(ids[2])[[0, 10]], [CLS, SEP])
  assert int((np.asarray(seen["ids"][2]) == MASK).sum()) == 5  # round(0.5 x 9) = 5 one-piece words.
  np.testing.assert_array_equal(mask, MASK_ROWS)


def _random_batch(seed, rows=16, length=24):
  rng = np.random.default_rng(seed)
  ids, mask = [], []
  for _ in range(rows):
    words = []
    for _ in range(rng.integers(0, 9)):
      words.append([int(rng.integers(5, 10)), *[int(t) for t in rng.integers(10, 12, rng.integers(0, 3))]])
    while sum(map(len, words)) + 2 > length:
      words.pop()
    i, m = _row(words, length)
    ids.append(i)
    mask.append(m)
  return jnp.array(ids, jnp.int32), jnp.array(mask, jnp.int32)


def _reference(op, key, ids, mask, fraction):
  """Plain Python: the same random draws, the words chosen by sorting, the rows rebuilt from word lists."""
  rows, length = ids.shape
  words = [_to_words(i, m) for i, m in zip(ids, mask)]
  out = []
  if op == "crop":
    u = np.asarray(jax.random.uniform(key, (rows,)))
    for r, w in enumerate(words):
      n = len(w)
      keep = max(n - _round_half_up(fraction, n), min(n, 1))
      first = min(int(np.floor(np.float32(u[r]) * np.float32(n - keep + 1))), n - keep)
      out.append(_row(w[first : first + keep], length))
  else:
    key_choose = jax.random.split(key)[0] if op == "mlm" else key
    score = np.asarray(jax.random.uniform(key_choose, (rows, length)))
    for r, w in enumerate(words):
      n = len(w)
      count = _round_half_up(fraction, n) if op != "one" else 1
      if op != "mlm":
        count = min(count, max(n - 1, 0))
      chosen = set(sorted(range(n), key=lambda j: score[r, j])[:count])
      if op == "mlm":
        out.append(_row([[9] + [10] * (len(x) - 1) if j in chosen else x for j, x in enumerate(w)], length))
      else:
        out.append(_row([x for j, x in enumerate(w) if j not in chosen], length))
  return np.array([o[0] for o in out]), np.array([o[1] for o in out])


@pytest.mark.parametrize(
  "op,fraction",
  [
    ("crop", 0.1),
    ("crop", 0.3),
    ("crop", 0.5),
    ("deletion", 0.1),
    ("deletion", 0.3),
    ("one", None),
    ("mlm", 0.15),
    ("mlm", 0.5),
  ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_plain_python_reference(op, fraction, seed):
  ids, mask = _random_batch(seed)
  key = jax.random.key(100 + seed)
  if op == "crop":
    got = augment.crop(key, ids, mask, fraction=fraction, pieces=PIECES)
  elif op == "deletion":
    got = augment.delete_words(key, ids, mask, fraction=fraction, pieces=PIECES)
  elif op == "one":
    got = augment.delete_words(key, ids, mask, count=1, pieces=PIECES)
  else:
    got = augment.mlm_replace(key, ids, mask, fraction=fraction, pieces=PIECES, logits_fn=_peaked_logits)
  expected = _reference(op, key, np.asarray(ids), np.asarray(mask), fraction)
  np.testing.assert_array_equal(got[0], expected[0])
  np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.parametrize(
  "view",
  [
    augment.SecondView(crop=0.2),
    augment.SecondView(word_deletion=0.3),
    augment.SecondView(delete_one_word=True),
    augment.SecondView(mlm=0.15),
    augment.SecondView(crop=0.1, mlm=0.15),
  ],
)
def test_invariants(view):
  """[CLS] first, [SEP] last, the mask a prefix of ones, padding after it, no special token lost or added, no
  empty sentence made from a non-empty one, and the result is the same under jit."""
  ids, mask = _random_batch(7, rows=64)
  key = jax.random.key(3)
  out_ids, out_mask = view(key, ids, mask, PIECES, _peaked_logits)
  jit_ids, jit_mask = jax.jit(lambda k, i, m: view(k, i, m, PIECES, _peaked_logits))(key, ids, mask)
  np.testing.assert_array_equal(out_ids, jit_ids)
  np.testing.assert_array_equal(out_mask, jit_mask)
  assert out_ids.shape == ids.shape and out_ids.dtype == ids.dtype and out_mask.dtype == mask.dtype
  for before_i, before_m, i, m in zip(*map(np.asarray, (ids, mask, out_ids, out_mask))):
    n = int(m.sum())
    np.testing.assert_array_equal(m, np.arange(len(m)) < n)
    assert i[0] == CLS and i[n - 1] == SEP and (i[n:] == PAD).all()
    assert not np.isin(i[1 : n - 1], PIECES.special_ids).any()
    before_words, words = _to_words(before_i, before_m), _to_words(i, m)
    assert (len(words) == 0) == (len(before_words) == 0)
    if view.mlm and not (view.crop or view.word_deletion or view.delete_one_word):  # Replaced words stay words.
      assert [len(w) for w in words] == [len(w) for w in before_words]
    if not view.mlm:  # Deletions keep the other words, in order.
      remaining = iter(before_words)
      assert all(any(w == b for b in remaining) for w in words)


def test_wordpieces_from_the_shipped_tokenizer_and_a_non_wordpiece_one():
  from tokenizers import Tokenizer, models as tok_models
  from transformers import AutoTokenizer, PreTrainedTokenizerFast

  from jaxcse.storage import hub

  tokenizer = AutoTokenizer.from_pretrained(hub.resolve_model_path("jaxcse/bert-mini-wiki-uncased"))
  pieces = augment.WordPieces.from_tokenizer(tokenizer)
  vocab = tokenizer.get_vocab()
  assert pieces.continuation.shape == (len(vocab),)
  assert all(pieces.continuation[i] == t.startswith("##") for t, i in vocab.items())
  assert (pieces.pad_id, pieces.mask_id) == (tokenizer.pad_token_id, tokenizer.mask_token_id)
  assert {tokenizer.cls_token_id, tokenizer.sep_token_id} <= set(pieces.special_ids)
  ids = jnp.array([tokenizer("unbelievably short sentences", padding="max_length", max_length=12)["input_ids"]])
  content, word, num_words = augment.words(ids, (ids != tokenizer.pad_token_id).astype(jnp.int32), pieces)
  assert int(num_words[0]) == 3  # "unbelievably" is several pieces, one word.
  word_level = PreTrainedTokenizerFast(
    tokenizer_object=Tokenizer(tok_models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
  )
  with pytest.raises(ValueError, match="need a WordPiece vocabulary"):
    augment.WordPieces.from_tokenizer(word_level)


def test_truncate_cuts_long_rows_to_their_first_tokens_then_sep():
  ids, mask = augment.truncate(IDS, MASK_ROWS, 6, sep_id=SEP, pad_id=PAD)
  # Row 0 (9 tokens) and row 2 (11) are cut: 5 tokens then [SEP], even mid-word; row 1 (3 tokens) fits.
  np.testing.assert_array_equal(ids, [[2, 5, 10, 6, 7, 3], [2, 9, 3, 0, 0, 0], [2, 5, 6, 7, 8, 3]])
  np.testing.assert_array_equal(mask, [[1] * 6, [1, 1, 1, 0, 0, 0], [1] * 6])
  assert ids.dtype == IDS.dtype and mask.dtype == MASK_ROWS.dtype
  same = augment.truncate(IDS, MASK_ROWS, 11, sep_id=SEP, pad_id=PAD)  # Every row fits: unchanged.
  np.testing.assert_array_equal(same[0], IDS)
  np.testing.assert_array_equal(same[1], MASK_ROWS)
  exact = augment.truncate(IDS, MASK_ROWS, 9, sep_id=SEP, pad_id=PAD)  # Row 0 fills 9 exactly: kept whole.
  np.testing.assert_array_equal(exact[0][0], IDS[0, :9])
  with pytest.raises(ValueError, match="cannot be cut to 12"):
    augment.truncate(IDS, MASK_ROWS, 12, sep_id=SEP, pad_id=PAD)


def test_truncate_is_the_tokenizers_own_truncation(tokenizer):
  """Sentences tokenized to 64 tokens, then cut to L, are the same sentences tokenized to L: ids and mask."""
  from jaxcse.data import tokenization
  from tests import helpers

  root = helpers.shared_data_dir()
  with open(f"{root}/corpora/wiki_offline.txt", encoding="utf-8") as f:
    sentences = [line.strip() for _, line in zip(range(1500), f)]
  with open(f"{root}/senteval/downstream/STS/STSBenchmark/sts-dev.csv", encoding="utf-8") as f:
    sentences += [line.split("\t")[5] for _, line in zip(range(500), f)]
  long_ids, long_mask = tokenization.tokenize_padded(tokenizer, sentences, 64)
  cut = jax.jit(augment.truncate, static_argnums=2, static_argnames=("sep_id", "pad_id"))
  for length in (3, 16, 32, 63, 64):
    ids, mask = cut(long_ids, long_mask, length, sep_id=tokenizer.sep_token_id, pad_id=tokenizer.pad_token_id)
    expected_ids, expected_mask = tokenization.tokenize_padded(tokenizer, sentences, length)
    np.testing.assert_array_equal(ids, expected_ids, err_msg=f"length {length}")
    np.testing.assert_array_equal(mask, expected_mask, err_msg=f"length {length}")
    if length in (16, 32):  # Both kinds of row are there: cut ones, and ones that fit with padding.
      assert 100 < int((long_mask.sum(axis=1) > length).sum()) < len(sentences) - 100
