r"""Compile the train step for a TPU slice or GPU you do not have: does the run fit, and how fast can it be at best?

  jaxcse-compile --config base --target v5e-1 [--config.model.dtype=bfloat16 ...] [--json FILE]
  jaxcse-compile --config base --target v5e-8 --find_max_batch
  jaxcse-compile --config base --target h100 --inference
  jaxcse-compile --list_targets

(= ``python -m jaxcse.compile``.) The config and its ``--config.<field>=<value>`` overrides are exactly
``jaxcse-train``'s. Nothing is trained and no weights or data are read: the step the trainer would jit
(``train_step.jit_train_step``: same function, mesh, shardings, donation, dtype, method, GradCache,
gradient checkpointing) is lowered with abstract arguments and compiled by the target's own compiler,
on this machine's CPU. It prints, and writes to ``--json``, the per-device memory against the device's
usable memory, FLOPs and bytes per step, a roofline lower bound on the step time and the sentences/s it
implies, the collectives of the program, and the compile time; it exits with status 3 and one line when
the step does not fit.

TPU targets need libtpu (``pip install "jaxcse[aot]"``, or ``"jaxcse[tpu]"``); GPU targets also jax's CUDA
plugin, which ``jaxcse-compile --install_gpu_compiler`` installs once, where only this command sees it (without
NVIDIA's 4 GB of libraries, which compiling does not need; ptxas comes with the aot extra). Neither changes what
other programs print or start on a machine without accelerators (jaxcse/core/platforms.py, ``targets.use_gpu_compiler``).
The numbers are the compiler's facts and bounds, not measured run times.
"""

from __future__ import annotations

import os
import sys

from jaxcse.core import compat, errors

# The status when the step does not fit the target (1: an error, 2: a bad flag).
EXIT_DOES_NOT_FIT = 3


def _gib(n: float) -> str:
  return f"{n / 2**30:.2f} GiB"


def describe(report: dict) -> list[str]:
  """A report as the lines the command prints."""
  m = report["memory_bytes"]
  hosts = f" on {report['num_hosts']} hosts" if report["num_hosts"] > 1 else ""
  lines = [
    f"{report['target']}: {report['num_devices']} x {report['device']}{hosts}, global batch "
    f"{report['batch_size']}" + (f", length {report['length']}" if "length" in report else ""),
    f"  memory per device: {_gib(m['total'])} of {_gib(m['device_limit'])} usable "
    f"({'fits' if report['fits'] else 'DOES NOT FIT'}): arguments {_gib(m['argument'])}, outputs "
    f"{_gib(m['output'])}, aliased {_gib(m['alias'])}, temporaries {_gib(m['temp'])}, code {_gib(m['code'])}",
  ]
  if report["flops_per_device"] is not None:
    lines.append(
      f"  per device and step: {report['flops_per_device'] / 1e12:.3f} TFLOP, "
      f"{report['bytes_accessed_per_device'] / 1e9:.2f} GB accessed"
    )
  if report["roofline_step_seconds"] is not None:
    lines.append(
      f"  roofline: at least {report['roofline_step_seconds'] * 1e3:.2f} ms per step "
      f"({report['roofline_bound']}-bound), at most {report['sentences_per_second_bound']:,.0f} "
      "sentences/s"
      + (
        f"; {report['roofline_xla_bytes_seconds'] * 1e3:.2f} ms at XLA's bytes accessed"
        if report["roofline_xla_bytes_seconds"]
        else ""
      )
    )
  kinds = ", ".join(f"{k} x{v}" for k, v in report["collectives"].items()) or "none"
  compiled = (
    f"from the compile cache (the compilation took {report['compile_seconds']:.1f} s when it ran)"
    if report.get("cached")
    else f"compiled in {report['compile_seconds']:.1f} s"
  )
  lines.append(f"  collectives: {kinds}; {compiled}")
  return lines


def does_not_fit_line(target: str, report: dict | None, error: str | None) -> str:
  if error is not None:
    return f"does not fit {target}: the compiler ran out of memory ({error})"
  m = report["memory_bytes"]
  return (
    f"does not fit {target}: {_gib(m['total'])} per device, {_gib(m['device_limit'])} usable "
    f"(batch {report['batch_size']})"
  )


def _progress(line: str) -> None:
  """What the command is doing, as it does it (stdout, before the report; stderr stays for the one-line errors)."""
  print(line, flush=True)


def list_targets() -> None:
  from jaxcse.compile import targets

  print(
    f"{'target':<11} {'devices':>7} {'hosts':>5}  {'device':<15} {'bf16 TFLOP/s':>12} {'HBM GB/s':>9} "
    f"{'usable':>10}  description"
  )
  for t in targets.TARGETS.values():
    if t.platform == "cpu":
      print(f"{t.name:<11} {'-':>7} {1:>5}  {'cpu':<15} {'-':>12} {'-':>9} {'-':>10}  {t.description}")
      continue
    usable = t.peaks.tpu_usable_gib * 2**30 if t.platform == "tpu" else None
    usable_text = _gib(usable) if usable else f"{targets.gpu_memory_fraction():.0%} of mem"
    print(
      f"{t.name:<11} {t.num_devices:>7} {t.num_hosts:>5}  {t.peaks.name:<15} "
      f"{t.bf16_flops_per_device / 1e12:>12.1f} {t.memory_bandwidth_per_device / 1e9:>9.0f} {usable_text:>10}  "
      f"{t.description}"
    )
  print("\nper device; sources:")
  for chip in targets.CHIPS.values():
    print(f"  {chip.name}: {chip.source}")


