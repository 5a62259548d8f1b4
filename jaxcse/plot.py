r"""Figures of training runs as PNG: training curves per run and the alignment-uniformity map of several runs.

  python -m jaxcse.plot WORKDIR [WORKDIR ...] [--out DIR] [--results RESULTS.json ...]

For each workdir, ``<run>_training.png`` draws what its ``metrics.jsonl``
holds: the loss, STS-B (and SICK-R) dev Spearman with the kept (best) step
marked, and the training dynamics when logged (mean positive / negative /
mixed-negative cosine per logged step; the largest angle omega between STS-B
dev embeddings, alignment and uniformity per evaluation). A panel whose keys
are missing is left out, with a note on stderr.

``align_uniform.png`` is the alignment-uniformity map of all runs (SimCSE's
Figure 3; lower is better on both axes): one point per run, coloured by its
STS Avg (x100) from a ``jaxcse.evaluate`` results JSON, or by the STS-B dev
Spearman of its best checkpoint when some run has no results JSON. With
``eval/alignment`` and ``eval/uniformity`` in the evaluation records, each run
also gets its trajectory over the evaluations (SimCSE's Figure 2) and the
point is its best checkpoint; otherwise the point is the results JSON's
alignment and uniformity on STS-B test. ``compare_training.png`` overlays the
loss and STS-B dev curves of several runs.

A results JSON belongs to the workdir named by its ``"model"`` field (the
``--model`` given to ``jaxcse.evaluate``); without ``--results``, a results
JSON inside the workdir is used (the newest, if several). The default output
folder is ``WORKDIR/plots`` for one run, ``./plots`` for several.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Sequence

import numpy as np

from jaxcse.core import errors
from jaxcse.core.errors import JaxcseError
from jaxcse.storage.runs import (  # noqa: F401  (plot.Run, plot.read_metrics, ...: the reading is storage.runs')
  ALIGNMENT,
  EVAL_METRIC,
  LOSS_KEYS,
  OMEGA,
  SCORE_KEYS,
  SICKR_DEV,
  STSB_DEV,
  UNIFORMITY,
  MetricsError,
  Run,
  load_runs,
  read_metrics,
  read_results,
)

# --------------------------------------------------------------------------
# Figures.


def _figure(**kwargs):
  """A matplotlib Figure outside pyplot: no display needed, and a notebook's own plotting backend is left alone."""
  from matplotlib.figure import Figure

  return Figure(**kwargs)


def _note_skipped(run: Run, skipped: list[tuple[str, Sequence[str]]]) -> None:
  """One stderr line naming the panels left out of ``run``'s figure and the keys they need."""
  if skipped:
    what = "; ".join(f"{panel} (needs {' or '.join(keys)})" for panel, keys in skipped)
    print(
      f"note: {run.name}: {os.path.join(run.workdir, 'metrics.jsonl')} lacks the keys of some panels, left out: {what}",
      file=sys.stderr,
    )


def _steps_range(run: Run) -> tuple[float, float]:
  """x-limits shared by every panel of a run: from 0 (or the first record) to the last step, with a margin."""
  steps = [r["step"] for r in run.train + run.evals]
  low, high = min(0, *steps), max(steps)
  pad = max((high - low) * 0.03, 0.5)
  return low - pad, high + pad


def _log_scale_if_wide(ax, values: np.ndarray) -> None:
  """Log y-axis when positive values span more than two decades (a contrastive loss falling towards 0)."""
  finite = values[np.isfinite(values)]
  if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100:
    ax.set_yscale("log")


def _panel_loss(ax, run: Run) -> None:
  plotted = []
  for key in LOSS_KEYS:
    steps, values = run.series(run.train, key)
    if not steps.size:
      continue
    # contrastive_loss equals loss unless an auxiliary (MLM) loss is added: draw it only when it differs.
    loss_values = run.series(run.train, "loss")[1]
    if (
      key == "contrastive_loss"
      and values.shape == loss_values.shape
      and np.allclose(values, loss_values, equal_nan=True)
    ):
      continue
    ax.plot(steps, values, marker="." if steps.size < 30 else None, label=key)
    plotted.append(values)
  _log_scale_if_wide(ax, np.concatenate(plotted))
  ax.set_title("training loss (mean per logged interval)")
  ax.set_xlabel("step")
  if len(plotted) > 1:
    ax.legend()


