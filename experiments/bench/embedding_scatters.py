"""The scatters in the GPU program of jaxcse's train step, compiled for an H100 on this CPU, and their atomics.

  PYTHONPATH=$PWD JAXCSE_GPU_COMPILER_DIR=$PWD/.venv-aot/gpu-compiler taskset -c 0 .venv-aot/bin/python \
    experiments/bench/embedding_scatters.py [--layers 2] [--batch_size 512] [--max_seq_len 32] [--family bert]

Builds the trainer's own step (``compile.lowering.train_step_program``: unsupervised SimCSE, ``configs/base.py``)
for a BERT (or, ``--family roberta``, a RoBERTa) of base's width, ``--layers`` deep (the embeddings, the only
gathers, are the same at any depth), in bfloat16 with float32 params, compiles it with XLA's GPU compiler for the
``h100`` target (no GPU needed: the ``aot`` venv of docs/compile.md), and prints XLA's cost analysis of it and
every scatter of the optimized program: the array it updates, the updates, the kernel it is in and the jax
operation it came from. With ``--ptx_dir`` it also dumps the program there and counts, per scatter kernel, the
atomics of its PTX (a native ``atom...add``, or ``atom...cas``: a compare-and-swap loop, which contended updates
serialise on). Nothing runs: these are facts of the compiled program. Which jaxcse is compiled is PYTHONPATH's.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import json
import os
import re
import tempfile
import time

ATOMIC = re.compile(r"\b(?:atom|red)\.[a-z0-9_.]+")  # PTX atomics: atom.global.v4.f32.add, atom...cas.b32


def parse_args(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--layers", type=int, default=2)
  p.add_argument("--batch_size", type=int, default=512)
  p.add_argument("--max_seq_len", type=int, default=32)
  p.add_argument("--dtype", default="bfloat16")
  p.add_argument("--family", default="bert", choices=["bert", "roberta"])
  p.add_argument("--target", default="h100")
  p.add_argument("--ptx_dir", default="", help="dump XLA's GPU program here and count each scatter's atomics")
  p.add_argument("--json", default="", help="also write the scatters found as JSON")
  return p.parse_args(argv)


def model_folder(family: str, layers: int) -> str:
  """A folder with the ``config.json`` of base's width and ``layers`` layers (what jaxcse-compile reads)."""
  from transformers import BertConfig, RobertaConfig

  if family == "bert":
    hf = BertConfig(num_hidden_layers=layers)  # bert-base-uncased's defaults: 30522 words, 512 positions, 2 types.
  else:
    hf = RobertaConfig(
      vocab_size=50265,
      num_hidden_layers=layers,
      max_position_embeddings=514,
      type_vocab_size=1,
      pad_token_id=1,
      bos_token_id=0,
      eos_token_id=2,
      layer_norm_eps=1e-5,
    )  # roberta-base's shape.
  folder = tempfile.mkdtemp(prefix=f"jaxcse-{family}{layers}-")
  hf.save_pretrained(folder)
  return folder


def fusion_callers(hlo: str) -> dict[str, str]:
  """``fused computation -> the fusion instruction that calls it`` (the kernel's name in the PTX)."""
  return {
    m["called"]: m["fusion"]
    for m in re.finditer(r"%(?P<fusion>[\w.\-]+) = .*? fusion\(.*?calls=%(?P<called>[\w.\-]+)", hlo)
  }


def ptx_atomics(ptx_dir: str) -> dict[str, collections.Counter]:
  """Per kernel (``.entry`` name) in the dumped PTX: a count of each atomic instruction's kind and type."""
  per_kernel = {}
  for path in glob.glob(os.path.join(ptx_dir, "*.ptx")):
    kernel = None
    with open(path) as f:
      for line in f:
        entry = re.match(r"\s*\.(?:visible\s+)?\.entry\s+(\w+)", line)
        if entry:
          kernel = entry[1]
        for m in ATOMIC.finditer(line):
          per_kernel.setdefault(kernel, collections.Counter())[m[0]] += 1
  return per_kernel


def main(argv=None) -> None:
  args = parse_args(argv)
  os.environ["JAX_PLATFORMS"] = "cpu"
  if args.ptx_dir:
    os.makedirs(args.ptx_dir, exist_ok=True)
    os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={args.ptx_dir} --xla_dump_hlo_as_text"
    ).strip()
  from jaxcse.compile import targets

  targets.use_gpu_compiler()
  import jax
  import jaxlib

  from jaxcse.compile import analysis, lowering
  from jaxcse.configs import base

  target = targets.get(args.target)
  config = base.get_config()
  config.model.name = model_folder(args.family, args.layers)
  config.model.dtype = args.dtype
  config.train.batch_size = args.batch_size
  config.data.max_seq_len = args.max_seq_len
  print(
    f"jax {jax.__version__}, jaxlib {jaxlib.__version__}; target {target.name}; {args.family} of base's width, "
    f"{args.layers} layers, batch {args.batch_size} x 1 column (SimCSE: 2 views), length {args.max_seq_len}, "
    f"{args.dtype} (params float32)",
    flush=True,
  )
  program = lowering.train_step_program(config, targets.devices(target))
  started = time.process_time()
  compiled = program.jitted.lower(*program.args).compile()
  print(f"compiled in {time.process_time() - started:.1f} CPU s", flush=True)
  cost, source = analysis.cost_of(compiled)
  print(
    f"{cost.get('flops', float('nan')) / 1e9:.1f} GFLOP, {cost.get('bytes accessed', float('nan')) / 1e9:.2f} GB "
    f"accessed ({source})"
  )
  hlo = compiled.as_text()
  callers = fusion_callers(hlo)
  found = analysis.scatters(hlo)
  atomics = ptx_atomics(args.ptx_dir) if args.ptx_dir else {}
  print(f"{len(found)} scatter(s) in the optimized program:")
  rows = []
  for s in found:
    kernel = callers.get(s.computation, s.computation).replace(".", "_")  # PTX's name of the fusion's kernel.
    rows.append({**dataclasses.asdict(s), "kernel": kernel, "atomics": dict(atomics.get(kernel, {}))})
    print(f"  {s.operand:<18} updates {s.updates:<18} in kernel {kernel}\n      from {s.op_name or '?'}")
    if args.ptx_dir:
      print(f"      atomics in its kernel's PTX: {rows[-1]['atomics']}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"jax": jax.__version__, "args": vars(args), "scatters": rows}, f, indent=1)


if __name__ == "__main__":
  main()
