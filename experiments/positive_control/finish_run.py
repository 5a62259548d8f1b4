"""Selects a run's checkpoint (step 125 or 250) and writes results/IMPL-seedS.json.

The two checkpoints were scored by jaxcse.evaluate (WORKDIR/eval-step{125,250}.json). Selection:
``official``: the official code's own choice (its SentEval STS-B dev during training; trainer_state.json's
best_model_checkpoint), ``st``: jaxcse's scorer's STS-B dev Spearman. The results file is the selected
checkpoint's jaxcse.evaluate output plus a ``positive_control`` block recording the selection and both steps.
STEPS (optional, comma-separated, default 125,250): the two checkpoints, for a smoke run of a few steps.

  python finish_run.py IMPL SEED WORKDIR RESULTS_DIR TRAIN_SECONDS [STEPS]
"""

import json
import os
import sys

STEPS = (125, 250)


def main(impl: str, seed: str, workdir: str, results: str, train_seconds: str, steps: str = "") -> None:
  checkpoints = tuple(int(s) for s in steps.split(",")) if steps else STEPS
  evals = {s: json.load(open(os.path.join(workdir, f"eval-step{s}.json"))) for s in checkpoints}
  dev = {s: evals[s]["tasks"]["STSBenchmark"]["dev"]["spearman"] for s in checkpoints}
  block = {
    "implementation": impl,
    "seed": int(seed),
    "train_wall_seconds": float(train_seconds),
    "jaxcse_stsb_dev": {str(s): dev[s] for s in checkpoints},
    "sts_avg": {str(s): evals[s]["summary"]["Avg"] for s in checkpoints},
  }
  if impl == "official":
    state = json.load(open(os.path.join(workdir, "train", "trainer_state.json")))
    best = state["best_model_checkpoint"]
    selected = int(os.path.basename(best.rstrip("/")).split("-")[-1])
    block["selected_by"] = "official code's own SentEval STS-B dev (load_best_model_at_end)"
    block["official_stsb_dev"] = {
      str(r["step"]): r["eval_stsb_spearman"] for r in state["log_history"] if "eval_stsb_spearman" in r
    }
    jaxcse_choice = max(checkpoints, key=lambda s: dev[s])
    block["jaxcse_scorer_would_select"] = jaxcse_choice
  else:
    selected = max(checkpoints, key=lambda s: dev[s])
    block["selected_by"] = "jaxcse scorer's STS-B dev"
  block["selected_step"] = selected
  out = dict(evals[selected])
  out["positive_control"] = block
  os.makedirs(results, exist_ok=True)
  path = os.path.join(results, f"{impl}-seed{seed}.json")
  with open(path + ".partial", "w") as f:
    json.dump(out, f, indent=2)
  os.replace(path + ".partial", path)
  print(f"{path}: step {selected}, STS avg {out['summary']['Avg']}, STS-B dev {dev[selected] * 100:.2f}")


if __name__ == "__main__":
  main(*sys.argv[1:])
