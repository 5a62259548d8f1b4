"""The pre-registered analysis of the st_parity experiment (README.md): equivalence, power and speed.

  python experiments/st_parity/analyze.py [--runs_dir experiments/st_parity/runs] [--margin 0.5]

Reads each run's records (``train.json``, ``primary.json``, ``secondary.json``; run.py writes them) and prints a
markdown report: the table of runs, the TOST on the primary metric (STS-B dev Spearman x100, jaxcse minus
sentence-transformers; Welch's t, alpha 0.05 each side, margin +-0.5), its 90% and 95% intervals, the verdict by the
README's rules, the seed SDs, the power the design had at the measured SD and the margin a 5-seed rerun would need
for 80% power, and the speed ratio. Runs not finished yet are listed as missing; the statistics need 2 seeds a side.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
SIDES = ("jaxcse", "st")
SEEDS = (1, 2, 3)
ALPHA = 0.05
MARGIN = 0.5


@dataclasses.dataclass(frozen=True)
class Tost:
  """Welch's two one-sided tests of ``mean(a) - mean(b)`` against ``(-margin, margin)``."""

  difference: float
  se: float
  df: float
  p_lower: float  # H0: difference <= -margin.
  p_upper: float  # H0: difference >= margin.
  ci90: tuple[float, float]
  ci95: tuple[float, float]
  margin: float
  alpha: float

  @property
  def p(self) -> float:
    """The TOST p-value: the larger of the two one-sided ones."""
    return max(self.p_lower, self.p_upper)

  @property
  def verdict(self) -> str:
    """The README's rules: equivalent, different or undecided."""
    if self.p_lower < self.alpha and self.p_upper < self.alpha:  # The 90% interval inside +-margin.
      return "equivalent"
    lo, hi = self.ci95
    if lo > self.margin or hi < -self.margin:  # The 95% interval excludes 0 and lies beyond the margin.
      return "different"
    return "undecided"


