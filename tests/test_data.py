"""Tests for jaxcse.data: strict corpus reading, data-root resolution, deterministic resumable batches."""

from __future__ import annotations

import logging
import os
import pathlib

import numpy as np
import pytest

from jaxcse import data
from jaxcse.data import tokenization
from jaxcse.data import Batches, Corpus, DataError

NLI_SAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "corpora", "nli_sample.csv")


def _write(path, content: bytes) -> str:
  """Writes raw bytes, so that line endings and encodings are exactly what the test says."""
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(content)
  return str(path)


# ------------------------------------------------------------------------
# read_text_lines.


def test_text_lines_basic(tmp_path):
  path = _write(tmp_path / "c.txt", "first sentence\nsecond, with café\nthird\n".encode())
  corpus = data.read_text_lines(path)
  assert corpus.columns == {"sent0": ["first sentence", "second, with café", "third"]}
  assert corpus.skipped_empty_lines == []
  assert len(corpus) == 3
  assert corpus.path == path


@pytest.mark.parametrize(
  "content",
  [
    b"a b\r\nc d\r\n",  # CRLF.
    b"a b\nc d",  # The last line has no newline: still a sentence.
    b"a b\r\nc d",
    b"a b\nc d\n",  # The final newline does not start an empty last sentence.
  ],
)
def test_text_lines_endings(tmp_path, content):
  corpus = data.read_text_lines(_write(tmp_path / "c.txt", content))
  assert corpus.columns["sent0"] == ["a b", "c d"]
  assert corpus.skipped_empty_lines == []


def test_text_lines_skips_and_records_empty_lines(tmp_path):
  path = _write(tmp_path / "c.txt", b"a\n\n   \nb\n\t\r\nc\n\n")
  corpus = data.read_text_lines(path)
  assert corpus.columns["sent0"] == ["a", "b", "c"]
  assert corpus.skipped_empty_lines == [2, 3, 5, 7]


def test_text_lines_empty_line_is_an_error_when_not_skipping(tmp_path):
  path = _write(tmp_path / "c.txt", b"a\nb\n  \nc\n")
  with pytest.raises(DataError, match=f"{path}:3"):
    data.read_text_lines(path, skip_empty_lines=False)
  # Without empty lines the flag changes nothing.
  clean = _write(tmp_path / "clean.txt", b"a\nb\n")
  assert data.read_text_lines(clean, skip_empty_lines=False).columns["sent0"] == ["a", "b"]


def test_text_lines_invalid_utf8_names_path_and_line(tmp_path):
  path = _write(tmp_path / "c.txt", b"ok\nfine\nbad \xff\xfe here\nlast\n")
  with pytest.raises(DataError, match=f"{path}:3:"):
    data.read_text_lines(path)


def test_text_lines_missing_file(tmp_path):
  path = str(tmp_path / "missing.txt")
  with pytest.raises(DataError, match="missing.txt"):
    data.read_text_lines(path)


@pytest.mark.parametrize("content", [b"", b"\n", b"\n  \n\r\n\t"])
def test_text_lines_no_sentences(tmp_path, content):
  with pytest.raises(DataError, match="no sentences"):
    data.read_text_lines(_write(tmp_path / "c.txt", content))


# ------------------------------------------------------------------------
# read_csv.


def test_csv_triplets_with_quoted_commas_and_newlines(tmp_path):
  path = _write(tmp_path / "t.csv", b'sent0,sent1,hard_neg\n"a, with comma","multi\nline",c\nd,e,"f ""quoted"""\n')
  corpus = data.read_csv(path)
  assert corpus.columns == {
    "sent0": ["a, with comma", "d"],
    "sent1": ["multi\nline", "e"],
    "hard_neg": ["c", 'f "quoted"'],
  }
  assert len(corpus) == 2


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_csv_error_line_is_where_the_row_starts(tmp_path, eol):
  # Rows 1 and 2 span lines 2-3 and 4-6; the bad row starts on physical line 8.
  lines = [
    b"sent0,sent1,hard_neg",
    b'"x","one',
    b'break",z',
    b'a,"two',
    b"",
    b'breaks",c',
    b"ok,ok,ok",
    b"bad,row",
    b"after,row,ok",
  ]
  path = _write(tmp_path / "t.csv", eol.join(lines) + eol)
  with pytest.raises(DataError, match=f"{path}:8: expected 3 fields"):
    data.read_csv(path)


