r"""The paper_ablations study's tables and plots, from its results and run records (no recomputation).

  python experiments/paper_ablations/summarize.py --out experiments/paper_ablations

Reads, under ``--out`` (run_study.sh's OUT): ``results/<group>/<run>.json`` (``jaxcse.evaluate --tasks
sts,align_uniform`` after training) and ``runs/<group>/<run>/`` (``metrics.jsonl``, ``summary.json``,
``config.json``), where a run is named ``<row>-lr<lr>-seed<seed>``. Writes ``tables.md`` (and prints it) and
``plots/*.png``:

* the learning-rate grid (one seed), and the main comparison: each method at its own best rate (the grid's
  seed 1 and the main stage's seeds);
* one table per experiment (SimCSE's dropout and augmentation tables, MixCSE's and DCLR's ablations): the
  paper's numbers with their source beside ours (mean ± std over seeds of the STS average of the seven test sets,
  the primary metric, and of STS-B dev at the kept checkpoint, secondary), each row's paired difference from its
  table's baseline in STS avg with its Holm-corrected p (``paired_tests.md`` has both metrics in full), the
  untrained encoder's row, and Kendall's tau between the paper's and our ordering of the rows that have both (on
  the paper's metric: STS-B dev for SimCSE's tables, STS avg for MixCSE's and DCLR's), only over 5 rows or more;
* plots: SimCSE's Fig. 2 (alignment-uniformity trajectories of SimCSE, no dropout, fixed 0.1 and delete one
  word), DCLR's Fig. 4 (uniformity during training, DCLR vs SimCSE), MixCSE's Fig. 4a (positive, negative and
  mixed scores, divided by the temperature as the paper plots them, of the main MixCSE run).

A study in progress gives the tables of what has run; what is missing is said in the output.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import json
import os
import re
import sys
import warnings

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # The repository, for jaxcse.plot.

from jaxcse import plot  # noqa: E402

# The untrained encoder's scores (jaxcse.evaluate of the raw encoder, avg pooler): the floor under every table.
UNTRAINED = os.path.join(HERE, "..", "positive_control", "results", "untrained-encoder.json")
MIN_TAU_ROWS = 5  # Kendall's tau over fewer rows orders too little to quote (its smallest p is 0.083 at 4 rows).
# Each ablation table's baseline row (the method as published): the row the others change one thing of.
BASELINES = {
  "dropout": "p0.1",
  "augment": "p0.1",
  "mixcse": "lam0.2",
  "dclr": "full",
  "dropout_per_element": "p0.1",
  "augment_per_element": "p0.1",
}
TOST_MARGIN = 0.5  # STS points: the equivalence margin of ../positive_control/tost.py.
MASK_STAGE_SEEDS = (1, 2, 3)  # The mask stage's pre-registered seeds; the faithful stage adds more to its group.
LAST_STEP = "-last"  # results/horizon/<run>-last.json: STS at the run's last step (the kept checkpoint: <run>.json).
UNTRAINED_NAME = "untrained"  # results/<group>/untrained.json: a stage's starting encoder, not a run (regime_minilm).
# The official SimCSE code trained on jaxcse's sentences in jaxcse's batch order (positive_control's data-subset
# control): the reference for the mask stage's SimCSE row.
OFFICIAL_ON_JAXCSE_BATCHES = os.path.join(HERE, "..", "positive_control", "results", "official_jaxdata-seed{}.json")
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}  # Student's t quantiles for the 95% intervals of n - 1 df.
RUN_NAME = re.compile(r"^(?P<row>.+?)-lr(?P<lr>.+)-seed(?P<seed>\d+)$")  # lr may hold "-" (3e-4).
METHODS = ("simcse", "mixcse", "dclr")
CLIPPED_DCLR = "dclr, clipped as SimCSE"  # DCLR with max_grad_norm / 128 (run_study.sh main_clip): not in the paper.


@dataclasses.dataclass(frozen=True)
class Row:
  """One row of a paper's table: where our runs are, and the paper's number(s)."""

  label: str
  switch: str  # The config fields that make it (on top of the method's config).
  group: str  # Our runs: OUT/results/<group>/<row>-lr*-seed*.json.
  row: str
  paper: float | None  # The paper's published number (None: not in it, or not verified here).
  paper_v1: float | None = None  # SimCSE's arXiv v1 (April 2021), where its numbers differ.


@dataclasses.dataclass(frozen=True)
class Experiment:
  title: str
  source: str  # Where the paper's numbers are.
  metric: str  # "stsb_dev" or "sts_avg": what the paper reports, and what Kendall's tau compares.
  rows: tuple[Row, ...]
  note: str = ""


SIMCSE = "Gao, Yao and Chen, SimCSE, EMNLP 2021 (arXiv 2104.08821 v4)"
SIMCSE_V1 = "arXiv v1 (April 2021), as reproduced in ../shared/seeds/simcse_slides_ko.md"
EXPERIMENTS = {
  "dropout": Experiment(
    "SimCSE: dropout as augmentation",
    f"{SIMCSE}, Table 3 (STS-B dev Spearman, BERT-base); v1: {SIMCSE_V1}, Table 4 (its 0.05 column is not "
    "in that copy)",
    "stsb_dev",
    (
      Row("p = 0.0 (no dropout)", "model.dropout=0.0", "dropout", "p0.0", 71.1, 64.9),
      Row("p = 0.01", "model.dropout=0.01", "dropout", "p0.01", 72.6, 69.5),
      Row("p = 0.05", "model.dropout=0.05", "dropout", "p0.05", 81.1, None),
      Row("p = 0.1 (SimCSE)", "model.dropout=0.1", "dropout", "p0.1", 82.5, 79.1),
      Row("p = 0.15", "model.dropout=0.15", "dropout", "p0.15", 81.4, 78.6),
      Row("p = 0.2", "model.dropout=0.2", "dropout", "p0.2", 80.5, 78.2),
      Row("p = 0.5", "model.dropout=0.5", "dropout", "p0.5", 71.0, 67.4),
      Row("fixed 0.1", "augment.same_dropout_mask=True", "dropout", "fixed0.1", 43.6, 45.2),
    ),
  ),
  "augment": Experiment(
    "SimCSE: discrete augmentations of the second view",
    f"{SIMCSE}, Table 1 (STS-B dev Spearman, BERT-base); v1: {SIMCSE_V1}, Table 2",
    "stsb_dev",
    (
      Row("None (SimCSE, dropout 0.1)", "", "dropout", "p0.1", 82.5, 79.1),
      Row("crop 10%", "augment.crop=0.1", "augment", "crop10", 77.8, 75.4),
      Row("crop 20%", "augment.crop=0.2", "augment", "crop20", 71.4, 70.1),
      Row("crop 30%", "augment.crop=0.3", "augment", "crop30", 63.6, 63.7),
      Row("word deletion 10%", "augment.word_deletion=0.1", "augment", "word_deletion10", 75.9, 74.7),
      Row("word deletion 20%", "augment.word_deletion=0.2", "augment", "word_deletion20", 72.2, 71.2),
      Row("word deletion 30%", "augment.word_deletion=0.3", "augment", "word_deletion30", 68.2, 70.2),
      Row("delete one word", "augment.delete_one_word=True", "augment", "delete_one_word", 75.9, 74.8),
      Row(
        "delete one word, w/o dropout",
        "augment.delete_one_word=True model.dropout=0.0",
        "augment",
        "delete_one_word_no_dropout",
        74.2,
        71.4,
      ),
      Row("MLM 15%", "augment.mlm=0.15", "augment", "mlm15", 62.2, 66.8),
      Row("crop 10% + MLM 15%", "augment.crop=0.1 augment.mlm=0.15", "augment", "crop10_mlm15", None, 70.8),
    ),
    note="The published table's synonym replacement row (77.4, nlpaug with WordNet) is not run: no WordNet "
    "offline here. Its MLM replacement uses BERT-base, the starting model; ours the starting encoder's "
    "own MLM head.",
  ),
  "mixcse": Experiment(
    "MixCSE: ablations and the mixing weight",
    "Zhang et al., MixCSE, AAAI 2022, Table 3 (STS avg of the seven test sets, BERT-base, mean of 5 runs; "
    "../shared/seeds/mixcse_paper.md); the paper gives no numbers for other lambdas (it trains with 0.2)",
    "sts_avg",
    (
      Row("MixCSE (lambda 0.2)", "mixcse.mix_lambda=0.2", "mixcse", "lam0.2", 77.66),
      Row("MixCSE_single", "mixcse.symmetric=False", "mixcse", "single", 76.43),
      Row("MixCSE w/o stop-gradient", "mixcse.stop_gradient=False", "mixcse", "no_stop_gradient", 75.74),
      Row("lambda 0.1", "mixcse.mix_lambda=0.1", "mixcse", "lam0.1", None),
      Row("lambda 0.3", "mixcse.mix_lambda=0.3", "mixcse", "lam0.3", None),
      Row("lambda 0.5", "mixcse.mix_lambda=0.5", "mixcse", "lam0.5", None),
    ),
  ),
  "dclr": Experiment(
    "DCLR: ablation and variation study",
    "Zhou et al., DCLR, ACL 2022: the full method's 77.22 is its Table 1 (STS avg, BERT-base); its Table 2 "
    "(the ablations, STS avg) is an image in every copy readable here, so those numbers are not filled in. "
    "Its text: removing either component lowers the average, removing instance weighting more; random "
    "noise and self instance weighting are below the full method",
    "sts_avg",
    (
      Row("DCLR", "", "dclr", "full", 77.22),
      Row("w/o instance weighting", "dclr.instance_weighting=none", "dclr", "no_instance_weighting", None),
      Row("w/o noise-based negatives", "dclr.noise_negatives=none", "dclr", "no_noise_negatives", None),
      Row("random noise (no gradient ascent)", "dclr.noise_negatives=random", "dclr", "random_noise", None),
      Row("self instance weighting", "dclr.instance_weighting=self", "dclr", "self_instance_weighting", None),
      Row("instance weighting at phi 0.37 (not in the paper)", "dclr.phi=0.37", "dclr", "phi0.37", None),
    ),
    note="Knowledge distillation, the paper's other variant, is not a switch of jaxcse.",
  ),
}
# The papers' main results (STS avg of the seven test sets, BERT-base): reference.md, section 3.
PAPER_MAIN = {
  "simcse": (76.25, "SimCSE, EMNLP 2021, Table 5"),
  "mixcse": (77.66, "MixCSE, AAAI 2022, Table 1"),
  "dclr": (77.22, "DCLR, ACL 2022, Table 1"),
}
# run_study.sh's dynamics stage.
FIG2_RUNS = (
  ("simcse", "unsup. SimCSE"),
  ("no_dropout", "no dropout"),
  ("fixed0.1", "fixed 0.1"),
  ("delete_one_word", "delete one word"),
)


# The dropout and augmentation tables again with the per-element attention-dropout mask (stage faithful, runs in
# group mask): jaxcse's default since issue 50, PyTorch's draw.
PER_ELEMENT = "_per_element"
for _name in ("dropout", "augment"):
  EXPERIMENTS[_name + PER_ELEMENT] = dataclasses.replace(
    EXPERIMENTS[_name],
    title=EXPERIMENTS[_name].title + ", attention-dropout mask per element (jaxcse's default since issue 50)",
    rows=tuple(dataclasses.replace(row, group="mask") for row in EXPERIMENTS[_name].rows),
  )


class StudyError(ValueError):
  """An input of the study cannot be read; the message names the file."""


@dataclasses.dataclass
class Run:
  group: str
  row: str
  lr: str
  seed: int
  sts_avg: float | None  # x100, from the results summary.
  stsb_dev: float | None  # x100: STS-B dev at the kept (best) checkpoint.
  selection: float | None  # x100: the run's own selection metric at that checkpoint (DCLR: STS-B + SICK-R dev).
  alignment: float | None
  uniformity: float | None
  run_dir: str | None


def _load_json(path: str):
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise StudyError(f"{path}: cannot read ({type(e).__name__}: {e})") from None


def _best_eval(run_dir: str) -> dict | None:
  """The evaluation record of the kept checkpoint (summary.json's best_step) in the run's metrics.jsonl."""
  summary_path, metrics_path = os.path.join(run_dir, "summary.json"), os.path.join(run_dir, "metrics.jsonl")
  if not (os.path.exists(summary_path) and os.path.exists(metrics_path)):
    return None
  best_step = _load_json(summary_path).get("best_step")
  if best_step is None:
    return None
  _, evals = plot.read_metrics(metrics_path)
  matches = [r for r in evals if r["step"] == best_step and plot.STSB_DEV in r]
  return matches[-1] if matches else None


def load_runs(out: str) -> list[Run]:
  """Every finished run of the study (a results file), with its run record when copied."""
  runs = []
  for path in sorted(glob.glob(os.path.join(out, "results", "*", "*.json"))):
    group, name = os.path.basename(os.path.dirname(path)), os.path.basename(path)[: -len(".json")]
    match = RUN_NAME.match(name)
    if name.endswith(LAST_STEP) or name == UNTRAINED_NAME:  # Read by horizon_table and regime_table.
      continue
    if match is None:
      print(f"note: {path}: not named <row>-lr<lr>-seed<seed>; left out", file=sys.stderr)
      continue
    summary = _load_json(path).get("summary")
    if not isinstance(summary, dict):
      raise StudyError(f"{path}: no 'summary' object (not a jaxcse.evaluate results file)")
    run_dir = os.path.join(out, "runs", group, name)
    best = _best_eval(run_dir)
    runs.append(
      Run(
        group,
        match["row"],
        match["lr"],
        int(match["seed"]),
        summary.get("Avg"),
        None if best is None else best[plot.STSB_DEV] * 100,
        None if best is None or plot.EVAL_METRIC not in best else best[plot.EVAL_METRIC] * 100,
        summary.get("alignment"),
        summary.get("uniformity"),
        run_dir if os.path.isdir(run_dir) else None,
      )
    )
  return runs


def _values(runs: list[Run], attribute: str) -> list[float]:
  return [getattr(r, attribute) for r in runs if getattr(r, attribute) is not None]


def mean(values: list[float]) -> float | None:
  return float(np.mean(values)) if values else None


def cell(values: list[float], digits: int = 2) -> str:
  """``mean ± std`` (sample std, ddof 1) of the seeds; the value alone for one run; ``–`` for none."""
  if not values:
    return "–"
  if len(values) == 1:
    return f"{values[0]:.{digits}f}"
  return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def number(value: float | None, digits: int = 2) -> str:
  return "–" if value is None else f"{value:.{digits}f}"


def kendall(paper: list[float | None], ours: list[float | None]) -> tuple[float, float, int] | None:
  """Kendall's tau (scipy's tau-b) and its two-sided p-value over the rows that have both; None below 5 rows."""
  pairs = [(p, o) for p, o in zip(paper, ours) if p is not None and o is not None]
  if len(pairs) < MIN_TAU_ROWS:
    return None
  result = stats.kendalltau([p for p, _ in pairs], [o for _, o in pairs])
  return float(result.statistic), float(result.pvalue), len(pairs)


def holm(p_values: list[float]) -> list[float]:
  """Holm's step-down adjusted p values (scipy has Benjamini-Hochberg, not Holm)."""
  order = np.argsort(p_values)
  m, adjusted, running = len(p_values), [0.0] * len(p_values), 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (m - rank) * p_values[i]))  # monotone: never below an earlier adjusted p
    adjusted[i] = running
  return adjusted


