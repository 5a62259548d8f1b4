"""Mean +- std (over seeds) of `jaxcse.evaluate` summaries, grouped by the file name before `-seed`.

  python experiments/compare_methods/summarize.py experiments/compare_methods/results/*.json
"""

import collections
import json
import os
import sys

import numpy as np

NAMES = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "Avg")

groups = collections.defaultdict(list)
for path in sys.argv[1:]:
  name = os.path.basename(path).removesuffix(".json").split("-seed")[0]
  with open(path) as f:
    groups[name].append(json.load(f)["summary"])

print("| method | seeds | " + " | ".join(NAMES) + " |")
print("|---|---:|" + "---:|" * len(NAMES))
for name, runs in groups.items():
  cells = []
  for task in NAMES:
    values = np.array([r[task] for r in runs])
    std = values.std(ddof=1) if len(values) > 1 else 0.0
    cells.append(f"{values.mean():.2f} ± {std:.2f}")
  print(f"| {name} | {len(runs)} | " + " | ".join(cells) + " |")
