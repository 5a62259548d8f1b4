"""RankCSE's terms (jaxcse.training.rankcse_losses) equal the released code's (github.com/perceptiveshawty/RankCSE,
``rankcse/models.py``: ``Similarity``, ``Divergence``, ``ListNet``, ``ListMLE``; ``trainers.py``: the teachers'
similarity lists), in float64, loss and gradient w.r.t. both views' embeddings.

The released code is not a package: the functions below transcribe its arithmetic in torch (the in-place
``fill_diagonal_``, ``nansum``, the shuffle before ListMLE's sort, the clamps), so each parity case compares ours with
what that code computes on the same embeddings. The tolerance is helpers.PARITY_RTOL's (the same sums in another
order, float64 on both sides).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse.core import compat
from jaxcse.training import rankcse_losses
from tests import helpers

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _released_similarity(x, y, temp):  # Similarity(temp)(x, y): cosine over the last axis, / temp.
  return F.cosine_similarity(x, y, dim=-1) / temp


def _released_teacher_scores(teachers, tau2, alpha):  # trainers.py: one teacher, or alpha-weighted two.
  lists = [_released_similarity(t.unsqueeze(1), t.unsqueeze(0), tau2) for t in teachers]
  return lists[0] if len(lists) == 1 else alpha * lists[0] + (1.0 - alpha) * lists[1]


def _released_listnet(teacher_top1_sim_pred, z1, z2, tau2, gamma):
  student = _released_similarity(z1.unsqueeze(1), z2.unsqueeze(0), tau2)
  p = F.log_softmax(student.fill_diagonal_(float("-inf")), dim=-1)
  q = F.softmax(teacher_top1_sim_pred.clone().fill_diagonal_(float("-inf")), dim=-1)
  return gamma * (-(q * p).nansum() / q.nansum())


def _released_listmle(teacher_top1_sim_pred, z1, z2, tau2, gamma, eps=1e-7):
  y_pred = _released_similarity(z1.unsqueeze(1), z2.unsqueeze(0), tau2)
  y_true = teacher_top1_sim_pred
  shuffle = torch.randperm(y_pred.shape[-1], generator=torch.Generator().manual_seed(0))
  y_pred, y_true = y_pred[:, shuffle], y_true[:, shuffle]
  y_true_sorted, indices = y_true.sort(descending=True, dim=-1)
  padding = y_true_sorted == -1
  ranked = torch.gather(y_pred, dim=1, index=indices)
  ranked[padding] = float("-inf")
  ranked = ranked - ranked.max(dim=1, keepdim=True)[0]
  cumsums = torch.cumsum(ranked.exp().flip(dims=[1]), dim=1).flip(dims=[1])
  observation = torch.log(cumsums + eps) - ranked
  observation[padding] = 0.0
  return gamma * torch.mean(torch.mean(observation, dim=1))


def _released_divergence(z1, z2, temp, eps=1e-7):  # cl_forward's sd_loss through Divergence.forward.
  p = _released_similarity(z1.unsqueeze(1), z2.unsqueeze(0), temp).softmax(dim=-1).clamp(min=eps)
  q = _released_similarity(z2.unsqueeze(1), z1.unsqueeze(0), temp).softmax(dim=-1).clamp(min=eps)
  kl = torch.nn.KLDivLoss(reduction="batchmean", log_target=True)
  m = (0.5 * (p + q)).log().clamp(min=eps)
  return 0.5 * (kl(m, p.log()) + kl(m, q.log()))


def _paper_jsd(z1, z2, temp, eps=1e-7):  # The same lists, the divergence the paper writes: m unclamped.
  p = _released_similarity(z1.unsqueeze(1), z2.unsqueeze(0), temp).softmax(dim=-1).clamp(min=eps)
  q = _released_similarity(z2.unsqueeze(1), z1.unsqueeze(0), temp).softmax(dim=-1).clamp(min=eps)
  kl = torch.nn.KLDivLoss(reduction="batchmean", log_target=True)
  m = (0.5 * (p + q)).log()
  return 0.5 * (kl(m, p.log()) + kl(m, q.log()))


def _teachers(batch, widths, seed):
  return [np.random.default_rng(seed + i).normal(size=(batch, w)) for i, w in enumerate(widths)]


def _ours_teacher_scores(teachers, tau2, alpha):
  with compat.enable_x64(True):
    arrays = [jnp.asarray(t, jnp.float64) for t in teachers]
    return rankcse_losses.teacher_scores(*arrays, temperature=tau2, alpha=alpha)


# Batches of 4 and 7; one teacher, or two of other widths (DiffCSE-base 768 and SimCSE-large 1024, in small);
# the run script's temperature and weights, and others.
CASES = [(4, (8,), 0.05, 0.33, 1.0), (7, (8,), 0.1, 0.33, 0.5), (6, (8, 12), 0.05, 0.33, 1.0)]


@pytest.mark.parametrize("loss", ["listnet", "listmle"])
@pytest.mark.parametrize("batch,widths,tau2,alpha,gamma", CASES)
def test_ranking_distillation_equals_the_released_code(loss, batch, widths, tau2, alpha, gamma):
  z = helpers.parity_embeddings(batch, 2, seed=batch)
  teachers = _teachers(batch, widths, seed=batch)
  ours_teacher = _ours_teacher_scores(teachers, tau2, alpha)
  theirs_teacher = _released_teacher_scores([torch.tensor(t, dtype=torch.float64) for t in teachers], tau2, alpha)
  np.testing.assert_allclose(np.asarray(ours_teacher), theirs_teacher.numpy(), rtol=helpers.PARITY_RTOL, atol=0)
  kernel = {"listnet": rankcse_losses.listnet_loss, "listmle": rankcse_losses.listmle_loss}[loss]
  released = {"listnet": _released_listnet, "listmle": _released_listmle}[loss]

  def ours(e):
    return gamma * kernel(rankcse_losses.cosine_scores(e[:, 0], e[:, 1], tau2), ours_teacher)

  ours_value = helpers.ours_value_and_grad(ours, z)
  assert np.isfinite(ours_value[1]).all()  # ListNet's left-out diagonal (-inf) leaves no NaN in the gradient.
  theirs = helpers.st_value_and_grad(lambda cols, _: released(theirs_teacher.clone(), *cols, tau2, gamma), z)
  helpers.assert_parity(ours_value, theirs)


@pytest.mark.parametrize("batch,temp", [(4, 0.05), (7, 0.1)])
@pytest.mark.parametrize("form", rankcse_losses.CONSISTENCY_FORMS)
def test_consistency_equals_the_released_code_and_the_papers_divergence(form, batch, temp):
  z = helpers.parity_embeddings(batch, 2, seed=batch + 1) * 0.3  # Lists of distinct, unsaturated softmaxes.

  def ours(e):
    scores_12 = rankcse_losses.cosine_scores(e[:, 0], e[:, 1], temp)
    scores_21 = rankcse_losses.cosine_scores(e[:, 1], e[:, 0], temp)
    return rankcse_losses.consistency_loss(scores_12, scores_21, form=form)

  reference = {"as_released": _released_divergence, "jsd": _paper_jsd}[form]
  theirs = helpers.st_value_and_grad(lambda cols, _: reference(*cols, temp), z)
  helpers.assert_parity(helpers.ours_value_and_grad(ours, z), theirs)


def test_the_released_consistency_is_a_negative_entropy_not_a_divergence():
  """What the docstring says of the released term: identical views give a JSD of 0 but a released value of minus
  the softmaxes' mean entropy (less 1e-7), which still has a gradient; the two forms differ."""
  z = helpers.parity_embeddings(5, 1, seed=3)[:, 0]
  with compat.enable_x64(True):
    scores = rankcse_losses.cosine_scores(jnp.asarray(z), jnp.asarray(z), 0.05)
    p = np.exp(np.asarray(scores - scores.max(-1, keepdims=True)))
    p = np.maximum(p / p.sum(-1, keepdims=True), 1e-7)
    entropy = -np.sum(p * np.log(p)) / 5
    released = float(rankcse_losses.consistency_loss(scores, scores))
    assert float(rankcse_losses.consistency_loss(scores, scores, form="jsd")) == pytest.approx(0.0, abs=1e-15)
  assert released == pytest.approx(-entropy - 1e-7 * p.sum() / 5, rel=1e-12)
  with pytest.raises(ValueError, match="form must be one of as_released, jsd"):
    rankcse_losses.consistency_loss(scores, scores, form="js")


