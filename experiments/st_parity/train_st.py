"""One sentence-transformers 6 training run of the st_parity experiment (the pre-registered settings).

  python experiments/st_parity/train_st.py --model FOLDER --train triplets.jsonl --seed N --out FOLDER --timing T.json

``SentenceTransformerTrainer`` + ``MultipleNegativesRankingLoss`` (scale 20, cosine, query_to_doc, joint), batch 32
with ``BatchSamplers.NO_DUPLICATES`` and the last partial batch dropped (as jaxcse's fixed-shape batches), 4 epochs,
AdamW lr 2e-5, weight decay 0, betas (0.9, 0.999), eps 1e-8, linear decay to 0 with no warmup, clipping at 1.0,
float32, no evaluation and no checkpoint during training; the model after the last step is saved to ``--out``.
Timing as ``train_jaxcse.py``'s: a callback records the wall clock and this process's CPU seconds at each step's end.
"""

import argparse
import json
import os
import time

T0, C0 = time.time(), time.process_time()

import datasets
import torch
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import BatchSamplers
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from transformers import TrainerCallback


class StepTimes(TrainerCallback):
  """Wall clock and process CPU seconds at the end of every optimizer step."""

  def __init__(self):
    self.steps = {}

  def on_step_end(self, args, state, control, **kwargs):
    self.steps[state.global_step] = (time.time(), time.process_time())


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--model", required=True)
  parser.add_argument("--train", required=True)
  parser.add_argument("--seed", type=int, required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--timing", required=True)
  parser.add_argument("--max_seq_length", type=int, default=64)
  args = parser.parse_args()
  torch.set_num_threads(1)  # One core (the run is pinned to one by taskset).

  model = SentenceTransformer(args.model, device="cpu")
  model.max_seq_length = args.max_seq_length
  train = datasets.load_dataset("json", data_files=args.train, split="train")
  loss = MultipleNegativesRankingLoss(
    model, scale=20.0, directions=("query_to_doc",), partition_mode="joint", hardness_mode=None, hardness_strength=0.0
  )
  targs = SentenceTransformerTrainingArguments(
    output_dir=os.path.join(args.out + ".trainer"),
    per_device_train_batch_size=32,
    num_train_epochs=4,
    learning_rate=2e-5,
    weight_decay=0.0,
    adam_beta1=0.9,
    adam_beta2=0.999,
    adam_epsilon=1e-8,
    warmup_steps=0,
    lr_scheduler_type="linear",
    max_grad_norm=1.0,
    seed=args.seed,
    batch_sampler=BatchSamplers.NO_DUPLICATES,
    dataloader_drop_last=True,
    dataloader_num_workers=0,
    eval_strategy="no",
    save_strategy="no",
    fp16=False,
    bf16=False,
    report_to="none",
    logging_steps=1,
    use_cpu=True,
  )
  times = StepTimes()
  trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=train, loss=loss, callbacks=[times])
  trainer.train()
  model.save(args.out)
  t1, c1 = time.time(), time.process_time()
  first, last = min(times.steps), max(times.steps)
  record = {
    "process_wall_s": t1 - T0,
    "process_cpu_s": c1 - C0,
    "steps": last,
    "loop_steps": last - first,
    "loop_wall_s": times.steps[last][0] - times.steps[first][0],
    "loop_cpu_s": times.steps[last][1] - times.steps[first][1],
    "first_step_end_wall_s": times.steps[first][0] - T0,
    "torch_threads": torch.get_num_threads(),
    "log_history": trainer.state.log_history,
  }
  with open(args.timing, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=2)


if __name__ == "__main__":
  main()
