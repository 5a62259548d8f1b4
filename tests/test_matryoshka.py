"""Matryoshka training (jaxcse.training.matryoshka) equals sentence-transformers 6.2's MatryoshkaLoss on the same
embeddings, wraps every method, and its config is checked; truncated embeddings at test time.

Parity: s-t's ``MatryoshkaLoss`` over its ``MultipleNegativesRankingLoss`` / ``CoSENTLoss``, driven by a stand-in
model that returns given float64 embeddings, against ``Matryoshka.loss`` over our ``mnrl_loss`` / ``cosent_loss``
under float64: the loss and its gradient w.r.t. every embedding. GradCache and 2 devices: the ``mnrl_k1_matryoshka``
variant of tests/test_ranking_losses.py's step checks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jaxcse import data as data_lib, models
from jaxcse.training import configuration, configured, matryoshka, ranking_losses, train_step
from tests import helpers


def _st_matryoshka_value_and_grad(inner, dims, weights, z: np.ndarray, labels: np.ndarray | None = None):
  """s-t's MatryoshkaLoss(stand-in model, ``inner(model)``) on ``z`` ``[batch, columns, dim]``: (loss, dloss/dz)."""
  torch = pytest.importorskip("torch")
  st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")

  class GivenEmbeddings(torch.nn.Module):
    """Returns the embeddings its features name (one column, or several merged into one forward)."""

    def __init__(self, embeddings):
      super().__init__()
      self.embeddings = embeddings

    def forward(self, features):
      return {"sentence_embedding": self.embeddings[:, features["column"]].transpose(0, 1).reshape(-1, z.shape[2])}

    def get_embedding_dimension(self):
      return z.shape[2]

  embeddings = torch.tensor(z, dtype=torch.float64, requires_grad=True)
  model = GivenEmbeddings(embeddings)
  loss = st_losses.MatryoshkaLoss(model, inner(model), list(dims), matryoshka_weights=weights and list(weights))
  # One feature dict per column; s-t may merge the candidate columns into one forward (their "column"s concatenated).
  features = [{"column": torch.tensor([c])} for c in range(z.shape[1])]
  label_tensor = torch.tensor(labels if labels is not None else np.zeros(z.shape[0]), dtype=torch.float64)
  value = loss(features, label_tensor)
  value.backward()
  return float(value.detach()), embeddings.grad.numpy()


def _ours_value_and_grad(inner_loss, dims, weights, z: np.ndarray):
  nested = _nested(",".join(map(str, dims)), ",".join(map(str, weights or ())))
  return helpers.ours_value_and_grad(lambda x: nested.loss(lambda e: (inner_loss(e), {}), x)[0], z)


def _nested(dims: str, weights: str = "", n_dims_per_step: int = -1) -> matryoshka.Matryoshka | None:
  block = {"dims": dims, "weights": weights, "n_dims_per_step": n_dims_per_step}
  return matryoshka.Matryoshka.from_config(ml_collections.ConfigDict({"matryoshka": block}))


# Dims in any order (s-t sorts them, largest first, keeping each one's weight), with and without the full width.
DIMS = [((8, 4, 2), None), ((2, 8, 4), (0.5, 2.0, 1.0)), ((6, 3), (1.0, 0.25))]


@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("dims,weights", DIMS)
def test_matryoshka_mnrl_equals_sentence_transformers(dims, weights, k):
  st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
  z = np.random.default_rng(k).normal(size=(6, 2 + k, 8))
  theirs = _st_matryoshka_value_and_grad(
    lambda model: st_losses.MultipleNegativesRankingLoss(model, scale=20.0), dims, weights, z
  )
  ours = _ours_value_and_grad(functools.partial(ranking_losses.mnrl_loss, scale=20.0), dims, weights, z)
  helpers.assert_parity(ours, theirs)


@pytest.mark.parametrize("dims,weights", DIMS[:2])
def test_matryoshka_cosent_equals_sentence_transformers(dims, weights):
  st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
  rng = np.random.default_rng(5)
  z, labels = rng.normal(size=(6, 2, 8)), rng.uniform(0, 5, 6)
  theirs = _st_matryoshka_value_and_grad(
    lambda model: st_losses.CoSENTLoss(model, scale=20.0), dims, weights, z, labels=labels
  )
  ours = _ours_value_and_grad(
    lambda e: ranking_losses.cosent_loss(e[:, 0], e[:, 1], jnp.asarray(labels), scale=20.0), dims, weights, z
  )
  helpers.assert_parity(ours, theirs)


