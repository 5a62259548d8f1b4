"""Pair data (jaxcse.data.pairs): sentence-transformers' column convention from every source (.jsonl, .csv, .parquet,
save_to_disk, the hub's cache, a datasets.Dataset), every row checked before anything is written, labels to the batch,
batches with no text twice as sentence-transformers' NO_DUPLICATES makes them, across the global batch, and training
that resumes exactly after kill -9."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from jaxcse.storage import workdir as workdir_lib
from jaxcse.training import configuration, inputs as inputs_lib
from jaxcse import data as data_lib, train
from jaxcse.data import Batches, DataError, pairs
from tests import helpers
from tests.helpers import REPO

datasets = pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
  """datasets' Arrow cache in the test's folder, and no network: the hub is its cache only."""
  import huggingface_hub.constants

  cache = str(tmp_path / "hf_datasets")
  monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
  monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
  return cache


def _lines(n: int, start: int = 0) -> list[str]:
  with open(os.path.join(helpers.shared_data_dir(), "corpora", "wiki_offline.txt"), encoding="utf-8") as f:
    lines = [line.strip() for _, line in zip(range(start + n), f)]
  return lines[start:]


def _triplets(n: int = 48, distinct_anchors: int = 0) -> list[dict]:
  """``n`` rows (question, answer, wrong): distinct texts, or anchors repeating every ``distinct_anchors`` rows."""
  lines = _lines(3 * n)
  return [
    {
      "question": lines[i % distinct_anchors if distinct_anchors else i],
      "answer": lines[n + i],
      "wrong": lines[2 * n + i],
    }
    for i in range(n)
  ]


def _write_jsonl(path, rows) -> str:
  helpers.write_jsonl(str(path), rows)
  return str(path)


def lay_out_hub_cache(cache: str, repo_id: str, config: str, splits: dict) -> None:
  """What an online ``datasets.load_dataset(repo_id, config)`` leaves in ``HF_DATASETS_CACHE``: each split's Arrow
  file and the dataset's info, under ``namespace___name/config/version/hash/``."""
  from datasets.arrow_writer import ArrowWriter

  namespace, name = repo_id.split("/")
  folder = os.path.join(cache, f"{namespace}___{name}", config, "0.0.0", "0123456789abcdef")
  os.makedirs(folder)
  infos = datasets.SplitDict(dataset_name=name)
  for split, dataset in splits.items():
    with ArrowWriter(path=os.path.join(folder, f"{name}-{split}.arrow")) as writer:
      writer.write_table(dataset.data.table)
    infos.add(datasets.SplitInfo(name=split, num_examples=len(dataset), dataset_name=name))
  datasets.DatasetInfo(
    config_name=config, dataset_name=name, features=next(iter(splits.values())).features, splits=infos
  ).write_to_directory(folder)


# --------------------------------------------------------------------------
# Reading: every source, the column convention, the checks.


def test_every_source_reads_the_same_rows(tmp_path, datasets_cache):
  rows = [{"score": 0.25 * (i % 5), **{k: v for k, v in r.items()}} for i, r in enumerate(_triplets(20))]
  dataset = datasets.Dataset.from_list(rows)
  sources = {
    "jsonl": _write_jsonl(tmp_path / "t.jsonl", rows),
    "parquet": str(tmp_path / "t.parquet"),
    "csv": str(tmp_path / "t.csv"),
    "folder": str(tmp_path / "saved"),
  }
  dataset.to_parquet(sources["parquet"])
  dataset.to_csv(sources["csv"], index=False)
  dataset.save_to_disk(sources["folder"])
  lay_out_hub_cache(datasets_cache, "someone/pairs", "triplet", {"train": dataset, "dev": dataset.select(range(5))})
  corpora = {name: data_lib.load_corpus(path, csv_format="sentence_transformers") for name, path in sources.items()}
  corpora["hub"] = data_lib.load_corpus("hf:someone/pairs:triplet:train")
  corpora["dataset"] = data_lib.load_corpus(dataset)
  for name, corpus in corpora.items():
    assert isinstance(corpus, pairs.PairCorpus), name
    assert corpus.text_columns == ("question", "answer", "wrong") and corpus.label_column == "score", name
    assert corpus.texts([3, 0]) == [
      [rows[3]["question"], rows[0]["question"]],
      [rows[3]["answer"], rows[0]["answer"]],
      [rows[3]["wrong"], rows[0]["wrong"]],
    ], name
    np.testing.assert_array_equal(corpus.labels, [r["score"] for r in rows])
    assert corpus.content_sha256 == corpora["jsonl"].content_sha256, name
  assert len(data_lib.load_corpus("hf:someone/pairs:triplet:dev")) == 5
  # The digest is of the rows, in order: not of how Arrow chunks them.
  shuffled = pairs.validate(dataset.select([1, 0, *range(2, 20)]), "x")
  assert shuffled.content_sha256 != corpora["dataset"].content_sha256
  assert pairs.validate(dataset.select(range(20)), "x").content_sha256 == corpora["dataset"].content_sha256


