"""STS data as SentEval loads it: STS12-16 (each year's subsets), STS-B and SICK-R, and the dev sets of training.

Pairs with an empty gold score are dropped; every sentence is split on whitespace and re-joined with single
spaces (SentEval's preprocessing).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from jaxcse import data as data_lib

# SentEval's subsets per year (STS13's SMT is not distributed).
STS_YEARS = {
  "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
  "STS13": ("FNWN", "headlines", "OnWN"),
  "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
  "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
  "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
STS_TASKS = (*STS_YEARS, "STSBenchmark", "SICKRelatedness")


@dataclasses.dataclass
class PairSet:
  """Sentence pairs with gold similarity scores."""

  sent1: list[str]
  sent2: list[str]
  gold: np.ndarray

  def __len__(self) -> int:
    return len(self.gold)


def _senteval_text(s: str) -> str:
  return " ".join(s.split())


def load_sts_year(root: str, year: str) -> dict[str, PairSet]:
  """STS12-16 subsets, each as SentEval loads it."""
  folder = os.path.join(root, "senteval", "downstream", "STS", f"{year}-en-test")
  subsets = {}
  for name in STS_YEARS[year]:
    input_path = os.path.join(folder, f"STS.input.{name}.txt")
    gold_path = os.path.join(folder, f"STS.gs.{name}.txt")
    pairs, gold = data_lib.read_senteval_lines(input_path), data_lib.read_senteval_lines(gold_path)
    if len(pairs) != len(gold):
      raise data_lib.DataError(f"{input_path}: {len(pairs)} lines but {gold_path} has {len(gold)}")
    s1, s2, g = [], [], []
    for lineno, (pair, score) in enumerate(zip(pairs, gold), start=1):
      if score.strip() == "":
        continue  # SentEval drops pairs without a gold score.
      fields = pair.split("\t")
      if len(fields) != 2:
        raise data_lib.DataError(
          f"{input_path}:{lineno}: expected 2 tab-separated sentences, found {len(fields)} fields"
        )
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
  lines = data_lib.read_senteval_lines(path)
  for lineno, line in enumerate(lines, start=1):
    if skip_header and lineno == 1:
      continue
    fields = line.strip().split("\t")
    if len(fields) <= max(cols):
      raise data_lib.DataError(
        f"{path}:{lineno}: expected at least {max(cols) + 1} tab-separated fields, found {len(fields)}"
      )
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
  return {
    split: _load_tsv_pairs(os.path.join(folder, f), skip_header=True, cols=SICKR_COLUMNS) for split, f in files.items()
  }


def task_folder(task: str) -> str:
  """The folder (relative to a data root, "/"-separated) that holds ``task``'s files."""
  if task in STS_YEARS:
    return f"senteval/downstream/STS/{task}-en-test"
  if task == "STSBenchmark":
    return "senteval/downstream/STS/STSBenchmark"
  if task == "SICKRelatedness":
    return "senteval/downstream/SICK"
  raise ValueError(f"unknown task {task!r}; choose from {STS_TASKS}")


def task_files(task: str) -> list[str]:
  """The files (relative to a data root) that ``load_task`` reads for ``task``."""
  folder = task_folder(task)
  if task in STS_YEARS:
    return [f"{folder}/STS.{kind}.{name}.txt" for name in STS_YEARS[task] for kind in ("input", "gs")]
  if task == "STSBenchmark":
    return [f"{folder}/sts-dev.csv", f"{folder}/sts-test.csv"]
  return [f"{folder}/SICK_trial.txt", f"{folder}/SICK_test_annotated.txt"]


def task_root(task: str, root: str | None = None) -> str:
  """The data root to read ``task`` from: ``root`` (else ``$JAXCSE_DATA_DIR``) if it has the task's folder, else the
  copy shipped with jaxcse (every file's pinned sha256 checked, one line saying so).

  A whole task comes from one place, never some files from each: a given root with the task's folder but a missing
  file is that root's error (``load_task`` names the file), not a silent mix with the shipped copy.
  """
  given = data_lib.given_root(root)
  if given and os.path.isdir(os.path.join(given, task_folder(task))):
    return given
  return data_lib.embedded_root_for(task_files(task), given, what=task_folder(task))


def load_task(root: str, task: str) -> dict[str, PairSet]:
  if task in STS_YEARS:
    return load_sts_year(root, task)
  if task == "STSBenchmark":
    return load_stsb(root)
  if task == "SICKRelatedness":
    return load_sickr(root)
  raise ValueError(f"unknown task {task!r}; choose from {STS_TASKS}")


def load_dev_sets(root: str | None = None, *, sickr: bool = True) -> dict[str, PairSet]:
  """The dev sets scored during training: STS-B dev (``stsb_dev``) and, if ``sickr``, SICK-R dev (``sickr_dev``).

  Their files are looked up by ``data.data_file``: under ``root`` (None: ``$JAXCSE_DATA_DIR``), else in the
  data shipped with jaxcse, which holds both.
  """
  sets = {"stsb_dev": _load_tsv_pairs(data_lib.data_file(STSB_DEV_FILE, root), skip_header=False, cols=STSB_COLUMNS)}
  if sickr:
    sets["sickr_dev"] = _load_tsv_pairs(data_lib.data_file(SICKR_DEV_FILE, root), skip_header=True, cols=SICKR_COLUMNS)
  return sets
