"""jaxcse.mining against sentence-transformers 6.2's mine_hard_negatives, on the same embeddings; the command.

The parity tests give sentence-transformers the embeddings through its ``cache_folder`` (the files it would have
saved after embedding), with a stand-in model that fails if asked to embed: both sides select from the same
vectors, so any difference is in the selection or the output.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import sys
import types

import numpy as np
import pytest

from jaxcse.storage import hub
from jaxcse import mining
from tests import helpers

datasets = pytest.importorskip("datasets")
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SCORE_TOL = 2e-6  # float32 cosines of unit vectors (384 products summed in another order): a few ulp of 1.


def _sick_pairs(root: str, n: int = 200) -> tuple[list[str], list[str]]:
  """SICK's first ``n`` training pairs (sentence_A, sentence_B): 149 distinct anchors, up to 4 rows each."""
  with open(os.path.join(root, "senteval/downstream/SICK/SICK_train.txt"), encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))[:n]
  return [r["sentence_A"] for r in rows], [r["sentence_B"] for r in rows]


def _mrpc_sentences(root: str, n: int = 150) -> list[str]:
  with open(os.path.join(root, "senteval/downstream/MRPC/msr_paraphrase_train.txt"), encoding="utf-8-sig") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1 : n + 1]
  return [r[3] for r in rows]


PROMPT, DOC_PROMPT = "query: ", "passage: "


@pytest.fixture(scope="module")
def data(real_data_dir, tmp_path_factory):
  """The pairs (plus an exact duplicate row), an extra corpus overlapping the positives, and every text's embedding
  (all-MiniLM-L6-v2 when installed, else the tiny test model), prompted anchors included."""
  from jaxcse.encode import Encoder

  anchors, positives = _sick_pairs(real_data_dir)
  anchors.append(anchors[5])  # The same row twice: counted twice for range_max, one positive.
  positives.append(positives[5])
  extra = _mrpc_sentences(real_data_dir) + positives[:10]  # Some positives are in the corpus too.
  model = (
    MINILM
    if hub.resolve_model_path(MINILM) != MINILM
    else helpers.make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny")))
  )
  encoder = Encoder.load(model, batch_size=64)
  texts = sorted(
    set(anchors)
    | set(positives)
    | set(extra)
    | {PROMPT + a for a in anchors}
    | {DOC_PROMPT + t for t in positives + extra}
  )
  vectors = encoder.encode(texts, normalize_embeddings=True)
  return {
    "anchors": anchors,
    "positives": positives,
    "corpus": extra,
    "vectors": dict(zip(texts, vectors)),
    "model": model,
  }


class LookUp:
  """An encoder of known texts only: their stored embeddings."""

  def __init__(self, vectors):
    self.vectors = vectors

  def encode(self, texts, normalize_embeddings=True):
    assert normalize_embeddings
    return np.stack([self.vectors[t] for t in texts])


class StandIn:
  """What sentence-transformers' mine_hard_negatives touches of a model, without a model: embedding fails."""

  model_card_data = types.SimpleNamespace(base_model="stand-in")

  def __init__(self, dim: int | None = None):
    import torch

    self.dim = dim
    from sentence_transformers import util

    self.device = torch.device("cpu")
    self.similarity, self.similarity_pairwise = util.cos_sim, util.pairwise_cos_sim

  def encode_query(self, *args, **kwargs):
    raise AssertionError("sentence-transformers was to read the embeddings from its cache")

  encode_document = encode_query

  def get_embedding_dimension(self):  # use_faiss sizes its index by it.
    return self.dim


def _cache(
  folder: str, vectors: dict, queries: list[str], corpus: list[str], query_prompt: str | None, corpus_prompt: str | None
) -> None:
  """The embeddings files sentence-transformers 6.2 would have saved (its names: sha256 of model, prompts, texts)."""
  for kind, texts, prompt in (("query", queries, query_prompt), ("corpus", corpus, corpus_prompt)):
    digest = hashlib.sha256(repr(("stand-in", prompt, None, texts)).encode()).hexdigest()
    np.save(
      os.path.join(folder, f"{kind}_embeddings_{digest}.npy"), np.stack([vectors[(prompt or "") + t] for t in texts])
    )


