"""The largest global batch that fits a target, by compiling only: ``find_max_batch`` searches (regula falsi on
the memory each compilation reports), ``max_batch`` runs it on a config in one of ``MEMORY_VARIANTS``.
"""

from __future__ import annotations

import math

import ml_collections

from jaxcse.compile import targets as targets_lib
from jaxcse.compile.lowering import OutOfMemory, compile_train_step

# find_max_batch's variants: overrides of the config for each way of trading compute for memory.
MEMORY_VARIANTS = ("plain", "grad_cache", "gradient_checkpointing", "grad_cache+gradient_checkpointing")


def variant_config(config: ml_collections.ConfigDict, variant: str, chunk: int) -> ml_collections.ConfigDict:
  """``config`` with GradCache (chunks of ``chunk`` examples) and/or gradient checkpointing on or off."""
  if variant not in MEMORY_VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(MEMORY_VARIANTS)}")
  config = ml_collections.ConfigDict(config.to_dict())
  config.train.grad_cache_chunk = chunk if "grad_cache" in variant else 0
  config.model.gradient_checkpointing = "gradient_checkpointing" in variant
  return config


def find_max_batch(
  measure, granularity: int, start: int, *, limit: int = 1 << 20, near: bool = False
) -> tuple[int | None, list]:
  """The largest multiple of ``granularity`` (up to ``limit``) whose program fits, assuming all smaller ones fit.

  ``measure(batch) -> (fits, (bytes needed, bytes usable) or None)`` compiles once; the bytes are per device,
  None when the compiler refused the program without saying how much it needs. Memory grows about linearly with
  the batch, so the search solves ``needed(batch) = usable`` by the Illinois variant of regula falsi (the line
  through the bracket's two ends, one end's excess halved when the other end moved twice running), falling back
  to the bracket's middle where a number is missing. The bracket comes from ``start``: the line through the two
  largest fitting batches, else doubling. With ``near``, ``start`` is a guess of the answer (e.g. the same config's
  on a similar target, scaled): the bracket widens from it by 1, 2, 4, ... granularities, up if it fits, else
  down, so a right guess costs two compilations and one k granularities off about 2 log2(k). Ends when the largest fitting and the smallest
  failing batch are one granularity apart. Returns ``(largest, [(batch, fits), ...])``; largest None when not one
  granularity fits.
  """
  tried, excess = [], {}  # excess[batch] = needed - usable (< 0 fits).

  def probe(batch):
    ok, used = measure(batch)
    tried.append((batch, ok))
    if used is not None:
      excess[batch] = used[0] - used[1]
    return ok

  def on_grid(x):
    return int(x) // granularity * granularity

  if near:
    low, high = _widen(probe, max(granularity, min(on_grid(start), on_grid(limit))), granularity, on_grid(limit))
    if low is None or high is None:
      return low, tried
    return _narrow(probe, excess, low, high, granularity, on_grid), tried
  low = max(granularity, on_grid(start))
  while not probe(low):  # The config's own batch may not fit: halve until one does.
    if low == granularity:
      return None, tried
    low = max(granularity, on_grid(low // 2))
  high = None
  while high is None:  # Bracket: where the line through the two largest fits reaches the limit, else double.
    fits = sorted(b for b in excess if excess[b] < 0)[-2:]
    candidate = low * 2
    if len(fits) == 2 and excess[fits[1]] > excess[fits[0]]:
      (b1, b2), (e1, e2) = fits, (excess[fits[0]], excess[fits[1]])
      candidate = max(on_grid(b2 - e2 * (b2 - b1) / (e2 - e1)) + granularity, low + granularity)
    candidate = min(candidate, limit)
    if candidate <= low:
      return low, tried
    if probe(candidate):
      low = candidate
    else:
      high = candidate
  return _narrow(probe, excess, low, high, granularity, on_grid), tried


def _widen(probe, guess: int, granularity: int, limit: int) -> tuple[int | None, int | None]:
  """A bracket (largest fitting, smallest failing) around ``guess``, by steps of 1, 2, 4, ... granularities.

  (low, None): everything up to ``limit`` fits; (None, high): not even one granularity fits.
  """
  step = granularity
  if probe(guess):
    low = guess
    while low < limit:
      candidate = min(low + step, limit)
      if not probe(candidate):
        return low, candidate
      low, step = candidate, step * 2
    return low, None
  high = guess
  while high > granularity:
    candidate = max(high - step, granularity)
    if probe(candidate):
      return candidate, high
    high, step = candidate, step * 2
  return None, high


def _narrow(probe, excess: dict, low: int, high: int, granularity: int, on_grid) -> int:
  """The largest fitting batch in (low, high): Illinois regula falsi on the measured excess, else bisection."""
  weight = {"low": 1.0, "high": 1.0}  # Illinois: the factor on an end's excess that has not moved lately.
  moved = []
  while high - low > granularity:
    guess = None
    if low in excess and high in excess:
      e_low, e_high = excess[low] * weight["low"], excess[high] * weight["high"]
      guess = on_grid(low - e_low * (high - low) / (e_high - e_low))
    if guess is None or not low < guess < high:
      guess = on_grid((low + high) // 2)
    guess = min(max(guess, low + granularity), high - granularity)
    side = "low" if probe(guess) else "high"
    if side == "low":
      low = guess
    else:
      high = guess
    weight[side] = 1.0
    if moved[-1:] == [side]:  # The same end twice running: halve the other end's pull.
      weight["high" if side == "low" else "low"] /= 2
    moved.append(side)
  return low


def max_batch(
  config: ml_collections.ConfigDict,
  target: targets_lib.Target,
  variant: str,
  *,
  devices=None,
  chunk: int | None = None,
  columns: int | None = None,
  near: int | None = None,
  cache_dir: str | None = None,
  log=None,
) -> dict:
  """The largest global batch of ``config`` that fits ``target`` in ``variant``, by compiling only.

  GradCache's chunk: ``chunk``, else the config's ``train.grad_cache_chunk``, else its ``train.batch_size``
  (the batch it trains at, one pass at a time). Batches are multiples of the chunk and of 8 rows per device.
  ``near``: a guess of the answer to search around (``find_max_batch``'s ``near``); else the search starts
  from the config's batch.
  """
  devices = devices if devices is not None else targets_lib.devices(target)
  chunk = chunk or config.train.grad_cache_chunk or config.train.batch_size
  config = variant_config(config, variant, chunk)
  granularity = 8 * len(devices)
  if "grad_cache" in variant:
    granularity = granularity * chunk // math.gcd(granularity, chunk)

  def measure(batch):
    config.train.batch_size = batch
    try:
      report = compile_train_step(
        config, target, devices=devices, batch_size=batch, columns=columns, cache_dir=cache_dir
      )
    except OutOfMemory:
      ok, used = False, None
    else:
      memory = report["memory_bytes"]
      ok, used = report["fits"], (memory["total"], memory["device_limit"])
    if log is not None:
      log(
        f"  {variant}: batch {batch} {'fits' if ok else 'does not fit'}"
        + (f" ({used[0] / 2**30:.2f} of {used[1] / 2**30:.2f} GiB)" if used else " (the compiler ran out of memory)")
      )
    return ok, used

  largest, tried = find_max_batch(measure, granularity, near or config.train.batch_size, near=near is not None)
  return {
    "variant": variant,
    "max_batch_size": largest,
    "granularity": granularity,
    "near": near,
    "grad_cache_chunk": chunk if "grad_cache" in variant else 0,
    "tried": tried,
  }
