r"""SentEval's seven transfer tasks with a JAX logistic-regression probe on frozen embeddings.

MR, CR, SUBJ, MPQA, SST-2, TREC and MRPC, loaded and split as SentEval does,
scored by SentEval's PyTorch classifier protocol (``nhid=0``: one linear layer,
softmax cross-entropy, the L2 penalty as the optimizer's weight decay, early
stopping on a validation split), as SimCSE's ``evaluation.py`` runs it:

* ``test`` mode: adam, batch 64, tenacity 5, epoch_size 4, 10 folds.
* ``dev`` (fast) mode: rmsprop, batch 128, tenacity 3, epoch_size 2, 5 folds.

Protocols (L2 grid 1e-5, 1e-4, 1e-3, 1e-2 everywhere):

* MR, CR, SUBJ, MPQA: nested k-fold. For each outer fold, every L2 value is
  scored by an inner k-fold on the outer training part (early stopping on the
  inner held-out fold); the best one is refitted on the whole outer training part
  (early stopping on a random 5% of it) and tested on the outer fold. Reported:
  the mean of the per-fold accuracies.
* TREC, MRPC: k-fold on train picks the L2 value, a refit on all of train
  (early stopping on a random 5%) is tested on test. MRPC's pair features are
  ``[|u - v|, u * v]`` and it also reports F1 of the positive class.
* SST-2: fixed train / dev / test; dev picks the L2 value and stops training.

Instead of SentEval's hundreds of sequential fits, all the probes of one stage
of a task (e.g. the 10 outer x 4 L2 x 10 inner fits of MR) train at once:
``jax.vmap`` over problems inside one ``jax.jit``, each problem with its own
training rows, validation rows, L2 value, shuffling key and early stopping
(a stopped problem's updates are masked out).

Like SentEval, sentences are whitespace-tokenised and re-joined with single
spaces, and each split is sorted by (token count, label) (MRPC: by the two
token counts, then label) before folds are drawn, so with the same split seed
the folds are SentEval's own: the nested k-fold of MR/CR/SUBJ/MPQA uses
scikit-learn's ``StratifiedKFold(shuffle=True, random_state=1111)`` whatever
the seed (as SentEval), TREC/MRPC's k-fold uses the seed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

import jax
import numpy as np

from jaxcse import data as data_lib
from jaxcse.evaluation.probe import MODES, ProbeConfig, Problems, fit_probes, predict  # noqa: F401  (transfer.X too)
from jaxcse.inference import embedder as embedder_lib

Embed = Callable[[Sequence[str]], np.ndarray]

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
# SentEval's L2 grid for its PyTorch classifier: 10**t for t in -5..-2.
L2_GRID = (1e-5, 1e-4, 1e-3, 1e-2)
# SentEval fixes the nested k-fold's shuffling seed, whatever the task seed.
NESTED_SPLIT_SEED = 1111
DEFAULT_SEED = 1111
# Share of the training rows held out for early stopping when refitting on a whole training set.
REFIT_VALIDATION_SPLIT = 0.05
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


@dataclasses.dataclass
class Split:
  """One split of a task: sentences (and second sentences for pairs) with integer labels ``[n]``."""

  sentences: list[str]
  labels: np.ndarray
  sentences_b: list[str] | None = None

  def __len__(self) -> int:
    return len(self.labels)


@dataclasses.dataclass
class TransferTask:
  """A task's splits: ``{"all"}`` (nested k-fold), ``{"train", "test"}`` or ``{"train", "dev", "test"}``."""

  name: str
  nclasses: int
  splits: dict[str, Split]


# ----------------------------------------------------------------------------------------------------------------------
# Loading, as SentEval's binary.py, sst.py, trec.py and mrpc.py.


def _tokens(text: str) -> list[str]:
  # An empty line stays an (empty) sentence, as in SentEval: CR's custrev.pos has one, and dropping it would
  # change the task's size and every fold.
  return text.split()