def test_columns_in_order_whatever_their_names_and_the_label_wherever_it_is():
  corpus = pairs.validate(
    datasets.Dataset.from_dict({"zeta": ["a"], "labels": [1], "alpha": ["b"], "dataset_name": ["mine"], "mid": ["c"]}),
    "d",
  )
  assert corpus.text_columns == ("zeta", "alpha", "mid") and corpus.label_column == "labels"
  assert corpus.labels.dtype == np.float64 and corpus.labels.tolist() == [1.0]
  single = pairs.validate(datasets.Dataset.from_dict({"text": ["a", "b"]}), "d")
  assert single.text_columns == ("text",) and single.label_column is None and single.labels is None
  with pytest.raises(DataError, match=r"^d: columns 'label' and 'score' are both label columns"):
    pairs.validate(datasets.Dataset.from_dict({"a": ["x"], "score": [1.0], "label": [1]}), "d")


@pytest.mark.parametrize(
  "name,content,message",
  [
    # A file's line (counted from 1, as an editor does), then the row (from 0, as dataset[i]) and the column.
    ("e.jsonl", '{"a": "x", "b": "y"}\n{"a": "x", "b": ""}\n', r"e.jsonl:2: row 1, column 'b': empty text$"),
    ("w.jsonl", '{"a": "x", "b": " \\t "}\n', r"w.jsonl:1: row 0, column 'b': empty text$"),
    (
      "n.jsonl",
      '{"a": "x", "b": "y"}\n{"a": "x", "b": "y"}\n{"a": null, "b": "y"}\n',
      r"n.jsonl:3: row 2, column 'a': missing value \(null\)$",
    ),
    ("k.jsonl", '{"a": "x", "b": "y"}\n{"a": "x"}\n', r"k.jsonl:2: row 1, column 'b': missing value \(null\)$"),
    (
      "s.jsonl",
      '{"a": "x", "score": 1}\n{"a": "x", "score": "high"}\n',
      r"s.jsonl:2: row 1, column 'score': not a number$",
    ),
    ("t.jsonl", '{"a": "x", "b": "y"}\n{"a": "x", "b": 3}\n', r"t.jsonl:2: row 1, column 'b': not text$"),
    ("f.jsonl", '{"a": "x", "score": NaN}\n', r"f.jsonl:1: row 0, column 'score': not a finite number$"),
    ("i.jsonl", '{"a": "x", "b": 3}\n', r"i.jsonl: column 'b' holds int64, not text"),
    ("s.csv", "a,score,b\nx,0.5,y\nx,high,y\n", r"s.csv:3: row 1, column 'score': 'high' is not a number$"),
    ("e.csv", "a,b,score\nx,,1\n", r"e.csv:2: row 0, column 'b': empty text$"),
    ("d.csv", "a,a\nx,y\n", r"d.csv:1: header a,a names a column twice$"),
    ("bad.jsonl", "not json\n", r"bad.jsonl:1: row 0: not JSON \(Expecting value at column 1\)$"),
    # Issue 69: blank lines (which datasets skips) no longer shift the row a message names from its line.
    (
      "blank.jsonl",
      '{"a": "x", "b": "y"}\n\n  \n{"a": "x", "b": ""}\n',
      r"blank.jsonl:4: row 1, column 'b': empty text$",
    ),
    ("blank.csv", "a,b\nx,y\n\nx,\n", r"blank.csv:4: row 1, column 'b': empty text$"),
    ("quoted.csv", 'a,b\n"x\ny",z\nx,\n', r"quoted.csv:4: row 1, column 'b': empty text$"),
    # Each one line naming the line, row and column (before: a traceback, or datasets' message naming none).
    ("empty.jsonl", "", r"empty.jsonl: no rows \(every line of the file is blank\)$"),
    ("blanks.jsonl", "\n \n", r"blanks.jsonl: no rows \(every line of the file is blank\)$"),
    ("bad2.jsonl", '{"a": "x"}\n{"a": \n', r"bad2.jsonl:2: row 1: not JSON \(Expecting value at column 6\)$"),
    (
      "big.jsonl",
      '{"a": "x", "score": 1}\n{"a": "y", "score": 1e400}\n',
      r"big.jsonl:2: row 1, column 'score': 1e400 is not a finite number$",
    ),
    (
      "nan.jsonl",
      '{"a": "x", "score": 1}\n{"a": "y", "score": NaN}\n',
      r"nan.jsonl:2: row 1, column 'score': not a finite number$",
    ),
    ("big.csv", "a,score\nx,1\ny,1e400\n", r"big.csv:3: row 1, column 'score': '1e400' is not a finite number$"),
    (
      "sur.jsonl",
      '{"a": "x", "b": "y"}\n{"a": "x\\ud800", "b": "y"}\n',
      r"sur.jsonl:2: row 1, column 'a': a lone surrogate \(U\+D800\), not text$",
    ),
    (
      "mixed.jsonl",
      '{"a": "x", "score": 1}\n{"a": "y", "score": "0.5"}\n',
      r"mixed.jsonl:2: row 1, column 'score': a string, where row 0 holds a number \(a column holds one type\)$",
    ),
    ("ragged.csv", "a,b\nx,y\nx,y,z\n", r"ragged.csv:3: row 1: 3 fields, the header has 2 \(a,b\)$"),
    # Bytes that are not UTF-8: passed "every row is checked" before and failed later with a traceback.
    (
      "u.jsonl",
      b'{"a": "x", "b": "y"}\n{"a": "x\xff", "b": "y"}\n',
      r"u.jsonl:2: row 1, column 'a': not valid UTF-8 \(invalid start byte at byte 1\)$",
    ),
    (
      "cesu.jsonl",
      b'{"a": "x", "b": "y"}\n{"a": "\xed\xa0\x80", "b": "y"}\n',
      r"cesu.jsonl:2: row 1, column 'a': not valid UTF-8 \(invalid continuation byte at byte 0\)$",
    ),
    ("u.csv", b"a,b\nx,y\nx\xff,y\n", r"u.csv:3: not valid UTF-8 \(invalid start byte at byte 1 of the line\)$"),
    # Decided (docs/own_data.md): a text of only control or format characters (U+0000, zero-width ones) is empty:
    # BERT's tokenizer drops them all, so it would train as [CLS] [SEP].
    (
      "nul.jsonl",
      '{"a": "x", "b": "y"}\n{"a": "\\u0000", "b": "y"}\n',
      r"nul.jsonl:2: row 1, column 'a': no visible character \(only control, format or space characters\)$",
    ),
    (
      "zw.jsonl",
      '{"a": "x", "b": "\\u200b\\u2060 "}\n',
      r"zw.jsonl:1: row 0, column 'b': no visible character \(only control, format or space characters\)$",
    ),
  ],
)
def test_a_bad_row_is_one_error_naming_the_file_row_and_column(tmp_path, name, content, message, capfd):
  path = tmp_path / name
  path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
  with pytest.raises(DataError, match=f"^{tmp_path}/{message}") as error:
    data_lib.load_corpus(str(path), csv_format="sentence_transformers")
  assert "\n" not in str(error.value)
  # Nothing of datasets' own: no progress bar ("Generating train split"), no "Failed to read file" log line.
  out, err = capfd.readouterr()
  assert out + err == ""


