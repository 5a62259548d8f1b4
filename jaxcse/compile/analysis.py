"""What a compiled program says: per-device memory, XLA's cost (FLOPs, bytes accessed), the collectives it runs,
its scatters, and a roofline lower bound on its step time from the target's peaks.

``analyse`` turns a compilation's ``Facts`` into the report ``jaxcse-compile --json`` writes: what a user needs
before renting anything.
"""

from __future__ import annotations

import collections
import dataclasses
import re

from jaxcse.compile import targets as targets_lib
from jaxcse.core import compat

_COLLECTIVE = re.compile(
  r"\s(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast|"
  r"ragged-all-to-all)(?:-start)?\("
)


def collectives(hlo_text: str) -> dict[str, int]:
  """Collective operations of an optimized HLO module, by kind (an async ``-start``/``-done`` pair counts once)."""
  return dict(sorted(collections.Counter(m.group(1) for m in _COLLECTIVE.finditer(hlo_text)).items()))


_COMPUTATION = re.compile(r"^(?:ENTRY )?%(?P<name>[\w.\-]+) \((?P<params>.*)\) -> .* \{$")
_PARAMETER = re.compile(r"(?P<name>[\w.\-]+): (?P<type>\w+\[[\d,]*\])")
_INSTRUCTION = re.compile(
  r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = (?P<type>\w+\[[\d,]*\])\S* (?P<op>[\w\-]+)\((?P<args>[^)]*)\)"
)
_OP_NAME = re.compile(r'op_name="(?P<op_name>[^"]*)"')


@dataclasses.dataclass(frozen=True)
class Scatter:
  """A scatter of an optimized HLO module: the array it updates (``operand``), its ``updates``, both as HLO types
  (``bf16[30522,768]``), the computation it is in (on a GPU, the fusion that becomes its kernel) and the jax
  operation it came from (``op_name``, e.g. ``.../word_embeddings/jit(_take)/scatter-add``)."""

  operand: str
  updates: str
  computation: str
  op_name: str

  @property
  def dtype(self) -> str:
    return self.operand.split("[")[0]


def scatters(hlo_text: str) -> list[Scatter]:
  """Every scatter of an optimized HLO module (``compiled.as_text()``), in the order of the text."""
  found, computation, types = [], "", {}
  for line in hlo_text.splitlines():
    head = _COMPUTATION.match(line)
    if head:
      computation = head["name"]
      types = {m["name"]: m["type"] for m in _PARAMETER.finditer(head["params"])}
      continue
    instruction = _INSTRUCTION.match(line)
    if not instruction:
      continue
    types[instruction["name"]] = instruction["type"]
    if instruction["op"] == "scatter":
      args = [a.strip().lstrip("%") for a in instruction["args"].split(",")]
      op_name = _OP_NAME.search(line)
      found.append(
        Scatter(types.get(args[0], "?"), types.get(args[-1], "?"), computation, op_name and op_name[1] or "")
      )
  return found


def cost_of(compiled) -> tuple[dict[str, float], str | None]:
  """``(XLA's cost analysis of the executable, where it came from)``; ``({}, None)`` when there is none.

  TPU and CPU executables carry their compiler's analysis. A device-less GPU executable reports none
  (``cost_analysis()`` is None in jaxlib 0.10.2); then XLA's HLO cost analysis runs on the GPU compiler's
  optimized module (its fusions as the GPU runs them), through jaxlib's ``hlo_module_cost_analysis``.
  """
  cost = compiled.cost_analysis()
  if isinstance(cost, list):  # Older jax: one dict per module.
    cost = cost[0] if cost else None
  if cost:
    return {k: float(v) for k, v in cost.items()}, "the compiler's cost analysis"
  cost = compat.hlo_module_cost_analysis(compiled.runtime_executable().hlo_modules()[0])
  if not cost:
    return {}, None
  return {k: float(v) for k, v in cost.items()}, "XLA's HLO cost analysis of the optimized module"


@dataclasses.dataclass(frozen=True)
class Memory:
  """Per-device bytes of a compiled program (``memory_analysis()``)."""

  argument: int
  output: int
  alias: int
  temp: int
  code: int

  @classmethod
  def of(cls, compiled) -> "Memory":
    m = compiled.memory_analysis()
    return cls(
      m.argument_size_in_bytes,
      m.output_size_in_bytes,
      m.alias_size_in_bytes,
      m.temp_size_in_bytes,
      m.generated_code_size_in_bytes,
    )

  @property
  def total(self) -> int:
    """What the program holds at once: donated arguments are reused for outputs (``alias``)."""
    return self.argument + self.output - self.alias + self.temp + self.code


