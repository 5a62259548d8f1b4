"""GISTEmbed (method gist): the loss equals sentence-transformers 6.2's, its config, its guide model, and its step.

Parity: s-t's ``GISTEmbedLoss.forward`` (2 and 3 columns) and ``CachedGISTEmbedLoss.calculate_loss`` (more hard
negative columns, in mini-batches) in torch float64, driven with given model and guide embeddings, against
``ranking_losses.gist_loss`` under float64: loss and gradient w.r.t. every embedding, for both margin strategies,
margins 0 and 0.1, the contrast flags on and off. Then the config's checks, the guide's vocabulary and length
checks, the step's loss from the model's and the guide's embeddings, and a few training steps on the tiny model.
GradCache against the plain step, and 2 devices against 1: ``tests/test_ranking_losses.py``'s ``STEP_VARIANTS``.
"""

from __future__ import annotations

import doctest
import functools
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcse import data as data_lib, models, train
from jaxcse.core import compat
from jaxcse.storage import model_card
from jaxcse.training import configuration, configured, objectives, ranking_losses, train_step
from tests import helpers

FLAGS = list(itertools.product((True, False), repeat=2))  # (contrast_anchors, contrast_positives)
MARGINS = [(strategy, margin) for strategy in ranking_losses.MARGIN_STRATEGIES for margin in (0.0, 0.1)]


def _embeddings(batch: int, columns: int, dim: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).normal(size=(batch, columns, dim))


def _guide_for(z: np.ndarray, seed: int) -> np.ndarray:
  """A guide of another width whose cosines spread around its positive scores: about half the candidates are
  left out at margin 0, and some are within 0.1 of the positive's score (so the margin changes what is left out)."""
  rng = np.random.default_rng(seed)
  projection = rng.normal(size=(z.shape[-1], 5))
  return z @ projection + 0.8 * rng.normal(size=(*z.shape[:2], 5))


class _Stub:
  """Stands in for a SentenceTransformer: the tokenizer s-t's constructors check (the same for model and guide,
  so nothing is retokenized), its length, and ``model[0]`` (not a StaticEmbedding)."""

  max_seq_length = 128

  def __init__(self, tokenizer):
    self.tokenizer = tokenizer

  def __getitem__(self, index):
    return None


def _st_loss(cls, tokenizer, **settings):
  return cls(_Stub(tokenizer), _Stub(tokenizer), **settings)


def _st_gist_value_and_grad(monkeypatch, tokenizer, z, guide, settings) -> tuple[float, np.ndarray]:
  """s-t's ``GISTEmbedLoss.forward`` with its embedding calls answered by ``z`` (model) and ``guide``."""
  torch = pytest.importorskip("torch")
  gist_module = pytest.importorskip("sentence_transformers.sentence_transformer.losses.gist_embed")
  loss_module = _st_loss(gist_module.GISTEmbedLoss, tokenizer, **settings)
  assert not loss_module.must_retokenize
  embeddings = torch.tensor(z, dtype=torch.float64, requires_grad=True)
  guide_tensor = torch.tensor(guide, dtype=torch.float64)

  def embed_columns(model, features):
    source = embeddings if model is loss_module.model else guide_tensor
    assert model in (loss_module.model, loss_module.guide) and len(features) == z.shape[1]
    return [source[:, c] for c in range(z.shape[1])]

  monkeypatch.setattr(gist_module, "embed_columns", embed_columns)
  loss = loss_module.forward([{} for _ in range(z.shape[1])], None)
  loss.backward()
  return float(loss.detach()), embeddings.grad.numpy()


def _st_cached_value_and_grad(tokenizer, z, guide, settings, mini_batch_size) -> tuple[float, np.ndarray]:
  """s-t's ``CachedGISTEmbedLoss.calculate_loss`` on the columns cut into mini-batches, as its forward cuts them."""
  torch = pytest.importorskip("torch")
  st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
  loss_module = _st_loss(st_losses.CachedGISTEmbedLoss, tokenizer, mini_batch_size=mini_batch_size, **settings)
  embeddings = torch.tensor(z, dtype=torch.float64, requires_grad=True)
  guide_tensor = torch.tensor(guide, dtype=torch.float64)

  def mini_batches(x, c):
    return list(torch.split(x[:, c], mini_batch_size))

  reps = [mini_batches(embeddings, c) for c in range(z.shape[1])]
  reps_guided = [mini_batches(guide_tensor, c) for c in range(z.shape[1])]
  loss = loss_module.calculate_loss(reps, reps_guided)
  loss.backward()
  return float(loss.detach()), embeddings.grad.numpy()


