"""The raw encoder shipped with jaxcse (jaxcse/pretrained/bert-mini-wiki-uncased): its identity and that it loads.

It was pretrained by configs/pretrain_mlm.py and packaged by experiments/from_raw_plm/package_encoder.py; the
model card records the sha256 of its weights. It must load in jaxcse by name and in PyTorch transformers, and
compute the same thing in both.
"""

import hashlib
import json
import os
import re

import numpy as np
import pytest

from jaxcse.core import compat
from jaxcse.storage import hub, loading
from jaxcse.data import tokenization
from tests import helpers

NAME = "jaxcse/bert-mini-wiki-uncased"
SENTENCES = ["A man is playing a guitar.", "The [MASK] sat on the mat, then left."]


@pytest.fixture(scope="module")
def folder():
  return hub.resolve_model_path(NAME)


def test_weights_are_the_ones_the_card_names(folder):
  card = open(os.path.join(folder, "README.md")).read()
  recorded = re.search(r"sha256: `([0-9a-f]{64})`", card).group(1)
  digest = hashlib.sha256(open(os.path.join(folder, "model.safetensors"), "rb").read()).hexdigest()
  assert digest == recorded
  config = json.load(open(os.path.join(folder, "config.json")))
  assert config["architectures"] == ["BertForMaskedLM"]
  assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (4, 256, 8192)
  # Pretrained without dropout; the folder gives fine-tuning BERT's 0.1 (what SimCSE and the study train with).
  assert config["hidden_dropout_prob"] == config["attention_probs_dropout_prob"] == 0.1


def test_loads_by_name_and_computes_as_pytorch_transformers(folder):
  torch = pytest.importorskip("torch")
  from transformers import BertModel

  loaded = loading.load_model(NAME, pooler="avg")
  ids, mask = tokenization.tokenize_padded(loaded.spec.tokenizer, SENTENCES, 16)
  with compat.enable_x64(True):
    # float64 on both sides: they differ only in the order of their sums, ~1e-15 of activations of size ~1.
    spec, params = helpers.in_float64(loaded.spec, loaded.params)
    ours = np.asarray(spec.backbone.apply({"params": params["backbone"]}, ids, mask).last_hidden_state)
  bert, info = BertModel.from_pretrained(folder, output_loading_info=True)
  assert not info["missing_keys"], info  # Only the MLM head's weights are left over, as for any BertForMaskedLM.
  with torch.no_grad():
    torch_out = (
      bert.double()
      .eval()(input_ids=torch.tensor(np.asarray(ids)).long(), attention_mask=torch.tensor(np.asarray(mask)).long())
      .last_hidden_state.numpy()
    )
  np.testing.assert_allclose(torch_out, ours, rtol=0, atol=1e-10)