@dataclasses.dataclass(frozen=True)
class Paired:
  """One row against its table's baseline, seed by seed (the rows of a table share seeds and data order)."""

  n: int  # seeds both have
  mean: float  # the row's mean over those seeds
  d: float  # mean of (row - baseline) over those seeds
  t: float  # paired t (scipy.stats.ttest_rel); nan when every difference is equal (no variance)
  p: float
  p_holm: float | None = None  # Holm-corrected within the table and metric; None when not tested (t is nan)


def paired_contrasts(name: str, experiment: Experiment, runs: list[Run], key: str) -> dict[str, Paired]:
  """Every row of table NAME but its baseline against the baseline in metric KEY, Holm-corrected over the table.

  Keyed by row name; rows with fewer than 2 seeds shared with the baseline are left out."""
  base_group = next(r.group for r in experiment.rows if r.row == BASELINES[name])
  base = {r.seed: r for r in _row_runs(runs, base_group, BASELINES[name])[0] if getattr(r, key) is not None}
  tested = {}
  for row in experiment.rows:
    if row.row == BASELINES[name] and row.group == base_group:
      continue
    pairs = [
      (getattr(r, key), getattr(base[r.seed], key))
      for r in _row_runs(runs, row.group, row.row)[0]
      if r.seed in base and getattr(r, key) is not None
    ]
    if len(pairs) >= 2:
      a, b = np.array(pairs).T
      with warnings.catch_warnings():  # Equal differences in every seed: scipy warns, and t is inf or nan.
        warnings.simplefilter("ignore", RuntimeWarning)
        t = stats.ttest_rel(a, b)
      tested[row.row] = Paired(
        len(pairs), float(np.mean(a)), float(np.mean(a - b)), float(t.statistic), float(t.pvalue)
      )
  family = [r for r, c in tested.items() if np.isfinite(c.p)]
  for r, p_holm in zip(family, holm([tested[r].p for r in family])):
    tested[r] = dataclasses.replace(tested[r], p_holm=p_holm)
  return tested