def test_json_booleans_are_labels_1_and_0_and_other_sources_name_the_row(tmp_path):
  """Decided (docs/own_data.md): a label column of JSON booleans reads as 1 and 0, as sentence-transformers'
  collator and Python read them; mixed with numbers it is refused, as any column of two types."""
  path = tmp_path / "b.jsonl"
  path.write_text('{"a": "x", "b": "y", "label": true}\n{"a": "z", "b": "w", "label": false}\n', encoding="utf-8")
  assert data_lib.load_corpus(str(path)).labels.tolist() == [1.0, 0.0]
  path.write_text('{"a": "x", "label": 1}\n{"a": "z", "label": true}\n', encoding="utf-8")
  with pytest.raises(DataError, match=r"b.jsonl:2: row 1, column 'label': not a number$"):
    data_lib.load_corpus(str(path))
  # A datasets.Dataset has no lines: the row alone.
  with pytest.raises(DataError, match=r"^d: row 1, column 'a': no visible character"):
    pairs.validate(datasets.Dataset.from_dict({"a": ["x", "\u200b"]}), "d")


def test_csv_reads_as_simcse_unless_asked_and_text_stays_text(tmp_path):
  path = tmp_path / "c.csv"
  path.write_text("sent0,oops\nNA,007\n", encoding="utf-8")
  with pytest.raises(DataError, match="header sent0,oops: expected sent0.*data.csv_format=sentence_transformers"):
    data_lib.load_corpus(str(path))
  corpus = data_lib.load_corpus(str(path), csv_format="sentence_transformers")
  assert corpus.texts([0]) == [["NA"], ["007"]]  # Neither a missing value nor the number 7.


