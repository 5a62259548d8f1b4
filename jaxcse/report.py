r"""Markdown tables of `jaxcse.evaluate` results, in the papers' layout.

  python -m jaxcse.report RESULTS.json [RESULTS.json ...] [--group-by-seed-suffix]

One row per file, labelled by its name without ``.json``. With
``--group-by-seed-suffix``, files whose names differ only by a ``-seed<N>``
suffix (``mixcse-seed1.json``, ``mixcse-seed2.json``) make one row, labelled
``mixcse``, of mean ± sample std (ddof=1) with a ``runs`` column. The STS table
always appears; the transfer table and the alignment/uniformity columns only
when some summary has them. Missing values show as ``–``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence

import numpy as np

from jaxcse.core import errors
from jaxcse.core.errors import JaxcseError

# (summary key, column header), in the papers' order.
STS_COLUMNS = (
  ("STS12", "STS12"),
  ("STS13", "STS13"),
  ("STS14", "STS14"),
  ("STS15", "STS15"),
  ("STS16", "STS16"),
  ("STSBenchmark", "STS-B"),
  ("SICKRelatedness", "SICK-R"),
  ("Avg", "Avg"),
)
ALIGN_UNIFORM_COLUMNS = (("alignment", "Alignment"), ("uniformity", "Uniformity"))
TRANSFER_COLUMNS = (
  ("MR", "MR"),
  ("CR", "CR"),
  ("SUBJ", "SUBJ"),
  ("MPQA", "MPQA"),
  ("SST2", "SST-2"),
  ("TREC", "TREC"),
  ("MRPC", "MRPC"),
  ("Avg_transfer", "Avg"),
)
# Alignment and uniformity are summarised to 4 decimals, everything else (x100 scores) to 2.
DECIMALS = {"alignment": 4, "uniformity": 4}
MISSING = "–"
_SEED_SUFFIX = re.compile(r"^(.+)-seed\d+$")


class ResultsError(JaxcseError, ValueError):
  """A results file that is not a ``jaxcse.evaluate`` JSON; the message names it."""


def group_by_seed_suffix(labels: Sequence[str]) -> dict[str, list[str]]:
  """Group name -> its labels, in first-seen order; ``x-seed<N>`` joins group ``x``, other labels stand alone."""
  groups: dict[str, list[str]] = {}
  for label in labels:
    match = _SEED_SUFFIX.match(label)
    groups.setdefault(match.group(1) if match else label, []).append(label)
  return groups


def _cell(values: list[float], n_runs: int, decimals: int) -> str:
  """``mean ± std`` of the runs that have the value; ``(n=k)`` when some runs lack it."""
  if not values:
    return MISSING
  if len(values) == 1:
    text = f"{values[0]:.{decimals}f}"
  else:
    text = f"{np.mean(values):.{decimals}f} ± {np.std(values, ddof=1):.{decimals}f}"
  return text if len(values) == n_runs else f"{text} (n={len(values)})"


def _table(rows: dict[str, list[dict]], columns: Sequence[tuple[str, str]], show_runs: bool) -> str:
  """A Markdown table: one row per entry of ``rows`` (label -> the summaries of its runs)."""
  headers = ["model", *(["runs"] if show_runs else []), *(h for _, h in columns)]
  lines = ["| " + " | ".join(headers) + " |", "|---|" + "---:|" * (len(headers) - 1)]
  for label, summaries in rows.items():
    cells = [label, *([str(len(summaries))] if show_runs else [])]
    for key, _ in columns:
      values = [float(s[key]) for s in summaries if s.get(key) is not None]
      cells.append(_cell(values, len(summaries), DECIMALS.get(key, 2)))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def format_report(results: dict[str, dict], *, group_by_seed: bool = False) -> str:
  """Markdown tables of results.

  Args:
    results: label (file name without ``.json``) -> a `jaxcse.evaluate` JSON (its ``"summary"`` is read).
    group_by_seed: merge labels that differ only by a ``-seed<N>`` suffix into one mean ± std row.

  Returns:
    The STS table (with alignment/uniformity columns if any summary has them; left out when the summaries
    hold only transfer scores), then, if any summary has a transfer score, the transfer table, separated by
    a blank line.
  """
  summaries = {}
  for label, result in results.items():
    if not isinstance(result.get("summary"), dict):
      raise ResultsError(f"{label}: no 'summary' in the results (is it a jaxcse.evaluate JSON?)")
    summaries[label] = result["summary"]
  if group_by_seed:
    rows = {name: [summaries[l] for l in labels] for name, labels in group_by_seed_suffix(list(summaries)).items()}
  else:
    rows = {label: [s] for label, s in summaries.items()}

  def present(columns):
    return any(key in s for s in summaries.values() for key, _ in columns)

  sts_columns = STS_COLUMNS + (ALIGN_UNIFORM_COLUMNS if present(ALIGN_UNIFORM_COLUMNS) else ())
  tables = []
  if present(sts_columns) or not present(TRANSFER_COLUMNS):  # Transfer-only results: no empty STS table.
    tables.append(_table(rows, sts_columns, group_by_seed))
  if present(TRANSFER_COLUMNS):
    tables.append(_table(rows, TRANSFER_COLUMNS, group_by_seed))
  return "\n\n".join(tables)


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.report"), description=__doc__.split("\n\n")[0])
  parser.add_argument("results", nargs="+", metavar="RESULTS.json", help="outputs of python -m jaxcse.evaluate")
  parser.add_argument(
    "--group-by-seed-suffix",
    action="store_true",
    help="one mean ± std row per name that differs only by a -seed<N> suffix",
  )
  args = parser.parse_args(argv)

  results = {}
  for path in args.results:
    label = os.path.basename(path).removesuffix(".json")
    if label in results:
      parser.error(f"two results are both labelled {label!r}; rename one")
    try:
      with open(path, encoding="utf-8") as f:
        results[label] = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
      raise ResultsError(f"{path}: not a JSON file ({e})") from None
  print(format_report(results, group_by_seed=args.group_by_seed_suffix))
  return 0


if __name__ == "__main__":
  sys.exit(main())