def _sorted_split(tokens: list[list[str]], labels: list[int], tokens_b: list[list[str]] | None = None) -> Split:
  """SentEval's order: a stable sort by (token count, label), or for pairs by (count A, count B, label)."""
  if tokens_b is None:
    order = sorted(range(len(labels)), key=lambda i: (len(tokens[i]), labels[i]))
  else:
    order = sorted(range(len(labels)), key=lambda i: (len(tokens[i]), len(tokens_b[i]), labels[i]))
  return Split(
    sentences=[" ".join(tokens[i]) for i in order],
    labels=np.asarray([labels[i] for i in order], np.int32),
    sentences_b=None if tokens_b is None else [" ".join(tokens_b[i]) for i in order],
  )


def _load_binary(folder: str, positive: str, negative: str) -> Split:
  # SentEval reads these files as latin-1 (every byte is valid), one sentence per line.
  tokens, labels = [], []
  for filename, label in ((positive, 1), (negative, 0)):
    path = os.path.join(folder, filename)
    for lineno, line in enumerate(data_lib.read_senteval_lines(path, "latin-1"), start=1):
      tokens.append(_tokens(line))
      labels.append(label)
  return _sorted_split(tokens, labels)


def _load_sst2(path: str) -> Split:
  tokens, labels = [], []
  for lineno, line in enumerate(data_lib.read_senteval_lines(path, "utf-8"), start=1):
    fields = line.strip().split("\t")
    if len(fields) != 2 or fields[1] not in ("0", "1"):
      raise data_lib.DataError(f"{path}:{lineno}: expected 'sentence<TAB>0|1', got {line[:80]!r}")
    tokens.append(_tokens(fields[0]))
    labels.append(int(fields[1]))
  return _sorted_split(tokens, labels)


def _load_trec(path: str) -> Split:
  tokens, labels = [], []
  for lineno, line in enumerate(data_lib.read_senteval_lines(path, "latin-1"), start=1):
    target, _, rest = line.strip().partition(":")
    if target not in TREC_CLASSES or " " not in rest:
      raise data_lib.DataError(
        f"{path}:{lineno}: expected 'COARSE:fine question' with COARSE in {TREC_CLASSES}, got {line[:80]!r}"
      )
    tokens.append(_tokens(rest.split(" ", 1)[1]))
    labels.append(TREC_CLASSES.index(target))
  return _sorted_split(tokens, labels)


def _load_mrpc(path: str) -> Split:
  tokens_a, tokens_b, labels = [], [], []
  for lineno, line in enumerate(data_lib.read_senteval_lines(path, "utf-8"), start=1):
    if lineno == 1:
      continue  # Header: Quality, #1 ID, #2 ID, #1 String, #2 String.
    fields = line.strip().split("\t")
    if len(fields) != 5 or fields[0] not in ("0", "1"):
      raise data_lib.DataError(
        f"{path}:{lineno}: expected 5 tab-separated fields starting with 0|1, got {len(fields)} fields"
      )
    tokens_a.append(_tokens(fields[3]))
    tokens_b.append(_tokens(fields[4]))
    labels.append(int(fields[0]))
  return _sorted_split(tokens_a, labels, tokens_b)