def _ours_value_and_grad(z, guide, settings) -> tuple[float, np.ndarray]:
  with compat.enable_x64(True):
    guide = jnp.asarray(guide, jnp.float64)
  return helpers.ours_value_and_grad(functools.partial(ranking_losses.gist_loss, guide=guide, **settings), z)


def _settings(strategy, margin, anchors, positives) -> dict:
  return dict(margin_strategy=strategy, margin=margin, contrast_anchors=anchors, contrast_positives=positives)


@pytest.mark.parametrize("columns", [2, 3])
@pytest.mark.parametrize("contrast_anchors,contrast_positives", FLAGS)
@pytest.mark.parametrize("margin_strategy,margin", MARGINS)
def test_gist_equals_sentence_transformers(
  monkeypatch, tokenizer, columns, margin_strategy, margin, contrast_anchors, contrast_positives
):
  z = _embeddings(6, columns, 8, seed=columns)
  guide = _guide_for(z, seed=columns + 10)
  settings = _settings(margin_strategy, margin, contrast_anchors, contrast_positives)
  theirs = _st_gist_value_and_grad(monkeypatch, tokenizer, z, guide, {"temperature": 0.01, **settings})
  helpers.assert_parity(_ours_value_and_grad(z, guide, settings), theirs)


@pytest.mark.parametrize("contrast_anchors,contrast_positives", [(True, True), (False, False)])
@pytest.mark.parametrize("margin_strategy,margin", [("absolute", 0.1), ("relative", 0.1)])
def test_more_hard_negative_columns_equal_cached_gist(
  tokenizer, margin_strategy, margin, contrast_anchors, contrast_positives
):
  # GISTEmbedLoss refuses more than one hard negative column; CachedGISTEmbedLoss takes any number (one block
  # each), and its mini-batches (4 rows of 6) must not change the loss.
  z = _embeddings(6, 4, 8, seed=4)
  guide = _guide_for(z, seed=14)
  settings = _settings(margin_strategy, margin, contrast_anchors, contrast_positives)
  theirs = _st_cached_value_and_grad(tokenizer, z, guide, {"temperature": 0.05, **settings}, mini_batch_size=4)
  helpers.assert_parity(_ours_value_and_grad(z, guide, {"temperature": 0.05, **settings}), theirs)


def test_the_guide_leaves_candidates_out_and_the_margin_matters():
  # The parity grid's batches exercise the filter: part of the candidates is left out at margin 0, more at 0.1,
  # and the losses differ from unfiltered InfoNCE over the same blocks.
  z = _embeddings(6, 3, 8, seed=3)
  guide = _guide_for(z, seed=13)
  with compat.enable_x64(True):
    g = jnp.asarray(guide)
    unit = g / jnp.linalg.norm(g, axis=-1, keepdims=True)
    positive = jnp.sum(unit[:, 0] * unit[:, 1], axis=-1)[:, None]
    in_batch = unit[:, 0] @ unit[:, 1].T
    off_diagonal = ~np.eye(6, dtype=bool)
    left_out = {m: float(np.mean(np.asarray(in_batch > positive - m)[off_diagonal])) for m in (0.0, 0.1)}
    assert 0.1 < left_out[0.0] < left_out[0.1] < 0.9, left_out
    # A guide that leaves nothing out: every guide cosine 1, the threshold 1 + 1.
    unfiltered = float(ranking_losses.gist_loss(jnp.asarray(z), jnp.ones((6, 3, 4)), margin=-1.0))
    filtered = [float(ranking_losses.gist_loss(jnp.asarray(z), g, margin=m)) for m in (0.0, 0.1)]
  assert abs(filtered[0] - unfiltered) > 1e-3 and abs(filtered[1] - filtered[0]) > 1e-3


