"""SentEval transfer tasks: loaders on the real files, folds, L2 selection, the JAX probe, determinism."""

import dataclasses
import os

import numpy as np
import pytest

from helpers import write_text
from jaxcse import data as data_lib
from jaxcse import evaluate
from jaxcse.evaluation import transfer

# A short run of the fast protocol keeps every probe test at a couple of compilations.
FAST = dataclasses.replace(transfer.MODES["dev"], max_epoch=40)


# ---------------------------------------------------------------------------------------------------------------------
# Loaders on the real SentEval files.

EXPECTED_SIZES = {
  "MR": {"all": 10662},
  "CR": {"all": 3775},
  "SUBJ": {"all": 10000},
  "MPQA": {"all": 10606},
  "SST2": {"train": 67349, "dev": 872, "test": 1821},
  "TREC": {"train": 5452, "test": 500},
  "MRPC": {"train": 4076, "test": 1725},
}


@pytest.mark.parametrize("name", transfer.TRANSFER_TASKS)
def test_loaders_read_senteval_counts(real_data_dir, name):
  task = transfer.load_transfer_task(real_data_dir, name)
  assert {split: len(s) for split, s in task.splits.items()} == EXPECTED_SIZES[name]
  for split in task.splits.values():
    assert len(split.sentences) == len(split.labels)
    assert set(np.unique(split.labels)) == set(range(task.nclasses))
    # SentEval's order: sorted by token count (first sentence for pairs).
    lengths = [len(s.split()) for s in split.sentences]
    assert lengths == sorted(lengths)
    if name == "MRPC":
      assert len(split.sentences_b) == len(split)


def test_loader_labels_and_text(real_data_dir):
  mr = transfer.load_transfer_task(real_data_dir, "MR").splits["all"]
  assert np.bincount(mr.labels).tolist() == [5331, 5331]
  subj = transfer.load_transfer_task(real_data_dir, "SUBJ").splits["all"]
  with open(os.path.join(real_data_dir, "senteval/downstream/SUBJ/subj.objective"), encoding="latin-1") as f:
    first_objective = " ".join(f.readline().split())
  assert subj.labels[subj.sentences.index(first_objective)] == 1  # SentEval: objective = 1.
  trec = transfer.load_transfer_task(real_data_dir, "TREC")
  assert trec.nclasses == 6 and np.bincount(trec.splits["test"].labels).tolist() == [9, 138, 94, 65, 81, 113]
  mrpc = transfer.load_transfer_task(real_data_dir, "MRPC").splits["test"]
  assert int(mrpc.labels.sum()) == 1147  # Paraphrases among the 1725 test pairs.


def test_bad_line_names_file_and_line(tmp_path):
  write_text(str(tmp_path / "senteval/downstream/TREC/train_5500.label"), "DESC:manner How so ?\nWHAT is this\n")
  write_text(str(tmp_path / "senteval/downstream/TREC/TREC_10.label"), "NUM:date When ?\n")
  with pytest.raises(data_lib.DataError, match=r"train_5500.label:2: expected 'COARSE:fine question'"):
    transfer.load_transfer_task(str(tmp_path), "TREC")
  with pytest.raises(data_lib.DataError, match=r"MR.*missing SentEval file"):
    transfer.load_transfer_task(str(tmp_path), "MR")


def test_pair_features_are_abs_difference_then_product():
  split = transfer.Split(["a", "b"], np.array([0, 1]), sentences_b=["b", "a"])
  table = {"a": np.array([1.0, -2.0]), "b": np.array([3.0, 5.0])}
  np.testing.assert_array_equal(transfer.split_features(split, table), [[2, 7, 3, -10], [2, 7, 3, -10]])


# ---------------------------------------------------------------------------------------------------------------------
# Folds and L2 selection.


def test_nested_folds_are_disjoint_cover_and_stratified():
  labels = np.array([0] * 60 + [1] * 40)
  folds = transfer.nested_folds(labels, 5)
  tests = np.concatenate([t for _, t, _ in folds])
  assert sorted(tests.tolist()) == list(range(100))  # Outer test folds partition the data.
  for outer_train, outer_test, inner in folds:
    assert not set(outer_train) & set(outer_test) and len(outer_train) + len(outer_test) == 100
    assert labels[outer_test].sum() == 8  # Stratified: 40% positives in every fold of 20.
    inner_vals = np.concatenate([v for _, v in inner])
    assert sorted(inner_vals.tolist()) == sorted(outer_train.tolist())  # Inner folds partition the outer train part.
    for inner_train, inner_val in inner:
      assert not set(inner_train) & set(inner_val) and not set(inner_val) & set(outer_test)
  # The same split every time, whatever else happens (SentEval fixes its seed to 1111).
  again = transfer.nested_folds(labels, 5)
  assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))