@dataclasses.dataclass(frozen=True)
class Facts:
  """What one compilation established: the executable's memory, cost and collectives (or its out-of-memory error).

  ``fingerprint`` names the compilation: the lowered program, the target and the compilers' versions; a cache
  hit (``cached``) is an earlier compilation of the same fingerprint.
  """

  memory: Memory | None
  cost: dict
  cost_source: str | None
  collectives: dict
  compile_seconds: float
  fingerprint: str
  out_of_memory: str | None = None
  cached: bool = False


def compiler_versions(target: targets_lib.Target) -> dict[str, str]:
  """The versions that decide what the target's compiler produces."""
  import importlib.metadata

  packages = ["jax", "jaxlib"] + {
    "tpu": ["libtpu"],
    "gpu": ["jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cuda-nvcc-cu12"],
  }.get(target.platform, [])
  versions = {}
  for package in packages:
    try:
      versions[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      versions[package] = "absent"
  return versions


def roofline_seconds(
  flops: float | None, bytes_moved: float | None, target: targets_lib.Target
) -> tuple[float | None, str | None]:
  """``(seconds, what bounds them)``: the larger of FLOPs / peak FLOP/s and bytes / HBM bandwidth, per device.

  Terms without a number (a target without peaks, a missing cost) are left out; ``(None, None)`` if both are.
  """
  terms = {}
  if flops and target.bf16_flops_per_device:
    terms["compute"] = flops / target.bf16_flops_per_device
  if bytes_moved and target.memory_bandwidth_per_device:
    terms["memory"] = bytes_moved / target.memory_bandwidth_per_device
  if not terms:
    return None, None
  bound = max(terms, key=terms.get)
  return terms[bound], bound


def analyse(facts: Facts, target: targets_lib.Target, *, batch_size: int, num_devices: int) -> dict:
  """The report of one compiled program (the keys ``jaxcse.compile --json`` writes).

  ``roofline_step_seconds`` is a lower bound on the step time: no device does FLOPs faster than its bfloat16
  matrix peak, and every argument must be read and every result written once (``argument + output`` bytes) at
  no more than the HBM bandwidth. ``roofline_xla_bytes_seconds`` puts XLA's own count of the bytes the program's
  operations access (``bytes_accessed_per_device``: every op's operands and results) in place of that minimum:
  nearer what the program does, but not a bound (data that stays on chip is counted too).
  """
  memory = facts.memory
  limit = target.usable_bytes()
  flops = facts.cost.get("flops")
  bytes_accessed = facts.cost.get("bytes accessed")
  seconds, bound = roofline_seconds(flops, memory.argument + memory.output, target)
  xla_seconds, _ = roofline_seconds(flops, bytes_accessed, target)
  return {
    "target": target.name,
    "device": target.peaks.name if target.peaks else "cpu",
    "num_devices": num_devices,
    "num_hosts": target.num_hosts,
    "batch_size": batch_size,
    "memory_bytes": {
      "argument": memory.argument,
      "output": memory.output,
      "alias": memory.alias,
      "temp": memory.temp,
      "code": memory.code,
      "total": memory.total,
      "device_limit": limit,
    },
    "fits": memory.total <= limit,
    "flops_per_device": flops,
    "bytes_accessed_per_device": bytes_accessed,
    "cost_source": facts.cost_source,
    "roofline_step_seconds": seconds,
    "roofline_bound": bound,
    "sentences_per_second_bound": batch_size / seconds if seconds else None,
    "roofline_xla_bytes_seconds": xla_seconds,
    "peaks_per_device": None
    if target.peaks is None
    else {
      "bf16_flops": target.bf16_flops_per_device,
      "memory_bandwidth": target.memory_bandwidth_per_device,
      "source": target.peaks.source,
    },
    "collectives": facts.collectives,
    "compile_seconds": facts.compile_seconds,
    "cached": facts.cached,
    "fingerprint": facts.fingerprint,
    "compiler_versions": compiler_versions(target),
  }