def untrained_scores(path: str) -> dict[str, float] | None:
  """The untrained encoder's STS avg and STS-B dev (x100) from its evaluation file; None without the file."""
  if not os.path.exists(path):
    return None
  u = _load_json(path)
  return {"sts_avg": u["summary"]["Avg"], "stsb_dev": u["tasks"]["STSBenchmark"]["dev"]["spearman"] * 100}


def _row_runs(runs: list[Run], group: str, row: str) -> tuple[list[Run], str | None, list[str]]:
  """The runs of one row: those of its learning rate with the most seeds; also that rate and any others seen."""
  by_lr = collections.defaultdict(list)
  for r in runs:
    if r.group == group and r.row == row:
      by_lr[r.lr].append(r)
  if not by_lr:
    return [], None, []
  lr = max(by_lr, key=lambda k: (len(by_lr[k]), k))
  return sorted(by_lr[lr], key=lambda r: r.seed), lr, sorted(set(by_lr) - {lr})


def _paired_cell(contrast: Paired | None, is_baseline: bool) -> str:
  if is_baseline:
    return "baseline"
  if contrast is None:
    return "–"
  if contrast.p_holm is None:
    return f"{contrast.d:+.2f} (equal in every seed)"
  return f"{contrast.d:+.2f} (p Holm {contrast.p_holm:.3f})"