def test_csv_pairs(tmp_path):
  corpus = data.read_csv(_write(tmp_path / "p.csv", b"sent0,sent1\na,b\nc,d\n"))
  assert corpus.columns == {"sent0": ["a", "c"], "sent1": ["b", "d"]}


@pytest.mark.parametrize("header", [b"text", b"sent0", b" text "])
def test_csv_single_column_is_unsupervised_text(tmp_path, header):
  corpus = data.read_csv(_write(tmp_path / "s.csv", header + b"\nfirst\nsecond one\n"))
  assert corpus.columns == {"sent0": ["first", "second one"]}


@pytest.mark.parametrize("row", [b"a,b", b"a,b,c,d", b"a"])
def test_csv_wrong_field_count(tmp_path, row):
  path = _write(tmp_path / "t.csv", b"sent0,sent1,hard_neg\nx,y,z\n" + row + b"\n")
  with pytest.raises(DataError, match=f"{path}:3: expected 3 fields"):
    data.read_csv(path)


@pytest.mark.parametrize("row,column", [(b"a,,c", "sent1"), (b"a,b,   ", "hard_neg"), (b'"",b,c', "sent0")])
def test_csv_empty_field(tmp_path, row, column):
  path = _write(tmp_path / "t.csv", b"sent0,sent1,hard_neg\nx,y,z\n" + row + b"\n")
  with pytest.raises(DataError, match=f"{path}:3: empty {column}"):
    data.read_csv(path)


@pytest.mark.parametrize("content", [b'sent0,sent1\n"a"b,c\n', b'sent0,sent1\n"never closed,d\n'])
def test_csv_malformed_quoting(tmp_path, content):
  path = _write(tmp_path / "t.csv", content)
  with pytest.raises(DataError, match=f"{path}:2: malformed csv row"):
    data.read_csv(path)


@pytest.mark.parametrize(
  "header",
  [
    b"sent1,hard_neg",  # No sent0.
    b"sentence,other",
    b"sent0,sent0",  # Duplicate.
    b"sent0,sent1,sent1",
    b"sent0,hard_neg",  # Hard negatives without positives.
    b"text,sent1",
    b"sent1,sent0",  # Known names in the wrong order.
    b"sent0,sent1,hardneg",  # A typo must not drop the hard negatives.
  ],
)
def test_csv_bad_header(tmp_path, header):
  path = _write(tmp_path / "t.csv", header + b"\n" + b",".join([b"v"] * (header.count(b",") + 1)) + b"\n")
  with pytest.raises(DataError, match=f"{path}:1: header"):
    data.read_csv(path)


@pytest.mark.parametrize("content", [b"", b"sent0,sent1\n"])
def test_csv_without_rows(tmp_path, content):
  with pytest.raises(DataError):
    data.read_csv(_write(tmp_path / "t.csv", content))


@pytest.mark.parametrize(
  "content,line",
  [
    (b"sent0,sent1\na,b\nc,d \xff\n", 3),
    (b"sent0,sent1\na,b\n\xffc,d\n", 3),
    (b"\xef\xbb\xbfsent0,sent1\na,b\nc,d \xff\n", 3),
    (b"\xef\xbb\xbfsent0,sent1\na,b\n\xffc,d\n", 3),  # The BOM's 3 bytes count in the offset.
  ],
)
def test_csv_invalid_utf8_names_line(tmp_path, content, line):
  path = _write(tmp_path / "t.csv", content)
  with pytest.raises(DataError, match=f"{path}:{line}: not valid UTF-8"):
    data.read_csv(path)