def test_shrink_is_the_normalised_prefix():
  z = jnp.asarray([[3.0, 4.0, 12.0], [0.0, 0.0, 1.0]])
  np.testing.assert_allclose(matryoshka.shrink(z, 2), [[0.6, 0.8], [0.0, 0.0]])  # A zero prefix stays zero.
  np.testing.assert_allclose(matryoshka.shrink(z, 3)[0], np.array([3, 4, 12]) / 13.0, rtol=1e-6)


def test_n_dims_per_step_trains_a_random_subset_of_the_dims():
  nested = matryoshka.Matryoshka((8, 4, 2), (1.0, 1.0, 1.0), n_dims_per_step=1)
  z = jnp.asarray(np.random.default_rng(0).normal(size=(6, 2, 8)))
  drawn = []
  for seed in range(12):
    total, metrics = nested.loss(lambda e: (ranking_losses.mnrl_loss(e), {}), z, jax.random.key(seed))
    per_dim = {d: float(metrics[f"matryoshka_loss_{d}"]) for d in nested.dims}  # Every dim is logged.
    (dim,) = [d for d, value in per_dim.items() if np.isclose(float(total), value, rtol=1e-6)]
    drawn.append(dim)
    again, _ = nested.loss(lambda e: (ranking_losses.mnrl_loss(e), {}), z, jax.random.key(seed))
    assert float(again) == float(total)  # The draw is the key's.
  assert set(drawn) == {8, 4, 2}, drawn  # 12 draws of 1 in 3: all three come up (chance of not: 3 (2/3)^12 < 2%).


@pytest.mark.parametrize(
  "dims,weights,n,message",
  [
    ("64,0", "", -1, "positive integers"),
    ("64,32.5", "", -1, "comma-separated ints"),
    ("64,64", "", -1, "twice"),
    ("64,32", "1", -1, "1 values for 2"),
    ("64,32", "1,nan", -1, "finite and >= 0"),
    ("64,32", "1,-1", -1, "finite and >= 0"),
    ("64,32", "", 0, "n_dims_per_step"),
  ],
)
def test_bad_matryoshka_settings_are_one_clear_error(dims, weights, n, message):
  with pytest.raises(ValueError, match=message):
    _nested(dims, weights, n)


def test_the_config_checks_name_the_field(tiny_model_dir, small_data_dir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "base", **{"matryoshka.dims": "32,16,0"})
  with pytest.raises(configuration.ConfigError, match="matryoshka.dims must be positive"):
    configuration.validate(config)
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "pretrain_mlm", **{"matryoshka.dims": "16"})
  with pytest.raises(configuration.ConfigError, match="no sentence embeddings to truncate"):
    configuration.validate(config)
  # Wider than the tiny model's 32 dims: refused once the model is known, before a run writes anything.
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, "base", **{"matryoshka.dims": "64,16"})
  configuration.validate(config)
  with pytest.raises(configuration.ConfigError, match="64 is wider than the model's 32-dimensional"):
    configured.model(config)


def test_an_older_config_without_the_block_trains_without_matryoshka():
  assert matryoshka.Matryoshka.from_config(ml_collections.ConfigDict({"method": "simcse"})) is None
  assert _nested("") is None


@pytest.mark.parametrize("method", ["simcse", "mixcse", "dclr"])
def test_every_method_trains_with_matryoshka(tiny_model_dir, small_data_dir, method):
  # The method's loss at each prefix, summed: the step's loss is the sum of the logged per-dim losses.
  config_name = {"simcse": "base", "mixcse": "mixcse", "dclr": "dclr"}[method]
  overrides = {"matryoshka.dims": "32,16,8", "matryoshka.weights": "1,0.5,0.25"}
  if method == "dclr":
    overrides["dclr.instance_weighting"] = "self"  # No complementary model to load for the tiny model.
  config = helpers.tiny_config(tiny_model_dir, small_data_dir, config_name, **overrides)
  configuration.validate(config)
  metrics = _one_step_metrics(config, tiny_model_dir, small_data_dir)
  per_dim = [float(metrics[f"matryoshka_loss_{d}"]) for d in (32, 16, 8)]
  assert all(np.isfinite(per_dim)) and len(set(per_dim)) == 3
  # float32 sums of three O(1) terms: a few ulps.
  np.testing.assert_allclose(metrics["contrastive_loss"], np.dot([1, 0.5, 0.25], per_dim), rtol=1e-6)