def _fake_fit(best_l2, calls):
  """A stand-in for fit_probes: validation accuracy peaks at ``best_l2``; params predict class 1."""

  def fit(features, labels, problems, *, nclasses, config, seed):
    calls.append(problems)
    acc = np.where(np.isclose(problems.l2, best_l2), 0.9, 0.6)
    dim = features.shape[1]
    params = {
      "w": np.zeros((len(problems.l2), dim, nclasses), np.float32),
      "b": np.tile(np.arange(nclasses, dtype=np.float32), (len(problems.l2), 1)),
    }
    return params, acc

  return fit


@pytest.mark.parametrize("best_l2", [1e-5, 1e-3])
def test_l2_grid_picks_the_best_validation_value(monkeypatch, best_l2):
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(50, 3)).astype(np.float32), np.array([0, 1] * 25)
  calls = []
  monkeypatch.setattr(transfer, "fit_probes", _fake_fit(best_l2, calls))
  nested = transfer.nested_kfold(x, y, nclasses=2, config=FAST)
  assert nested["l2"] == [best_l2] * FAST.kfold and nested["devacc"] == 90.0
  assert len(calls[0].l2) == FAST.kfold * len(transfer.L2_GRID) * FAST.kfold  # Every outer x L2 x inner fit.
  np.testing.assert_allclose(calls[1].l2, [best_l2] * FAST.kfold, rtol=1e-6)  # Refits use the chosen value.
  assert nested["acc"] == 50.0  # The fake probe always says 1; half the labels are 1.
  calls.clear()
  result, pred = transfer.kfold_then_test(x, y, x[:10], y[:10], nclasses=2, config=FAST)
  assert result["l2"] == best_l2 and result["devacc"] == 90.0 and pred.tolist() == [1] * 10
  # The refit holds out SentEval's 5%: 2 of the 50 rows.
  assert calls[1].n_train.tolist() == [48] and calls[1].val_mask.sum() == 2
  calls.clear()
  split = transfer.train_dev_test(x, y, x[:10], y[:10], x[:6], y[:6], nclasses=2, config=FAST)
  assert split["l2"] == best_l2 and split["devacc"] == 90.0


# ---------------------------------------------------------------------------------------------------------------------
# The probe itself.


def _blobs(rng, n, dim, separation):
  y = rng.integers(0, 3, n).astype(np.int32)
  centres = separation * np.eye(3, dim)
  return (centres[y] + rng.normal(size=(n, dim))).astype(np.float32), y


def test_probe_learns_separable_data_and_not_random_labels():
  rng = np.random.default_rng(0)
  n, dim = 600, 8
  x, y = _blobs(rng, n, dim, separation=8.0)
  problems = transfer.Problems.build(n, [np.arange(400), np.arange(300)], [np.arange(400, n)] * 2, [1e-5, 1e-3])
  _, acc = transfer.fit_probes(x, y, problems, nclasses=3, config=FAST, seed=0)
  assert np.all(acc > 0.98), acc
  # Same shapes (one compilation): random labels on pure noise stay near chance (1/3) on held-out rows.
  noise, random_labels = rng.normal(size=(n, dim)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32)
  params, acc = transfer.fit_probes(noise, random_labels, problems, nclasses=3, config=FAST, seed=0)
  assert np.all(np.abs(acc - 1 / 3) < 0.12), acc
  # Validation accuracy is the best round's: it cannot be beaten by the returned params' own score.
  pred = transfer.predict(params, noise[400:])
  np.testing.assert_allclose((pred == random_labels[400:]).mean(axis=1), acc, atol=1e-6)


def _toy_task(rng):
  x, y = _blobs(rng, 240, 6, separation=2.0)
  sentences = [f"s{i}" for i in range(240)]
  task = transfer.TransferTask(
    "TREC", 3, {"train": transfer.Split(sentences[:180], y[:180]), "test": transfer.Split(sentences[180:], y[180:])}
  )
  return task, dict(zip(sentences, x))


def test_transfer_evaluation_is_deterministic_and_summarised():
  task, table = _toy_task(np.random.default_rng(1))
  first = transfer.evaluate_task(task, table, mode="dev", seed=3)
  second = transfer.evaluate_task(task, table, mode="dev", seed=3)
  assert first == second
  assert 60 < first["acc"] <= 100 and first["l2"] in transfer.L2_GRID and first["ntest"] == 60
  # The evaluate CLI's task groups and summary.
  assert evaluate.expand_tasks("transfer") == list(transfer.TRANSFER_TASKS)
  assert evaluate.expand_tasks("all")[-7:] == list(transfer.TRANSFER_TASKS) and "STS12" in evaluate.expand_tasks("all")
  accs = {"MR": 75.55, "CR": 80.0, "SUBJ": 90.0, "MPQA": 85.0, "SST2": 80.0, "TREC": 70.0, "MRPC": 70.0}
  summary = evaluate.summarize({name: {"acc": a} for name, a in accs.items()})
  assert summary["MR"] == 75.55 and summary["Avg_transfer"] == round(sum(accs.values()) / 7, 2)
  assert "Avg_transfer" not in evaluate.summarize({"MR": {"acc": 80.0}})