def test_csv_utf8_bom_accepted(tmp_path):
  corpus = data.read_csv(_write(tmp_path / "t.csv", b"\xef\xbb\xbfsent0,sent1\r\na,b\r\n"))
  assert corpus.columns == {"sent0": ["a"], "sent1": ["b"]}


def test_csv_missing_file(tmp_path):
  with pytest.raises(DataError, match="nope.csv"):
    data.read_csv(str(tmp_path / "nope.csv"))


def test_real_nli_sample():
  if not os.path.isfile(NLI_SAMPLE):
    pytest.skip(f"{NLI_SAMPLE} not found")
  corpus = data.read_csv(NLI_SAMPLE)
  assert list(corpus.columns) == ["sent0", "sent1", "hard_neg"]
  assert len(corpus) == 9
  assert all(len(column) == 9 for column in corpus.columns.values())
  assert corpus.columns["sent1"][0] == "You lose the things to the following level if the people recall."
  assert corpus.columns["hard_neg"][-1] == "Place des Vosges is constructed entirely of gray marble."


# ------------------------------------------------------------------------
# data_dir, resolve, load_corpus.


@pytest.fixture
def roots(tmp_path, monkeypatch):
  """Two data roots with the same relative file, and a working directory where it does not exist."""
  env_root, explicit_root = tmp_path / "env_root", tmp_path / "explicit_root"
  _write(env_root / "corpora" / "c.txt", b"from env\n")
  _write(explicit_root / "corpora" / "c.txt", b"from explicit\n")
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  monkeypatch.chdir(cwd)
  monkeypatch.setenv(data.DATA_DIR_ENV, str(env_root))
  return str(env_root), str(explicit_root)


def test_data_dir(roots, monkeypatch, tmp_path):
  env_root, explicit_root = roots
  assert data.data_dir() == env_root
  assert data.data_dir(explicit_root) == explicit_root
  with pytest.raises(DataError, match="does not exist"):
    data.data_dir(str(tmp_path / "nowhere"))
  monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "gone"))
  with pytest.raises(DataError, match="gone"):
    data.data_dir()
  monkeypatch.delenv(data.DATA_DIR_ENV)
  with pytest.raises(DataError, match=data.DATA_DIR_ENV):
    data.data_dir()


def test_resolve(roots, tmp_path, monkeypatch):
  env_root, explicit_root = roots
  assert data.resolve("corpora/c.txt") == os.path.join(env_root, "corpora/c.txt")
  assert data.resolve("corpora/c.txt", explicit_root) == os.path.join(explicit_root, "corpora/c.txt")
  # Absolute paths are taken as given, and so is a relative path that exists from the current directory.
  absolute = str(tmp_path / "anywhere.txt")
  assert data.resolve(absolute) == absolute
  _write(tmp_path / "cwd" / "corpora" / "c.txt", b"from cwd\n")
  assert data.resolve("corpora/c.txt", explicit_root) == "corpora/c.txt"


def test_resolve_missing(roots):
  env_root, _ = roots
  with pytest.raises(DataError, match="nope.txt") as info:
    data.resolve("corpora/nope.txt")
  assert os.path.join(env_root, "corpora/nope.txt") in str(info.value)
  assert "current directory" in str(info.value)