def _st_mine(tmp_path, data, dataset, corpus, options, query_prompt=None, corpus_prompt=None):
  from sentence_transformers.util import mine_hard_negatives

  anchors, positives = list(dataset["anchor"]), list(dataset["positive"])
  folder = str(tmp_path / "st_cache")
  os.makedirs(folder, exist_ok=True)
  _cache(
    folder,
    data["vectors"],
    list(dict.fromkeys(anchors)),
    list(dict.fromkeys((corpus or positives) + positives)),
    query_prompt,
    corpus_prompt,
  )
  random.seed(options.get("seed", 0))
  st_options = {k: v for k, v in options.items() if k != "seed"}
  return mine_hard_negatives(
    dataset,
    StandIn(len(next(iter(data["vectors"].values())))),
    corpus=corpus,
    query_prompt=query_prompt,
    corpus_prompt=corpus_prompt,
    cache_folder=folder,
    verbose=False,
    **st_options,
  )


def _assert_same(ours, theirs):
  assert ours.column_names == theirs.column_names
  assert len(ours) == len(theirs)
  for name in ours.column_names:
    a, b = ours[name], theirs[name]
    if name in ("score", "scores"):
      np.testing.assert_allclose(np.array(a, np.float64), np.array(b, np.float64), atol=SCORE_TOL, rtol=0)
    else:
      assert a == b, f"column {name!r} differs"


GRID = {
  "top": {},
  "top, the issue's options": {"num_negatives": 3, "range_max": 20, "relative_margin": 0.05},
  "top, every filter": {"absolute_margin": 0.02, "relative_margin": 0.1, "max_score": 0.75, "min_score": 0.3},
  "top, range_min, default range_max with a margin": {"range_min": 3, "absolute_margin": 0.0, "num_negatives": 4},
  "top, scores": {"output_scores": True, "relative_margin": 0.05},
  "random": {"sampling_strategy": "random", "seed": 7, "range_max": 30},
  "random, filters, range_min": {
    "sampling_strategy": "random",
    "seed": 3,
    "range_min": 2,
    "range_max": 25,
    "relative_margin": 0.05,
    "max_score": 0.8,
    "num_negatives": 5,
  },
  "random, min_score leaves few": {"sampling_strategy": "random", "seed": 11, "min_score": 0.6, "range_max": 12},
}


@pytest.mark.parametrize("output_format", mining.OUTPUT_FORMATS)
@pytest.mark.parametrize("case", sorted(GRID))
def test_selection_equals_sentence_transformers(data, tmp_path, case, output_format):
  pytest.importorskip("sentence_transformers")
  options = {**GRID[case], "output_format": output_format}
  dataset = datasets.Dataset.from_dict({"anchor": data["anchors"], "positive": data["positives"]})
  ours = mining.mine_hard_negatives(dataset, LookUp(data["vectors"]), verbose=False, progress=False, **options)
  _assert_same(ours, _st_mine(tmp_path, data, dataset, None, options))
  assert len(ours) > 0


@pytest.mark.parametrize("case", ["top, the issue's options", "top, scores", "random, filters, range_min"])
def test_faiss_search_equals_sentence_transformers_faiss_and_the_exact_search(data, tmp_path, case):
  pytest.importorskip("sentence_transformers")
  pytest.importorskip("faiss")  # The dev extra installs it (the faiss extra).
  dataset = datasets.Dataset.from_dict({"anchor": data["anchors"], "positive": data["positives"]})
  options = {**GRID[case], "use_faiss": True}
  ours = mining.mine_hard_negatives(dataset, LookUp(data["vectors"]), verbose=False, progress=False, **options)
  _assert_same(ours, _st_mine(tmp_path, data, dataset, None, options))
  exact = mining.mine_hard_negatives(dataset, LookUp(data["vectors"]), verbose=False, progress=False, **GRID[case])
  _assert_same(ours, exact)  # Both searches are exact: the same candidates (these scores have no ties).