_BINARY_FILES = {
  "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
  "CR": ("CR", "custrev.pos", "custrev.neg"),
  # SentEval labels SUBJ's objective sentences 1 and subjective ones 0.
  "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
  "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}


def load_transfer_task(root: str, name: str) -> TransferTask:
  """Loads one task from ``root/senteval/downstream`` in SentEval's order."""
  base = os.path.join(root, "senteval", "downstream")
  if name in _BINARY_FILES:
    folder, positive, negative = _BINARY_FILES[name]
    return TransferTask(name, 2, {"all": _load_binary(os.path.join(base, folder), positive, negative)})
  if name == "SST2":
    folder = os.path.join(base, "SST", "binary")
    return TransferTask(
      name, 2, {s: _load_sst2(os.path.join(folder, f"sentiment-{s}")) for s in ("train", "dev", "test")}
    )
  if name == "TREC":
    folder = os.path.join(base, "TREC")
    return TransferTask(
      name,
      len(TREC_CLASSES),
      {
        "train": _load_trec(os.path.join(folder, "train_5500.label")),
        "test": _load_trec(os.path.join(folder, "TREC_10.label")),
      },
    )
  if name == "MRPC":
    folder = os.path.join(base, "MRPC")
    return TransferTask(
      name, 2, {s: _load_mrpc(os.path.join(folder, f"msr_paraphrase_{s}.txt")) for s in ("train", "test")}
    )
  raise ValueError(f"unknown transfer task {name!r}; choose from {TRANSFER_TASKS}")


def task_sentences(task: TransferTask) -> list[str]:
  """Every sentence the task needs embedded (with repeats)."""
  out = []
  for split in task.splits.values():
    out.extend(split.sentences)
    out.extend(split.sentences_b or [])
  return out


# ----------------------------------------------------------------------------------------------------------------------
# SentEval's three validation schemes.


def _percent(fraction: float) -> float:
  return round(100 * float(fraction), 2)


def _refit_rows(rows: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """SentEval's refit split of ``rows``: (train, validation), the first 5% of a seeded permutation held out.

  ``np.random.seed(seed)`` then ``np.random.permutation`` is what SentEval's classifier does, so this is its split.
  """
  perm = np.random.RandomState(seed).permutation(len(rows))
  n_val = int(REFIT_VALIDATION_SPLIT * len(rows))
  return rows[perm[n_val:]], rows[perm[:n_val]]


def _best_l2(scores: Sequence[float]) -> int:
  return int(np.argmax(scores))  # The first best, as SentEval's np.argmax over the rounded scores.


def nested_folds(
  labels: np.ndarray, k: int
) -> list[tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]]:
  """SentEval's nested stratified k-fold: ``[(outer_train, outer_test, [(inner_train, inner_val)] * k)] * k``.

  All indices are rows of ``labels`` (inner ones already mapped back from the outer training part).
  """
  import sklearn.model_selection  # Here: sklearn takes seconds to import, and only transfer tasks need it.

  skf = sklearn.model_selection.StratifiedKFold(n_splits=k, shuffle=True, random_state=NESTED_SPLIT_SEED)
  folds = []
  for outer_train, outer_test in skf.split(np.zeros(len(labels)), labels):
    inner = [(outer_train[t], outer_train[v]) for t, v in skf.split(np.zeros(len(outer_train)), labels[outer_train])]
    folds.append((outer_train, outer_test, inner))
  return folds


def nested_kfold(
  features: np.ndarray, labels: np.ndarray, *, nclasses: int, config: ProbeConfig, seed: int = DEFAULT_SEED
) -> dict:
  """MR/CR/SUBJ/MPQA: inner k-fold picks L2 per outer fold, refit, test on the outer fold.

  Args:
    features: ``[n, D]`` in SentEval's sorted order. labels: ``[n]``.

  Returns:
    SentEval's ``{"devacc", "acc", "ndev", "ntest"}`` plus the chosen ``"l2"`` per outer fold.
  """
  folds = nested_folds(labels, config.kfold)
  outer = [(outer_train, outer_test) for outer_train, outer_test, _ in folds]
  train, val, l2 = [], [], []
  for _, _, inner in folds:
    for reg in L2_GRID:
      for inner_train, inner_val in inner:
        train.append(inner_train)
        val.append(inner_val)
        l2.append(reg)
  _, inner_acc = fit_probes(
    features, labels, Problems.build(len(labels), train, val, l2), nclasses=nclasses, config=config, seed=seed
  )
  inner_acc = inner_acc.reshape(config.kfold, len(L2_GRID), config.kfold)
  dev_scores = [[_percent(np.mean(inner_acc[o, r])) for r in range(len(L2_GRID))] for o in range(config.kfold)]
  chosen = [_best_l2(s) for s in dev_scores]
  refits = [_refit_rows(outer_train, seed) for outer_train, _ in outer]
  params, _ = fit_probes(
    features,
    labels,
    Problems.build(len(labels), [t for t, _ in refits], [v for _, v in refits], [L2_GRID[c] for c in chosen]),
    nclasses=nclasses,
    config=config,
    seed=seed + 1,
  )
  test_acc = []
  for o, (_, outer_test) in enumerate(outer):
    pred = predict(jax.tree.map(lambda a: a[o : o + 1], params), features[outer_test])[0]
    test_acc.append(_percent(np.mean(pred == labels[outer_test])))
  return {
    "devacc": round(float(np.mean([max(s) for s in dev_scores])), 2),
    "acc": round(float(np.mean(test_acc)), 2),
    "ndev": len(labels),
    "ntest": len(labels),
    "l2": [L2_GRID[c] for c in chosen],
    "fold_acc": test_acc,
  }


def kfold_then_test(
  train_x: np.ndarray,
  train_y: np.ndarray,
  test_x: np.ndarray,
  test_y: np.ndarray,
  *,
  nclasses: int,
  config: ProbeConfig,
  seed: int = DEFAULT_SEED,
) -> tuple[dict, np.ndarray]:
  """TREC/MRPC: k-fold on train picks L2, a refit on all of train (5% held out to stop) is tested.

  Returns:
    (SentEval's ``{"devacc", "acc", "ndev", "ntest"}`` plus ``"l2"``, test predictions ``[n_test]``).
  """
  import sklearn.model_selection  # Here: sklearn takes seconds to import, and only transfer tasks need it.

  skf = sklearn.model_selection.StratifiedKFold(n_splits=config.kfold, shuffle=True, random_state=seed)
  folds = list(skf.split(train_x, train_y))
  train, val, l2 = [], [], []
  for reg in L2_GRID:
    for fold_train, fold_val in folds:
      train.append(fold_train)
      val.append(fold_val)
      l2.append(reg)
  _, acc = fit_probes(
    train_x, train_y, Problems.build(len(train_y), train, val, l2), nclasses=nclasses, config=config, seed=seed
  )
  scores = [_percent(np.mean(a)) for a in acc.reshape(len(L2_GRID), config.kfold)]
  best = _best_l2(scores)
  refit_train, refit_val = _refit_rows(np.arange(len(train_y)), seed)
  params, _ = fit_probes(
    train_x,
    train_y,
    Problems.build(len(train_y), [refit_train], [refit_val], [L2_GRID[best]]),
    nclasses=nclasses,
    config=config,
    seed=seed + 1,
  )
  pred = predict(params, test_x)[0]
  return (
    {
      "devacc": max(scores),
      "acc": _percent(np.mean(pred == test_y)),
      "ndev": len(train_y),
      "ntest": len(test_y),
      "l2": L2_GRID[best],
    },
    pred,
  )


def train_dev_test(
  train_x: np.ndarray,
  train_y: np.ndarray,
  dev_x: np.ndarray,
  dev_y: np.ndarray,
  test_x: np.ndarray,
  test_y: np.ndarray,
  *,
  nclasses: int,
  config: ProbeConfig,
  seed: int = DEFAULT_SEED,
) -> dict:
  """SST-2: one fit per L2 value stopped on dev; the best on dev is tested.

  SentEval refits the chosen L2 value with the same seed, which reproduces the same fit, so its test accuracy
  is read from the selection fit here.
  """
  features = np.concatenate([train_x, dev_x])
  labels = np.concatenate([train_y, dev_y])
  train_rows, dev_rows = np.arange(len(train_y)), len(train_y) + np.arange(len(dev_y))
  problems = Problems.build(len(labels), [train_rows] * len(L2_GRID), [dev_rows] * len(L2_GRID), L2_GRID)
  params, acc = fit_probes(features, labels, problems, nclasses=nclasses, config=config, seed=seed)
  scores = [_percent(a) for a in acc]
  best = _best_l2(scores)
  pred = predict(jax.tree.map(lambda a: a[best : best + 1], params), test_x)[0]
  return {
    "devacc": max(scores),
    "acc": _percent(np.mean(pred == test_y)),
    "ndev": len(dev_y),
    "ntest": len(test_y),
    "l2": L2_GRID[best],
  }


# ----------------------------------------------------------------------------------------------------------------------
# Tasks end to end.


def split_features(split: Split, table: dict[str, np.ndarray]) -> np.ndarray:
  """``[n, D]`` sentence embeddings, or for pairs SentEval's ``[n, 2D]`` features ``[|u - v|, u * v]``."""
  u = np.stack([table[s] for s in split.sentences]).astype(np.float32)
  if split.sentences_b is None:
    return u
  v = np.stack([table[s] for s in split.sentences_b]).astype(np.float32)
  return np.concatenate([np.abs(u - v), u * v], axis=1)


def evaluate_task(
  task: TransferTask, table: dict[str, np.ndarray], *, mode: str = "test", seed: int = DEFAULT_SEED
) -> dict:
  """Runs one task's SentEval protocol on embeddings looked up in ``table`` (sentence -> ``[D]``)."""
  config = MODES[mode]
  feats = {name: split_features(split, table) for name, split in task.splits.items()}
  labels = {name: split.labels for name, split in task.splits.items()}
  kwargs = dict(nclasses=task.nclasses, config=config, seed=seed)
  if set(task.splits) == {"all"}:
    return nested_kfold(feats["all"], labels["all"], **kwargs)
  if set(task.splits) == {"train", "dev", "test"}:
    return train_dev_test(
      feats["train"], labels["train"], feats["dev"], labels["dev"], feats["test"], labels["test"], **kwargs
    )
  result, pred = kfold_then_test(feats["train"], labels["train"], feats["test"], labels["test"], **kwargs)
  if task.name == "MRPC":
    import sklearn.metrics  # As sklearn.model_selection above.

    result["f1"] = _percent(sklearn.metrics.f1_score(labels["test"], pred))
  return result


def evaluate_transfer(
  embed: Embed,
  root: str,
  tasks: Sequence[str] = TRANSFER_TASKS,
  *,
  mode: str = "test",
  seed: int = DEFAULT_SEED,
  progress=None,
) -> dict:
  """Embeds every distinct sentence of ``tasks`` once, then runs each task; returns SentEval-shaped results.

  ``progress`` (a ``progress.Progress`` over the tasks) is advanced as each task's probes finish.
  """
  if mode not in MODES:
    raise ValueError(f"unknown transfer mode {mode!r}; choose from {sorted(MODES)}")
  loaded = [load_transfer_task(root, name) for name in tasks]
  table = embedder_lib.embed_each_once(embed, (s for task in loaded for s in task_sentences(task)))
  results = {}
  for task in loaded:
    if progress is not None:
      progress.set(task=task.name)
    results[task.name] = evaluate_task(task, table, mode=mode, seed=seed)
    if progress is not None:
      progress.update(1)
  return results


def summarize_transfer(results: dict) -> dict[str, float]:
  """Test accuracies (already x100, 2 decimals) of the tasks present; ``Avg_transfer`` when all seven are."""
  summary = {name: results[name]["acc"] for name in TRANSFER_TASKS if name in results}
  if len(summary) == len(TRANSFER_TASKS):
    summary["Avg_transfer"] = round(sum(summary.values()) / len(TRANSFER_TASKS), 2)
  return summary