def _one_step_metrics(config, model_dir: str, data_dir: str) -> dict:
  """The metrics of one jitted train step of ``config`` on the tiny model's first batch."""
  spec, params = models.load_pretrained(model_dir, models.PoolerSpec(config.model.pooler, True), seed=0)
  corpus = data_lib.load_corpus(config.data.train, root=data_dir)
  batch = data_lib.Batches(corpus, spec.tokenizer, batch_size=8, max_seq_len=16, seed=0).batch(0)
  tx = optax.sgd(1e-3)
  step = jax.jit(train_step.make_train_step(config, spec, tx))
  state = train_step.TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))
  return jax.device_get(step(state, batch, None)[1])


# --------------------------------------------------------------------------
# Truncated embeddings at test time: Encoder, jaxcse-encode, jaxcse-evaluate, the export.

SENTENCES = ["A man is playing a guitar.", "A woman slices an onion.", "Two dogs run on the beach.", ""]


def test_encoder_truncates_before_normalising(tiny_model_dir):
  from jaxcse.encode import Encoder, TruncateDimError

  encoder = Encoder.load(tiny_model_dir, "avg")
  full = encoder.encode(SENTENCES)
  assert full.shape == (4, 32) and encoder.dim == 32
  np.testing.assert_array_equal(encoder.encode(SENTENCES, truncate_dim=8), full[:, :8])
  unit = encoder.encode(SENTENCES, truncate_dim=8, normalize_embeddings=True)  # s-t: truncate, then normalise.
  np.testing.assert_allclose(unit, full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True), rtol=1e-6)
  small = Encoder.load(tiny_model_dir, "avg", truncate_dim=8)
  assert small.dim == 8 and small.encode("one").shape == (8,)
  np.testing.assert_array_equal(small.encode(SENTENCES), full[:, :8])
  np.testing.assert_allclose(small.similarity(SENTENCES[:2], SENTENCES[2:]).shape, (2, 2))
  for bad in (0, 33, 8.0):
    with pytest.raises(TruncateDimError, match=r"truncate_dim must be an integer in \[1, 32\]"):
      Encoder.load(tiny_model_dir, "avg", truncate_dim=bad)


def test_encode_command_and_evaluate_command_truncate(tiny_model_dir, tmp_path, capsys):
  from jaxcse import encode, evaluate

  (tmp_path / "in.txt").write_text("\n".join(SENTENCES[:3]) + "\n", encoding="utf-8")
  args = ["--model", tiny_model_dir, "--input", str(tmp_path / "in.txt"), "--pooler", "avg"]
  assert encode.main([*args, "--output", str(tmp_path / "full.npy")]) == 0
  assert encode.main([*args, "--output", str(tmp_path / "small.npy"), "--truncate_dim", "8"]) == 0
  np.testing.assert_array_equal(np.load(tmp_path / "small.npy"), np.load(tmp_path / "full.npy")[:, :8])
  import json

  assert json.load(open(tmp_path / "small.json"))["dim"] == 8
  assert encode.main([*args, "--output", str(tmp_path / "bad.npy"), "--truncate_dim", "64"]) == 1
  assert "error: truncate_dim must be an integer in [1, 32]" in capsys.readouterr().err
  scores = {}
  for dim in (None, 8):
    out = tmp_path / f"eval_{dim}.json"
    flags = ["--truncate_dim", str(dim)] if dim else []
    assert (
      evaluate.main(["--model", tiny_model_dir, "--pooler", "avg", "--tasks", "STS16", "--output", str(out), *flags])
      == 0
    )
    record = json.load(open(out))
    assert record.get("truncate_dim") == dim
    scores[dim] = record["summary"]["STS16"]
  assert scores[None] != scores[8]  # The first 8 of the random tiny model's 32 dims rank the pairs differently.


def test_export_writes_truncate_dim_that_sentence_transformers_and_jaxcse_read(tiny_model_dir, tmp_path):
  SentenceTransformer = pytest.importorskip("sentence_transformers").SentenceTransformer
  from jaxcse import export_hf
  from jaxcse.encode import Encoder

  out = str(tmp_path / "exported")
  assert export_hf.main([tiny_model_dir, out, "--pooler", "avg", "--truncate_dim", "8"]) == 0
  theirs = SentenceTransformer(out, device="cpu").encode(SENTENCES, convert_to_numpy=True)
  ours = Encoder.load(out)
  assert theirs.shape == (4, 8) and ours.truncate_dim == 8
  # float32 forward passes of two implementations: as tests/test_export_hf.py's round trips.
  np.testing.assert_allclose(ours.encode(SENTENCES), theirs, rtol=0, atol=1e-5)
  with pytest.raises(export_hf.ExportError, match="truncate_dim must be in"):
    export_hf.export(ours.spec, ours.params, str(tmp_path / "wide"), "avg", truncate_dim=33)