def test_resolve_without_root(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
  with pytest.raises(DataError):
    data.resolve("corpora/c.txt")
  with pytest.raises(DataError, match="does not exist"):
    data.resolve("corpora/c.txt", str(tmp_path / "no_root"))


def test_load_corpus_by_extension_and_root(roots):
  env_root, explicit_root = roots
  assert data.load_corpus("corpora/c.txt").columns["sent0"] == ["from env"]
  assert data.load_corpus("corpora/c.txt", root=explicit_root).columns["sent0"] == ["from explicit"]
  _write(pathlib.Path(env_root) / "corpora" / "t.csv", b"sent0,sent1,hard_neg\na,b,c\n")
  corpus = data.load_corpus("corpora/t.csv")
  assert corpus.columns == {"sent0": ["a"], "sent1": ["b"], "hard_neg": ["c"]}


def test_load_corpus_forwards_skip_empty_lines(tmp_path):
  path = _write(tmp_path / "c.txt", b"a\n\nb\n")
  assert data.load_corpus(path).columns["sent0"] == ["a", "b"]
  with pytest.raises(DataError, match=f"{path}:2"):
    data.load_corpus(path, skip_empty_lines=False)


def test_load_corpus_warns_with_skipped_count(tmp_path, caplog):
  path = _write(tmp_path / "c.txt", b"a\n\n\nb\n \n\n\nc\n\n")  # Empty: 2, 3, 5, 6, 7, 9.
  with caplog.at_level(logging.WARNING):
    data.load_corpus(path)
  warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  assert len(warnings) == 1
  assert path in warnings[0]
  assert "skipped 6 empty line(s)" in warnings[0]
  assert "lines 2, 3, 5, 6, 7, ..." in warnings[0]


def test_load_corpus_clean_file_does_not_warn(tmp_path, caplog):
  path = _write(tmp_path / "c.txt", b"a\nb\n")
  with caplog.at_level(logging.WARNING):
    data.load_corpus(path)
  assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------------------------------
# Batches.


def _corpus(n: int, columns=("sent0",)) -> Corpus:
  # Distinct sentences of varied length, so that any mix-up of rows or columns shows in the ids.
  return Corpus("memory", {c: [f"{c} number {i} " + "word " * (i % 5) for i in range(n)] for c in columns})


def _assert_batches_equal(a, b):
  assert a.keys() == b.keys() == {"input_ids", "attention_mask"}
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])


def test_batch_shapes_and_contents(tokenizer):
  corpus = _corpus(10, ("sent0", "sent1", "hard_neg"))
  batches = Batches(corpus, tokenizer, batch_size=4, max_seq_len=16, seed=0)
  batch = batches.batch(1)
  for key in ("input_ids", "attention_mask"):
    assert batch[key].dtype == np.int32
    assert batch[key].shape == (4, 3, 16)
  ids, mask = batch["input_ids"], batch["attention_mask"]
  assert np.all(ids[:, :, 0] == tokenizer.cls_token_id)
  assert np.all(ids[mask == 0] == tokenizer.pad_token_id)
  rows = batches.indices(1)
  for c, name in enumerate(corpus.columns):
    for r, example in enumerate(rows):
      # Row r of every column is the same example, tokenized on its own.
      want = tokenizer(corpus.columns[name][example])["input_ids"]
      assert mask[r, c].sum() == len(want)
      assert ids[r, c, : len(want)].tolist() == want
      assert ids[r, c, len(want) - 1] == tokenizer.sep_token_id


def test_batch_truncates_long_sentences(tokenizer):
  corpus = Corpus("memory", {"sent0": ["short", "word " * 100, "another long one " * 30, "x"]})
  batches = Batches(corpus, tokenizer, batch_size=4, max_seq_len=8, seed=0)
  batch = batches.batch(0)
  assert batch["input_ids"].shape == (4, 1, 8)
  for r, example in enumerate(batches.indices(0)):
    ids, mask = batch["input_ids"][r, 0], batch["attention_mask"][r, 0]
    if example in (1, 2):
      assert mask.sum() == 8
      assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    else:
      assert mask.sum() == 3  # [CLS] word [SEP].