def _panel_dev(ax, run: Run) -> None:
  for key, label in ((STSB_DEV, "STS-B dev"), (SICKR_DEV, "SICK-R dev")):
    steps, values = run.series(run.evals, key)
    if steps.size:
      ax.plot(steps, values * 100, marker="o", label=label)
  best = run.best_eval()
  if best is not None and STSB_DEV in best:
    ax.plot(
      [best["step"]],
      [best[STSB_DEV] * 100],
      marker="*",
      markersize=16,
      color="gold",
      markeredgecolor="black",
      linestyle="none",
      label=f"kept checkpoint: step {best['step']} ({best[STSB_DEV] * 100:.2f})",
    )
  ax.set_title("dev Spearman x100")
  ax.set_xlabel("step")
  ax.legend(fontsize="small")


def _panel_scores(ax, run: Run) -> None:
  labels = {"pos_score": "positive pairs", "neg_score": "in-batch negatives", "mix_score": "mixed negatives"}
  for key in SCORE_KEYS:
    steps, values = run.series(run.train, key)
    if steps.size:
      ax.plot(steps, values, marker="." if steps.size < 30 else None, label=labels[key])
  ax.set_title("mean cosine similarity")
  ax.set_xlabel("step")
  ax.legend(fontsize="small")


def _panel_eval(ax, run: Run, key: str, title: str) -> None:
  steps, values = run.series(run.evals, key)
  ax.plot(steps, values, marker="o")
  if key == OMEGA:
    # The MixCSE paper's argument: past 90 degrees random negatives are near-orthogonal and the gradient fades.
    ax.axhline(90, color="grey", linestyle="--", linewidth=1)
    ax.text(ax.get_xlim()[0], 90, " 90°", va="bottom", color="grey", fontsize="small")
  ax.set_title(title)
  ax.set_xlabel("step")


def plot_training(run: Run, path: str) -> str:
  """Writes ``run``'s training curves to ``path`` (PNG): one panel per kind of record it has. Returns ``path``."""
  from matplotlib.ticker import MaxNLocator

  panels, skipped = [], []
  if run.train:  # Every train record has a loss.
    panels.append(lambda ax: _panel_loss(ax, run))
  else:
    skipped.append(("loss", ["loss"]))
  if any(STSB_DEV in r or SICKR_DEV in r for r in run.evals):
    panels.append(lambda ax: _panel_dev(ax, run))
  else:
    skipped.append(("dev Spearman", [STSB_DEV, SICKR_DEV]))
  if any(k in r for r in run.train for k in SCORE_KEYS):
    panels.append(lambda ax: _panel_scores(ax, run))
  else:
    skipped.append(("cosine scores", SCORE_KEYS))
  for key, title in (
    (OMEGA, "largest angle between STS-B dev embeddings\n(omega, degrees)"),
    (ALIGNMENT, "alignment, STS-B dev (lower is better)"),
    (UNIFORMITY, "uniformity, STS-B dev (lower is better)"),
  ):
    if any(key in r for r in run.evals):
      panels.append(lambda ax, key=key, title=title: _panel_eval(ax, run, key, title))
    else:
      skipped.append((key.removeprefix("eval/"), [key]))
  _note_skipped(run, skipped)
  if not panels:
    raise MetricsError(f"{os.path.join(run.workdir, 'metrics.jsonl')}: no loss and no dev scores: nothing to plot")
  cols = min(len(panels), 3)
  rows = math.ceil(len(panels) / cols)
  fig = _figure(figsize=(5.2 * cols, 3.9 * rows))
  axes = fig.subplots(rows, cols, squeeze=False)
  xlim = _steps_range(run)
  for ax, draw in zip(axes.flat, panels):
    ax.set_xlim(*xlim)  # Before drawing: the omega panel places its label at the left edge.
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # Steps are whole numbers, even on a short run.
    draw(ax)
    ax.grid(alpha=0.3)
  for ax in axes.flat[len(panels) :]:
    ax.remove()
  fig.suptitle(f"{run.name}", fontweight="bold")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  return path


