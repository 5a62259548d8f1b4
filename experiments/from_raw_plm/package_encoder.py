r"""Exports the pretrained encoder into jaxcse/pretrained/NAME with its model card and sha256.

  python experiments/from_raw_plm/package_encoder.py WORKDIR [--name bert-mini-wiki-uncased]

Runs ``python -m jaxcse.export_hf WORKDIR OUT --masked_lm`` (the best checkpoint: the highest held-out
masked-token accuracy) and writes README.md (data, steps, held-out accuracy, sha256) from the workdir's own
records. The folder then loads as ``jaxcse/NAME`` (``config.model.name``, ``--model``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from jaxcse.core.files import file_sha256 as sha256

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("workdir")
  parser.add_argument("--name", default="bert-mini-wiki-uncased")
  parser.add_argument(
    "--shortened_at",
    type=int,
    default=None,
    help="the step at which the run was resumed with a smaller train.max_steps, if it was",
  )
  args = parser.parse_args(argv)
  out = os.path.join(REPO, "jaxcse", "pretrained", args.name)
  subprocess.run([sys.executable, "-m", "jaxcse.export_hf", args.workdir, out, "--masked_lm"], check=True, cwd=REPO)
  # Pretrained without dropout (configs/pretrain_mlm.py); a fine-tuner reading config.json gets BERT's 0.1.
  hf_config = json.load(open(os.path.join(out, "config.json")))
  hf_config.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(hf_config, f, indent=2, sort_keys=True)
    f.write("\n")
  config = json.load(open(os.path.join(args.workdir, "config.json")))
  summary = json.load(open(os.path.join(args.workdir, "summary.json")))
  records = [json.loads(line) for line in open(os.path.join(args.workdir, "metrics.jsonl"))]
  train = [r for r in records if "loss" in r]
  best = next(r for r in records if "eval/metric" in r and r["step"] == summary["best_step"])
  seconds = sum((r["step"] - p["step"]) / r["steps_per_sec"] for p, r in zip([{"step": 0}] + train, train))
  tokens = summary["best_step"] * config["train"]["batch_size"] * config["data"]["max_seq_len"]
  arch = config["model"]["architecture"]
  weights = os.path.join(out, "model.safetensors")
  if args.shortened_at is None:
    schedule, reproduce = "", " (the same numbers on the same CPU and versions: training is deterministic by step)"
  else:  # The saved config.json keeps the schedule the run began with.
    schedule = (
      f" (the run began with a {config['train']['max_steps']}-step schedule and was resumed at step "
      f"{args.shortened_at} with `--config.train.max_steps={summary['steps']}`, for time: the learning rate "
      f"stepped down there, from the first schedule's value to the second's)"
    )
    reproduce = (
      f" (one schedule of {summary['steps']} steps throughout, so close to but not the same numbers as this run's two)"
    )
  card = f"""---
library_name: transformers
tags: [bert, fill-mask, jaxcse]
language: en
license: cc-by-sa-4.0
---
# jaxcse/{args.name}

A small uncased BERT (BERT-Mini's shape: {arch["num_hidden_layers"]} layers, hidden {arch["hidden_size"]},
{arch["num_attention_heads"]} heads, FFN {arch["intermediate_size"]}, {arch["max_position_embeddings"]} positions,
a {len(open(os.path.join(out, "vocab.txt")).read().split())}-token WordPiece vocabulary trained on the same text)
pretrained by jaxcse with BERT's masked-language-model objective from random initialisation, on one 2-core CPU.
It is the raw encoder that jaxcse's SimCSE, MixCSE and DCLR comparison starts from (experiments/from_raw_plm).
It is a masked language model, not a sentence encoder: fine-tune it (e.g. with SimCSE) first.

- Data: `corpora/wiki_offline.txt` (151,990 Wikipedia sentences; its README lists the sources, CC BY-SA), less the
  1% held out by content hash (`jaxcse.data.is_heldout`); sentences packed into {config["data"]["max_seq_len"]}-token
  sequences.
- Objective: 15% of the tokens predicted (80% [MASK], 10% random, 10% kept), the output layer tied to the word
  embeddings. No dropout while pretraining; `config.json` keeps BERT's 0.1 for fine-tuning.
- Optimisation: AdamW, lr {config["train"]["learning_rate"]}, {config["train"]["warmup_steps"]} warmup steps then
  linear decay to 0 at step {summary["steps"]}{schedule}, batch {config["train"]["batch_size"]}, weight decay
  {config["train"]["weight_decay"]}, beta2 {config["train"]["adam_b2"]}, clipping at {config["train"]["max_grad_norm"]}.
- This checkpoint: step {summary["best_step"]} of {summary["steps"]} ({tokens / 1e6:.1f}M token positions), the best
  held-out masked-token accuracy: **{100 * best["eval/heldout_mlm_accuracy"]:.2f}%** (held-out loss
  {best["eval/heldout_mlm_loss"]:.3f} over {best["eval/heldout_mlm_tokens"]} masked tokens); its mean-pooled STS-B dev
  Spearman: {100 * best["eval/stsb_dev"]:.2f}.
- Training time: {seconds / 3600:.2f} h wall time of the training loop (evaluations excluded), on a 2-core CPU shared with
  other jobs for part of the run.
- Reproduce: `python -m jaxcse.train --config configs/pretrain_mlm.py --workdir W`, then
  `python experiments/from_raw_plm/package_encoder.py W`{reproduce}.
- `model.safetensors` (float32, PyTorch names) sha256: `{sha256(weights)}`

```python
from transformers import BertForMaskedLM, BertModel, FlaxBertModel
BertModel.from_pretrained("PATH"); FlaxBertModel.from_pretrained("PATH")   # or, in jaxcse: "jaxcse/{args.name}"
```
"""
  with open(os.path.join(out, "README.md"), "w") as f:
    f.write(card)
  print(
    f"wrote {out}: step {summary['best_step']}, held-out accuracy {100 * best['eval/heldout_mlm_accuracy']:.2f}%, "
    f"model.safetensors sha256 {sha256(weights)}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
