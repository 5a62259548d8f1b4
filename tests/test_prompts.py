"""Prompts: put before the texts in training, kept with the model, applied by name in jaxcse, MTEB and the export."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from jaxcse.training import configuration
from jaxcse import data as data_lib, encode, train
from jaxcse.storage.workdir import Workdir
from jaxcse.inference import mteb_model
from jaxcse.data import tokenization
from tests import helpers

PROMPTS = {"query": "query: ", "document": "passage: "}
SENTENCES = ["A man is playing a guitar.", "Someone plays music.", "The cat sleeps on the mat."]


def test_the_batch_puts_the_query_prompt_before_the_anchor_and_the_document_prompt_before_the_rest(
  small_data_dir, tmp_path, tokenizer
):
  path = str(tmp_path / "t.jsonl")
  helpers.write_jsonl(path, helpers.small_triplets(small_data_dir, 16))
  corpus = data_lib.load_corpus(path)
  plain = data_lib.Batches(corpus, tokenizer, batch_size=8, max_seq_len=24, seed=0)
  prompted = data_lib.Batches(
    corpus, tokenizer, batch_size=8, max_seq_len=24, seed=0, query_prompt="query: ", document_prompt="passage: "
  )
  rows = plain.indices(1)
  np.testing.assert_array_equal(prompted.indices(1), rows)  # Prompts change the texts, never the order.
  texts = data_lib.batching.corpus_texts(corpus, rows)
  batch = prompted.batch(1)
  for column, prompt in enumerate(("query: ", "passage: ", "passage: ")):
    ids, mask = tokenization.tokenize_padded(tokenizer, [prompt + t for t in texts[column]], 24)
    np.testing.assert_array_equal(batch["input_ids"][:, column], ids)
    np.testing.assert_array_equal(batch["attention_mask"][:, column], mask)
  assert not np.array_equal(batch["input_ids"], plain.batch(1)["input_ids"])


def test_prompts_are_strings_and_not_for_packed_pretraining(tiny_model_dir, small_data_dir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "pairs", **{"data.query_prompt": "query: "})
  configuration.validate(config)
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "pretrain_mlm", **{"data.document_prompt": "p: "})
  with pytest.raises(configuration.ConfigError, match=r"data.document_prompt is put before each text"):
    configuration.validate(config)


@pytest.fixture(scope="module")
def prompted_workdir(tiny_model_dir, small_data_dir, tmp_path_factory) -> str:
  folder = tmp_path_factory.mktemp("prompts")
  path = str(folder / "triplets.jsonl")
  helpers.write_jsonl(path, helpers.small_triplets(small_data_dir, 24))
  workdir = str(folder / "workdir")
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    "pairs",
    **{
      "data.train": path,
      "train.max_steps": 2,
      "eval.every": 2,
      "eval.at_start": False,
      "checkpoint.every": 2,
      "data.query_prompt": PROMPTS["query"],
      "data.document_prompt": PROMPTS["document"],
    },
  )
  train.train_and_evaluate(config, workdir)
  return workdir


def test_a_trained_model_encodes_with_its_prompts_by_name(prompted_workdir, tmp_path):
  encoder = encode.Encoder.load(prompted_workdir)
  assert encoder.prompts == PROMPTS
  for name, text in PROMPTS.items():
    np.testing.assert_array_equal(
      encoder.encode(SENTENCES, prompt_name=name), encoder.encode([text + s for s in SENTENCES])
    )
  np.testing.assert_array_equal(encoder.encode(SENTENCES, prompt="x: "), encoder.encode(["x: " + s for s in SENTENCES]))
  with pytest.raises(
    encode.PromptError,
    match=r"prompt_name 'title' is not one of this model's prompts "
    r"\('query', 'document'\)",
  ):
    encoder.encode(SENTENCES, prompt_name="title")
  # The command: --prompt_name, recorded in the sidecar.
  source = tmp_path / "in.txt"
  source.write_text("".join(s + "\n" for s in SENTENCES))
  out = str(tmp_path / "q.npy")
  assert (
    encode.main(["--model", prompted_workdir, "--input", str(source), "--output", out, "--prompt_name", "query"]) == 0
  )
  np.testing.assert_allclose(np.load(out), encoder.encode(SENTENCES, prompt_name="query"), rtol=0, atol=1e-6)
  assert json.load(open(out[:-4] + ".json"))["prompt"] == PROMPTS["query"]
  assert Workdir(prompted_workdir).prompts() == PROMPTS


def test_mteb_applies_the_prompt_of_its_prompt_type(prompted_workdir):
  mteb = pytest.importorskip("mteb")
  from mteb.types import PromptType

  encoder = encode.Encoder.load(prompted_workdir)
  assert mteb_model.prompt_name_for(PromptType.query, encoder.prompts) == "query"
  assert mteb_model.prompt_name_for(PromptType.document, encoder.prompts) == "document"
  assert mteb_model.prompt_name_for(None, encoder.prompts) is None
  assert mteb_model.prompt_name_for(PromptType.query, {}) is None
  model = encoder.mteb()
  got = model.encode([{"text": SENTENCES}], prompt_type=PromptType.query)
  np.testing.assert_array_equal(got, encoder.encode(SENTENCES, prompt_name="query"))
  del mteb


def test_the_export_carries_the_prompts_to_sentence_transformers(prompted_workdir, tmp_path):
  st = pytest.importorskip("sentence_transformers")
  from jaxcse import export_hf

  out = str(tmp_path / "exported")
  assert export_hf.main([prompted_workdir, out]) == 0
  with open(os.path.join(out, "config_sentence_transformers.json")) as f:
    assert json.load(f)["prompts"] == PROMPTS
  assert '- Prompts: `query` = "query: ", `document` = "passage: "' in open(os.path.join(out, "README.md")).read()
  model = st.SentenceTransformer(out, device="cpu")
  assert model.prompts == PROMPTS
  encoder = encode.Encoder.load(prompted_workdir)
  for name in PROMPTS:
    # float32 on both sides; the export's own tests hold the plain embeddings to the same 1e-5.
    np.testing.assert_allclose(
      model.encode(SENTENCES, prompt_name=name, convert_to_numpy=True),
      encoder.encode(SENTENCES, prompt_name=name),
      rtol=0,
      atol=1e-5,
    )
  # And jaxcse reads the exported folder's prompts back.
  assert encode.Encoder.load(out).prompts == PROMPTS