def test_hub_sources_that_cannot_be_read_are_one_error(datasets_cache):
  lay_out_hub_cache(datasets_cache, "someone/pairs", "triplet", {"train": datasets.Dataset.from_dict({"a": ["x"]})})
  with pytest.raises(
    DataError,
    match=r"^hf:someone/pairs:pair:train: datasets.load_dataset\('someone/pairs', 'pair', "
    r"split='train'\) failed: .*Available configs in the cache: \['triplet'\]",
  ):
    data_lib.load_corpus("hf:someone/pairs:pair:train")
  with pytest.raises(DataError, match=r"^hf:someone/pairs:triplet:test: .*Unknown split \"test\""):
    data_lib.load_corpus("hf:someone/pairs:triplet:test")
  with pytest.raises(DataError, match=r"^hf:: expected hf:NAME\[:CONFIG\[:SPLIT\]\]"):
    data_lib.load_corpus("hf:")


def test_a_folder_of_splits_or_of_something_else_is_one_error(tmp_path):
  datasets.DatasetDict({"train": datasets.Dataset.from_dict({"a": ["x"]})}).save_to_disk(str(tmp_path / "dict"))
  with pytest.raises(
    DataError, match=r"dict: a DatasetDict \(splits train\): give one split's folder, e.g. .*dict/train"
  ):
    data_lib.load_corpus(str(tmp_path / "dict"))
  (tmp_path / "other").mkdir()
  with pytest.raises(DataError, match=r"other: not a folder written by Dataset.save_to_disk"):
    data_lib.load_corpus(str(tmp_path / "other"))


# --------------------------------------------------------------------------
# Batches: labels, and no text twice as sentence-transformers' NO_DUPLICATES.


def test_labels_reach_the_batch_row_for_row(tokenizer):
  rows = [{"s1": f"first {i}", "s2": f"second {i}", "score": i / 10} for i in range(30)]
  corpus = pairs.validate(datasets.Dataset.from_list(rows), "scored")
  batches = Batches(corpus, tokenizer, batch_size=8, max_seq_len=8, seed=0)
  batch, indices = batches.batch(5), batches.indices(5)
  assert batch["input_ids"].shape == (8, 2, 8) and batch["labels"].dtype == np.float32
  np.testing.assert_array_equal(batch["labels"], np.float32(indices / 10))
  for r, index in enumerate(indices):
    assert tokenizer.decode(batch["input_ids"][r, 1], skip_special_tokens=True) == f"second {index}"
  shard = batches.batch(5, np.arange(4, 8))  # One process's rows of the global batch.
  np.testing.assert_array_equal(shard["labels"], batch["labels"][4:])
  np.testing.assert_array_equal(shard["input_ids"], batch["input_ids"][4:])


def _duplicates(n: int = 96) -> list[dict]:
  """Rows full of repeats: 7 distinct anchors, positives repeating every 11 rows, some positive = another anchor."""
  return [
    {
      "anchor": f"anchor {i % 7}",
      "positive": f"anchor {(i + 1) % 7}" if i % 5 == 0 else f"positive {i % 11}",
      "negative": f"negative {i}",
    }
    for i in range(n)
  ]


@pytest.mark.parametrize("batch_size,seed", [(4, 0), (5, 1), (3, 7)])
def test_no_duplicates_is_sentence_transformers_no_duplicates_sampler(batch_size, seed):
  torch = pytest.importorskip("torch")
  from sentence_transformers.base.sampler import NoDuplicatesBatchSampler

  dataset = datasets.Dataset.from_list([{**r, "score": 1.0} for r in _duplicates()])
  corpus = pairs.validate(dataset, "d")
  sampler = NoDuplicatesBatchSampler(
    dataset,
    batch_size=batch_size,
    drop_last=True,
    valid_label_columns=["score"],
    generator=torch.Generator(),
    seed=seed,
  )
  sampler.generator.manual_seed(seed)
  values = lambda i: {str(v) for k, v in sampler.dataset[i].items()}  # noqa: E731  (its own duplicate key)
  theirs = list(sampler._iter_one_pass(values, lambda a, b: not a.isdisjoint(b)))
  order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed), dtype=torch.int32).numpy()
  ours, report = data_lib.distinct_batches(order, data_lib.text_ids(corpus), batch_size)
  assert ours.tolist() == theirs
  assert report.batches == len(theirs) and report.batches * batch_size + report.left_out == len(dataset)
  assert 0 < report.deferred <= report.batches * batch_size