def experiment_table(
  name: str, experiment: Experiment, runs: list[Run], untrained: dict[str, float] | None = None
) -> list[str]:
  has_v1 = any(r.paper_v1 is not None for r in experiment.rows)
  metric = "STS-B dev" if experiment.metric == "stsb_dev" else "STS avg"
  lines = [f"### {experiment.title} (`{name}`)", "", f"Paper: {experiment.source}.", ""]
  paired = paired_contrasts(name, experiment, runs, "sts_avg")
  # A per-element table shows each row's committed shared-mask score beside it: what the faithful mask moved.
  shared = EXPERIMENTS[name.removesuffix(PER_ELEMENT)] if name.endswith(PER_ELEMENT) else None
  header = [
    "row",
    "switch",
    f"paper ({metric})",
    *(["paper v1"] if has_v1 else []),
    "ours: STS avg",
    *(["STS avg, shared mask"] if shared else []),
    f"STS avg: paired d vs {BASELINES[name]}",
    "ours: STS-B dev",
    "alignment",
    "uniformity",
    "seeds",
    "lr",
  ]
  lines += ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
  ours, notes = [], []
  for i, row in enumerate(experiment.rows):
    row_runs, lr, other_lrs = _row_runs(runs, row.group, row.row)
    if other_lrs:
      notes.append(f"{row.label}: runs at other rates ({', '.join(other_lrs)}) left out; lr {lr} has the most seeds")
    dev, avg = _values(row_runs, "stsb_dev"), _values(row_runs, "sts_avg")
    ours.append(mean(dev if experiment.metric == "stsb_dev" else avg))
    lines.append(
      "| "
      + " | ".join(
        [
          row.label,
          f"`{row.switch}`" if row.switch else "",
          number(row.paper, 2 if name in ("mixcse", "dclr") else 1),
          *([number(row.paper_v1, 1)] if has_v1 else []),
          cell(avg),
          *([cell(_values(_row_runs(runs, shared.rows[i].group, row.row)[0], "sts_avg"))] if shared else []),
          _paired_cell(paired.get(row.row), row.row == BASELINES[name]),
          cell(dev),
          number(mean(_values(row_runs, "alignment")), 3),
          number(mean(_values(row_runs, "uniformity")), 3),
          str(len(row_runs)),
          lr or "–",
        ]
      )
      + " |"
    )
  if untrained is not None:
    lines.append(
      "| "
      + " | ".join(
        [
          "untrained encoder (no training)",
          "",
          "",
          *([""] if has_v1 else []),
          number(untrained["sts_avg"]),
          *([""] if shared else []),
          "",
          number(untrained["stsb_dev"]),
          "–",
          "–",
          "–",
          "–",
        ]
      )
      + " |"
    )
  lines.append("")
  for label, papers in (
    ("published", [r.paper for r in experiment.rows]),
    *((("v1", [r.paper_v1 for r in experiment.rows]),) if has_v1 else ()),
  ):
    tau = kendall(papers, ours)
    if tau is None:
      lines.append(
        f"Kendall's tau ({label} paper vs ours, {metric}): not given (fewer than {MIN_TAU_ROWS} rows "
        "with both numbers)."
      )
    else:
      lines.append(f"Kendall's tau ({label} paper vs ours, {metric}): {tau[0]:+.3f} (p = {tau[1]:.3g}, {tau[2]} rows).")
  if name.startswith("augment"):
    base_group = next(r.group for r in experiment.rows if r.row == BASELINES[name])
    sign_group = next(r.group for r in experiment.rows if r.row == SIGN_ROWS[0])
    lines += ["", pooled_sign_line(runs, sign_group, base_group)]
  if experiment.note:
    lines += ["", experiment.note]
  for note in notes:
    lines += ["", f"Note: {note}."]
  return lines + [""]


# The augmentation table's rows that the paper finds below None (crop and word deletion), and the seeds every row
# of the tables has: the sign question pooled over them (README, Results).
SIGN_ROWS = ("crop10", "crop20", "crop30", "word_deletion10", "word_deletion20", "word_deletion30", "delete_one_word")
TABLE_SEEDS = (1, 2, 3)


def pooled_sign(runs: list[Run], group: str, base_group: str, base_row: str = "p0.1") -> dict | None:
  """The crop and deletion rows against None, paired by seed over TABLE_SEEDS, pooled over the rows.

  Returns None until every row has every seed; else ``gains`` [rows, seeds], how many are above zero, and the
  one-sample t over the seeds of the per-seed mean gain over the rows (n = 3: the seeds are the replicates, the
  rows are not independent of each other)."""
  base = _by_seed(runs, base_group, base_row)
  gains = []
  for row in SIGN_ROWS:
    ours = _by_seed(runs, group, row)
    if not all(s in ours and s in base for s in TABLE_SEEDS):
      return None
    gains.append([ours[s] - base[s] for s in TABLE_SEEDS])
  gains = np.array(gains)
  t = stats.ttest_1samp(gains.mean(axis=0), 0.0)
  return {"gains": gains, "above": int((gains > 0).sum()), "t": float(t.statistic), "p": float(t.pvalue)}


def sign_verdict(result: dict | None) -> str:
  """The reading of the pooled sign question fixed before the faithful tables were complete (README, Stages)."""
  if result is None:
    return "no decision: not every row has seeds " + ", ".join(map(str, TABLE_SEEDS))
  if result["p"] < 0.05:
    return "the reversal holds (crop and deletion gain)" if result["t"] > 0 else "the paper's direction (they lose)"
  return "not decided"


def order_verdict(tau: tuple[float, float, int] | None) -> str:
  """A table's order against the paper's, by the rule fixed before the faithful tables were complete (README)."""
  return "the paper's order" if tau is not None and tau[0] > 0 and tau[1] < 0.05 else "not the paper's order"


def pooled_sign_line(runs: list[Run], group: str, base_group: str) -> str:
  result = pooled_sign(runs, group, base_group)
  rows = len(SIGN_ROWS)
  if result is None:
    return (
      f"The {rows} crop and deletion rows pooled: not yet (every row needs seeds {', '.join(map(str, TABLE_SEEDS))})."
    )
  g = result["gains"]
  return (
    f"The {rows} crop and deletion rows against None, seeds {', '.join(map(str, TABLE_SEEDS))}: above None in "
    f"{result['above']} of {g.size} row-seeds (paired gains {g.min():+.2f} to {g.max():+.2f}); pooled, the per-seed "
    f"mean gain over the {rows} rows ({_per_seed(dict(zip(TABLE_SEEDS, g.mean(axis=0))))}) has one-sample t "
    f"{result['t']:.2f}, p {result['p']:.3f} (n = {len(TABLE_SEEDS)}): {sign_verdict(result)}."
  )


def _best_rate(runs: list[Run], group: str, method: str) -> str | None:
  """GROUP's seed-1 rate of METHOD with the best selection metric, as run_study.sh's best_lr chooses it."""
  grid = [r for r in runs if r.group == group and r.row == method and r.seed == 1 and r.selection is not None]
  return max(grid, key=lambda r: r.selection).lr if grid else None


def best_lrs(runs: list[Run]) -> dict[str, str]:
  """Each method's grid rate (seed 1), and CLIPPED_DCLR's: DCLR clipped as SimCSE (main_clip's own grid)."""
  best = {method: _best_rate(runs, "lr_grid", method) for method in METHODS}
  best[CLIPPED_DCLR] = _best_rate(runs, "main_clip", "dclr")
  return {method: lr for method, lr in best.items() if lr is not None}


