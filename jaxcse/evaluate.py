r"""Evaluation as SimCSE runs SentEval: STS12-16, STS-B and SICK-R, unsupervised.

Each sentence pair is scored by the cosine similarity of its two embeddings,
and the scores are correlated with the gold scores (Spearman; Pearson too).
Loading follows SentEval: pairs with an empty gold score are dropped, every
sentence is split on whitespace and re-joined with single spaces, STS12-16
report ``all`` (one correlation over all subsets of the year), ``mean`` and
``wmean``; STS-B and SICK-R report dev and test (SentEval also scores their
train splits, which no unsupervised result uses; we skip them for speed).

  python -m jaxcse.evaluate --model PATH_OR_ID [--pooler P] --tasks sts --output results.json

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
import scipy.stats

from jaxcse import data as data_lib

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


def load_stsb(root: str) -> dict[str, PairSet]:
  """STS Benchmark: genre, file, year, id, score, sentence 1, sentence 2 (tab-separated)."""
  folder = os.path.join(root, "senteval", "downstream", "STS", "STSBenchmark")
  return {
      split: _load_tsv_pairs(os.path.join(folder, f"sts-{split}.csv"), skip_header=False, cols=(5, 6, 4))
      for split in ("dev", "test")
  }


def load_sickr(root: str) -> dict[str, PairSet]:
  """SICK relatedness: pair_ID, sentence_A, sentence_B, relatedness_score, ... with a header."""
  folder = os.path.join(root, "senteval", "downstream", "SICK")
  files = {"dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
  return {split: _load_tsv_pairs(os.path.join(folder, f), skip_header=True, cols=(1, 2, 3)) for split, f in files.items()}


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


def summarize(results: dict) -> dict[str, float]:
  """The numbers SimCSE's evaluation.py prints: Spearman x100, 2 decimals, STS12-16 'all', test splits."""
  summary = {}
  for task in STS_TASKS:
    if task not in results:
      continue
    r = results[task]
    value = r["all"]["spearman"]["all"] if task in STS_YEARS else r["test"]["spearman"]
    summary[task] = round(value * 100, 2)
  if all(t in summary for t in STS_TASKS):
    summary["Avg"] = round(sum(summary[t] for t in STS_TASKS) / len(STS_TASKS), 2)
  return summary


def dev_scores(embed: Embed, dev_sets: dict[str, PairSet]) -> dict[str, float]:
  """Spearman (not x100) on each dev set; used for model selection during training."""
  table = embed_unique(embed, list(dev_sets.values()))
  return {name: correlations(score_pairs(table, ps), ps.gold)["spearman"] for name, ps in dev_sets.items()}


def load_dev_sets(root: str) -> dict[str, PairSet]:
  return {"stsb_dev": load_stsb(root)["dev"], "sickr_dev": load_sickr(root)["dev"]}


def format_table(summary: dict[str, float]) -> str:
  names = [n for n in SUMMARY_NAMES if n in summary]
  widths = [max(len(n), 6) for n in names]
  line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
  head = "|" + "|".join(f" {n:>{w}} " for n, w in zip(names, widths)) + "|"
  row = "|" + "|".join(f" {summary[n]:>{w}.2f} " for n, w in zip(names, widths)) + "|"
  return "\n".join([line, head, line, row, line])


TASK_GROUPS = {"sts": STS_TASKS}


def expand_tasks(spec: str) -> list[str]:
  tasks = []
  for item in spec.split(","):
    item = item.strip()
    if item in TASK_GROUPS:
      tasks.extend(TASK_GROUPS[item])
    elif item in STS_TASKS:
      tasks.append(item)
    else:
      raise ValueError(f"unknown task {item!r}; choose from {sorted(TASK_GROUPS)} or {STS_TASKS}")
  return list(dict.fromkeys(tasks))


def main(argv: Sequence[str] | None = None) -> int:
  import argparse

  from jaxcse import checkpoints, models

  parser = argparse.ArgumentParser(prog="python -m jaxcse.evaluate", description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="HF folder or hub id, or a jaxcse workdir or checkpoint folder")
  parser.add_argument("--pooler", choices=models.POOLERS, default=None,
                      help="test-time pooler; default: the one saved with a jaxcse model, the sentence-transformers "
                           "pooling config of a HF folder, else cls (SimCSE's evaluation.py default)")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step number")
  parser.add_argument("--tasks", default="sts", help="comma-separated: sts, or task names " + ",".join(STS_TASKS))
  parser.add_argument("--data_dir", default=None, help=f"data root (default ${data_lib.DATA_DIR_ENV})")
  parser.add_argument("--batch_size", type=int, default=128)
  parser.add_argument("--output", default=None, help="write the full results as JSON here")
  args = parser.parse_args(argv)

  tasks = expand_tasks(args.tasks)
  root = data_lib.data_dir(args.data_dir)
  start = time.time()
  model, described = checkpoints.load_model(args.model, checkpoint=args.checkpoint)
  pooler = args.pooler or model.pooling.test_pooler
  if args.pooler and described and args.pooler != model.pooling.test_pooler:
    print(f"warning: evaluating with pooler {args.pooler!r}, but this model was saved with test pooler "
          f"{model.pooling.test_pooler!r}", file=sys.stderr)
  embedder = models.Embedder(model, pooler, batch_size=args.batch_size)
  results = evaluate_sts(embedder, root, tasks)
  summary = summarize(results)
  wall = time.time() - start
  print(f"model: {args.model}  pooler: {pooler}  ({wall:.1f} s)")
  print(format_table(summary))
  if args.output:
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
      json.dump({"model": args.model, "pooler": pooler, "tasks": results, "summary": summary,
                 "wall_seconds": round(wall, 1)}, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
