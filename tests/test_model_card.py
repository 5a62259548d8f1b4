"""The exported model card: what the workdir recorded (data, loss, hyperparameters, dev metrics, versions)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from jaxcse import export_hf, train
from jaxcse.storage import model_card
from tests import helpers


@pytest.fixture(scope="module")
def pair_workdir(tiny_model_dir, small_data_dir, tmp_path_factory) -> tuple[str, str, int]:
  """4 steps of the pairs config on 40 triplets, evaluated before training and at the end."""
  folder = tmp_path_factory.mktemp("card")
  data = str(folder / "triplets.jsonl")
  helpers.write_jsonl(data, helpers.small_triplets(small_data_dir, 40))
  workdir = str(folder / "workdir")
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    "pairs",
    **{"data.train": data, "train.max_steps": 4, "eval.every": 4, "eval.at_start": True, "checkpoint.every": 4},
  )
  train.train_and_evaluate(config, workdir)
  return workdir, data, 40


def _front_matter(card: str) -> dict:
  assert card.startswith("---\n")
  return yaml.safe_load(card.split("---\n")[1])


def test_the_card_reports_the_run_as_recorded(pair_workdir, tmp_path, monkeypatch):
  workdir, data, rows = pair_workdir
  monkeypatch.chdir(os.path.dirname(workdir))
  out = str(tmp_path / "exported")
  assert export_hf.main(["workdir", out]) == 0
  card = open(os.path.join(out, "README.md")).read()
  config = json.load(open(os.path.join(workdir, "config.json")))
  evals = [r for r in helpers.metrics_records(workdir) if "eval/metric" in r]
  assert [r["step"] for r in evals] == [0, 4]

  front = _front_matter(card)
  assert front["library_name"] == "sentence-transformers" and front["pipeline_tag"] == "sentence-similarity"
  assert config["method"] in front["tags"] and "base_model" not in front  # A local base folder is no hub id.
  results = {m["type"]: m["value"] for m in front["model-index"][0]["results"][0]["metrics"]}
  assert results == pytest.approx(
    {
      k.removeprefix("eval/"): v
      for k, v in evals[-1].items()
      if k.startswith("eval/") and k not in ("eval/seconds", "eval/metric")
    },
    rel=1e-5,
  )

  assert f"- Examples: {rows:,}" in card
  assert "- Columns, in order: `anchor`, `positive`, `negative`" in card
  assert f"- Source: `{data}`" in card
  assert f"- Method: `{config['method']}`" in card
  assert f"| `train.batch_size` | `{config['train']['batch_size']}` |" in card
  assert f"| `train.learning_rate` | `{json.dumps(config['train']['learning_rate'])}` |" in card
  assert f"| `data.max_seq_len` | `{config['data']['max_seq_len']}` |" in card
  assert "| steps trained | 4 |" in card
  # The dev metrics at the exported step (the best checkpoint, step 4) beside those before training (step 0).
  assert "At the exported step 4 (the workdir's best checkpoint" in card
  stsb = f"| `stsb_dev` | {evals[-1]['eval/stsb_dev']:.4f} | {evals[0]['eval/stsb_dev']:.4f} |"
  assert stsb in card
  summary = json.load(open(os.path.join(workdir, "summary.json")))
  assert f"- jax: {summary['provenance']['libraries']['jax']}" in card
  assert "## Usage" in card and 'SentenceTransformer("PATH_TO_THIS_FOLDER")' in card


def test_an_unfinished_run_says_what_it_did_not_record(pair_workdir, tmp_path):
  workdir, _, _ = pair_workdir
  run = model_card.TrainingRun.read(workdir, "w", 4, "latest")
  unfinished = model_card.TrainingRun("w", 2, "latest", run.config, {}, run.evals)
  card = helpers.tiny_card(unfinished)
  assert "- Examples: not recorded by this run" in card
  assert "No evaluation was recorded at the exported step 2." in card
  assert "steps trained" not in card
  assert "model-index" not in _front_matter(card)


def test_a_hub_base_model_is_named_in_the_front_matter_and_prompts_in_usage():
  card = model_card.model_card(
    pooler="avg",
    pooling_lines="",
    source="`sentence-transformers/all-MiniLM-L6-v2`",
    architecture="BertModel",
    modules=["1_Pooling"],
    dim=384,
    max_seq_len=256,
    base_model="sentence-transformers/all-MiniLM-L6-v2",
    prompts={"query": "query: ", "document": "passage: "},
  )
  front = _front_matter(card)
  assert front["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
  assert "# Sentence encoder exported from jaxcse" in card and "## Training details" not in card
  assert '- Prompts: `query` = "query: ", `document` = "passage: "' in card
  assert "prompt_name='query'" in card
  assert export_hf._hub_id("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
  assert export_hf._hub_id("jaxcse/bert-mini-wiki-uncased") is None
  assert export_hf._hub_id("/some/local/folder") is None


def test_a_matryoshka_run_lists_its_sizes_and_cites_the_paper():
  config = {
    "method": "mnrl",
    "mnrl": {"scale": 20.0},
    "matryoshka": {"dims": "32,16", "weights": "", "n_dims_per_step": -1},
  }
  run = model_card.TrainingRun("w", 4, "latest", config, {}, [])
  card = helpers.tiny_card(run)
  assert "- Matryoshka: dims=`32,16`, n_dims_per_step=`-1`, weights=(none)" in card
  assert "Kusupati et al. Matryoshka Representation Learning" in card
  plain = dict(config, matryoshka={"dims": "", "weights": "", "n_dims_per_step": -1})
  assert "Matryoshka" not in helpers.tiny_card(model_card.TrainingRun("w", 4, "latest", plain, {}, []))
