"""Training dynamics: positive/negative/mix scores in the train records, omega/alignment/uniformity in the evals."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxcse.training import objectives
from jaxcse.evaluation import sts_data, sts_metrics
from jaxcse import train
from tests import helpers


def _scores(config, z, rng):
  """The training scores the method's objective logs (objectives.Objective.scores, on its settings)."""
  objective = objectives.get(config.method)
  return objective.scores(objective.settings(config), z, rng)


def _config(method: str, **mixcse):
  import ml_collections

  config = ml_collections.ConfigDict({"method": method})
  config.loss = ml_collections.ConfigDict({"temperature": 0.05, "hard_negative_weight": 0.0})
  config.mixcse = ml_collections.ConfigDict(
    {"mix_lambda": 0.2, "neighbour": "roll", "symmetric": False, "stop_gradient": True, **mixcse}
  )
  return config


# Three sentences, two views: z1 = anchors, z2 = positives.
Z1 = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
Z2 = [[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]]


def test_scores_on_toy_embeddings():
  z = jnp.stack([jnp.array(Z1), jnp.array(Z2)], axis=1)  # [3, 2, 2]
  scores = _scores(_config("mixcse"), z, None)
  # Positives: cos(z1[i], z2[i]) = 1, 0, 1/sqrt(2).
  assert float(scores["pos_score"]) == pytest.approx((1 + 0 + 1 / math.sqrt(2)) / 3, abs=1e-6)
  # Negatives, i != j: (0,1) 1, (0,2) 0, (1,0) 0, (1,2) 1, (2,0) 1/sqrt(2), (2,1) 1/sqrt(2).
  assert float(scores["neg_score"]) == pytest.approx((2 + math.sqrt(2)) / 6, abs=1e-6)
  # Mixes with the next row, lambda 0.2: m0 = (1, 0), m1 = (0.2, 1.6), m2 = (0.8, 0.4).
  mix = (1 + 1.6 / math.sqrt(0.2**2 + 1.6**2) + (0.8 + 0.4) / (math.sqrt(2) * math.sqrt(0.8**2 + 0.4**2))) / 3
  assert float(scores["mix_score"]) == pytest.approx(mix, abs=1e-6)
  assert "mix_score" not in _scores(_config("simcse"), z, None)
  # "hardest" mixes z1[i]'s most similar other positive: row 0 -> z2[1] (cos 1), mix (1, 0), cos 1;
  # row 1 -> z2[2] (cos 1), m = 0.2 (1, 0) + 0.8 (0, 2), as roll; row 2 -> z2[0] or z2[1] (both 1/sqrt(2)): argmax
  # takes the first, m = 0.2 (0, 2) + 0.8 (1, 0), as roll.
  hardest = _scores(_config("mixcse", neighbour="hardest"), z, None)
  assert float(hardest["mix_score"]) == pytest.approx(mix, abs=1e-6)


def test_dev_dynamics_on_toy_embeddings():
  # Sentence "x y" embeds as the vector (x, y) (helpers.numeric_embed): angles 0, 45, 90, 135 degrees.
  a, b, c, d = "1 0", "1 1", "0 1", "-1 1"
  stsb_dev = sts_data.PairSet([a, b, a], [b, c, d], np.array([4.5, 4.0, 3.0]))
  sick = sts_data.PairSet(["-1 -1", "-1 -1"], [b, a], np.array([1.0, 2.0]))  # "-1 -1" is opposite to b: not STS-B.
  scores, table = sts_metrics.dev_scores_and_embeddings(
    helpers.numeric_embed, {"stsb_dev": stsb_dev, "sickr_dev": sick}
  )
  assert set(table) == {a, b, c, d, "-1 -1"}
  # Spearman of cosines (.71, .71, -.71), ranks (2.5, 2.5, 1), with gold ranks (3, 2, 1): sqrt(3) / 2.
  assert scores["stsb_dev"] == pytest.approx(math.sqrt(3) / 2)
  dynamics = sts_metrics.dev_dynamics(table, stsb_dev)
  assert dynamics["omega_deg"] == pytest.approx(135.0, abs=1e-9)  # Between a and d.
  # Positives (gold >= 4): (a, b) and (b, c), both 45 degrees apart: ||u - v||^2 = 2 - sqrt(2).
  assert dynamics["alignment"] == pytest.approx(2 - math.sqrt(2), abs=1e-9)
  # Pairs of {a, b, c, d}: three at 45 degrees, two at 90, one at 135; ||u - v||^2 = 2 - 2 cos.
  sq = [2 - math.sqrt(2)] * 3 + [2.0] * 2 + [2 + math.sqrt(2)]
  assert dynamics["uniformity"] == pytest.approx(math.log(np.mean(np.exp(-2 * np.array(sq)))), abs=1e-9)
  assert sts_metrics.largest_angle_deg(np.array([[1.0, 0.0], [2.0, 0.0]])) == pytest.approx(0.0, abs=1e-5)
  assert sts_metrics.largest_angle_deg(np.array([[1.0, 0.0], [-3.0, 0.0]])) == pytest.approx(180.0)


def test_tiny_run_logs_dynamics(tiny_model_dir, small_data_dir, fresh_workdir):
  # MixCSE with the cached step (2 chunks of 4): train records get the scores, eval records the geometry.
  config = helpers.tiny_config(
    tiny_model_dir,
    small_data_dir,
    "mixcse",
    **{"train.max_steps": 2, "train.log_every": 1, "eval.every": 2, "checkpoint.every": 2, "train.grad_cache_chunk": 4},
  )
  train.train_and_evaluate(config, fresh_workdir)
  records = helpers.metrics_records(fresh_workdir)
  train_records = [r for r in records if "loss" in r]
  eval_records = [r for r in records if "eval/metric" in r]
  assert [r["step"] for r in train_records] == [1, 2] and [r["step"] for r in eval_records] == [2]
  for r in train_records:
    for key in ("pos_score", "neg_score", "mix_score"):
      assert math.isfinite(r[key]) and -1 <= r[key] <= 1, (key, r)
  ev = eval_records[0]
  assert 0 < ev["eval/omega_deg"] <= 180
  assert 0 <= ev["eval/alignment"] <= 4 and -4 <= ev["eval/uniformity"] <= 0
