"""Embedding files to numpy and the Encoder API: row alignment, streaming, resume, search."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from jaxcse import data as data_lib, encode


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
  return encode.Encoder.load(tiny_model_dir, "avg", batch_size=4)


def _lines(n):
  return [("word " * (1 + (7 * i) % 13)).strip() + f" {i}" for i in range(n)]


def test_rows_align_with_lines_including_empty_and_very_long(encoder, tmp_path):
  lines = ["first", "", "third line", "   ", "tok " * 400, "last"]
  path = tmp_path / "in.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  out = str(tmp_path / "out.npy")
  sidecar = encode.encode_file(encoder, str(path), out, chunk_size=4, progress=False)
  got = np.load(out)
  assert got.shape == (6, 32) and sidecar["count"] == 6 and sidecar["dim"] == 32
  direct = encoder.embed(lines)  # Row i is line i: empty lines are the empty sentence, not dropped.
  np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-6)
  assert not np.allclose(got[1], got[0])
  np.testing.assert_allclose(got[1], got[3], rtol=1e-5, atol=1e-6)  # Both are the empty sentence.
  meta = json.load(open(tmp_path / "out.json"))
  assert meta["pooler"] == "avg" and meta["normalized"] is False and meta["dtype"] == "float32"
  assert not os.path.exists(out + ".partial") and not os.path.exists(out + ".progress.json")


def test_streams_in_chunks_far_smaller_than_the_input(encoder, tmp_path, monkeypatch):
  lines = _lines(50)
  path = tmp_path / "big.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  seen = []
  real = encoder.encode
  monkeypatch.setattr(encoder, "encode", lambda chunk, **kw: (seen.append(len(chunk)), real(chunk, **kw))[1])
  encode.encode_file(encoder, str(path), str(tmp_path / "big.npy"), chunk_size=8, progress=False)
  assert seen == [8] * 6 + [2]  # Never more than one chunk of rows in memory.
  np.testing.assert_allclose(np.load(tmp_path / "big.npy"), real(lines), rtol=1e-5, atol=1e-6)


def test_interrupted_run_resumes_to_byte_identical_output(encoder, tmp_path, monkeypatch):
  lines = _lines(30)
  path = tmp_path / "in.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  reference = str(tmp_path / "ref.npy")
  encode.encode_file(encoder, str(path), reference, chunk_size=7, dtype="float16", normalize=True, progress=False)

  out = str(tmp_path / "out.npy")
  real = encoder.encode
  calls = []

  def dies_on_third_chunk(chunk, **kw):
    calls.append(len(chunk))
    if len(calls) == 3:
      raise KeyboardInterrupt
    return real(chunk, **kw)

  monkeypatch.setattr(encoder, "encode", dies_on_third_chunk)
  with pytest.raises(KeyboardInterrupt):
    encode.encode_file(encoder, str(path), out, chunk_size=7, dtype="float16", normalize=True, progress=False)
  assert json.load(open(out + ".progress.json"))["rows_done"] == 14 and not os.path.exists(out)
  resumed = []
  monkeypatch.setattr(encoder, "encode", lambda chunk, **kw: (resumed.append(len(chunk)), real(chunk, **kw))[1])
  encode.encode_file(encoder, str(path), out, chunk_size=7, dtype="float16", normalize=True, progress=False)
  assert resumed == [7, 7, 2]  # Only the rows after the last finished chunk.
  assert open(out, "rb").read() == open(reference, "rb").read()
  got = np.load(out)
  assert got.dtype == np.float16
  np.testing.assert_allclose(np.linalg.norm(got.astype(np.float32), axis=1), 1.0, atol=2e-3)


def test_csv_and_jsonl_columns(encoder, tmp_path):
  (tmp_path / "in.csv").write_text('id,text\n1,"hello, world"\n2,"two\nlines"\n', encoding="utf-8")
  (tmp_path / "in.jsonl").write_text('{"text": "hello, world"}\n{"text": "two\\nlines"}\n', encoding="utf-8")
  a = encode.encode_file(encoder, str(tmp_path / "in.csv"), str(tmp_path / "a.npy"), column="text", progress=False)
  encode.encode_file(encoder, str(tmp_path / "in.jsonl"), str(tmp_path / "b.npy"), column="text", progress=False)
  assert a["count"] == 2
  np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
  with pytest.raises(data_lib.DataError, match="needs --column"):
    encode.encode_file(encoder, str(tmp_path / "in.csv"), str(tmp_path / "c.npy"), progress=False)
  (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"txt": "no"}\n', encoding="utf-8")
  with pytest.raises(data_lib.DataError, match=r"bad.jsonl:2: no string field 'text'"):
    encode.encode_file(encoder, str(tmp_path / "bad.jsonl"), str(tmp_path / "d.npy"), column="text", progress=False)
  (tmp_path / "bad.txt").write_bytes(b"fine\n\xff\n")
  with pytest.raises(data_lib.DataError, match=r"bad.txt:2: not valid UTF-8"):
    encode.encode_file(encoder, str(tmp_path / "bad.txt"), str(tmp_path / "e.npy"), progress=False)


def test_search_returns_the_exact_top_k(encoder):
  rng = np.random.default_rng(0)
  corpus = rng.normal(size=(300, 32)).astype(np.float32)
  queries = rng.normal(size=(7, 32)).astype(np.float32)
  encoder.build_index(corpus)
  scores, ids = encoder.search(queries, top_k=5, block_size=64)  # Several blocks: the merge must be exact.
  unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
  brute = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ unit.T
  np.testing.assert_array_equal(ids, np.argsort(-brute, axis=1)[:, :5])
  np.testing.assert_allclose(scores, np.sort(brute, axis=1)[:, ::-1][:, :5], rtol=1e-5, atol=1e-6)


def test_encode_and_similarity_on_sentences(encoder):
  sentences = ["a cat sat", "a dog ran", "a cat sat"]
  e = encoder.encode(sentences)
  assert e.shape == (3, 32)
  sim = encoder.similarity(sentences, sentences)
  np.testing.assert_allclose(np.diag(sim), 1.0, rtol=1e-5)
  assert sim[0, 2] == pytest.approx(1.0, abs=1e-5)
  assert encoder.encode("a cat sat").shape == (32,)
  encoder.build_index(sentences)
  _, ids = encoder.search("a dog ran", top_k=1)
  assert ids.tolist() == [[1]]


def test_cli_writes_npy_and_sidecar(tiny_model_dir, tmp_path, capsys):
  (tmp_path / "in.txt").write_text("one\ntwo\n\nfour\n", encoding="utf-8")
  out = str(tmp_path / "emb.npy")
  assert (
    encode.main(
      [
        "--model",
        tiny_model_dir,
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        out,
        "--pooler",
        "avg",
        "--normalize",
      ]
    )
    == 0
  )
  assert np.load(out).shape == (4, 32)
  assert f"and its sidecar {tmp_path / 'emb.json'}" in capsys.readouterr().out
  assert json.load(open(tmp_path / "emb.json"))["normalized"] is True


def test_an_existing_output_or_sidecar_is_never_replaced_unasked(tiny_model_dir, tmp_path, capsys):
  (tmp_path / "in.txt").write_text("one\ntwo\n", encoding="utf-8")
  args = ["--model", tiny_model_dir, "--input", str(tmp_path / "in.txt"), "--pooler", "avg"]
  for existing, output in (("exist.npy", "exist.npy"), ("other.json", "other.npy")):  # The output; its sidecar.
    (tmp_path / existing).write_bytes(b"the user's own file")
    assert encode.main([*args, "--output", str(tmp_path / output)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / existing} exists" in err[0] and "--overwrite" in err[0], err
    assert (tmp_path / existing).read_bytes() == b"the user's own file"
    assert sorted(os.listdir(tmp_path)) == sorted({"in.txt", "exist.npy", existing})
  assert encode.main([*args, "--output", str(tmp_path / "exist.npy"), "--overwrite"]) == 0
  assert np.load(tmp_path / "exist.npy").shape == (2, 32)


def test_encode_takes_the_sentence_transformers_and_mteb_call_shape(encoder):
  sentences = [_lines(9)[i] for i in range(9)]
  base = encoder.encode(sentences)
  # The keywords sentence-transformers' encode takes are accepted (unknown ones, as MTEB passes, are ignored).
  st = pytest.importorskip("sentence_transformers")
  import inspect

  for name in inspect.signature(st.SentenceTransformer.encode).parameters:
    if name not in ("self", "sentences", "inputs", "kwargs"):
      encoder.encode(
        sentences[:2], **{name: None} if name not in ("batch_size", "normalize_embeddings", "show_progress_bar") else {}
      )
  got = encoder.encode(
    sentences,
    batch_size=2,
    normalize_embeddings=True,
    show_progress_bar=False,
    convert_to_numpy=True,
    task_name="STSBenchmark",
    prompt_type=None,
  )
  assert got.dtype == np.float32 and got.shape == (9, 32)
  np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-6)
  # Another batch size computes the same rows (float32 of the same sentences; shapes differ: ~1e-7 relative).
  np.testing.assert_allclose(got, base / np.linalg.norm(base, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
  # MTEB 2's data loaders yield batches {"text": [...]}.
  np.testing.assert_array_equal(encoder.encode([{"text": sentences[:4]}, {"text": sentences[4:]}]), base)


def test_a_partial_batch_is_not_padded_to_a_full_batch(tiny_model_dir):
  from jaxcse.inference import embedder as embedder_lib
  from jaxcse import models

  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg"))
  embedder = embedder_lib.BucketedEmbedder(spec, batch_size=64, packed=False)
  shapes = []
  real = embedder._apply
  embedder._apply = lambda p, ids, mask: (shapes.append(ids.shape), real(p, ids, mask))[1]
  embedder(["one sentence"] * 70, params)
  assert shapes == [(64, 4), (8, 4)]  # 64 rows, then the last 6 padded to 8 (not to 64).


def test_the_index_stays_on_the_device(encoder):
  import jax

  encoder.build_index(_lines(20))
  assert isinstance(encoder._index, jax.Array)