def test_a_guide_that_leaves_nothing_out_is_infonce_over_the_same_blocks():
  # No candidate left out (every guide cosine 1, threshold 1 + 1): the loss is the cross-entropy over
  # [ap | aa | pp | an] / temperature, computed here in numpy.
  z = _embeddings(5, 3, 8, seed=9)
  guide = np.ones((5, 3, 4))
  unit = z / np.linalg.norm(z, axis=-1, keepdims=True)
  logits = (
    np.concatenate(
      [unit[:, 0] @ unit[:, c].T for c in (1, 0)] + [unit[:, 1] @ unit[:, 1].T, unit[:, 0] @ unit[:, 2].T], axis=1
    )
    / 0.05
  )
  expected = np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(5), np.arange(5)])
  with compat.enable_x64(True):
    ours = float(ranking_losses.gist_loss(jnp.asarray(z), jnp.asarray(guide), temperature=0.05, margin=-1.0))
  np.testing.assert_allclose(ours, expected, rtol=1e-12)


def test_gist_loss_refuses_mismatched_shapes_and_settings():
  z = jnp.zeros((4, 3, 8))
  with pytest.raises(ValueError, match="guide must be"):
    ranking_losses.gist_loss(z, jnp.zeros((4, 2, 8)))
  with pytest.raises(ValueError, match="z must be"):
    ranking_losses.gist_loss(z[:, :1], jnp.zeros((4, 1, 8)))
  with pytest.raises(ValueError, match="margin_strategy must be one of absolute, relative"):
    ranking_losses.gist_loss(z, z, margin_strategy="percent")
  with pytest.raises(ValueError, match="contrast_anchors must be True or False, not 'yes'"):
    ranking_losses.gist_loss(z, z, contrast_anchors="yes")


def test_gist_loss_doctest():
  (test,) = doctest.DocTestFinder().find(ranking_losses.gist_loss, "gist_loss", globs=vars(ranking_losses).copy())
  assert test.examples
  runner = doctest.DocTestRunner()
  runner.run(test)
  assert runner.summarize(verbose=False).failed == 0


# --------------------------------------------------------------------------
# The method: its config, its guide, its step.


def _gist_config(model_dir: str, data_dir: str, **overrides):
  """``--config pairs --config.method=gist`` on the tiny model, guided by the tiny model's folder (``cls`` of its
  pooler layer, while the trained model pools ``avg``): triplets of the small corpus."""
  return helpers.tiny_config(
    model_dir, data_dir, "pairs", method="gist", **{"gist.guide_model": model_dir, **overrides}
  )


@pytest.mark.parametrize(
  "field,value,message",
  [
    ("temperature", 0.0, r"gist.temperature must be a finite number >= 0.0001 .*, not 0.0"),
    ("temperature", float("inf"), r"gist.temperature must be a finite number >= 0.0001 .*, not inf"),
    ("margin_strategy", "percent", r"gist.margin_strategy must be one of absolute, relative, not 'percent'"),
    ("margin", float("nan"), r"gist.margin must be a finite number, not nan"),
  ],
)
def test_gist_config_errors_name_the_field(tiny_model_dir, small_data_dir, tmp_path, field, value, message):
  config = _gist_config(tiny_model_dir, small_data_dir, **{f"gist.{field}": value})
  workdir = str(tmp_path / "workdir")
  with pytest.raises(configuration.ConfigError, match=message) as raised:
    train.train_and_evaluate(config, workdir)
  assert "\n" not in str(raised.value) and not os.path.exists(workdir)


def test_an_empty_guide_is_the_starting_model(tiny_model_dir, small_data_dir):
  config = _gist_config(tiny_model_dir, small_data_dir, **{"gist.guide_model": "", "model.revision": ""})
  needs = objectives.needs(config)
  assert needs.complementary and not needs.complementary_dropout
  assert (needs.complementary_model, needs.complementary_embedding) == (tiny_model_dir, "sentence")
  config.model.init = "random"
  with pytest.raises(ValueError, match="gist.guide_model is empty, which means the starting model"):
    objectives.get("gist").check_config(config)


def test_a_one_column_corpus_is_refused_before_the_workdir_is_written(tiny_model_dir, small_data_dir, tmp_path):
  config = _gist_config(tiny_model_dir, small_data_dir, **{"data.train": "corpora/small.txt"})
  workdir = str(tmp_path / "workdir")
  with pytest.raises(data_lib.DataError, match=r"method gist needs at least 2 text columns .* this data has 1"):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(workdir)