def plot_compare(runs: Sequence[Run], path: str) -> str:
  """Overlays the loss and STS-B dev curves of several runs; writes ``path`` (PNG) and returns it."""
  from matplotlib.ticker import MaxNLocator

  fig = _figure(figsize=(12, 4.4))
  ax_loss, ax_dev = fig.subplots(1, 2)
  all_losses = []
  for i, run in enumerate(runs):
    color = f"C{i % 10}"
    steps, values = run.series(run.train, "loss")
    if steps.size:
      ax_loss.plot(steps, values, color=color, label=run.name)
      all_losses.append(values)
    steps, values = run.series(run.evals, STSB_DEV)
    if steps.size:
      ax_dev.plot(steps, values * 100, color=color, marker="o", label=run.name)
  if all_losses:
    _log_scale_if_wide(ax_loss, np.concatenate(all_losses))
  ax_loss.set_title("training loss")
  ax_dev.set_title("STS-B dev Spearman x100")
  limits = [_steps_range(run) for run in runs]
  for ax in (ax_loss, ax_dev):
    ax.set_xlim(min(lo for lo, _ in limits), max(hi for _, hi in limits))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  ax_dev.legend(fontsize="small", loc="best")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  return path


def _has_trajectory(run: Run) -> bool:
  return any(ALIGNMENT in r and UNIFORMITY in r for r in run.evals)


def _has_test_point(run: Run) -> bool:
  summary = (run.results or {}).get("summary", {})
  return "alignment" in summary and "uniformity" in summary


def plot_align_uniform(runs: Sequence[Run], path: str) -> str | None:
  """The alignment-uniformity map of ``runs`` (PNG at ``path``); None, with a note, when no run has the numbers.

  All points come from one source, so the map compares like with like: the
  evaluation records (STS-B dev, best checkpoint, with trajectories) when
  at least as many runs have them as have results JSONs with alignment and
  uniformity (STS-B test); runs without the chosen source are left out with
  a note. The colour is likewise one measure for all runs: STS Avg when every
  plotted run has it, else the best checkpoint's STS-B dev.
  """
  with_dev = [r for r in runs if _has_trajectory(r)]
  with_test = [r for r in runs if _has_test_point(r)]
  if not with_dev and not with_test:
    print(
      "note: no run has alignment/uniformity (eval/alignment in metrics.jsonl, or a results JSON from "
      "`jaxcse.evaluate --tasks sts,align_uniform`); skipping align_uniform.png",
      file=sys.stderr,
    )
    return None
  use_dev = len(with_dev) >= len(with_test)
  plotted = with_dev if use_dev else with_test
  for run in runs:
    if run not in plotted:
      print(
        f"note: {run.name}: no alignment/uniformity "
        f"{'in its evaluation records' if use_dev else 'in a results JSON'}; left out of the map",
        file=sys.stderr,
      )

  # Each run's point, and its colour value.
  points, colour_values = [], []
  use_avg = all(r.sts_avg() is not None for r in plotted)
  for run in plotted:
    best = run.best_eval() if use_dev else None
    if use_dev:
      if best is None or ALIGNMENT not in best:  # No eval/metric: the last evaluation with the numbers.
        best = [r for r in run.evals if ALIGNMENT in r and UNIFORMITY in r][-1]
      points.append((best[UNIFORMITY], best[ALIGNMENT]))  # SimCSE's Figure 2: x = uniformity, y = alignment.
    else:
      summary = run.results["summary"]
      points.append((summary["uniformity"], summary["alignment"]))
    if use_avg:
      colour_values.append(run.sts_avg())
    else:
      best = best or run.best_eval()
      colour_values.append(best[STSB_DEV] * 100 if best is not None and STSB_DEV in best else np.nan)
  if not use_avg:
    missing = [r.name for r in plotted if r.sts_avg() is None]
    print(
      f"note: no STS Avg for {', '.join(missing)} (no results JSON from `jaxcse.evaluate --tasks sts`); "
      "colouring every run by its best STS-B dev instead",
      file=sys.stderr,
    )

  import matplotlib
  from matplotlib.ticker import MaxNLocator

  fig = _figure(figsize=(7.2, 5.6))
  ax = fig.subplots()
  colours = np.array(colour_values, dtype=np.float64)
  finite = colours[np.isfinite(colours)]
  low, high = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
  if high - low < 0.5:  # One run, or runs within half a point: keep the colour scale readable.
    low, high = low - 0.5, high + 0.5
  norm = matplotlib.colors.Normalize(low, high)
  cmap = matplotlib.colormaps["viridis"]
  if use_dev:
    for i, run in enumerate(plotted):
      rows = [r for r in run.evals if ALIGNMENT in r and UNIFORMITY in r]
      xs = np.array([r[UNIFORMITY] for r in rows])
      ys = np.array([r[ALIGNMENT] for r in rows])
      ax.plot(
        xs,
        ys,
        color="0.55",
        linewidth=1,
        marker=".",
        markersize=5,
        zorder=1,
        label="evaluations during training" if i == 0 else None,
      )
      for j in range(len(xs) - 1):  # Arrows show the direction of training, as in SimCSE's Figure 2.
        if (xs[j], ys[j]) != (xs[j + 1], ys[j + 1]):
          ax.annotate(
            "",
            xy=(xs[j + 1], ys[j + 1]),
            xytext=(xs[j], ys[j]),
            zorder=1,
            arrowprops=dict(arrowstyle="->", color="0.45", lw=1),
          )
  xs = np.array([p[0] for p in points])
  ys = np.array([p[1] for p in points])
  scatter = ax.scatter(
    xs,
    ys,
    c=colours,
    cmap=cmap,
    norm=norm,
    s=140,
    edgecolors="black",
    zorder=3,
    plotnonfinite=True,
    label="best checkpoint" if use_dev else None,
  )
  colour_label = (
    "STS Avg x100 (STS12-16, STS-B, SICK-R test)" if use_avg else "STS-B dev Spearman x100 (best checkpoint)"
  )
  fig.colorbar(scatter, ax=ax, label=colour_label)
  split = "STS-B dev" if use_dev else "STS-B test"
  ax.set_xlabel(f"uniformity, {split} (lower is better)")
  ax.set_ylabel(f"alignment, {split} (lower is better)")
  ax.xaxis.set_major_locator(MaxNLocator(6))  # Small ranges would otherwise crowd long tick labels.
  ax.set_title("alignment-uniformity map")
  ax.grid(alpha=0.3)
  ax.margins(x=0.25, y=0.15)  # Room for the run labels beside the points.
  left, right = ax.get_xlim()
  for run, x, y, value in zip(plotted, xs, ys, colours):
    text = f"{run.name} ({value:.2f})" if np.isfinite(value) else run.name
    # Labels of points in the right part of the map go to their left, so they stay inside the axes.
    on_right = (x - left) > 0.6 * (right - left)
    ax.annotate(
      text,
      (x, y),
      xytext=(-9 if on_right else 9, 7),
      textcoords="offset points",
      fontsize="small",
      ha="right" if on_right else "left",
      zorder=4,
    )
  if use_dev:
    ax.legend(fontsize="small", loc="best")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  return path


