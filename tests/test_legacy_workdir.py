"""A workdir written before jaxcse had its own encoders (transformers' Flax BERT) reads, encodes and resumes.

tests/fixtures/legacy_workdir was made by tests/fixtures/make_legacy_workdir.py with jaxcse at commit 8691b44
(transformers 4.57.6's Flax BERT classes): a tiny BERT trained 2 of 4 steps with SimCSE + the MLM term (backbone, MLP,
untied MLM head), its embeddings of a few sentences, and the metrics and final parameters of the same run trained
straight through. Today's modules keep transformers' parameter names and compute the same operations in the same
order, so the numbers agree; the bounds below allow only for another CPU's float32 rounding (the fixture was
recorded on a 2-core AMD EPYC; on that machine every number here is equal bit for bit).
"""

from __future__ import annotations

import json
import os
import shutil

import ml_collections
import numpy as np
import pytest

from jaxcse import encode, models, train
from jaxcse.storage import loading
from tests import helpers

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "legacy_workdir")
# float32 rounding: the embeddings pass through 2 layers of sums over at most 32 terms (hidden 16, intermediate 32,
# length 16); a reordered sum of n terms differs by at most n * 2^-24 relative to the sum of magnitudes, so
# 64 * 2^-24 (~4e-6) relative per layer bounds another CPU's vectorisation, 3e-5 over the whole forward.
RTOL = 3e-5


@pytest.fixture
def workdir(tmp_path, monkeypatch):
  monkeypatch.delenv("JAXCSE_DATA_DIR", raising=False)  # The fixture's config reads the shipped quickstart data.
  path = str(tmp_path / "legacy")
  shutil.copytree(os.path.join(FIXTURE, "workdir"), path)
  return path


def _expected() -> dict:
  with open(os.path.join(FIXTURE, "expected.json")) as f:
    return json.load(f)


def test_a_legacy_workdir_encodes_to_the_same_embeddings(workdir):
  encoder = encode.Encoder.load(workdir, checkpoint="latest")
  ours = np.asarray(encoder.encode(_expected()["sentences"]))
  np.testing.assert_allclose(ours, np.load(os.path.join(FIXTURE, "embeddings_step2.npy")), rtol=RTOL, atol=RTOL)


def test_a_legacy_workdir_resumes_to_the_same_run(workdir):
  with open(os.path.join(workdir, "config.json")) as f:
    config = ml_collections.ConfigDict(json.load(f))
  train.train_and_evaluate(config, workdir)
  expected = _expected()

  def by_step(lines):  # A step has a training line and, at evaluations, an eval/ line.
    return {(m["step"], any(k.startswith("eval/") for k in m)): m for m in lines}

  ours = by_step(helpers.metrics_records(workdir))
  reference = by_step(expected["reference_metrics"])
  assert ours.keys() == reference.keys()
  clocks = ("eval/seconds", "steps_per_sec")  # Wall-clock readings, not results.
  for key, ref in reference.items():
    for name, value in ref.items():
      if name not in clocks:
        assert ours[key][name] == pytest.approx(value, rel=RTOL, abs=RTOL), (key, name)
  final = loading.load_model(workdir, checkpoint="latest")
  assert final.step == expected["reference_final_step"]
  fingerprint = models.params_fingerprint(final.params)
  if fingerprint != expected["reference_final_params_fingerprint"]:  # Not bit-equal: another CPU's rounding.
    pytest.skip("resumed parameters are not bit-identical on this CPU (metrics agree within the bound)")