def test_no_duplicates_never_puts_a_text_twice_in_a_batch_and_resumes_mid_epoch(tokenizer):
  rows = _duplicates()
  corpus = pairs.validate(datasets.Dataset.from_list(rows), "d")
  batches = Batches(corpus, tokenizer, batch_size=6, max_seq_len=8, seed=3, no_duplicates=True)
  plain = Batches(corpus, tokenizer, batch_size=6, max_seq_len=8, seed=3)
  total = batches.total_steps(3)
  assert total < plain.total_steps(3)  # Repeats cost batches...
  for step in range(total):
    texts = [rows[r][c] for r in batches.indices(step) for c in ("anchor", "positive", "negative")]
    assert len(texts) == len(set(texts)), step
  assert any(len({rows[r]["anchor"] for r in plain.indices(s)}) < 6 for s in range(plain.steps_per_epoch))  # Plain.
  report = batches.epoch_report(0)
  assert report.batches == batches.steps_in_epoch(0) and report.deferred > 0
  assert report.batches * 6 + report.left_out == len(rows)
  # A resumed run (a fresh process: nothing cached) sees the same batches from any step, across epoch boundaries.
  expected = list(batches.iterate(0, total))
  middle = batches.steps_in_epoch(0) // 2
  for start in (middle, batches.steps_in_epoch(0) + 1, total - 1):
    resumed = Batches(corpus, tokenizer, batch_size=6, max_seq_len=8, seed=3, no_duplicates=True)
    for got, want in zip(resumed.iterate(start, total), expected[start:]):
      np.testing.assert_array_equal(got["input_ids"], want["input_ids"])


TWO_DEVICES = r"""
import json, sys
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from jaxcse.training import distributed, inputs as inputs_lib
from jaxcse import train
from jaxcse.storage.workdir import Workdir
from tests import helpers
model_dir, data_dir, path, workdir = sys.argv[1:]
config = helpers.tiny_config(model_dir, data_dir, "pairs", **{"data.train": path, "train.max_steps": 4,
                                                              "train.batch_size": 6, "eval.every": 4})
summary = train.train_and_evaluate(config, workdir)
# What the trainer fed each device: this process's rows of each global batch, placed as the trainer places them.
inputs = inputs_lib.read(config, Workdir(workdir), False, distributed.make_mesh())
sharding = NamedSharding(distributed.make_mesh(), PartitionSpec("data"))
rows = distributed.process_rows(sharding, 6)
shards = []
for step in range(4):
  host = inputs.batches.batch(step, rows)
  ids = jax.make_array_from_process_local_data(sharding, host["input_ids"], (6, *host["input_ids"].shape[1:]))
  shards.append([np.asarray(s.data).tolist() for s in sorted(ids.addressable_shards, key=lambda s: s.index[0].start)])
json.dump({"devices": jax.device_count(), "steps": summary["steps"], "shards": shards}, sys.stdout)
"""