def _file_name(name: str) -> str:
  return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "run"


def plot_runs(workdirs: Sequence[str], out: str | None = None, results_paths: Sequence[str] = ()) -> list[str]:
  """Writes every figure for ``workdirs`` into ``out``; returns the PNG paths written."""
  if not workdirs:
    raise ValueError("give at least one workdir")
  if out is None:
    out = os.path.join(workdirs[0], "plots") if len(workdirs) == 1 else "plots"
  errors.check_output(out, folder=True)
  runs = load_runs(workdirs, results_paths)
  try:
    import matplotlib  # noqa: F401 (needed by every figure: checked before the output folder is made)
  except ImportError:
    raise JaxcseError('plotting needs matplotlib: pip install "jaxcse[plot]"') from None
  os.makedirs(out, exist_ok=True)
  written = [plot_training(run, os.path.join(out, f"{_file_name(run.name)}_training.png")) for run in runs]
  if len(runs) > 1:
    written.append(plot_compare(runs, os.path.join(out, "compare_training.png")))
  path = plot_align_uniform(runs, os.path.join(out, "align_uniform.png"))
  if path is not None:
    written.append(path)
  return written


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.plot"), description=__doc__.split("\n\n")[0])
  parser.add_argument("workdirs", nargs="+", metavar="WORKDIR", help="jaxcse training workdirs (with metrics.jsonl)")
  parser.add_argument("--out", default=None, help="output folder (default: WORKDIR/plots for one run, ./plots)")
  parser.add_argument(
    "--results",
    nargs="+",
    default=(),
    metavar="RESULTS.json",
    help="jaxcse.evaluate --output files; each belongs to the workdir named by its 'model'",
  )
  args = parser.parse_args(argv)
  written = plot_runs(args.workdirs, args.out, args.results)
  for path in written:
    print(path)
  return 0


if __name__ == "__main__":
  sys.exit(main())