def test_use_faiss_without_faiss_is_one_line_before_anything_runs(monkeypatch):
  monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` now raises ImportError.
  with pytest.raises(mining.MiningError, match=r'use_faiss needs FAISS: pip install "jaxcse\[faiss\]"'):
    mining.Options(use_faiss=True).check()


@pytest.mark.parametrize(
  "options",
  [
    {"range_max": 15, "relative_margin": 0.05, "output_format": "triplet", "output_scores": True},
    {"sampling_strategy": "random", "seed": 5, "range_min": 1, "output_format": "n-tuple"},
    {"max_score": 0.7, "output_format": "labeled-pair", "output_scores": True},
  ],
  ids=["triplet", "n-tuple random", "labeled-pair"],
)
def test_with_a_separate_corpus_and_prompts(data, tmp_path, options):
  pytest.importorskip("sentence_transformers")
  dataset = datasets.Dataset.from_dict({"anchor": data["anchors"], "positive": data["positives"]})
  ours = mining.mine_hard_negatives(
    dataset,
    LookUp(data["vectors"]),
    corpus=data["corpus"],
    query_prompt=PROMPT,
    corpus_prompt=DOC_PROMPT,
    verbose=False,
    progress=False,
    **options,
  )
  theirs = _st_mine(tmp_path, data, dataset, data["corpus"], options, query_prompt=PROMPT, corpus_prompt=DOC_PROMPT)
  _assert_same(ours, theirs)
  extra = set(data["corpus"]) - set(data["positives"])
  negatives = ours[
    "positive"
    if options["output_format"] == "labeled-pair"
    else "negative"
    if options["output_format"] == "triplet"
    else "negative_1"
  ]
  assert extra & set(negatives)  # The extra corpus is mined from.


@pytest.mark.parametrize(
  "options",
  [
    {"range_max": 10, "num_negatives": 8, "output_format": "n-tuple"},
    {"range_max": 10, "num_negatives": 8, "output_format": "triplet", "output_scores": True},
    {"range_max": 10, "num_negatives": 6, "sampling_strategy": "random", "seed": 2, "output_format": "labeled-list"},
  ],
  ids=["n-tuple", "triplet", "labeled-list random"],
)
def test_a_corpus_smaller_than_the_window(data, tmp_path, options):
  """7 pairs, 6 distinct positives: fewer candidates than range_max + max_positives (padded, never chosen)."""
  pytest.importorskip("sentence_transformers")
  dataset = datasets.Dataset.from_dict({"anchor": data["anchors"][:7], "positive": data["positives"][:7]})
  ours = mining.mine_hard_negatives(dataset, LookUp(data["vectors"]), verbose=False, progress=False, **options)
  _assert_same(ours, _st_mine(tmp_path, data, dataset, None, options))


@pytest.mark.parametrize(
  "options",
  [
    {"num_negatives": 0},
    {"range_min": -1},
    {"range_min": 5, "range_max": 5},
    {"num_negatives": 4, "range_min": 2, "range_max": 5},
    {"output_format": "quadruplet"},
  ],
)
def test_bad_options_fail_as_in_sentence_transformers(data, tmp_path, options):
  st = pytest.importorskip("sentence_transformers.util")
  dataset = datasets.Dataset.from_dict({"anchor": data["anchors"][:20], "positive": data["positives"][:20]})
  with pytest.raises(ValueError):
    st.mine_hard_negatives(dataset, StandIn(), verbose=False, **options)
  with pytest.raises(mining.MiningError) as raised:
    mining.mine_hard_negatives(dataset, LookUp(data["vectors"]), verbose=False, progress=False, **options)
  assert "\n" not in str(raised.value)
  assert any(name in str(raised.value) for name in options)  # It names the option.


def test_seeded_random_is_deterministic_and_the_seed_matters(data):
  dataset = datasets.Dataset.from_dict({"anchor": data["anchors"], "positive": data["positives"]})
  mined = [
    mining.mine_hard_negatives(
      dataset,
      LookUp(data["vectors"]),
      sampling_strategy="random",
      seed=seed,
      range_max=30,
      verbose=False,
      progress=False,
    )["negative"]
    for seed in (1, 1, 2)
  ]
  assert mined[0] == mined[1] and mined[0] != mined[2]


def test_search_blocks_do_not_change_the_result():
  # Blocks of another row count are dots of another shape, which XLA may accumulate in another order: each float32
  # score is within gamma_K * sum_i |q_i c_i| of the exact one (K = 16 products, gamma_K = K u / (1 - K u), u =
  # 2^-24), so two blockings agree within twice that, and the order agrees wherever neighbours are further apart.
  rng = np.random.default_rng(0)
  queries, corpus = rng.normal(size=(37, 16)).astype(np.float32), rng.normal(size=(50, 16)).astype(np.float32)
  corpus[7] = corpus[3]  # A tie: the earlier row first.
  whole = mining.top_k(queries, corpus, 9)
  unit = 2.0**-24
  gamma = 16 * unit / (1 - 16 * unit)
  magnitudes = np.abs(queries.astype(np.float64)) @ np.abs(corpus.T.astype(np.float64))
  bound = gamma * np.take_along_axis(magnitudes, whole[1], axis=1)
  exact = queries.astype(np.float64) @ corpus.T.astype(np.float64)
  assert np.all(np.abs(whole[0] - np.take_along_axis(exact, whole[1], axis=1)) <= bound)
  np.testing.assert_array_equal(whole[1], np.argsort(-exact, axis=1, kind="stable")[:, :9])
  neighbours = -np.diff(np.sort(exact, axis=1)[:, ::-1][:, :10], axis=1)
  assert np.all((neighbours == 0) | (neighbours > 4 * np.max(bound))), "a near tie would let the order differ"
  for rows in (1, 5, 36):
    blocked = mining.top_k(queries, corpus, 9, block_rows=rows)
    np.testing.assert_array_equal(blocked[1], whole[1])
    assert np.all(np.abs(blocked[0] - whole[0]) <= 2 * bound)
  ties = np.flatnonzero((whole[1] == 3).any(axis=1) & (whole[1] == 7).any(axis=1))
  assert len(ties)
  for q in ties:
    row = list(whole[1][q])
    assert row.index(3) < row.index(7)


# --------------------------------------------------------------------------
# The command.


def _pairs_file(path: str, anchors, positives) -> str:
  helpers.write_jsonl(path, [{"anchor": a, "positive": p} for a, p in zip(anchors, positives)])
  return path


def test_command_writes_what_the_function_mines(tiny_model_dir, real_data_dir, tmp_path, capsys):
  from jaxcse.encode import Encoder

  anchors, positives = _sick_pairs(real_data_dir, 40)
  pairs = _pairs_file(str(tmp_path / "pairs.jsonl"), anchors, positives)
  out = str(tmp_path / "out" / "mined.jsonl")
  argv = [
    "--model",
    tiny_model_dir,
    "--input",
    pairs,
    "--output",
    out,
    "--num_negatives",
    "3",
    "--range_max",
    "20",
    "--sampling_strategy",
    "random",
    "--seed",
    "1",
    "--output_scores",
  ]
  assert mining.main(argv) == 0
  printed = capsys.readouterr().out
  assert "distinct queries of 40 rows" in printed and f"wrote {out}" in printed
  with open(out, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
  expected = mining.mine_hard_negatives(
    pairs,
    Encoder.load(tiny_model_dir),
    num_negatives=3,
    range_max=20,
    sampling_strategy="random",
    seed=1,
    output_scores=True,
    verbose=False,
    progress=False,
  )
  assert len(rows) == len(expected) == 40 * 3  # The random tiny model's cosines: every candidate close.
  assert [list(r) for r in rows[:1]] == [["anchor", "positive", "negative", "scores"]]
  assert [r["negative"] for r in rows] == expected["negative"]
  np.testing.assert_allclose([r["scores"] for r in rows], expected["scores"], atol=1e-6)
  # The output is read back as pair data (triplets), and written whole: no temporary file left.
  assert sorted(os.listdir(os.path.dirname(out))) == ["mined.jsonl"]
  # An existing output is refused, one line, before anything runs; --overwrite replaces it.
  capsys.readouterr()  # The Encoder.load above warned how it pools the tiny model (a command's lines, once run).
  assert mining.main(argv) == 1
  assert capsys.readouterr().err.strip() == (
    f"error: {out} exists; pass --overwrite to replace it, or choose another --output"
  )
  # A separate corpus from a text file, n-tuples to parquet: as the function mines them.
  extra = _mrpc_sentences(real_data_dir, 30)
  helpers.write_text(str(tmp_path / "corpus.txt"), "".join(t + "\n" for t in extra))
  parquet = str(tmp_path / "mined.parquet")
  assert (
    mining.main(
      argv[:5] + [parquet] + argv[6:] + ["--output_format", "n-tuple", "--corpus", str(tmp_path / "corpus.txt")]
    )
    == 0
  )
  written = datasets.Dataset.from_parquet(parquet)
  expected = mining.mine_hard_negatives(
    pairs,
    Encoder.load(tiny_model_dir),
    corpus=extra,
    num_negatives=3,
    range_max=20,
    sampling_strategy="random",
    seed=1,
    output_scores=True,
    output_format="n-tuple",
    verbose=False,
    progress=False,
  )
  assert written.column_names == ["anchor", "positive", "negative_1", "negative_2", "negative_3", "scores"]
  assert written["negative_1"] == expected["negative_1"] and written["negative_3"] == expected["negative_3"]


@pytest.mark.parametrize(
  "extra, message",
  [
    (["--output", "{tmp}/mined.txt"], "--output must end in .jsonl, .csv, .parquet"),
    (["--output", "{tmp}/mined.csv", "--output_scores"], "a column of lists, which a .csv cannot hold"),
    (["--range_min", "5", "--range_max", "4"], "range_min must be smaller than range_max"),
    (["--num_negatives", "30", "--range_max", "20"], "cannot mine 30 negatives per query"),
    (["--anchor_column", "query"], "no text column 'query' (anchor_column)"),
    (["--corpus", "{tmp}/missing.txt"], "missing.txt"),
  ],
)
def test_command_mistakes_are_one_line_before_the_model_loads(real_data_dir, tmp_path, capsys, extra, message):
  anchors, positives = _sick_pairs(real_data_dir, 10)
  pairs = _pairs_file(str(tmp_path / "pairs.jsonl"), anchors, positives)
  argv = ["--model", str(tmp_path / "no_model"), "--input", pairs, "--output", str(tmp_path / "mined.jsonl")]
  argv += [a.format(tmp=tmp_path) for a in extra]
  assert mining.main(argv) == 1
  err = capsys.readouterr().err.strip().split("\n")[-1]  # Reading a file, datasets may draw a progress bar first.
  assert err.startswith("error: ") and message in err, err
  assert "no_model" not in err  # The model was never looked for.
  assert sorted(os.listdir(tmp_path)) == ["pairs.jsonl"]


def test_a_corpus_from_a_text_file_or_a_pairs_file(tmp_path):
  helpers.write_text(str(tmp_path / "corpus.txt"), "first text\n\nsecond text\n")
  assert mining.read_corpus(str(tmp_path / "corpus.txt")) == ["first text", "second text"]  # Empty lines skipped.
  records = [{"title": "t1", "body": "b1"}, {"title": "t2", "body": "b2"}]
  helpers.write_jsonl(str(tmp_path / "docs.jsonl"), records)
  assert mining.read_corpus(str(tmp_path / "docs.jsonl")) == ["t1", "t2"]
  assert mining.read_corpus(str(tmp_path / "docs.jsonl"), "body") == ["b1", "b2"]
  with pytest.raises(mining.MiningError, match="no text column 'text'"):
    mining.read_corpus(str(tmp_path / "docs.jsonl"), "text")


def test_a_failed_write_leaves_nothing(tmp_path):
  dataset = datasets.Dataset.from_dict({"anchor": ["a"], "positive": ["b"], "negative": ["c"]})
  path = str(tmp_path / "mined.jsonl")

  class Full(OSError):
    pass

  def half_then_fail(tmp, **kwargs):
    with open(tmp, "w") as f:
      f.write('{"anchor": "a", "pos')
    raise Full(28, "No space left on device")

  dataset.to_json = half_then_fail
  with pytest.raises(OSError) as raised:
    mining.write_dataset(dataset, path)
  assert raised.value.filename == path
  assert os.listdir(tmp_path) == []
  with pytest.raises(mining.MiningError, match="must end in"):
    mining.write_dataset(dataset, str(tmp_path / "mined.txt"))