def test_no_batch_holds_a_duplicate_on_any_of_two_devices(tiny_model_dir, small_data_dir, tmp_path):
  rows = _duplicates(60)
  path = _write_jsonl(tmp_path / "dups.jsonl", rows)
  env = {
    **os.environ,
    "XLA_FLAGS": helpers.simulated_devices(2),
    "JAX_PLATFORMS": "cpu",
    "PYTHONPATH": REPO,
    "HF_DATASETS_CACHE": str(tmp_path / "hf"),
    "HF_HUB_OFFLINE": "1",
  }
  result = subprocess.run(
    [sys.executable, "-c", TWO_DEVICES, tiny_model_dir, small_data_dir, path, str(tmp_path / "w")],
    env=env,
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  out = json.loads(result.stdout.strip().splitlines()[-1])
  assert out["devices"] == 2 and out["steps"] == 4
  for step, (first, second) in enumerate(out["shards"]):
    assert len(first) == len(second) == 3  # Each device holds half of the global batch of 6.
    # Token rows of every text of the global batch (the texts are short and distinct in their tokens): no repeat
    # within a device, nor between the two.
    texts = [tuple(column) for device in (first, second) for row in device for column in row]
    assert len(texts) == 18 and len(set(texts)) == 18, step


# --------------------------------------------------------------------------
# Training: the command on a file, resume after kill -9, the corpus digest, a datasets.Dataset from Python.


def _pairs_args(workdir, model_dir, data_dir, train_path, **overrides) -> list[str]:
  values = {
    "model.name": model_dir,
    "data.data_dir": data_dir,
    "data.train": train_path,
    "data.max_seq_len": 16,
    "train.batch_size": 8,
    "train.max_steps": 6,
    "train.learning_rate": 3e-3,
    "train.log_every": 1,
    "eval.every": 3,
    "eval.batch_size": 32,
    "checkpoint.every": 1,
    **overrides,
  }
  return ["--config", "pairs", "--workdir", workdir, *(f"--config.{k}={v}" for k, v in values.items())]


def _pairs_config(model_dir, data_dir, train_path, **overrides):
  config = helpers.tiny_config(
    model_dir,
    data_dir,
    "pairs",
    **{
      "data.train": train_path,
      "train.max_steps": 6,
      "train.learning_rate": 3e-3,
      "train.log_every": 1,
      "checkpoint.every": 1,
      **overrides,
    },
  )
  return config


def test_jsonl_triplets_train_and_resume_exactly_after_kill_9(tiny_model_dir, small_data_dir, tmp_path):
  path = _write_jsonl(tmp_path / "triplets.jsonl", _triplets(64, distinct_anchors=20))
  reference = str(tmp_path / "reference")
  train.train_and_evaluate(_pairs_config(tiny_model_dir, small_data_dir, path), reference)
  workdir = str(tmp_path / "killed")
  cmd = [sys.executable, "-m", "jaxcse.train", *_pairs_args(workdir, tiny_model_dir, small_data_dir, path)]
  env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
  rng = random.Random(0)
  for _ in range(2):
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = os.path.join(workdir, workdir_lib.LATEST_DIR)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
      if os.path.isdir(latest) and os.listdir(latest):
        break
      time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 1.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
  result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-3000:]
  helpers.assert_same_params(helpers.saved_params(workdir), helpers.saved_params(reference))
  assert [r["step"] for r in helpers.metrics_records(workdir) if "loss" in r] == list(range(1, 7))
  with open(os.path.join(workdir, workdir_lib.INPUTS_FILE)) as f:
    assert list(json.load(f)["corpus_sha256"]) == ["triplets.jsonl"]
  # The file changed: the run refuses to resume on other batches.
  _write_jsonl(tmp_path / "triplets.jsonl", _triplets(64))
  with pytest.raises(train.WorkdirError, match="another training corpus"):
    train.train_and_evaluate(_pairs_config(tiny_model_dir, small_data_dir, path), workdir)


@pytest.mark.parametrize("source", ["parquet", "folder", "hub"])
def test_parquet_folders_and_the_hub_cache_train(tiny_model_dir, small_data_dir, tmp_path, datasets_cache, source):
  dataset = datasets.Dataset.from_list(_triplets(32))
  if source == "parquet":
    dataset.to_parquet(str(tmp_path / "t.parquet"))
    path = str(tmp_path / "t.parquet")
  elif source == "folder":
    dataset.save_to_disk(str(tmp_path / "saved"))
    path = str(tmp_path / "saved")
  else:
    lay_out_hub_cache(datasets_cache, "someone/triplets", "default", {"train": dataset})
    path = "hf:someone/triplets"
  workdir = str(tmp_path / "w")
  summary = train.train_and_evaluate(
    _pairs_config(tiny_model_dir, small_data_dir, path, **{"train.max_steps": 2}), workdir
  )
  assert summary["steps"] == 2
  with open(os.path.join(workdir, workdir_lib.INPUTS_FILE)) as f:
    recorded = json.load(f)["corpus_sha256"]
  if source == "hub":  # The content's digest: the cache's files are datasets' business.
    assert recorded == {path: pairs.validate(dataset, "d").content_sha256}
  else:
    assert recorded and all(name.startswith(os.path.basename(path)) for name in recorded)


def test_a_dataset_built_in_python_trains_and_resumes_only_on_the_same_rows(tiny_model_dir, small_data_dir, tmp_path):
  dataset = datasets.Dataset.from_list(_triplets(32))
  config = _pairs_config(tiny_model_dir, small_data_dir, "", **{"train.max_steps": 2})
  workdir = str(tmp_path / "w")
  assert train.train_and_evaluate(config, workdir, train_data=dataset)["steps"] == 2
  with open(os.path.join(workdir, workdir_lib.INPUTS_FILE)) as f:
    assert json.load(f)["corpus_sha256"] == {
      "train_data (a datasets.Dataset)": pairs.validate(dataset, "d").content_sha256
    }
  assert train.train_and_evaluate(config, workdir, train_data=dataset)["steps"] == 2  # Done already: the same run.
  other = dataset.select(range(1, 32))
  with pytest.raises(train.WorkdirError, match="another training corpus"):
    train.train_and_evaluate(config, workdir, train_data=other)
  named = _pairs_config(tiny_model_dir, small_data_dir, "t.jsonl")
  with pytest.raises(configuration.ConfigError, match="train_data is given, and data.train is 't.jsonl' too"):
    train.train_and_evaluate(named, str(tmp_path / "x"), train_data=dataset)
  with pytest.raises(configuration.ConfigError, match="data.train is empty"):
    train.train_and_evaluate(config, str(tmp_path / "x"))
  with pytest.raises(configuration.ConfigError, match="train_data must be a datasets.Dataset"):
    train.train_and_evaluate(config, str(tmp_path / "x"), train_data=datasets.DatasetDict({"train": dataset}))
  assert not os.path.exists(tmp_path / "x")