def tost(a, b, margin: float = MARGIN, alpha: float = ALPHA) -> Tost:
  """Welch's TOST of ``mean(a) - mean(b)`` within ``+-margin`` (scipy's Welch t-tests on shifted samples)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  lower = stats.ttest_ind(a + margin, b, equal_var=False, alternative="greater")  # difference > -margin
  upper = stats.ttest_ind(a - margin, b, equal_var=False, alternative="less")  # difference < margin
  both = stats.ttest_ind(a, b, equal_var=False)
  ci90, ci95 = both.confidence_interval(0.90), both.confidence_interval(0.95)
  se = float(np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))
  return Tost(
    difference=float(a.mean() - b.mean()),
    se=se,
    df=float(both.df),
    p_lower=float(lower.pvalue),
    p_upper=float(upper.pvalue),
    ci90=(float(ci90.low), float(ci90.high)),
    ci95=(float(ci95.low), float(ci95.high)),
    margin=margin,
    alpha=alpha,
  )


def tost_rejects(a: np.ndarray, b: np.ndarray, margin, alpha: float = ALPHA) -> np.ndarray:
  """Whether Welch's TOST rejects (equivalence), for a stack of experiments: ``a``, ``b`` are [experiments, n].

  ``margin`` is a number or an array broadcasting against the experiments. The same decision as ``tost`` (tested).
  """
  na, nb = a.shape[-1], b.shape[-1]
  va, vb = a.var(axis=-1, ddof=1) / na, b.var(axis=-1, ddof=1) / nb
  se = np.sqrt(va + vb)
  df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
  crit = stats.t.ppf(1 - alpha, df)
  d = a.mean(axis=-1) - b.mean(axis=-1)
  return ((d + margin) / se > crit) & ((d - margin) / se < -crit)


def tost_power(
  n: int, sigma: float, margin: float = MARGIN, difference: float = 0.0, alpha: float = ALPHA, sims: int = 200_000
) -> float:
  """The probability that Welch's TOST (n seeds a side, seed SD ``sigma`` on both) finds equivalence, by simulation.

  A fixed random stream (seed 0), so the number is reproducible and, for one ``n``, monotone in ``margin``.
  """
  rng = np.random.default_rng(0)
  z = rng.standard_normal((2, sims, n))
  return float(tost_rejects(difference + sigma * z[0], sigma * z[1], margin, alpha).mean())


def margin_for_power(n: int, sigma: float, power: float = 0.8, alpha: float = ALPHA, sims: int = 200_000) -> float:
  """The smallest margin at which Welch's TOST with ``n`` seeds a side has ``power`` at a true difference of 0.

  Bisection on the margin over one fixed set of simulated experiments (``tost_power``'s), to 1e-4 of sigma.
  """
  rng = np.random.default_rng(0)
  z = rng.standard_normal((2, sims, n))
  lo, hi = 0.0, 20.0 * sigma
  while hi - lo > 1e-4 * sigma:
    mid = (lo + hi) / 2
    if tost_rejects(sigma * z[0], sigma * z[1], mid, alpha).mean() >= power:
      hi = mid
    else:
      lo = mid
  return hi


def _read(path: str) -> dict | None:
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def load_runs(runs_dir: str) -> dict[str, dict]:
  """Every run folder's records: ``{run: {"train": ..., "primary": ..., "secondary": ...}}`` (None when missing)."""
  names = ["reference", *(f"{side}_seed{s}" for s in SEEDS for side in SIDES)]
  return {
    n: {p: _read(os.path.join(runs_dir, n, f"{p}.json")) for p in ("train", "primary", "secondary")} for n in names
  }


def primary(run: dict) -> float | None:
  return None if run["primary"] is None else 100 * run["primary"]["pairs_spearman"]


def secondary(run: dict) -> float | None:
  return None if run["secondary"] is None else run["secondary"]["sts_avg_x100"]


def _fmt(x, digits: int = 2) -> str:
  return "—" if x is None else f"{x:.{digits}f}"


def runs_table(runs: dict[str, dict]) -> str:
  lines = [
    "| run | STS-B dev | STS avg | steps | train wall s | train CPU s | loop steps/s | loop CPU s/step | load avg (1 min) |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  for name, run in runs.items():
    t = run["train"]
    if t:
      load = f"{t['process']['loadavg_before'][0]:.2f}-{t['process']['loadavg_after'][0]:.2f}"
      cells = [
        str(t["steps"]),
        f"{t['process']['wall_s']:.0f}",
        f"{t['process']['cpu_s']:.0f}",
        f"{t['steps_per_s']:.4f}",
        f"{t['cpu_s_per_step']:.2f}",
        load,
      ]
    else:
      cells = ["—"] * 5 + [
        f"{run['primary']['process']['loadavg_before'][0]:.2f} (evaluation)" if run["primary"] else "—"
      ]
    lines.append(f"| {name} | {_fmt(primary(run))} | {_fmt(secondary(run))} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def side_values(runs: dict[str, dict], side: str, metric) -> list[float]:
  return [v for s in SEEDS if (v := metric(runs[f"{side}_seed{s}"])) is not None]


def report(runs: dict[str, dict], margin: float = MARGIN) -> str:
  """The markdown report of whatever runs are finished."""
  out = ["## Runs", "", runs_table(runs), ""]
  missing = [n for n, r in runs.items() if r["primary"] is None or r["secondary"] is None]
  if missing:
    out += [f"Not finished (primary or secondary missing): {', '.join(missing)}.", ""]
  ref = primary(runs["reference"])
  for label, metric in (("STS-B dev Spearman x100 (primary)", primary), ("STS avg x100 (secondary)", secondary)):
    a, b = side_values(runs, "jaxcse", metric), side_values(runs, "st", metric)
    out.append(f"## {label}")
    out.append("")
    if len(a) < 2 or len(b) < 2:
      out += ["Needs at least 2 seeds a side.", ""]
      continue
    t = tost(a, b, margin)
    sd_a, sd_b = float(np.std(a, ddof=1)), float(np.std(b, ddof=1))
    pooled = float(np.sqrt((sd_a**2 + sd_b**2) / 2))
    out += [
      f"- jaxcse: {', '.join(f'{x:.2f}' for x in a)} (mean {np.mean(a):.3f}, SD {sd_a:.3f}); "
      f"sentence-transformers: {', '.join(f'{x:.2f}' for x in b)} (mean {np.mean(b):.3f}, SD {sd_b:.3f})",
      f"- difference jaxcse - s-t: {t.difference:+.3f} (Welch SE {t.se:.3f}, df {t.df:.2f}); "
      f"90% CI [{t.ci90[0]:+.3f}, {t.ci90[1]:+.3f}], 95% CI [{t.ci95[0]:+.3f}, {t.ci95[1]:+.3f}]",
      f"- TOST at +-{margin}: p(difference <= -{margin}) = {t.p_lower:.4f}, p(difference >= {margin}) = "
      f"{t.p_upper:.4f}; TOST p = {t.p:.4f}: **{t.verdict}**",
    ]
    if metric is primary:
      n = min(len(a), len(b))
      out.append(
        f"- power at a true difference of 0 with the pooled seed SD {pooled:.3f}: {n} + {n} seeds at +-{margin}: "
        f"{tost_power(n, pooled, margin):.3f}; the margin with 80% power: {n} seeds "
        f"{margin_for_power(n, pooled):.3f}, 5 seeds {margin_for_power(5, pooled):.3f}"
      )
      if ref is not None:
        out.append(
          f"- training effect (mean minus the untrained model's {ref:.2f}): jaxcse {np.mean(a) - ref:+.3f}, "
          f"s-t {np.mean(b) - ref:+.3f}"
        )
    out.append("")
  out += ["## Speed (one core, the training loop from the end of step 1 to the end of the last step)", ""]
  pairs = [
    (runs[f"jaxcse_seed{s}"]["train"], runs[f"st_seed{s}"]["train"])
    for s in SEEDS
    if runs[f"jaxcse_seed{s}"]["train"] and runs[f"st_seed{s}"]["train"]
  ]
  if pairs:
    ratios = [j["steps_per_s"] / s["steps_per_s"] for j, s in pairs]
    cpu_ratios = [j["cpu_s_per_step"] / s["cpu_s_per_step"] for j, s in pairs]
    proc = [j["process"]["cpu_s"] / s["process"]["cpu_s"] for j, s in pairs]
    mean = lambda key, side: np.mean([p[side][key] for p in pairs])  # noqa: E731
    out += [
      f"- steps/s: jaxcse {mean('steps_per_s', 0):.4f}, s-t {mean('steps_per_s', 1):.4f}; ratio jaxcse / s-t "
      f"{np.mean(ratios):.3f} (seed pairs {min(ratios):.3f}-{max(ratios):.3f})",
      f"- CPU s per step: jaxcse {mean('cpu_s_per_step', 0):.2f}, s-t {mean('cpu_s_per_step', 1):.2f}; ratio "
      f"jaxcse / s-t {np.mean(cpu_ratios):.3f} ({min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}; below 1: jaxcse cheaper)",
      f"- whole training command (start-up, loading, compilation, saving), CPU s ratio jaxcse / s-t "
      f"{np.mean(proc):.3f} ({min(proc):.3f}-{max(proc):.3f})",
      "",
    ]
  return "\n".join(out)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--runs_dir", default=os.path.join(HERE, "runs"))
  parser.add_argument("--margin", type=float, default=MARGIN)
  args = parser.parse_args()
  print(report(load_runs(args.runs_dir), args.margin))


if __name__ == "__main__":
  main()