def lr_grid_table(runs: list[Run], best: dict[str, str]) -> list[str]:
  lines = [
    "### Learning-rate grid (seed 1)",
    "",
    "| method | lr | selection metric at the kept checkpoint | STS-B dev | STS avg | best rate |",
    "|---|---:|---:|---:|---:|:---:|",
  ]
  grid = [(r.row, r) for r in runs if r.group == "lr_grid"]
  grid += [(CLIPPED_DCLR, r) for r in runs if r.group == "main_clip" and r.row == "dclr" and r.seed == 1]
  for method, r in sorted(grid, key=lambda item: (item[0], float(item[1].lr), item[1].seed)):
    lines.append(
      f"| {method} | {r.lr} | {number(r.selection)} | {number(r.stsb_dev)} | {number(r.sts_avg)} | "
      f"{'yes' if best.get(method) == r.lr else ''} |"
    )
  if not grid:
    lines.append("| (no lr_grid runs yet) | | | | | |")
  return lines + [
    "",
    "Selection metric: STS-B dev (SimCSE, MixCSE), mean of STS-B and SICK-R dev (DCLR), x100. "
    f"{CLIPPED_DCLR}: DCLR with max_grad_norm / 128 (not in the paper; run_study.sh main_clip).",
    "",
  ]


def main_table(runs: list[Run], best: dict[str, str], untrained: dict[str, float] | None = None) -> list[str]:
  lines = [
    "### Main comparison: each method at its own best rate",
    "",
    "| method | lr | seeds | STS-B dev | STS avg | paper STS avg (BERT-base) |",
    "|---|---:|---:|---:|---:|---:|",
  ]
  ours = []
  for method in METHODS:
    lr = best.get(method)
    seeds = (
      sorted(
        (r for r in runs if r.row == method and r.lr == lr and r.group in ("lr_grid", "main")), key=lambda r: r.seed
      )
      if lr
      else []
    )
    avg = _values(seeds, "sts_avg")
    ours.append(mean(avg))
    paper, source = PAPER_MAIN[method]
    lines.append(
      f"| {method} | {lr or '–'} | {len(seeds)} | {cell(_values(seeds, 'stsb_dev'))} | {cell(avg)} | "
      f"{paper:.2f} ({source}) |"
    )
  lr = best.get(CLIPPED_DCLR)
  clipped = sorted((r for r in runs if r.group == "main_clip" and r.row == "dclr" and r.lr == lr), key=lambda r: r.seed)
  if clipped:  # Not in the paper, not in tau: DCLR with its loss clipped as SimCSE's is, at its own best rate.
    lines.append(
      f"| {CLIPPED_DCLR} (max_grad_norm / 128) | {lr} | {len(clipped)} | "
      f"{cell(_values(clipped, 'stsb_dev'))} | {cell(_values(clipped, 'sts_avg'))} | – |"
    )
  if untrained is not None:
    lines.append(
      f"| untrained encoder (no training) | – | – | {number(untrained['stsb_dev'])} | "
      f"{number(untrained['sts_avg'])} | – |"
    )
  tau = kendall([PAPER_MAIN[m][0] for m in METHODS], ours)
  lines.append("")
  lines.append(
    "Kendall's tau (paper vs ours, STS avg): "
    + (
      f"not given (fewer than {MIN_TAU_ROWS} methods)."
      if tau is None
      else f"{tau[0]:+.3f} (p = {tau[1]:.3g}, {tau[2]} rows)."
    )
  )
  return lines + [""]


# --------------------------------------------------------------------------
# The regime and implementation tests of issue 38 (horizon, mask): their pre-registered rules, computed.


def _by_seed(runs: list[Run], group: str, row: str, key: str = "sts_avg") -> dict[int, float]:
  return {r.seed: getattr(r, key) for r in _row_runs(runs, group, row)[0] if getattr(r, key) is not None}


def _gains(rows: dict[int, float], base: dict[int, float]) -> dict[int, float]:
  return {seed: rows[seed] - base[seed] for seed in sorted(rows) if seed in base}


def _interval(values: list[float]) -> str:
  if len(values) < 2:
    return "–"
  half = T_975[len(values) - 1] * np.std(values, ddof=1) / np.sqrt(len(values))
  return f"[{np.mean(values) - half:+.2f}, {np.mean(values) + half:+.2f}]"


def _per_seed(values: dict[int, float]) -> str:
  return ", ".join(f"{v:+.2f}" for _, v in sorted(values.items())) or "–"


def reversal_verdict(gains: dict[int, float], *, extra_condition: bool = True, seeds_needed: int = 3) -> str:
  """The pre-registered reading of crop 10%'s paired gains (README: the horizon and mask stages' rules)."""
  if len(gains) < seeds_needed:
    return f"no decision: {len(gains)} of {seeds_needed} seeds finished"
  values = list(gains.values())
  if np.mean(values) <= 0.5 and extra_condition:
    return "gain gone (mean paired gain <= +0.5)"
  if all(v >= 2.0 for v in values):
    return "gain kept (>= +2.0 in every seed)"
  return "undecided (between the two)"


def _last_step_avg(out: str, group: str, row: str, lr: str, seeds: list[int]) -> dict[int, float]:
  found = {}
  for seed in seeds:
    path = os.path.join(out, "results", group, f"{row}-lr{lr}-seed{seed}{LAST_STEP}.json")
    if os.path.exists(path):
      found[seed] = _load_json(path)["summary"]["Avg"]
  return found


def horizon_table(out: str, runs: list[Run], untrained: dict[str, float] | None = None) -> list[str]:
  """Stage horizon: None, crop 10% and crop 30% at 1,500 steps; the pre-registered rule on crop 10%'s gain."""
  if not any(r.group == "horizon" for r in runs):
    return []
  lines = [
    "### The longer horizon (`horizon`: 1,500 steps; rule pre-registered in README.md)",
    "",
    "| row | seeds | STS avg (kept checkpoint) | STS avg (last step) | STS-B dev (kept) | kept step | "
    "paired gain over None (kept), per seed | the same at 250 steps |",
    "|---|---:|---:|---:|---:|---|---|---|",
  ]
  base = _by_seed(runs, "horizon", "none")
  gains = {}
  for row, label, short in (
    ("none", "None (dropout 0.1)", "p0.1"),
    ("crop10", "crop 10%", "crop10"),
    ("crop30", "crop 30%", "crop30"),
  ):
    row_runs, lr, _ = _row_runs(runs, "horizon", row)
    kept = _by_seed(runs, "horizon", row)
    last = _last_step_avg(out, "horizon", row, lr, sorted(kept)) if lr else {}
    steps = []
    for r in row_runs:
      summary = os.path.join(r.run_dir or "", "summary.json")
      steps.append(str(_load_json(summary).get("best_step")) if r.run_dir and os.path.exists(summary) else "?")
    gains[row] = _gains(kept, base)
    short_gains = _gains(
      _by_seed(runs, "augment" if row != "none" else "dropout", short), _by_seed(runs, "dropout", "p0.1")
    )
    short_gains = {seed: v for seed, v in short_gains.items() if seed in kept}
    lines.append(
      f"| {label} | {len(row_runs)} | {cell(list(kept.values()))} | {cell(list(last.values()))} | "
      f"{cell(_values(row_runs, 'stsb_dev'))} | {', '.join(steps) or '–'} | "
      f"{'–' if row == 'none' else _per_seed(gains[row])} | "
      f"{'–' if row == 'none' else _per_seed(short_gains)} |"
    )
  if untrained is not None:
    lines.append(
      f"| untrained encoder (no training) | – | {number(untrained['sts_avg'])} | – | "
      f"{number(untrained['stsb_dev'])} | – | – | – |"
    )
  crop10, crop30 = gains["crop10"], gains["crop30"]
  both = sorted(set(crop10) & set(crop30))
  crop30_below = bool(both) and np.mean([crop30[s] for s in both]) < np.mean([crop10[s] for s in both])
  lines += [
    "",
    f"Crop 10%'s paired gain: mean {number(mean(list(crop10.values())))}, 95% interval "
    f"{_interval(list(crop10.values()))} over {len(crop10)} seed{'' if len(crop10) == 1 else 's'}; crop 30% below crop 10%: "
    f"{'yes' if crop30_below else 'no'}.",
    "Verdict by the pre-registered rule: " + horizon_verdict(crop10, crop30, crop30_below) + ".",
    "",
  ]
  return lines


