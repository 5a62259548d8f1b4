"""GISTEmbed (method gist): the loss equals sentence-transformers 6.2's, its config, its guide model, and its step.

Parity: s-t's ``GISTEmbedLoss.forward`` (2 and 3 columns) and ``CachedGISTEmbedLoss.calculate_loss`` (more hard
negative columns, in mini-batches) in torch float64, driven with given model and guide embeddings, against
``ranking_losses.gist_loss`` under float64: loss and gradient w.r.t. every embedding, for both margin strategies,
margins 0 and 0.1, the contrast flags on and off. Then the config's checks, the guide's vocabulary and length
checks, GradCache against the plain step, and a few training steps on the tiny model.
"""

from __future__ import annotations

import doctest
import functools
import itertools

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from jaxcse.core import compat
from jaxcse.training import ranking_losses

# As tests/test_ranking_losses.py: float64 on both sides, the same sums in another order (~1e-15 relative); a
# candidate wrongly kept or left out moves the loss by 1e-3 or more.
RTOL = 1e-10

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
    fn = functools.partial(ranking_losses.gist_loss, guide=jnp.asarray(guide, jnp.float64), **settings)
    value, grad = jax.value_and_grad(lambda e: fn(e))(jnp.asarray(z, jnp.float64))
    assert value.dtype == jnp.float64
    return float(value), np.asarray(grad)


def _assert_close(ours, theirs) -> None:
  np.testing.assert_allclose(ours[0], theirs[0], rtol=RTOL, atol=0)
  np.testing.assert_allclose(ours[1], theirs[1], rtol=RTOL, atol=RTOL * np.abs(theirs[1]).max())


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
  _assert_close(_ours_value_and_grad(z, guide, settings), theirs)


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
  _assert_close(_ours_value_and_grad(z, guide, {"temperature": 0.05, **settings}), theirs)


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


def test_gist_loss_doctest():
  (test,) = doctest.DocTestFinder().find(ranking_losses.gist_loss, "gist_loss", globs=vars(ranking_losses).copy())
  assert test.examples
  runner = doctest.DocTestRunner()
  runner.run(test)
  assert runner.summarize(verbose=False).failed == 0
