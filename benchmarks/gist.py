r"""What GISTEmbed's guide costs per train step: method gist against mnrl on the same batch, model and optimizer.

  taskset -c 0 python -m benchmarks.gist [--batch_size 16] [--max_seq_len 32] [--steps 5] [--guide NAME]

``--config pairs`` (all-MiniLM-L6-v2, AdamW) on one batch of triplets from the STS-B dev pairs shipped with jaxcse
(sentence1, sentence2, the next row's sentence1): the jitted train step of ``mnrl`` (no guide) and of ``gist`` with
the guide (default: the starting model, frozen, ``gist.guide_model=""``), each compiled first (not timed), then
``--steps`` steps timed. CPU seconds of the whole process (``time.process_time``: pin it with taskset) and wall
seconds, per step. The last line is ``gist: <x.xx>x``: gist's CPU seconds per step over mnrl's.
"""

from __future__ import annotations

import argparse
import csv
import time

import numpy as np


def _batch(tokenizer, rows: int, max_seq_len: int) -> dict:
  from jaxcse import data

  with open(data.data_file("senteval/downstream/STS/STSBenchmark/sts-dev.csv"), encoding="utf-8") as f:
    pairs = [(r[5], r[6]) for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][: rows + 1]
  texts = [s for i in range(rows) for s in (pairs[i][0], pairs[i][1], pairs[i + 1][0])]
  encoded = tokenizer(texts, max_length=max_seq_len, truncation=True, padding="max_length", return_tensors="np")
  return {k: encoded[k].astype(np.int32).reshape(rows, 3, max_seq_len) for k in ("input_ids", "attention_mask")}


def _per_step(config, steps: int) -> tuple[float, float, float]:
  """(CPU seconds, wall seconds, last loss) per step of ``config``'s jitted step, after one untimed step."""
  import jax

  from jaxcse.training import configured, train_step

  model = configured.model(config)
  frozen = configured.complementary(config, model.spec)
  tx = train_step.make_optimizer(config.train, steps + 1)
  state = train_step.TrainState(step=np.int32(0), params=model.params, opt_state=tx.init(model.params))
  step = jax.jit(train_step.make_train_step(config, model.spec, tx, frozen and frozen.spec), donate_argnums=0)
  batch = _batch(model.spec.tokenizer, config.train.batch_size, config.data.max_seq_len)
  frozen_params = frozen and frozen.params
  state, metrics = step(state, batch, frozen_params)  # Compiles.
  jax.block_until_ready(metrics)
  cpu, wall = time.process_time(), time.perf_counter()
  for _ in range(steps):
    state, metrics = step(state, batch, frozen_params)
  jax.block_until_ready(metrics)
  return (time.process_time() - cpu) / steps, (time.perf_counter() - wall) / steps, float(metrics["loss"])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--max_seq_len", type=int, default=32)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--guide", default="", help='gist.guide_model ("" = the starting model)')
  args = parser.parse_args()

  from jaxcse.configs import pairs

  results = {}
  for method in ("mnrl", "gist"):
    config = pairs.get_config()
    config.method = method
    config.gist.guide_model = args.guide
    config.train.batch_size = args.batch_size
    config.data.max_seq_len = args.max_seq_len
    results[method] = _per_step(config, args.steps)
    cpu, wall, loss = results[method]
    print(f"{method}: {cpu:.3f} CPU s/step, {wall:.3f} wall s/step (loss {loss:.4f})", flush=True)
  print(f"batch {args.batch_size} x 3 columns x {args.max_seq_len} tokens, {args.steps} steps, guide {args.guide!r}")
  print(f"gist: {results['gist'][0] / results['mnrl'][0]:.2f}x")


if __name__ == "__main__":
  main()