def horizon_verdict(crop10: dict[int, float], crop30: dict[int, float], crop30_below: bool) -> str:
  """reversal_verdict in the horizon rule's words; "the horizon" also needs crop 30% on the same 3 seeds."""
  verdict = reversal_verdict(crop10, extra_condition=crop30_below)
  missing = sorted(set(crop10) - set(crop30))
  if len(crop10) >= 3 and np.mean(list(crop10.values())) <= 0.5 and missing:
    return (
      f"no decision: crop 10%'s condition for the horizon is met (mean paired gain <= +0.5), crop 30%'s is "
      f"untested (seed(s) {', '.join(map(str, missing))} not run)"
    )
  return verdict.replace("gain gone", "the horizon").replace("gain kept", "not the horizon")


def mask_table(
  runs: list[Run], official_path: str = OFFICIAL_ON_JAXCSE_BATCHES, untrained: dict[str, float] | None = None
) -> list[str]:
  """Stage mask: None and crop 10% with per-element attention-dropout masks; the pre-registered readings."""
  if not any(r.group == "mask" for r in runs):
    return []
  shared_none, shared_crop = _by_seed(runs, "dropout", "p0.1"), _by_seed(runs, "augment", "crop10")
  mask_none, mask_crop = (
    {s: v for s, v in _by_seed(runs, "mask", row).items() if s in MASK_STAGE_SEEDS} for row in ("p0.1", "crop10")
  )
  lines = [
    "### The attention-dropout mask (`mask`: per element, as PyTorch; rule pre-registered in README.md)",
    "",
    f"Seeds {', '.join(map(str, MASK_STAGE_SEEDS))}, as pre-registered (the faithful tables above use every seed).",
    "",
    "| row | seeds | STS avg, per-element mask | STS avg, shared mask (committed) | paired d (per element - "
    "shared), per seed | STS-B dev, per-element mask |",
    "|---|---:|---:|---:|---|---:|",
  ]
  for row, label, mine, theirs in (
    ("p0.1", "None (dropout 0.1)", mask_none, shared_none),
    ("crop10", "crop 10%", mask_crop, shared_crop),
  ):
    d = _gains(mine, theirs)
    lines.append(
      f"| {label} | {len(mine)} | {cell(list(mine.values()))} | "
      f"{cell([theirs[s] for s in mine if s in theirs])} | {_per_seed(d)} | "
      f"{cell([r.stsb_dev for r in _row_runs(runs, 'mask', row)[0] if r.seed in MASK_STAGE_SEEDS and r.stsb_dev is not None])} |"
    )
  if untrained is not None:
    lines.append(
      f"| untrained encoder (no training) | – | {number(untrained['sts_avg'])} | – | – | "
      f"{number(untrained['stsb_dev'])} |"
    )
  d_none = list(_gains(mask_none, shared_none).values())
  paired = "–"
  if len(d_none) >= 2:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      t = stats.ttest_rel(
        [mask_none[s] for s in sorted(mask_none) if s in shared_none],
        [shared_none[s] for s in sorted(mask_none) if s in shared_none],
      )
    paired = f"t {t.statistic:.2f}, p {t.pvalue:.3f}"
  official = [
    _load_json(official_path.format(seed))["summary"]["Avg"]
    for seed in (1, 2, 3)
    if os.path.exists(official_path.format(seed))
  ]
  lines += ["", f"The mask and SimCSE: d = {number(mean(d_none))} ({paired}, n = {len(d_none)})."]
  if len(official) >= 2 and len(mask_none) >= 2:
    d = np.mean(list(mask_none.values())) - np.mean(official)
    pooled = np.sqrt((np.var(list(mask_none.values()), ddof=1) + np.var(official, ddof=1)) / 2)
    lines.append(
      f"Against the official code on jaxcse's batches ({cell(official)}): d = {d:+.2f}, pooled SD "
      f"{pooled:.2f}: {'equivalent' if abs(d) <= pooled else 'not equivalent'} (|d| <= pooled SD)."
    )
  gains, shared_gains = _gains(mask_crop, mask_none), _gains(shared_crop, shared_none)
  lines += [
    f"Crop 10%'s paired gain with the per-element mask: {_per_seed(gains)} (mean "
    f"{number(mean(list(gains.values())))}, 95% interval {_interval(list(gains.values()))}); with the "
    f"shared mask, the same seeds: {_per_seed({s: shared_gains[s] for s in gains if s in shared_gains})}.",
    "Verdict by the pre-registered rule: "
    + reversal_verdict(gains)
    .replace("gain gone", "the mask explains it")
    .replace("gain kept", "not the mask")
    .replace("undecided (between the two)", "in part")
    + ".",
    "",
  ]
  return lines


def _tost_line(label: str, diffs: dict[int, float]) -> str:
  """A paired difference with its t and its TOST at +-0.5 STS points (../positive_control/tost.py)."""
  if len(diffs) < 2:
    return f"{label}: {_per_seed(diffs)} (too few seeds for a test)."
  import importlib.util

  spec = importlib.util.spec_from_file_location("tost", os.path.join(HERE, "..", "positive_control", "tost.py"))
  tost = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(tost)
  values = np.array([diffs[s] for s in sorted(diffs)])
  result = tost.paired_tost(values, TOST_MARGIN)
  low, high = result["ci90"]
  return (
    f"{label}: {_per_seed(diffs)} (mean {values.mean():+.2f}, paired t p {result['p_diff']:.3f}; TOST at "
    f"±{TOST_MARGIN}: 90% CI [{low:+.2f}, {high:+.2f}], p {result['p_tost']:.3f}, {result['verdict']})."
  )