def test_listmle_keeps_a_tied_teachers_column_order():
  """Ties in a teacher's row: ours keeps column order (a stable sort), where the released code shuffles first."""
  teacher = jnp.zeros((3, 3))  # Every candidate tied.
  student = jnp.asarray([[3.0, 2.0, 1.0]] * 3)
  in_order = rankcse_losses.listmle_loss(student, teacher)
  reversed_order = rankcse_losses.listmle_loss(student[:, ::-1], teacher)
  assert float(in_order) < float(reversed_order)  # Column order is the ranking: the student agreeing scores lower.


def _released_total(z1, z2, teachers, temp, tau2, gamma, alpha, distillation):
  """cl_forward's loss for unsupervised pairs: InfoNCE + sd_loss + kd_loss, the teachers' lists from trainers.py."""
  cos_sim = _released_similarity(z1.unsqueeze(1), z2.unsqueeze(0), temp)
  infonce = F.cross_entropy(cos_sim, torch.arange(cos_sim.size(0)))
  teacher = _released_teacher_scores(teachers, tau2, alpha)
  kd = {"listnet": _released_listnet, "listmle": _released_listmle}[distillation](teacher, z1, z2, tau2, gamma)
  return infonce + _released_divergence(z1, z2, temp) + kd


@pytest.mark.parametrize("distillation", ["listnet", "listmle"])
@pytest.mark.parametrize("widths", [(8,), (8, 12)])
def test_the_rankcse_method_equals_the_released_loss(distillation, widths):
  """jaxcse.training.rankcse.loss on two views and the rows' teacher embeddings (two teachers: one label [2, D],
  the narrower zero-padded) against cl_forward's total, at the run script's settings."""
  from jaxcse.training import rankcse

  batch, temp, tau2, gamma, alpha = 6, 0.05, 0.05, 1.0, 0.33
  z = helpers.parity_embeddings(batch, 2, seed=11)
  teachers = _teachers(batch, widths, seed=12)
  wide = max(widths)
  padded = np.stack([np.pad(t, ((0, 0), (0, wide - t.shape[1]))) for t in teachers], axis=1)
  labels = padded[:, 0] if len(teachers) == 1 else padded
  settings = dict(
    temperature=temp,
    distillation=distillation,
    tau2=tau2,
    gamma=gamma,
    alpha=alpha,
    consistency="as_released",
    consistency_weight=1.0,
  )

  def ours(e):
    return rankcse.loss(settings, e, None, None, labels=jnp.asarray(labels, jnp.float64))[0]

  torch_teachers = [torch.tensor(t, dtype=torch.float64) for t in teachers]
  theirs = helpers.st_value_and_grad(
    lambda cols, _: _released_total(*cols, torch_teachers, temp, tau2, gamma, alpha, distillation), z
  )
  helpers.assert_parity(helpers.ours_value_and_grad(ours, z), theirs)