def run_command(args, config) -> int:
  from jaxcse.compile import lowering, max_batch, targets
  from jaxcse.core import platforms
  from jaxcse.core.errors import USER_ERRORS, print_error
  from jaxcse.training import cli

  platforms.use_compilation_cache()  # Read by the CPU target; the others turn jax's cache off below.

  cache_dir = os.path.expanduser(args.cache_dir) if args.cache_dir else None
  try:
    target = targets.get(args.target)
    if target.platform != "cpu":
      # jaxlib 0.10.2 writes compile-only executables to the persistent cache but cannot read them back ("PjRtCompiler
      # must be constructed with a Client"): entries of up to ~100 MB that only cost disk and a warning.
      import jax

      jax.config.update("jax_enable_compilation_cache", False)
    devices = targets.devices(target)
    result: dict = {
      "config": cli.resolve_config(args.config),
      "overrides": args.overrides,
    }
    fits, error = True, None
    if args.inference:
      reports = lowering.compile_encoder(
        config,
        target,
        devices=devices,
        max_len=args.inference_max_len or None,
        lengths=[int(n) for n in args.inference_lengths] or None,
        cache_dir=cache_dir,
        log=_progress,
      )
      result.update(reports[-1], lengths=reports)
      for r in reports:
        print("\n".join(describe(r)))
      fits = all(r["fits"] for r in reports)
    elif args.find_max_batch:
      found = []
      for variant in args.variants:
        print(f"{target.name}: largest global batch, {variant} ...", flush=True)
        found.append(
          max_batch.max_batch(
            config,
            target,
            variant,
            devices=devices,
            chunk=args.grad_cache_chunk or None,
            columns=args.columns or None,
            near=args.max_batch_near or None,
            cache_dir=cache_dir,
            log=print,
          )
        )
        print(f"{target.name}: {variant}: largest batch that fits: {found[-1]['max_batch_size']}", flush=True)
      result.update(target=target.name, num_devices=len(devices), max_batch=found)
    else:
      try:
        report = lowering.compile_train_step(
          config,
          target,
          devices=devices,
          columns=args.columns or None,
          packed_length=args.packed_length or None,
          cache_dir=cache_dir,
          log=_progress,
        )
      except lowering.OutOfMemory as e:
        fits, error = False, str(e)
        result.update(
          target=target.name, num_devices=len(devices), batch_size=config.train.batch_size, fits=False, error=error
        )
      else:
        result.update(report)
        fits = report["fits"]
        print("\n".join(describe(report)))
  except USER_ERRORS as e:
    return print_error(e)
  if args.json:
    from jaxcse.core import files

    files.write_json(args.json, result)
  if not fits:
    print(does_not_fit_line(target.name, None if error else result, error), file=sys.stderr)
    return EXIT_DOES_NOT_FIT
  return 0


def install_gpu_compiler() -> int:
  from jaxcse.compile import targets
  from jaxcse.core.errors import print_error

  print(f"installing jax's CUDA plugin for this jaxlib into {targets.gpu_compiler_dir()} ...", flush=True)
  try:
    folder = targets.install_gpu_compiler()
  except targets.TargetError as e:
    return print_error(e)
  print(f"done: jaxcse-compile now compiles for GPU targets; nothing else sees {folder}")
  return 0


@errors.cli
def main(argv: list[str]) -> int:
  from jaxcse.training import cli

  parser = _parser()
  args = cli.parse_with_overrides(parser, argv)
  if args.list_targets:
    list_targets()
    return 0
  if args.install_gpu_compiler:
    return install_gpu_compiler()
  if args.config is None or args.target is None:
    parser.error("--config and --target are required (--list_targets shows the targets)")
  config = cli.load_config(args.config, args.overrides, module="jaxcse.compile")
  with compat.harmless_native_lines_dropped():
    return run_command(args, config)


def _comma_list(value: str) -> list[str]:
  return [item for item in value.split(",") if item]