def minilm_regime_verdict(g_crop: dict[int, float], g_wd: dict[int, float]) -> str:
  """The regime test (b)'s pre-registered rule on its per-seed gains over None (README: "The regime, put to a test")."""
  finished = [*g_crop.values(), *g_wd.values()]
  if min(len(g_crop), len(g_wd)) < 3:
    verdict = f"no decision: {min(len(g_crop), len(g_wd))} of 3 paired seeds finished for both rows"
    # Each decisive outcome needs every gain on its side: one finished gain on the wrong side rules it out for
    # good, whatever the seeds still to run give.
    if any(v < 0.5 for v in finished) and any(v > -0.5 for v in finished):
      verdict += (
        "; the rule can no longer decide (a finished gain below +0.5 rules out 'against', one above -0.5 "
        "rules out 'for'): 'not decided' whatever the remaining seeds give"
      )
  elif all(v >= 0.5 for v in finished):
    verdict = "against the regime explanation (both gains >= +0.5 in every seed)"
  elif all(v <= -0.5 for v in finished):
    verdict = "for the regime explanation (both gains <= -0.5 in every seed)"
  else:
    verdict = "not decided"
  return verdict


def regime_table(runs: list[Run]) -> list[str]:
  """Issue 50's regime tests (README: "The regime, put to a test"), by their pre-registered rules."""
  lines = []
  none = _by_seed(runs, "mask", "p0.1")
  before = _by_seed(runs, "regime_crop", "crop10_before")
  if before:
    gains = _gains(before, none)
    after = _by_seed(runs, "mask", "crop10")
    values = list(gains.values())
    if len(gains) < 3:
      verdict = f"no decision: {len(gains)} of 3 seeds finished"
    elif np.mean(values) <= 0:
      verdict = "the crop's semantics explain the reversal (mean gain <= 0)"
    elif all(v >= 1.0 for v in values):
      verdict = "not the crop's semantics (gain >= +1.0 in every seed)"
    else:
      verdict = "in part (between the two)"
    lines += [
      "### The regime (a): crop before truncation (`regime_crop`; rule pre-registered in README.md)",
      "",
      "| row | seeds | STS avg | STS-B dev |",
      "|---|---:|---:|---:|",
    ]
    for group, row, label in (
      ("mask", "p0.1", "None (dropout 0.1)"),
      ("mask", "crop10", "crop 10% of the truncated rows (the tables')"),
      ("regime_crop", "crop10_before", "crop 10% of the whole sentence, then truncation"),
    ):
      row_runs = [r for r in _row_runs(runs, group, row)[0] if r.seed in before]
      lines.append(
        f"| {label} | {len(row_runs)} | {cell(_values(row_runs, 'sts_avg'))} | {cell(_values(row_runs, 'stsb_dev'))} |"
      )
    lines += [
      "",
      _tost_line("Gain of crop-before-truncation over None, per seed", gains),
      _tost_line("Crop before minus crop after truncation, per seed", _gains(before, after)),
      f"Verdict by the pre-registered rule: {verdict}.",
      "",
    ]
  minilm = {row: _by_seed(runs, "regime_minilm", row) for row in ("none", "crop10", "word_deletion10")}
  if any(minilm.values()):
    g_crop, g_wd = _gains(minilm["crop10"], minilm["none"]), _gains(minilm["word_deletion10"], minilm["none"])
    verdict = minilm_regime_verdict(g_crop, g_wd)
    untrained = os.path.join(HERE, "results", "regime_minilm", f"{UNTRAINED_NAME}.json")
    lines += [
      "### The regime (b): all-MiniLM-L6-v2 at the paper's rate (`regime_minilm`; rule pre-registered in README.md)",
      "",
      "| row | seeds | STS avg | STS-B dev |",
      "|---|---:|---:|---:|",
    ]
    for row, label in (
      ("none", "None (dropout 0.1)"),
      ("crop10", "crop 10%"),
      ("word_deletion10", "word deletion 10%"),
    ):
      row_runs = _row_runs(runs, "regime_minilm", row)[0]
      lines.append(
        f"| {label} | {len(row_runs)} | {cell(_values(row_runs, 'sts_avg'))} | {cell(_values(row_runs, 'stsb_dev'))} |"
      )
    if os.path.exists(untrained):
      u = untrained_scores(untrained)
      lines.append(f"| untrained all-MiniLM-L6-v2 | – | {number(u['sts_avg'])} | {number(u['stsb_dev'])} |")
    lines += [
      "",
      _tost_line("Crop 10% minus None, per seed", g_crop),
      _tost_line("Word deletion 10% minus None, per seed", g_wd),
      f"Verdict by the pre-registered rule: {verdict}.",
      "",
    ]
  return lines


# --------------------------------------------------------------------------
# Plots.


def _figure(**kwargs):
  from matplotlib.figure import Figure

  return Figure(**kwargs)


def _dynamics_dir(out: str, row: str) -> str | None:
  found = sorted(glob.glob(os.path.join(out, "runs", "dynamics", f"{row}-lr*-seed1")))
  return found[-1] if found and os.path.exists(os.path.join(found[-1], "metrics.jsonl")) else None


def plot_fig2(out: str, plots: str) -> str | None:
  """SimCSE's Fig. 2: alignment against uniformity (STS-B dev) over training, one colour per dynamics run,
  arrows in the direction of training, the start (before training) ringed."""
  curves = []
  for row, label in FIG2_RUNS:
    d = _dynamics_dir(out, row)
    if d is None:
      continue
    _, evals = plot.read_metrics(os.path.join(d, "metrics.jsonl"))
    rows = [r for r in evals if plot.UNIFORMITY in r and plot.ALIGNMENT in r]
    if rows:
      # The last evaluation's STS-B dev: the kept checkpoint of these runs may be step 0 (they evaluate at start).
      last = (
        f" (STS-B dev at step {rows[-1]['step']}: {rows[-1][plot.STSB_DEV] * 100:.1f})"
        if plot.STSB_DEV in rows[-1]
        else ""
      )
      curves.append((label + last, [(r[plot.UNIFORMITY], r[plot.ALIGNMENT]) for r in rows]))
  if not curves:
    return None
  fig = _figure(figsize=(6.8, 5.2))
  ax = fig.subplots()
  for i, (label, points) in enumerate(curves):
    colour = f"C{i}"
    xs, ys = [x for x, _ in points], [y for _, y in points]
    ax.plot(xs, ys, color=colour, marker=".", label=label)
    ax.plot(xs[:1], ys[:1], color=colour, marker="o", markersize=10, markerfacecolor="none")
    for j in range(len(points) - 1):
      if points[j] != points[j + 1]:
        ax.annotate("", xy=points[j + 1], xytext=points[j], arrowprops=dict(arrowstyle="->", color=colour, lw=1))
  ax.set_xlabel("uniformity, STS-B dev (lower is better)")
  ax.set_ylabel("alignment, STS-B dev (lower is better)")
  ax.set_title("alignment-uniformity during training (SimCSE's Fig. 2); o = start")
  ax.grid(alpha=0.3)
  ax.legend(fontsize="small")
  fig.tight_layout()
  path = os.path.join(plots, "simcse_fig2_align_uniform.png")
  fig.savefig(path, dpi=110)
  return path