def test_a_guide_with_another_vocabulary_is_refused_before_the_workdir_is_written(
  tiny_model_dir, small_data_dir, tmp_path
):
  # The guide reads the batch's token ids: a tokenizer with one token more reads other words (s-t would decode
  # and retokenize; jaxcse refuses).
  import shutil

  from transformers import AutoTokenizer

  guide = str(tmp_path / "other_vocabulary")
  shutil.copytree(tiny_model_dir, guide)
  tokenizer = AutoTokenizer.from_pretrained(guide)
  tokenizer.add_tokens(["gistembedtoken"])
  tokenizer.save_pretrained(guide)
  config = _gist_config(tiny_model_dir, small_data_dir, **{"gist.guide_model": guide})
  workdir = str(tmp_path / "workdir")
  with pytest.raises(configuration.ConfigError, match=r"gist.guide_model: .*'s vocabulary is not the trained") as e:
    train.train_and_evaluate(config, workdir)
  assert "\n" not in str(e.value) and not os.path.exists(workdir)


def test_a_guide_with_fewer_positions_than_max_seq_len_is_refused(tiny_model_dir, small_data_dir, tmp_path):
  # Ahead of time (shapes from config.json): a guide of 8 positions cannot embed 16 tokens.
  import json
  import shutil

  guide = str(tmp_path / "short_guide")
  shutil.copytree(tiny_model_dir, guide)
  with open(os.path.join(guide, "config.json")) as f:
    hf_config = json.load(f)
  hf_config["max_position_embeddings"] = 8
  with open(os.path.join(guide, "config.json"), "w") as f:
    json.dump(hf_config, f)
  config = _gist_config(tiny_model_dir, small_data_dir, **{"gist.guide_model": guide})
  spec = configured.model(config, abstract=True).spec
  with pytest.raises(configuration.ConfigError, match=r"gist.guide_model: .* embeds at most 8 positions, fewer than"):
    configured.complementary(config, spec, abstract=True)


def test_the_abstract_guide_is_the_loaded_one(tiny_model_dir, small_data_dir):
  # jaxcse-compile builds the guide from its config.json: the same pooler and parameter shapes as the trainer's.
  config = _gist_config(tiny_model_dir, small_data_dir)
  real = configured.complementary(config, configured.model(config).spec)
  abstract = configured.complementary(config, configured.model(config, abstract=True).spec, abstract=True)
  assert abstract.spec.pooling == real.spec.pooling == models.PoolerSpec("cls")
  shapes = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)  # noqa: E731
  assert shapes(abstract.params) == shapes(jax.eval_shape(lambda: real.params))


def test_jaxcse_compile_lowers_gist_with_pairs_by_default(tiny_model_dir, small_data_dir):
  # The corpus is not read ahead of time: a .jsonl is taken for one column, which gist cannot train on; 2 instead.
  from jaxcse.compile import lowering

  config = _gist_config(tiny_model_dir, small_data_dir, **{"data.train": "pairs.jsonl"})
  assert lowering.default_columns(config) == 2
  config.data.train = "triplets.csv"
  assert lowering.default_columns(config) == 3
  config.method = "mnrl"
  config.data.train = "pairs.jsonl"
  assert lowering.default_columns(config) == 1


def _triplet_batch(tokenizer, data_dir: str, rows: int, max_seq_len: int) -> tuple[list[list[str]], dict]:
  """``rows`` distinct (anchor, positive, negative) texts and their ``[rows, 3, max_seq_len]`` batch."""
  texts = [[t["anchor"], t["positive"], t["negative"]] for t in helpers.small_triplets(data_dir, rows)]
  encoded = tokenizer(
    [s for row in texts for s in row],
    max_length=max_seq_len,
    truncation=True,
    padding="max_length",
    return_tensors="np",
  )
  batch = {k: encoded[k].astype(np.int32).reshape(rows, 3, max_seq_len) for k in ("input_ids", "attention_mask")}
  return texts, batch


def _guide_cosine_offsets(guide: np.ndarray) -> np.ndarray:
  """Every candidate's guide cosine minus its row's positive score (float64), the positives and self-pairs not
  counted: gist_loss's absolute margin ``m`` leaves a candidate out where its offset is ``> -m``."""
  g = guide.astype(np.float64) / np.linalg.norm(guide.astype(np.float64), axis=-1, keepdims=True)
  anchors, positives, negatives = g[:, 0], g[:, 1], g[:, 2]
  offsets = []
  for scores in (anchors @ positives.T, anchors @ anchors.T, positives @ positives.T, anchors @ negatives.T):
    scores = scores - np.sum(anchors * positives, axis=-1)[:, None]
    offsets.append(scores[~np.eye(len(g), dtype=bool)])
  return np.sort(np.concatenate(offsets))