def test_scored_pairs_for_a_method_without_labels_are_refused_before_anything_is_written(
  tiny_model_dir, small_data_dir, tmp_path
):
  path = tmp_path / "scored.csv"
  path.write_text("s1,s2,score\n" + "".join(f"first {i},second {i},{i / 10}\n" for i in range(20)), encoding="utf-8")
  workdir = tmp_path / "w"
  with pytest.raises(
    DataError,
    # The flag that trains them (before: the method's name only).
    match=r"scored.csv: column 'score' holds a label per row \(scored pairs, a teacher's scores or embeddings\), "
    r"which method mnrl does not use: train them with --config.method=cosent, or drop the column",
  ):
    train.train_and_evaluate(_pairs_config(tiny_model_dir, small_data_dir, str(path)), str(workdir))
  assert not workdir.exists()


def test_a_bad_row_leaves_the_workdir_as_it_was(tiny_model_dir, small_data_dir, tmp_path):
  rows = _triplets(20)
  rows[13]["answer"] = ""
  path = _write_jsonl(tmp_path / "t.jsonl", rows)
  workdir = tmp_path / "w"
  workdir.mkdir()
  (workdir / "notes.txt").write_text("mine\n")
  with pytest.raises(DataError, match=r"t.jsonl:14: row 13, column 'answer': empty text$"):
    train.train_and_evaluate(_pairs_config(tiny_model_dir, small_data_dir, path), str(workdir))
  assert sorted(os.listdir(workdir)) == ["notes.txt"]


def test_labels_pass_through_the_jitted_step_sharded_and_chunked(tiny_model_dir):
  """A batch with ``labels`` (float32 [batch]) is split over the mesh and GradCache's chunks like every row array:
  the step runs (method simcse reads only the ids and masks)."""
  import jax

  from jaxcse.training import configured, distributed, train_step

  config = helpers.tiny_config(tiny_model_dir, "", "pairs", **{"train.grad_cache_chunk": 4})
  spec = configured.model(config).spec
  params = configured.model(config).params
  tx = train_step.make_optimizer(config.train, 2)
  mesh = distributed.make_mesh()
  step = train_step.jit_train_step(config, spec, tx, None, mesh)
  state = train_step.TrainState(step=jax.numpy.zeros((), jax.numpy.int32), params=params, opt_state=tx.init(params))
  batch = {
    "input_ids": np.full((8, 2, 16), 1000, np.int32),
    "attention_mask": np.ones((8, 2, 16), np.int32),
    "labels": np.linspace(0, 1, 8, dtype=np.float32),
  }
  state, metrics = step(state, batch, None, None)
  assert np.isfinite(float(metrics["loss"]))


def test_labels_only_for_a_method_that_reads_them():
  """``inputs_lib.check_labels``: scored pairs need a method whose Objective reads ``labels`` (cosent), and such a
  method needs scored pairs."""
  scored = pairs.validate(datasets.Dataset.from_dict({"a": ["x"], "b": ["y"], "score": [0.5]}), "scored")
  unscored = pairs.validate(datasets.Dataset.from_dict({"a": ["x"], "b": ["y"]}), "unscored")
  config = helpers.tiny_config("m", "d", "pairs")
  inputs_lib.check_labels(config, unscored)
  with pytest.raises(DataError, match="^scored: column 'score' holds a label per row"):
    inputs_lib.check_labels(config, scored)
  config.method = "cosent"
  inputs_lib.check_labels(config, scored)
  with pytest.raises(DataError, match=r"^unscored: method cosent needs a label per row \(a column named label or "):
    inputs_lib.check_labels(config, unscored)