def test_csv_triplet_corpus_gives_three_columns(tokenizer, tmp_path):
  rows = b"".join(b"p%d,e%d,c%d\n" % (i, i, i) for i in range(6))
  corpus = data.read_csv(_write(tmp_path / "t.csv", b"sent0,sent1,hard_neg\n" + rows))
  batch = Batches(corpus, tokenizer, batch_size=2, max_seq_len=8, seed=0).batch(0)
  assert batch["input_ids"].shape == (2, 3, 8)


def test_determinism(tokenizer):
  corpus = _corpus(23)
  a = Batches(corpus, tokenizer, batch_size=4, max_seq_len=12, seed=5)
  b = Batches(corpus, tokenizer, batch_size=4, max_seq_len=12, seed=5)
  c = Batches(corpus, tokenizer, batch_size=4, max_seq_len=12, seed=6)
  for step in range(12):
    _assert_batches_equal(a.batch(step), b.batch(step))
  order = lambda x: np.concatenate([x.indices(s) for s in range(x.steps_per_epoch)])
  assert not np.array_equal(order(a), order(c))


def test_random_access_matches_sequential(tokenizer):
  # The per-epoch order cache must not leak between epochs when steps come out of order.
  batches = Batches(_corpus(23), tokenizer, batch_size=4, max_seq_len=12, seed=0)
  sequential = [batches.indices(s).copy() for s in range(15)]
  fresh = Batches(_corpus(23), tokenizer, batch_size=4, max_seq_len=12, seed=0)
  for s in [12, 2, 7, 0, 14, 5, 12]:
    np.testing.assert_array_equal(fresh.indices(s), sequential[s])


def test_every_epoch_is_a_permutation(tokenizer):
  n, batch_size, seed = 23, 4, 3
  batches = Batches(_corpus(n), tokenizer, batch_size=batch_size, max_seq_len=12, seed=seed)
  assert batches.steps_per_epoch == 5
  orders, left_out = [], []
  for epoch in range(4):
    order = np.concatenate([batches.indices(epoch * 5 + k) for k in range(5)])
    assert len(order) == n - n % batch_size
    assert len(set(order.tolist())) == len(order)  # Disjoint batches.
    assert set(order.tolist()) <= set(range(n))
    # The documented order, so that it stays stable across versions (resume relies on it).
    np.testing.assert_array_equal(order, np.random.default_rng([seed, epoch]).permutation(n)[: len(order)])
    orders.append(order)
    left_out.append(frozenset(range(n)) - frozenset(order.tolist()))
  assert all(not np.array_equal(orders[0], o) for o in orders[1:])
  assert len(set(left_out)) > 1  # The dropped remainder changes between epochs.


def test_iterate_and_resume(tokenizer):
  batches = Batches(_corpus(23), tokenizer, batch_size=4, max_seq_len=12, seed=1)
  expected = [batches.batch(s) for s in range(7)]  # Crosses the epoch boundary at step 5.
  full = list(batches.iterate(0, 7))
  assert len(full) == 7
  for got, want in zip(full, expected):
    _assert_batches_equal(got, want)
  resumed = list(Batches(_corpus(23), tokenizer, batch_size=4, max_seq_len=12, seed=1).iterate(3, 7, prefetch=1))
  assert len(resumed) == 4
  for got, want in zip(resumed, expected[3:]):
    _assert_batches_equal(got, want)
  for got, want in zip(batches.iterate(4, 6, prefetch=10), expected[4:6]):
    _assert_batches_equal(got, want)
  assert list(batches.iterate(5, 5)) == []


def test_corpus_smaller_than_a_batch(tokenizer):
  with pytest.raises(DataError, match="fewer than one batch"):
    Batches(_corpus(3), tokenizer, batch_size=4, max_seq_len=8, seed=0)
  # Exactly one batch is fine.
  assert Batches(_corpus(4), tokenizer, batch_size=4, max_seq_len=8, seed=0).steps_per_epoch == 1


