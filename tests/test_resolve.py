"""What a model name or path is (``hub.resolve``), and the published shapes read from the shipped data file."""

from __future__ import annotations

import pytest

# Golden fields of the published config.json shapes (huggingface.co/<id>/blob/main/config.json) and their
# tokenizers' special ids: (model_type, hidden, layers, heads, intermediate, vocab, positions, pad id, eps,
# (mask id, pad id, all special ids, sep id)).
_BERT_IDS = (103, 0, (100, 102, 0, 101, 103), 102)
_ROBERTA_IDS = (50264, 1, (0, 2, 3, 1, 50264), 2)
_BERT_BASE = ("bert", 768, 12, 12, 3072, 30522, 512, 0, 1e-12, _BERT_IDS)
_BERT_LARGE = ("bert", 1024, 24, 16, 4096, 30522, 512, 0, 1e-12, _BERT_IDS)
_ROBERTA_BASE = ("roberta", 768, 12, 12, 3072, 50265, 514, 1, 1e-5, _ROBERTA_IDS)
_ROBERTA_LARGE = ("roberta", 1024, 24, 16, 4096, 50265, 514, 1, 1e-5, _ROBERTA_IDS)
_MODERNBERT = (
  "modernbert",
  768,
  22,
  12,
  1152,
  50368,
  8192,
  50283,
  1e-5,
  (50284, 50283, (50281, 50282, 50280, 50283, 50284), 50282),
)
GOLDEN = {
  "bert-base-uncased": _BERT_BASE,
  "google-bert/bert-base-uncased": _BERT_BASE,
  "princeton-nlp/unsup-simcse-bert-base-uncased": _BERT_BASE,
  "princeton-nlp/sup-simcse-bert-base-uncased": _BERT_BASE,
  "bert-large-uncased": _BERT_LARGE,
  "google-bert/bert-large-uncased": _BERT_LARGE,
  "roberta-base": _ROBERTA_BASE,
  "FacebookAI/roberta-base": _ROBERTA_BASE,
  "princeton-nlp/unsup-simcse-roberta-base": _ROBERTA_BASE,
  "princeton-nlp/sup-simcse-roberta-base": _ROBERTA_BASE,
  "roberta-large": _ROBERTA_LARGE,
  "FacebookAI/roberta-large": _ROBERTA_LARGE,
  "answerdotai/ModernBERT-base": _MODERNBERT,
}


@pytest.fixture
def empty_hub_cache(monkeypatch, tmp_path):
  """huggingface_hub's cache, empty and offline: only a published shape can answer."""
  from huggingface_hub import constants

  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_published_shapes_are_the_published_configs(name, empty_hub_cache):
  from jaxcse.training import configured

  model_type, hidden, layers, heads, intermediate, vocab, positions, pad, eps, ids = GOLDEN[name]
  shape = configured.model_shape(name, dropout=0.0)
  c = shape.hf_config
  assert shape.source == f"the published shape of {name}" and shape.folder is None
  assert (c.model_type, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size) == (
    model_type,
    hidden,
    layers,
    heads,
    intermediate,
  )
  assert (c.vocab_size, c.max_position_embeddings, c.pad_token_id) == (vocab, positions, pad)
  assert (c.norm_eps if model_type == "modernbert" else c.layer_norm_eps) == eps
  t = shape.tokens
  assert (t.mask_token_id, t.pad_token_id, t.all_special_ids, t.sep_token_id) == ids and t.vocab is None
  families = {"bert": "hidden_dropout_prob", "roberta": "hidden_dropout_prob", "modernbert": "embedding_dropout"}
  assert getattr(c, families[model_type]) == 0.0  # ``dropout`` applied, as to a loaded model's config.
  assert configured.model_shape(name).hf_config.to_dict()["initializer_range"] == 0.02