def test_the_step_loss_is_gist_loss_of_the_model_and_the_guide_as_they_encode(tiny_model_dir, small_data_dir, tmp_path):
  # The trained model without dropout, and the guide as jaxcse-encode embeds it (its own sentence-transformers
  # pooling, no dropout): the step's loss is gist_loss of those embeddings. The guide is another random tiny BERT
  # (the trained one's pooler-layer cls scores every pair within 1e-5 of cosine 1, a tie at any margin that
  # float32 rounding decides), and the margin lies midway in the widest gap between the guide's cosine offsets
  # (of the middle 60%): a candidate flips sides only if a cosine moves by half that gap, > 1e-4 below, while the
  # step's and the encoder's float32 cosines of the same texts differ by ~1e-6.
  from jaxcse import Encoder
  from jaxcse.storage import st_format

  guide_dir = helpers.make_tiny_model_dir(str(tmp_path / "guide"), seed=1)
  st_format.write_modules(guide_dir, "avg", hidden=32, num_layers=2, max_seq_len=16, mlp=None)
  config = _gist_config(tiny_model_dir, small_data_dir, **{"model.dropout": 0.0, "gist.guide_model": guide_dir})
  model = configured.model(config)
  texts, batch = _triplet_batch(model.spec.tokenizer, small_data_dir, 8, 16)
  flat = [s for row in texts for s in row]
  # Padded, as the step embeds: packed rows round differently.
  z = Encoder.load(tiny_model_dir, pooler="avg", max_seq_len=16, packed=False).embed(flat).reshape(8, 3, -1)
  g = Encoder.load(guide_dir, max_seq_len=16, packed=False).embed(flat).reshape(8, 3, -1)
  offsets = _guide_cosine_offsets(g)
  middle = offsets[int(0.2 * len(offsets)) : int(0.8 * len(offsets))]
  widest = int(np.argmax(np.diff(middle)))
  half_gap = (middle[widest + 1] - middle[widest]) / 2
  assert half_gap > 1e-4, half_gap
  config.gist.margin = float(-(middle[widest] + half_gap))
  guide = configured.complementary(config, model.spec)
  assert guide.spec.pooling.test_pooler == "avg" and guide.spec.hf_config.hidden_dropout_prob == 0.1
  tx = optax.sgd(1.0)
  state = train_step.TrainState(step=np.int32(0), params=model.params, opt_state=tx.init(model.params))
  step = jax.jit(train_step.make_train_step(config, model.spec, tx, guide.spec))
  _, metrics = step(state, batch, guide.params)
  settings = objectives.get("gist").settings(config)
  expected = ranking_losses.gist_loss(jnp.asarray(z), jnp.asarray(g), **settings)
  # A cosine off by d moves its logit by d / temperature (0.01) and the loss by at most twice that: 1e-4 relative
  # of a loss near 2.3 allows d ~ 1e-6.
  np.testing.assert_allclose(metrics["contrastive_loss"], expected, rtol=1e-4)
  share = float(ranking_losses.gist_left_out_share(jnp.asarray(g), **settings))
  np.testing.assert_allclose(metrics["gist/left_out_frac"], share, rtol=1e-6)
  assert 0.2 < share < 0.8  # The guide leaves some candidates out and keeps others: the check above can fail.


def test_gist_trains_on_the_tiny_model(tiny_model_dir, small_data_dir, fresh_workdir):
  config = _gist_config(tiny_model_dir, small_data_dir, **{"train.max_steps": 2, "eval.at_start": False})
  summary = train.train_and_evaluate(config, fresh_workdir)
  assert summary["steps"] == 2
  records = [r for r in helpers.metrics_records(fresh_workdir) if "loss" in r]
  assert records and all(np.isfinite(r["loss"]) and r["loss"] > 0 for r in records)
  assert all(0.0 <= r["gist/left_out_frac"] <= 1.0 for r in records)
  # The exported model card names the method's own settings (not loss.temperature) and its paper.
  run = model_card.TrainingRun.read(fresh_workdir, "w", 2, "latest")
  card = helpers.tiny_card(run)
  assert f"- `gist`: contrast_anchors=`true`, contrast_positives=`true`, guide_model=`{tiny_model_dir}`" in card
  assert "- `loss`:" not in card and "GISTEmbed: Guided In-sample Selection" in card