def _parser():
  import argparse

  from jaxcse.compile import max_batch
  from jaxcse.training import cli

  prog = errors.command_name("jaxcse.compile")
  parser = errors.ArgumentParser(
    prog=prog,
    usage=f"%(prog)s --config NAME|FILE.py --target NAME {cli.OVERRIDES} [--json FILE]\n"
    "       [--find_max_batch] [--inference] [--list_targets]",
    description=_DESCRIPTION,
    epilog=f"example: {prog} --config base --config.model.dtype=bfloat16 --target v5e-1 --json v5e-1.json",
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  cli.add_config_argument(
    parser,
    "training config, as jaxcse-train's: a shipped config's name (base, simcse_sup, "
    "mixcse, dclr, pretrain_mlm, ...) or a config file (FILE.py)",
  )
  parser.add_argument(
    "--target",
    metavar="NAME",
    help="what to compile for: v5e-1, v5e-8, v5e-16, v6e-8, v4-8, v4-32, v3-8, v2-8, h100, a100-80gb, a100-40gb, "
    "... or cpu (this machine); --list_targets shows them all",
  )
  parser.add_argument("--json", metavar="FILE", help="write the report to this JSON file")
  parser.add_argument(
    "--find_max_batch",
    action="store_true",
    help="find the largest global batch that fits, by compiling only (a bracket from the config's batch or "
    "--max_batch_near, then regula falsi; multiples of 8 rows per device), for each of --variants",
  )
  parser.add_argument(
    "--max_batch_near",
    type=int,
    default=0,
    help="with --find_max_batch: a guess of the answer (e.g. the same config's largest batch on a similar target, "
    "scaled by the devices' count and memory); the search widens a bracket around it by 1, 2, 4, ... steps, so a "
    "good guess costs two compilations",
  )
  parser.add_argument(
    "--variants",
    type=_comma_list,
    default=list(max_batch.MEMORY_VARIANTS),
    help="with --find_max_batch, comma-separated: plain, grad_cache, gradient_checkpointing, "
    "grad_cache+gradient_checkpointing (default: all)",
  )
  parser.add_argument(
    "--grad_cache_chunk",
    type=int,
    default=0,
    help="with --find_max_batch: GradCache's chunk (default: the config's train.grad_cache_chunk, else its "
    "train.batch_size)",
  )
  parser.add_argument(
    "--inference",
    action="store_true",
    help="compile the evaluation/encoding forward instead (the BucketedEmbedder's, at eval.batch_size rows), at "
    "every length bucket up to --inference_max_len",
  )
  parser.add_argument(
    "--inference_max_len",
    type=int,
    default=0,
    help="with --inference: the longest length bucket (default: the model's maximum positions)",
  )
  parser.add_argument(
    "--inference_lengths",
    type=_comma_list,
    default=[],
    help="with --inference: only these length buckets, comma-separated (e.g. 32,128,512)",
  )
  parser.add_argument(
    "--columns",
    type=int,
    default=0,
    help="sentence columns of a batch (default: 3 for a .csv corpus, SimCSE's NLI triplets; else 1, or 2 for a "
    "method that needs pairs: gist); the corpus is never read",
  )
  parser.add_argument(
    "--packed_length",
    type=int,
    default=0,
    help="with --config.train.packed=True: the texts' mean length in tokens the packed rows are sized for (default: "
    "data.max_seq_len, every text full, the most rows a step can need); the report's packed_rows says how many",
  )
  parser.add_argument(
    "--cache_dir",
    default=os.environ.get("JAXCSE_COMPILE_CACHE", "~/.cache/jaxcse/compile"),
    help="where compilations' results are kept, by a fingerprint of the lowered program, the target and the "
    "compilers' versions, so that the same compilation is never run twice (env JAXCSE_COMPILE_CACHE; empty: "
    "none); jax's own cache cannot read back compile-only executables",
  )
  parser.add_argument(
    "--list_targets", action="store_true", help="list the targets with their per-device peaks and sources, then exit"
  )
  parser.add_argument(
    "--install_gpu_compiler",
    action="store_true",
    help="install jax's CUDA plugin for the installed jaxlib (no NVIDIA libraries; ptxas comes with the aot extra) "
    "where only jaxcse-compile looks for it (env JAXCSE_GPU_COMPILER_DIR, default "
    "~/.cache/jaxcse/gpu-compiler/jaxlib-VERSION), then exit; needed once for GPU targets: in site-packages the "
    "plugin would start, and print errors, in every jax program on a machine without a GPU",
  )
  return parser


def run() -> None:
  """``python -m jaxcse.compile`` (and the ``jaxcse-compile`` console script)."""
  # This command never runs anything on this machine's accelerator (it would hold a TPU another process trains
  # on); the targets' devices are compile-only. Set before jax is imported.
  os.environ["JAX_PLATFORMS"] = "cpu"
  from jaxcse.compile import targets

  targets.use_gpu_compiler()  # Before jax is imported: the CUDA plugin, if installed for compiling (see the flag).
  with compat.harmless_native_lines_dropped():
    from jaxcse import train  # noqa: F401  (jax, flax and transformers load here, their native lines filtered)
  sys.exit(main(sys.argv[1:]))


_DESCRIPTION = """\
Compile the train step a config would run for a TPU slice or GPU you do not have, on this machine's CPU, without
reading weights or data: whether the run fits the device's memory, its FLOPs, a lower bound on its step time and
the collectives it runs. These are the compiler's facts and bounds, not measured run times. Exit status 3 (one
line) when the step does not fit.

--config.FIELD=VALUE overrides one field of the config, exactly as jaxcse-train's, e.g. --config.model.dtype=bfloat16.
"""


if __name__ == "__main__":
  run()
