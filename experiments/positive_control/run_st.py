"""(b) sentence-transformers' unsupervised-SimCSE recipe in jaxcse's regime: trains one seed.

MultipleNegativesRankingLoss on (s, s) pairs (the same sentence twice: dropout makes the two views), scale 20
(= 1 / temperature 0.05), cosine similarity, mean pooling over the encoder folder, max_seq_length 32; batch 64,
one epoch of the first 16,000 corpus lines = 250 steps; AdamW (torch) lr 1e-3, weight decay 0, betas
(0.9, 0.999), eps 1e-8, linear decay to 0 without warmup, gradient clipping at norm 1.0; dropout 0.1 (the
encoder's config). Checkpoints at steps 125 and 250 (selection happens after, by STS-B dev; see run_st.sh).

  python run_st.py --encoder DIR --data wiki16k.txt --output_dir DIR --seed S
"""

import argparse
import json

import torch

torch.set_flush_denormal(True)  # as XLA on CPU (jaxcse): denormals flushed; otherwise ~6x slower once loss ~1e-4

import datasets  # noqa: E402
import sentence_transformers  # noqa: E402
from sentence_transformers import (
  SentenceTransformer,
  SentenceTransformerTrainer,  # noqa: E402
  SentenceTransformerTrainingArguments,
  losses,
)
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer  # noqa: E402
from sentence_transformers.sentence_transformer.training_args import BatchSamplers  # noqa: E402


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--encoder", required=True)
  p.add_argument("--data", required=True)
  p.add_argument("--output_dir", required=True)
  p.add_argument("--seed", type=int, required=True)
  p.add_argument("--temperature", type=float, default=0.05)
  a = p.parse_args()

  with open(a.data, encoding="utf-8") as f:
    lines = [line.rstrip("\n") for line in f]
  train = datasets.Dataset.from_dict({"anchor": lines, "positive": lines})

  word = Transformer(a.encoder, max_seq_length=32)
  model = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), "mean")])
  cfg = word.auto_model.config
  assert cfg.hidden_dropout_prob == 0.1 and cfg.attention_probs_dropout_prob == 0.1, cfg
  loss = losses.MultipleNegativesRankingLoss(model, scale=1.0 / a.temperature)

  args = SentenceTransformerTrainingArguments(
    output_dir=a.output_dir,
    seed=a.seed,
    num_train_epochs=1,
    max_steps=250,
    per_device_train_batch_size=64,
    learning_rate=1e-3,
    weight_decay=0.0,
    adam_beta1=0.9,
    adam_beta2=0.999,
    adam_epsilon=1e-8,
    lr_scheduler_type="linear",
    warmup_steps=0,
    max_grad_norm=1.0,
    optim="adamw_torch",
    batch_sampler=BatchSamplers.BATCH_SAMPLER,
    save_strategy="steps",
    save_steps=125,
    save_only_model=True,
    logging_steps=10,
    report_to="none",
    dataloader_drop_last=False,
    use_cpu=True,
  )
  trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, loss=loss)
  print(
    json.dumps(
      {
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "n_train": len(lines),
        "seed": a.seed,
        "scale": loss.scale,
      }
    ),
    flush=True,
  )
  trainer.train()


if __name__ == "__main__":
  main()
