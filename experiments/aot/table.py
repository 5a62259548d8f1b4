r"""The README's ahead-of-time table, from the JSON reports run.sh wrote: per config and target, per-device memory,
FLOPs per step, the roofline bound, the largest batch, and the config's whole run at the bound and at 40% of it.

  python experiments/aot/table.py            # prints the markdown table, every target
  python experiments/aot/table.py v5e-1 h100 # only these targets (the main README's table: the issue's six)
  python experiments/aot/table.py --missing  # what is not compiled yet: cells without a report or a largest batch
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
CONFIGS = ("base", "simcse_sup", "mixcse", "dclr")
TARGETS = ("v5e-1", "v5e-8", "v4-8", "v6e-8", "v3-8", "v2-8", "v5e-16", "h100", "a100-80gb", "a100-40gb")
# Steps of each config's own run (none reads its corpus: the counts are the configs' documented ones). wiki1m has
# 1,000,000 sentences: 15,625 steps of 64 is the paper's one epoch, 3 epochs of 128 are DCLR's 23,436 steps;
# nli_for_simcse.csv has 275,601 triplets: 3 epochs of 512 are 1,614 steps.
RUN_STEPS = {"base": 15_625, "simcse_sup": 1_614, "mixcse": 15_625, "dclr": 23_436}
UTILISATION = 0.4  # "At 40% of the bound": the step taking 2.5 times its roofline.


def _load(path: str) -> dict | None:
  return json.load(open(path)) if os.path.isfile(path) else None


def _duration(seconds: float) -> str:
  if seconds < 120:
    return f"{seconds:.0f} s"
  return f"{seconds / 60:.0f} min" if seconds < 3600 * 1.5 else f"{seconds / 3600:.1f} h"


def _largest(config: str, target: str) -> str:
  """The largest batch found to fit, over every search of the cell (``.max_batch.json`` from the config's batch,
  ``.max_batch_near.json`` around a guess), and any smaller batch found not to fit: near the limit the compilers'
  rematerialization makes fitting non-monotone in the batch."""
  searches = [_load(os.path.join(RESULTS, config, f"{target}.{kind}.json")) for kind in ("max_batch", "max_batch_near")]
  tried = [(batch, fits) for s in searches if s is not None for batch, fits in s["max_batch"][0]["tried"]]
  if not tried:
    return "not compiled yet"
  largest = max(s["max_batch"][0]["max_batch_size"] or 0 for s in searches if s is not None)
  if not largest:
    return "none"
  below = sorted({batch for batch, fits in tried if not fits and batch < largest})
  return str(largest) + (f" ({', '.join(map(str, below))} not)" if below else "")


def rows(targets=TARGETS) -> list[str]:
  lines = [
    "| config (batch) | target | memory per device | TFLOP per device and step | bound per step | "
    "largest batch | run at the bound | at 40% |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for config in CONFIGS:
    for target in targets:
      report = _load(os.path.join(RESULTS, config, f"{target}.json"))
      if report is None:
        continue
      largest = _largest(config, target)
      label = f"`{config}` ({report['batch_size']})"
      if not report["fits"]:
        lines.append(f"| {label} | {target} | does not fit | | | {largest} | | |")
        continue
      m = report["memory_bytes"]
      bound = report["roofline_step_seconds"]
      run = RUN_STEPS[config] * bound
      lines.append(
        f"| {label} | {target} | {m['total'] / 2**30:.2f} of {m['device_limit'] / 2**30:.2f} GiB | "
        f"{report['flops_per_device'] / 1e12:.3f} | {bound * 1e3:.2f} ms ({report['roofline_bound']}) | "
        f"{largest} | {_duration(run)} | {_duration(run / UTILISATION)} |"
      )
  return lines


def missing() -> list[str]:
  """One line per config: the targets with no report, and those with no largest batch."""
  lines = []
  for config in CONFIGS:
    absent = [t for t in TARGETS if not os.path.isfile(os.path.join(RESULTS, config, f"{t}.json"))]
    no_max = [
      t for t in TARGETS if t not in absent and not os.path.isfile(os.path.join(RESULTS, config, f"{t}.max_batch.json"))
    ]
    gaps = ([f"not compiled on {', '.join(absent)}"] if absent else []) + (
      [f"no largest batch on {', '.join(no_max)}"] if no_max else []
    )
    lines.append(f"- `{config}`: {'; '.join(gaps) or 'every target compiled, each with its largest batch'}")
  return lines


if __name__ == "__main__":
  args = sys.argv[1:]
  if args == ["--missing"]:
    sys.stdout.write("\n".join(missing()) + "\n")
  else:
    unknown = sorted(set(args) - set(TARGETS))
    if unknown:
      sys.exit(f"table.py: unknown targets {unknown}; known: {' '.join(TARGETS)}")
    sys.stdout.write("\n".join(rows(tuple(t for t in TARGETS if t in args) if args else TARGETS)) + "\n")
