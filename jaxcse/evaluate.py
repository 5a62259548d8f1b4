r"""Evaluation as SimCSE runs SentEval: STS12-16, STS-B and SICK-R, unsupervised.

Each sentence pair is scored by the cosine similarity of its two embeddings,
and the scores are correlated with the gold scores (Spearman; Pearson too).
Loading follows SentEval: pairs with an empty gold score are dropped, every
sentence is split on whitespace and re-joined with single spaces, STS12-16
report ``all`` (one correlation over all subsets of the year), ``mean`` and
``wmean``; STS-B and SICK-R report dev and test (SentEval also scores their
train splits, which no unsupervised result uses; we skip them for speed).
``align_uniform`` adds Wang & Isola's alignment and uniformity on STS-B test,
as SimCSE uses them (see ``evaluate_align_uniform``). ``transfer`` runs
SentEval's seven transfer tasks (MR ... MRPC) with a JAX logistic-regression
probe (``jaxcse.transfer``); ``all`` = STS + transfer.

  python -m jaxcse.evaluate --model PATH_OR_ID [--pooler P] --tasks sts,align_uniform --output results.json

``--model`` is a Hugging Face folder or hub id, or a jaxcse workdir (its best
checkpoint, else its latest) or one of its checkpoint folders.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
import scipy.spatial.distance
import scipy.stats

from jaxcse import data as data_lib
from jaxcse import transfer as transfer_lib
from jaxcse import errors, provenance
from jaxcse.errors import JaxcseError
from jaxcse.progress import Progress

Embed = Callable[[Sequence[str]], np.ndarray]

# SentEval's subsets per year (STS13's SMT is not distributed).
STS_YEARS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
STS_TASKS = (*STS_YEARS, "STSBenchmark", "SICKRelatedness")
SUMMARY_NAMES = (*STS_TASKS, "Avg")
ALIGN_UNIFORM = "align_uniform"
# SimCSE's positive pairs for alignment: STS-B pairs with a gold score of at least 4 (out of 5).
POSITIVE_MIN_SCORE = 4.0


@dataclasses.dataclass
class PairSet:
  """Sentence pairs with gold similarity scores."""

  sent1: list[str]
  sent2: list[str]
  gold: np.ndarray

  def __len__(self) -> int:
    return len(self.gold)


def _read_lines(path: str) -> list[str]:
  try:
    with open(path, encoding="utf-8") as f:
      return f.read().splitlines()
  except FileNotFoundError:
    raise data_lib.DataError(f"{path}: missing evaluation file (is the data root laid out as senteval/downstream/...?)") from None
  except UnicodeDecodeError as e:
    raise data_lib.DataError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None


def _senteval_text(s: str) -> str:
  return " ".join(s.split())


def load_sts_year(root: str, year: str) -> dict[str, PairSet]:
  """STS12-16 subsets, each as SentEval loads it."""
  folder = os.path.join(root, "senteval", "downstream", "STS", f"{year}-en-test")
  subsets = {}
  for name in STS_YEARS[year]:
    input_path = os.path.join(folder, f"STS.input.{name}.txt")
    gold_path = os.path.join(folder, f"STS.gs.{name}.txt")
    pairs, gold = _read_lines(input_path), _read_lines(gold_path)
    if len(pairs) != len(gold):
      raise data_lib.DataError(f"{input_path}: {len(pairs)} lines but {gold_path} has {len(gold)}")
    s1, s2, g = [], [], []
    for lineno, (pair, score) in enumerate(zip(pairs, gold), start=1):
      if score.strip() == "":
        continue  # SentEval drops pairs without a gold score.
      fields = pair.split("\t")
      if len(fields) != 2:
        raise data_lib.DataError(f"{input_path}:{lineno}: expected 2 tab-separated sentences, found {len(fields)} fields")
      try:
        g.append(float(score))
      except ValueError:
        raise data_lib.DataError(f"{gold_path}:{lineno}: gold score {score!r} is not a number") from None
      s1.append(_senteval_text(fields[0]))
      s2.append(_senteval_text(fields[1]))
    subsets[name] = PairSet(s1, s2, np.asarray(g, np.float64))
  return subsets


def _load_tsv_pairs(path: str, *, skip_header: bool, cols: tuple[int, int, int]) -> PairSet:
  """Rows of a tab-separated file; ``cols`` = (sentence 1, sentence 2, score) column indices."""
  s1, s2, g = [], [], []
  lines = _read_lines(path)
  for lineno, line in enumerate(lines, start=1):
    if skip_header and lineno == 1:
      continue
    fields = line.strip().split("\t")
    if len(fields) <= max(cols):
      raise data_lib.DataError(f"{path}:{lineno}: expected at least {max(cols) + 1} tab-separated fields, found {len(fields)}")
    try:
      g.append(float(fields[cols[2]]))
    except ValueError:
      raise data_lib.DataError(f"{path}:{lineno}: score {fields[cols[2]]!r} is not a number") from None
    s1.append(_senteval_text(fields[cols[0]]))
    s2.append(_senteval_text(fields[cols[1]]))
  return PairSet(s1, s2, np.asarray(g, np.float64))


STSB_COLUMNS = (5, 6, 4)  # STS-B's sentence 1, sentence 2 and score columns (no header).
SICKR_COLUMNS = (1, 2, 3)  # SICK's sentence_A, sentence_B and relatedness_score columns (after a header).
# The dev sets scored during training, as paths under a data root.
STSB_DEV_FILE = "senteval/downstream/STS/STSBenchmark/sts-dev.csv"
SICKR_DEV_FILE = "senteval/downstream/SICK/SICK_trial.txt"


def load_stsb(root: str) -> dict[str, PairSet]:
  """STS Benchmark: genre, file, year, id, score, sentence 1, sentence 2 (tab-separated)."""
  folder = os.path.join(root, "senteval", "downstream", "STS", "STSBenchmark")
  return {
      split: _load_tsv_pairs(os.path.join(folder, f"sts-{split}.csv"), skip_header=False, cols=STSB_COLUMNS)
      for split in ("dev", "test")
  }


def load_sickr(root: str) -> dict[str, PairSet]:
  """SICK relatedness: pair_ID, sentence_A, sentence_B, relatedness_score, ... with a header."""
  folder = os.path.join(root, "senteval", "downstream", "SICK")
  files = {"dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
  return {split: _load_tsv_pairs(os.path.join(folder, f), skip_header=True, cols=SICKR_COLUMNS)
          for split, f in files.items()}


def load_task(root: str, task: str) -> dict[str, PairSet]:
  if task in STS_YEARS:
    return load_sts_year(root, task)
  if task == "STSBenchmark":
    return load_stsb(root)
  if task == "SICKRelatedness":
    return load_sickr(root)
  raise ValueError(f"unknown task {task!r}; choose from {STS_TASKS}")


def cosine_scores(e1: np.ndarray, e2: np.ndarray) -> np.ndarray:
  """Row-wise cosine similarity, as SentEval computes it (NaN-safe, in float64)."""
  e1 = np.nan_to_num(e1.astype(np.float64))
  e2 = np.nan_to_num(e2.astype(np.float64))
  denom = np.linalg.norm(e1, axis=1) * np.linalg.norm(e2, axis=1)
  return np.nan_to_num((e1 * e2).sum(axis=1) / denom)


def correlations(scores: np.ndarray, gold: np.ndarray) -> dict[str, float]:
  return {
      "pearson": float(scipy.stats.pearsonr(scores, gold)[0]),
      "spearman": float(scipy.stats.spearmanr(scores, gold)[0]),
      "nsamples": int(len(gold)),
  }


def embed_unique(embed: Embed, pair_sets: Sequence[PairSet]) -> dict[str, np.ndarray]:
  """Embeds every distinct sentence of ``pair_sets`` once."""
  unique = sorted({s for ps in pair_sets for s in (*ps.sent1, *ps.sent2)})
  vectors = embed(unique)
  return dict(zip(unique, vectors))


def score_pairs(table: dict[str, np.ndarray], pairs: PairSet) -> np.ndarray:
  e1 = np.stack([table[s] for s in pairs.sent1])
  e2 = np.stack([table[s] for s in pairs.sent2])
  return cosine_scores(e1, e2)


def evaluate_sts(embed: Embed, root: str, tasks: Sequence[str] = STS_TASKS) -> dict:
  """Runs the STS tasks; returns SentEval-shaped results per task."""
  loaded = {task: load_task(root, task) for task in tasks}
  table = embed_unique(embed, [ps for subsets in loaded.values() for ps in subsets.values()])
  results = {}
  for task, subsets in loaded.items():
    res, all_scores, all_gold = {}, [], []
    for name, pairs in subsets.items():
      scores = score_pairs(table, pairs)
      res[name] = correlations(scores, pairs.gold)
      all_scores.append(scores)
      all_gold.append(pairs.gold)
    if task in STS_YEARS:
      weights = [res[n]["nsamples"] for n in subsets]
      res["all"] = {}
      for metric in ("pearson", "spearman"):
        values = [res[n][metric] for n in subsets]
        res["all"][metric] = {
            "all": correlations(np.concatenate(all_scores), np.concatenate(all_gold))[metric],
            "mean": float(np.mean(values)),
            "wmean": float(np.average(values, weights=weights)),
        }
      res["all"]["nsamples"] = int(sum(weights))
    results[task] = res
  return results


def _normalize_rows(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, np.float64)
  if x.ndim != 2:
    raise ValueError(f"expected embeddings of shape [n, dim], got {x.shape}")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  if np.any(norms == 0) or not np.all(np.isfinite(norms)):
    raise ValueError("embeddings must be finite and non-zero to be normalised")
  return x / norms


def alignment(x: np.ndarray, y: np.ndarray, *, alpha: float = 2) -> float:
  """Wang & Isola's alignment: mean of ||f(x) - f(y)||^alpha over paired rows (lower is better).

  Args:
    x, y: ``[n, dim]`` embeddings; row i of ``x`` and of ``y`` form a positive pair. Rows are L2-normalised here.
    alpha: the exponent (2, as SimCSE).

  Returns:
    A float in [0, 2^alpha].
  """
  x, y = _normalize_rows(x), _normalize_rows(y)
  if x.shape != y.shape or len(x) == 0:
    raise ValueError(f"alignment needs two non-empty arrays of the same shape, got {x.shape} and {y.shape}")
  return float(np.mean(np.linalg.norm(x - y, axis=1) ** alpha))


def uniformity(x: np.ndarray, *, t: float = 2) -> float:
  """Wang & Isola's uniformity: log of the mean of exp(-t ||f(a) - f(b)||^2) over all pairs i < j (lower is better).

  Args:
    x: ``[n, dim]`` embeddings, n >= 2; rows are L2-normalised here.
    t: the temperature (2, as SimCSE).

  Returns:
    A float in [-4t, 0]: 0 when all rows are equal.
  """
  x = _normalize_rows(x)
  if len(x) < 2:
    raise ValueError(f"uniformity needs at least 2 embeddings, got {len(x)}")
  sq_dists = scipy.spatial.distance.pdist(x, "sqeuclidean")  # [n (n - 1) / 2], the pairs i < j.
  return float(np.log(np.mean(np.exp(-t * sq_dists))))


def evaluate_align_uniform(embed: Embed, root: str) -> dict:
  """Alignment and uniformity on STS-B test, as SimCSE measures them.

  Alignment is over the test pairs with gold score >= 4 (``POSITIVE_MIN_SCORE``) and uniformity over all pairs
  of the distinct sentences of the test split (both sides of every pair, after SentEval's whitespace
  normalisation, each sentence once). Embeddings are L2-normalised; alpha = 2, t = 2.

  Returns:
    ``{"alignment", "uniformity", "n_positive_pairs", "n_sentences"}``.
  """
  test = load_stsb(root)["test"]
  table = embed_unique(embed, [test])
  positive = np.flatnonzero(test.gold >= POSITIVE_MIN_SCORE)
  if len(positive) == 0:
    raise data_lib.DataError(f"STS-B test has no pair with gold score >= {POSITIVE_MIN_SCORE} under {root}")
  e1 = np.stack([table[test.sent1[i]] for i in positive])
  e2 = np.stack([table[test.sent2[i]] for i in positive])
  return {
      "alignment": alignment(e1, e2),
      "uniformity": uniformity(np.stack(list(table.values()))),
      "n_positive_pairs": int(len(positive)),
      "n_sentences": len(table),
  }


def largest_angle_deg(x: np.ndarray) -> float:
  """The largest angle between any two rows of ``[n, hidden]`` embeddings (n >= 2), in degrees.

  The MixCSE paper's omega (Fig. 4b): the biggest angle between any two
  sentences' embeddings of STS-B, taken as the opening of the spherical cap the
  embeddings fill; contrastive training widens it.
  """
  x = np.asarray(x, np.float64)
  if x.ndim != 2 or len(x) < 2:
    raise ValueError(f"need [n >= 2, hidden] embeddings, got {x.shape}")
  unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  cos = unit @ unit.T  # [n, n]
  np.fill_diagonal(cos, np.inf)  # A row with itself is not a pair.
  return float(np.degrees(np.arccos(np.clip(cos.min(), -1.0, 1.0))))


def dev_dynamics(table: dict[str, np.ndarray], stsb_dev: PairSet) -> dict[str, float]:
  """Geometry of the STS-B dev embeddings the dev evaluation computed (no second encoding).

  Returns ``omega_deg`` (``largest_angle_deg`` over its distinct sentences),
  ``alignment`` over its pairs with gold score >= 4 and ``uniformity`` over its
  distinct sentences (Wang & Isola, ``alignment``/``uniformity``, as
  ``evaluate_align_uniform`` measures them on the test split).

  Args:
    table: ``{sentence: [hidden] vector}`` covering the STS-B dev sentences (other sentences are ignored).
    stsb_dev: the STS-B dev pairs.
  """
  sentences = list(dict.fromkeys((*stsb_dev.sent1, *stsb_dev.sent2)))
  everything = np.stack([table[s] for s in sentences])
  positive = np.flatnonzero(stsb_dev.gold >= POSITIVE_MIN_SCORE)
  dynamics = {"omega_deg": largest_angle_deg(everything), "uniformity": uniformity(everything)}
  if len(positive):  # A cut-down dev set may have no such pair; then there is no alignment to report.
    dynamics["alignment"] = alignment(np.stack([table[stsb_dev.sent1[i]] for i in positive]),
                                               np.stack([table[stsb_dev.sent2[i]] for i in positive]))
  return dynamics


def summarize(results: dict) -> dict[str, float]:
  """The numbers SimCSE's evaluation.py prints: Spearman x100, 2 decimals, STS12-16 'all', test splits.

  With ``results["align_uniform"]``, also its alignment and uniformity, rounded to 4 decimals.
  """
  summary = {}
  for task in STS_TASKS:
    if task not in results:
      continue
    r = results[task]
    value = r["all"]["spearman"]["all"] if task in STS_YEARS else r["test"]["spearman"]
    summary[task] = round(value * 100, 2)
  if all(t in summary for t in STS_TASKS):
    summary["Avg"] = round(sum(summary[t] for t in STS_TASKS) / len(STS_TASKS), 2)
  if ALIGN_UNIFORM in results:
    for key in ("alignment", "uniformity"):
      summary[key] = round(results[ALIGN_UNIFORM][key], 4)
  # Transfer accuracies (x100, 2 decimals) and Avg_transfer, the mean of the seven rounded values.
  summary.update(transfer_lib.summarize_transfer(results))
  return summary


def dev_scores(embed: Embed, dev_sets: dict[str, PairSet]) -> dict[str, float]:
  """Spearman (not x100) on each dev set; used for model selection during training."""
  return dev_scores_and_embeddings(embed, dev_sets)[0]


def dev_scores_and_embeddings(embed: Embed, dev_sets: dict[str, PairSet]
                              ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
  """``dev_scores`` and the embeddings they were computed from: ``{sentence: [hidden] vector}``, each once."""
  table = embed_unique(embed, list(dev_sets.values()))
  scores = {name: correlations(score_pairs(table, ps), ps.gold)["spearman"] for name, ps in dev_sets.items()}
  return scores, table


def load_dev_sets(root: str | None = None, *, sickr: bool = True) -> dict[str, PairSet]:
  """The dev sets scored during training: STS-B dev (``stsb_dev``) and, if ``sickr``, SICK-R dev (``sickr_dev``).

  Their files are looked up by ``data.data_file``: under ``root`` (None: ``$JAXCSE_DATA_DIR``), else in the
  quickstart data shipped with jaxcse, which holds STS-B dev (not SICK-R).
  """
  sets = {"stsb_dev": _load_tsv_pairs(data_lib.data_file(STSB_DEV_FILE, root), skip_header=False, cols=STSB_COLUMNS)}
  if sickr:
    sets["sickr_dev"] = _load_tsv_pairs(data_lib.data_file(SICKR_DEV_FILE, root), skip_header=True,
                                        cols=SICKR_COLUMNS)
  return sets


# Model selection during training (``config.eval.metric``): the number to maximise, from an evaluation's scores.
SELECTION_METRICS: dict[str, Callable[[dict[str, float]], float]] = {
    "stsb_dev": lambda scores: scores["stsb_dev"],  # SimCSE, MixCSE.
    "stsb_sickr_dev": lambda scores: (scores["stsb_dev"] + scores["sickr_dev"]) / 2,  # DCLR.
    "heldout_mlm_accuracy": lambda scores: scores["heldout_mlm_accuracy"],  # MLM pretraining.
}


def format_table(summary: dict[str, float], names: Sequence[str] = SUMMARY_NAMES) -> str:
  names = [n for n in names if n in summary]
  widths = [max(len(n), 6) for n in names]
  line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
  head = "|" + "|".join(f" {n:>{w}} " for n, w in zip(names, widths)) + "|"
  row = "|" + "|".join(f" {summary[n]:>{w}.2f} " for n, w in zip(names, widths)) + "|"
  return "\n".join([line, head, line, row, line])


TASK_GROUPS = {"sts": STS_TASKS, "transfer": transfer_lib.TRANSFER_TASKS,
               "all": (*STS_TASKS, *transfer_lib.TRANSFER_TASKS)}
TRANSFER_SUMMARY_NAMES = (*transfer_lib.TRANSFER_TASKS, "Avg_transfer")


class TaskError(JaxcseError, ValueError):
  """An unknown evaluation task name."""


# The folder of senteval/downstream each task reads (its files' sha256 go into the results' provenance).
TASK_FOLDERS = {**{year: os.path.join("STS", f"{year}-en-test") for year in STS_YEARS},
                "STSBenchmark": os.path.join("STS", "STSBenchmark"), "SICKRelatedness": "SICK",
                ALIGN_UNIFORM: os.path.join("STS", "STSBenchmark"), "MR": "MR", "CR": "CR", "SUBJ": "SUBJ",
                "MPQA": "MPQA", "SST2": os.path.join("SST", "binary"), "TREC": "TREC", "MRPC": "MRPC"}


def expand_tasks(spec: str) -> list[str]:
  tasks = []
  for item in spec.split(","):
    item = item.strip()
    if item in TASK_GROUPS:
      tasks.extend(TASK_GROUPS[item])
    elif item in STS_TASKS or item in transfer_lib.TRANSFER_TASKS or item == ALIGN_UNIFORM:
      tasks.append(item)
    else:
      raise TaskError(f"unknown task {item!r}; choose from {sorted(TASK_GROUPS)}, {STS_TASKS}, "
                       f"{transfer_lib.TRANSFER_TASKS} or {ALIGN_UNIFORM!r}")
  return list(dict.fromkeys(tasks))


def check_task_data(root: str, tasks: Sequence[str]) -> None:
  """Raises ``DataError`` naming the first task whose folder is missing under ``root`` and the download of it."""
  for task in tasks:
    folder = os.path.join(root, "senteval", "downstream", TASK_FOLDERS[task])
    if not os.path.isdir(folder):
      raise data_lib.DataError(f"{folder}: missing ({task}'s data); `jaxcse-data download senteval --data_dir {root}` "
                               "fetches every evaluation task")


def _workdir_config(model: str) -> dict | None:
  """The training config of a jaxcse workdir model (its config.json), else None."""
  from jaxcse import checkpoints

  workdir = checkpoints.find_workdir(model) if os.path.exists(model) else None
  path = os.path.join(workdir, "config.json") if workdir else None
  return json.load(open(path)) if path and os.path.isfile(path) else None


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  import argparse

  from jaxcse import embedder as embedder_lib, loading, poolers

  parser = argparse.ArgumentParser(prog=errors.command_name("jaxcse.evaluate"), description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="HF folder or hub id, or a jaxcse workdir or checkpoint folder")
  parser.add_argument("--pooler", choices=poolers.names(), default=None,
                      help="test-time pooler; default: the one saved with a jaxcse model, the sentence-transformers "
                           "pooling config of a HF folder, else cls (SimCSE's evaluation.py default)")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step number")
  parser.add_argument("--revision", default=None, help="for a hub id: the branch, tag or commit (default: main)")
  parser.add_argument("--tasks", default="sts",
                      help=f"comma-separated: sts, transfer, all (sts + transfer), task names "
                           f"{','.join(STS_TASKS + transfer_lib.TRANSFER_TASKS)}, or {ALIGN_UNIFORM} (STS-B test)")
  parser.add_argument("--transfer_mode", choices=sorted(transfer_lib.MODES), default="test",
                      help="SentEval's classifier protocol for transfer tasks: test (adam, batch 64, 10 folds; the "
                           "papers' numbers) or dev (rmsprop, batch 128, 5 folds; fast)")
  parser.add_argument("--transfer_seed", type=int, default=transfer_lib.DEFAULT_SEED,
                      help="seed of the transfer probes (initialisation, shuffling, k-fold of TREC/MRPC)")
  parser.add_argument("--data_dir", default=None, help=f"data root (default ${data_lib.DATA_DIR_ENV})")
  parser.add_argument("--batch_size", type=int, default=128)
  parser.add_argument("--output", default=None, help="write the full results as JSON here")
  args = parser.parse_args(argv)

  tasks = expand_tasks(args.tasks)
  if args.output:
    errors.check_output(args.output, folder=False)
  root = data_lib.data_dir(args.data_dir)
  check_task_data(root, tasks)  # Before the model loads and anything runs.
  start = time.time()
  loaded = loading.load_model(args.model, checkpoint=args.checkpoint, pooler=args.pooler, revision=args.revision)
  pooler = args.pooler or loaded.spec.pooling.test_pooler
  if args.pooler and loaded.described and args.pooler != loaded.spec.pooling.test_pooler:
    print(f"warning: evaluating with pooler {args.pooler!r}, but this model was saved with test pooler "
          f"{loaded.spec.pooling.test_pooler!r}", file=sys.stderr)
  embed_with = embedder_lib.Embedder(loaded.spec, pooler, batch_size=args.batch_size)

  def embedder(sentences):
    with Progress(len(sentences), unit="sent", desc="embedding") as bar:
      return embed_with(sentences, loaded.params, progress=bar)

  sts_tasks = [t for t in tasks if t in STS_TASKS]
  transfer_tasks = [t for t in tasks if t in transfer_lib.TRANSFER_TASKS]
  results = evaluate_sts(embedder, root, sts_tasks) if sts_tasks else {}
  if transfer_tasks:
    with Progress(len(transfer_tasks), unit="task", desc=f"transfer probes ({args.transfer_mode} mode)") as bar:
      results.update(transfer_lib.evaluate_transfer(embedder, root, transfer_tasks, mode=args.transfer_mode,
                                                    seed=args.transfer_seed, progress=bar))
  if ALIGN_UNIFORM in tasks:
    results[ALIGN_UNIFORM] = evaluate_align_uniform(embedder, root)
  summary = summarize(results)
  wall = time.time() - start
  print(f"model: {args.model}  pooler: {pooler}  ({wall:.1f} s)")
  if sts_tasks:
    print(format_table(summary))
  if transfer_tasks:
    print(f"transfer ({args.transfer_mode} mode, seed {args.transfer_seed}):")
    print(format_table(summary, TRANSFER_SUMMARY_NAMES))
  if ALIGN_UNIFORM in results:
    au = results[ALIGN_UNIFORM]
    print(f"alignment: {summary['alignment']:.4f}  uniformity: {summary['uniformity']:.4f}  (STS-B test: "
          f"{au['n_positive_pairs']} pairs with score >= {POSITIVE_MIN_SCORE:g}, {au['n_sentences']} sentences)")
  if args.output:
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    record = {"model": args.model, "pooler": pooler, "tasks": results, "summary": summary,
              "wall_seconds": round(wall, 1)}
    if transfer_tasks:
      record["transfer"] = {"mode": args.transfer_mode, "seed": args.transfer_seed}
    downstream = os.path.join(root, "senteval", "downstream")
    folders = sorted({os.path.join(downstream, TASK_FOLDERS[t]) for t in tasks})
    record["provenance"] = provenance.provenance(
        model=args.model, checkpoint_step=loaded.step, revision=loaded.spec.revision, config=_workdir_config(args.model),
        data=provenance.data_digests(folders, root=downstream), wall_seconds=wall)
    from jaxcse import checkpoints

    checkpoints.write_json(args.output, record)
  return 0


if __name__ == "__main__":
  sys.exit(main())
