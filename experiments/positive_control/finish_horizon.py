"""Selects an official horizon run's checkpoint and writes its two results files (run_official_horizon.sh).

Every checkpoint (EVERY, 2 EVERY, ..., STEPS) was scored on STS-B by jaxcse.evaluate (WORKDIR/dev-stepN.json); the
kept one is the best STS-B dev Spearman (the study's selection; the earliest on a tie, as jaxcse's trainer keeps
the first best), and the seven STS test sets were scored there and at the last step (WORKDIR/eval-stepN.json).

  python finish_horizon.py best WORKDIR STEPS EVERY                       # prints the kept step
  python finish_horizon.py write WORKDIR STEPS EVERY OUT_PREFIX TRAIN_SECONDS
                                                 # OUT_PREFIX.json (kept) and OUT_PREFIX-last.json
"""

import json
import os
import sys


def _dev(workdir: str, steps: int, every: int) -> dict[int, float]:
  dev = {}
  for step in range(every, steps + 1, every):
    with open(os.path.join(workdir, f"dev-step{step}.json")) as f:
      dev[step] = json.load(f)["tasks"]["STSBenchmark"]["dev"]["spearman"]
  return dev


def _kept(dev: dict[int, float]) -> int:
  return max(dev, key=lambda step: (dev[step], -step))


def _write(path: str, results: dict) -> None:
  with open(path + ".partial", "w") as f:
    json.dump(results, f, indent=2)
  os.replace(path + ".partial", path)


def main(command: str, workdir: str, steps: str, every: str, *rest: str) -> None:
  dev = _dev(workdir, int(steps), int(every))
  kept = _kept(dev)
  if command == "best":
    print(kept)
    return
  out_prefix, train_seconds = rest
  block = {
    "implementation": "official",
    "train_wall_seconds": float(train_seconds),
    "steps": int(steps),
    "jaxcse_stsb_dev": {str(s): d for s, d in dev.items()},
    "selected_by": "jaxcse scorer's STS-B dev",
    "selected_step": kept,
  }
  for step, path in ((kept, out_prefix + ".json"), (int(steps), out_prefix + "-last.json")):
    with open(os.path.join(workdir, f"eval-step{step}.json")) as f:
      results = json.load(f)
    results["positive_control"] = dict(block, scored_step=step)
    _write(path, results)
    print(f"{path}: step {step}, STS avg {results['summary']['Avg']:.2f}, STS-B dev {dev[step] * 100:.2f}")


if __name__ == "__main__":
  main(*sys.argv[1:])