def test_text_lines_utf8_bom_is_not_part_of_the_first_sentence(tmp_path):
  corpus = data.read_text_lines(_write(tmp_path / "bom.txt", b"\xef\xbb\xbffirst line\nsecond\n"))
  assert corpus.columns["sent0"] == ["first line", "second"]


def test_no_duplicate_batches_hold_distinct_texts_and_stay_deterministic(tokenizer):
  # 60 examples, only 12 distinct texts in sent0 (5 copies each); pairs share some texts across columns too.
  sent0 = [f"sentence {i % 12}" for i in range(60)]
  sent1 = [f"other {i}" if i % 7 else f"sentence {(i + 1) % 12}" for i in range(60)]
  corpus = Corpus("memory", {"sent0": sent0, "sent1": sent1})
  b = Batches(corpus, tokenizer, batch_size=4, max_seq_len=8, seed=1, no_duplicates=True)
  plain = Batches(corpus, tokenizer, batch_size=4, max_seq_len=8, seed=1)
  assert any(len({sent0[r] for r in plain.indices(s)}) < 4 for s in range(plain.steps_per_epoch))  # Plain has clashes.
  for epoch in range(2):
    seen_rows = []
    for k in range(b.steps_in_epoch(epoch)):
      step = sum(b.steps_in_epoch(e) for e in range(epoch)) + k
      rows = b.indices(step)
      texts = [corpus.columns[c][r] for r in rows for c in ("sent0", "sent1")]
      assert len(texts) == len(set(texts)), (epoch, k, texts)
      seen_rows.extend(rows.tolist())
    assert len(seen_rows) == len(set(seen_rows))  # No example twice in an epoch.
    assert len(seen_rows) >= 40  # Deferral keeps most examples (12 distinct texts allow 3 batches in a row).
  again = Batches(corpus, tokenizer, batch_size=4, max_seq_len=8, seed=1, no_duplicates=True)
  assert b.total_steps(2) == again.total_steps(2)
  for s in range(b.total_steps(2)):
    np.testing.assert_array_equal(b.indices(s), again.indices(s))
  assert b.locate(b.steps_in_epoch(0)) == (1, 0)


def test_no_duplicates_without_clashes_matches_plain_order(tokenizer):
  corpus = _corpus(50)
  a = Batches(corpus, tokenizer, batch_size=8, max_seq_len=8, seed=3, no_duplicates=True)
  p = Batches(corpus, tokenizer, batch_size=8, max_seq_len=8, seed=3)
  assert a.total_steps(3) == p.total_steps(3) == 18
  for s in range(18):
    np.testing.assert_array_equal(a.indices(s), p.indices(s))


def test_no_duplicates_impossible_batch_is_an_error(tokenizer):
  corpus = Corpus("memory.txt", {"sent0": ["same"] * 10})
  with pytest.raises(DataError, match="distinct sentences"):
    Batches(corpus, tokenizer, batch_size=2, max_seq_len=8, seed=0, no_duplicates=True).total_steps(1)


def test_prefetch_thread_does_not_share_the_callers_tokenizer(tokenizer):
  # Training evaluates (tokenizing in the main thread) while Batches.iterate tokenizes the next batches in its
  # thread; one Hugging Face fast tokenizer used by two threads at once raises "RuntimeError: Already borrowed".
  corpus = Corpus("memory", {"sent0": [f"sentence {i} " + "word " * (i % 40) for i in range(4096)]})
  batches = Batches(corpus, tokenizer, batch_size=256, max_seq_len=32, seed=0)
  assert batches.tokenizer is not tokenizer
  long_lines = [f"evaluation line {i} " + "token " * (i % 200) for i in range(512)]
  for batch in batches.iterate(0, batches.steps_per_epoch, prefetch=4):
    tokenization.tokenize(tokenizer, long_lines, 128)  # What the BucketedEmbedder does during an evaluation.
    assert batch["input_ids"].shape == (256, 1, 32)