def test_scored_pairs_csv_trains_with_cosent_from_the_command(tiny_model_dir, small_data_dir, tmp_path):
  """--config pairs --config.method=cosent on a scored-pairs .csv: the scores reach CoSENT, the loss falls."""
  lines = _lines(80)
  rng = np.random.default_rng(0)
  path = str(tmp_path / "scored.csv")
  with open(path, "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(["sentence1", "sentence2", "score"])
    writer.writerows([lines[i], lines[40 + i], f"{rng.uniform(0, 5):.2f}"] for i in range(40))
  workdir = str(tmp_path / "cosent")
  args = _pairs_args(
    workdir,
    tiny_model_dir,
    small_data_dir,
    path,
    **{"method": "cosent", "train.max_steps": 8, "checkpoint.every": 8, "eval.every": 8},
  )
  result = subprocess.run(
    [sys.executable, "-m", "jaxcse.train", *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    env={**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"},
  )
  assert result.returncode == 0, result.stderr[-3000:]
  losses = [r["loss"] for r in helpers.metrics_records(workdir) if "loss" in r]
  assert len(losses) == 8 and all(np.isfinite(losses))
  assert np.mean(losses[-3:]) < np.mean(losses[:3])  # 8 steps over the same 40 scored pairs (5 epochs).
  # Without the score column, cosent has nothing to learn from: one line, nothing written.
  bare = str(tmp_path / "bare.csv")
  with open(bare, "w", newline="", encoding="utf-8") as f:
    csv.writer(f).writerows([["sentence1", "sentence2"], *([lines[i], lines[40 + i]] for i in range(40))])
  refused = subprocess.run(
    [
      sys.executable,
      "-m",
      "jaxcse.train",
      *_pairs_args(str(tmp_path / "w2"), tiny_model_dir, small_data_dir, bare, method="cosent"),
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    env={**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"},
  )
  assert refused.returncode == 1 and "method cosent needs a label per row" in refused.stderr
  assert not os.path.exists(str(tmp_path / "w2"))


def _rewrite_keeping_mtime(path: str, rows: list[dict], suffix: str) -> None:
  """Rewrites ``path`` with ``rows`` and puts its modification time back, as ``cp -p`` or ``rsync -a`` leave it."""
  before = os.stat(path)
  _write_rows(path, rows, suffix)
  os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
  assert os.stat(path).st_mtime_ns == before.st_mtime_ns


def _write_rows(path: str, rows: list[dict], suffix: str) -> None:
  if suffix == "jsonl":
    _write_jsonl(path, rows)
  elif suffix == "csv":
    datasets.Dataset.from_list(rows).to_csv(path, index=False)
  else:
    datasets.Dataset.from_list(rows).to_parquet(path)


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_a_file_rewritten_with_its_mtime_kept_is_read_anew_and_hashed_as_read(
  tiny_model_dir, small_data_dir, tmp_path, suffix
):
  from jaxcse.core import files

  rows = _triplets(20)
  path = str(tmp_path / f"t.{suffix}")
  _write_rows(path, rows, suffix)
  config = _pairs_config(tiny_model_dir, small_data_dir, path, **{"data.csv_format": "sentence_transformers"})
  first = inputs_lib.read_corpus(config)
  assert first.texts([0, 19])[0] == [rows[0]["question"], rows[19]["question"]]
  # The same rows in reverse: the same size, other content (cp -p of an equal-length file over it).
  size = os.path.getsize(path)
  _rewrite_keeping_mtime(path, rows[::-1], suffix)
  if suffix != "parquet":  # Parquet's column statistics are not byte-stable under reordering; the rows are what count.
    assert os.path.getsize(path) == size
  second = inputs_lib.read_corpus(config)
  # Before: datasets' Arrow cache, keyed by path and mtime, served the first rows again.
  assert second.texts([0, 19])[0] == [rows[19]["question"], rows[0]["question"]]
  assert second.content_sha256 != first.content_sha256
  # What inputs.json records is the sha256 of the bytes that were read.
  assert inputs_lib.digest_corpus(config, second) == {os.path.basename(path): files.file_sha256(path)}


def test_a_file_rewritten_while_it_is_read_is_refused_and_its_cache_dropped(tmp_path, datasets_cache, monkeypatch):
  from jaxcse.core import files

  rows = _triplets(20)
  path = _write_jsonl(tmp_path / "t.jsonl", rows)
  hashed = files.file_sha256(path)
  load = datasets.load_dataset

  def rewritten_then_read(*args, **kwargs):  # After the digest, before datasets reads: cp -p at the wrong moment.
    _rewrite_keeping_mtime(path, rows[::-1], "jsonl")
    return load(*args, **kwargs)

  monkeypatch.setattr(datasets, "load_dataset", rewritten_then_read)
  with pytest.raises(DataError, match=f"^{path}: changed while it was read"):
    data_lib.load_corpus(path)
  # The folder named by the old bytes' digest held the new bytes' rows: gone, so no later read is served them.
  assert not os.path.exists(os.path.join(datasets_cache, pairs.FILE_CACHE, hashed))
  monkeypatch.setattr(datasets, "load_dataset", load)
  corpus = data_lib.load_corpus(path)
  assert corpus.texts([0])[0] == [rows[19]["question"]] and corpus.file_sha256 == files.file_sha256(path) != hashed