def plot_uniformity(out: str, plots: str) -> str | None:
  """DCLR's Fig. 4: uniformity of the STS-B dev embeddings during training, DCLR against SimCSE (and DCLR with
  its loss on SimCSE's scale, or only its Adam epsilon scaled, if run)."""
  curves = []
  for row, label in (
    ("simcse", "SimCSE"),
    ("dclr", "DCLR"),
    ("dclr_loss_x128", "DCLR, loss x 128"),
    ("dclr_eps_div128", "DCLR, Adam eps / 128"),
  ):
    d = _dynamics_dir(out, row)
    if d is not None:
      _, evals = plot.read_metrics(os.path.join(d, "metrics.jsonl"))
      points = [(r["step"], r[plot.UNIFORMITY]) for r in evals if plot.UNIFORMITY in r]
      if points:  # Each method at its own best rate, so the rate is in the label.
        curves.append((f"{label}, lr {RUN_NAME.match(os.path.basename(d))['lr']}", points))
  if not curves:
    return None
  fig = _figure(figsize=(6.4, 4.4))
  ax = fig.subplots()
  for i, (label, points) in enumerate(curves):  # Later curves smaller and dashed: they can lie on DCLR's.
    ax.plot(
      [s for s, _ in points],
      [u for _, u in points],
      marker="o",
      markersize=6 - i,
      label=label,
      linestyle="-" if i < 2 else "--",
    )
  ax.set_xlabel("step")
  ax.set_ylabel("uniformity, STS-B dev (lower is better)")
  ax.set_title("uniformity during training (DCLR's Fig. 4)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  path = os.path.join(plots, "dclr_fig4_uniformity.png")
  fig.savefig(path, dpi=110)
  return path


def plot_mixcse_scores(out: str, plots: str, best: dict[str, str]) -> str | None:
  """MixCSE's Fig. 4a: mean positive, negative and mixed scores (cosine / temperature) of the main MixCSE run."""
  if "mixcse" not in best:
    return None
  run_dir = os.path.join(out, "runs", "lr_grid", f"mixcse-lr{best['mixcse']}-seed1")
  if not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
    return None
  temperature = _load_json(os.path.join(run_dir, "config.json"))["loss"]["temperature"]
  train, _ = plot.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
  fig = _figure(figsize=(6.4, 4.4))
  ax = fig.subplots()
  for key, label in (("pos_score", "positive"), ("neg_score", "negative"), ("mix_score", "mix")):
    points = [(r["step"], r[key] / temperature) for r in train if key in r]
    ax.plot([s for s, _ in points], [v for _, v in points], label=label)
  ax.set_xlabel("step")
  ax.set_ylabel(f"mean score: cosine / temperature ({temperature})")
  ax.set_title(f"MixCSE, lr {best['mixcse']}, seed 1 (MixCSE's Fig. 4a)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  path = os.path.join(plots, "mixcse_fig4a_scores.png")
  fig.savefig(path, dpi=110)
  return path


def summarize(out: str, untrained_path: str = UNTRAINED) -> str:
  """Writes ``out/tables.md`` and ``out/plots/*.png``; returns the markdown."""
  runs = load_runs(out)
  best = best_lrs(runs)
  untrained = untrained_scores(untrained_path)
  lines = [
    "# paper_ablations: tables",
    "",
    "Generated by `python experiments/paper_ablations/summarize.py --out DIR` from DIR/results and "
    "DIR/runs. Primary metric: the STS avg of the seven test sets (x100), as the papers report; secondary: "
    "STS-B dev at the kept checkpoint (also the selection metric). Ours: mean ± std over seeds (sample "
    "std); alignment and uniformity on STS-B test (means). Paired d: the mean over seeds of (row - the "
    "table's baseline) in the same seed (same data order), with its paired t test's p, Holm-corrected "
    "within the table; n = 3 seeds gives that t 2 degrees of freedom, so a large p is no evidence of no "
    "effect (both metrics in full: paired_tests.md). Kendall's tau only over 5 rows or more.",
    "",
  ]
  lines += lr_grid_table(runs, best) + main_table(runs, best, untrained)
  for name, experiment in EXPERIMENTS.items():
    if name.endswith(PER_ELEMENT) and not any(r.group == "mask" for r in runs):
      continue  # A study without the mask or faithful stages.
    lines += experiment_table(name, experiment, runs, untrained)
  lines += horizon_table(out, runs, untrained) + mask_table(runs, untrained=untrained) + regime_table(runs)
  plots = os.path.join(out, "plots")
  os.makedirs(plots, exist_ok=True)
  written = [
    p
    for p in (plot_fig2(out, plots), plot_uniformity(out, plots), plot_mixcse_scores(out, plots, best))
    if p is not None
  ]
  lines += ["### Plots", ""]
  lines += [f"![{os.path.basename(p)}](plots/{os.path.basename(p)})" for p in written] or ["(none yet)"]
  missing = [
    f
    for f, p in (("SimCSE Fig. 2", "simcse_fig2"), ("DCLR Fig. 4", "dclr_fig4"), ("MixCSE Fig. 4a", "mixcse_fig4a"))
    if not any(p in w for w in written)
  ]
  if missing:
    lines += ["", f"Not drawn yet (no runs for them): {', '.join(missing)}."]
  text = "\n".join(lines) + "\n"
  with open(os.path.join(out, "tables.md"), "w", encoding="utf-8") as f:
    f.write(text)
  return text


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default=HERE, help="the study's folder (run_study.sh's OUT): read and written")
  parser.add_argument(
    "--untrained",
    default=UNTRAINED,
    help="jaxcse.evaluate's results for the untrained encoder (its row in every table; none without the file)",
  )
  args = parser.parse_args(argv)
  if not os.path.isdir(os.path.join(args.out, "results")):
    print(f"error: {args.out}: no results/ folder (run run_study.sh first)", file=sys.stderr)
    return 1
  try:
    print(summarize(args.out, args.untrained), end="")
  except (StudyError, plot.MetricsError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
