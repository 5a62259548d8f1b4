"""Issue 64's fused-attention check: ``jaxcse.models.attention.attend`` with cuDNN's fused kernel
(``implementation="cudnn"``) against XLA's attention (``"xla"``), on packed rows and on padded rows, forward and
gradients, at BERT-base's heads (12 x 64), in bfloat16 and float16; each also against a float32 reference.

  python experiments/packing/attention_fused.py [--smoke]  # --smoke: tiny shapes, bfloat16, XLA on both sides (a CPU)

Prints one line per case: the largest difference, at real tokens, of each side from the float32 reference (the
fused path passes when its error is within a small factor of XLA's own 16-bit error: both round q, k, v and the
output to 16 bits), whether padding tokens stay finite, and each side's time per call (forward; forward and
backward), median of repeats after a warm-up. Exit status 1 if a case fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxcse.models import attention  # noqa: E402


def packed_segments(rng: np.random.Generator, rows: int, length: int, low: int, high: int) -> np.ndarray:
  """Segment ids ``[rows, length]``: texts of ``low..high`` tokens laid one after another in each row (1, 2, ...),
  0 after the last one that fits."""
  ids = np.zeros((rows, length), np.int32)
  for r in range(rows):
    column, segment = 0, 1
    while True:
      n = int(rng.integers(low, high + 1))
      if column + n > length:
        break
      ids[r, column : column + n] = segment
      column, segment = column + n, segment + 1
  return ids


def padded_mask(rng: np.random.Generator, rows: int, length: int, low: int) -> np.ndarray:
  """A padding mask ``[rows, length]``: each row's first ``low..length`` tokens real."""
  lengths = rng.integers(low, length + 1, size=rows)
  return (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)


def timed(fn, *args, repeats: int) -> float:
  """Median seconds per call of a jitted ``fn`` after one warm-up call (which compiles)."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--smoke", action="store_true", help="tiny shapes, XLA on both sides (runs on a CPU)")
  args = parser.parse_args(argv)
  fused = "xla" if args.smoke else "cudnn"
  rows, length, heads, depth, repeats = (4, 32, 2, 16, 2) if args.smoke else (256, 128, 12, 64, 20)
  print(f"devices {jax.devices()} kind {jax.devices()[0].device_kind}; fused side: {fused}")
  rng = np.random.default_rng(0)
  failures = 0
  layouts = {
    "packed": attention.visible(segment_ids=jnp.asarray(packed_segments(rng, rows, length, 8, 40))),
    "packed_window": attention.visible(
      segment_ids=jnp.asarray(packed_segments(rng, rows, length, 8, 40)), window=8
    ),  # ModernBERT's local layers.
    "padded": attention.visible(attention_mask=jnp.asarray(padded_mask(rng, rows, length, 8))),
  }
  for layout, mask in layouts.items():
    # The tokens whose outputs anyone reads: a query that sees at least one key.
    real = np.asarray(jnp.any(jnp.broadcast_to(mask, (rows, 1, length, length)), axis=-1))[:, 0]  # [rows, length]
    q, k, v, cotangent = (jnp.asarray(rng.normal(size=(rows, length, heads, depth)), jnp.float32) for _ in range(4))

    def run(implementation, dtype, q, k, v):
      return attention.attend(
        q.astype(dtype), k.astype(dtype), v.astype(dtype), mask, dtype=dtype, implementation=implementation
      ).astype(jnp.float32)

    def loss_and_grads(implementation, dtype):
      def loss(q, k, v, cotangent):  # The cotangent an argument: as a constant, XLA would fold it at compile time.
        out = run(implementation, dtype, q, k, v)
        return jnp.sum(jnp.where(real[:, :, None, None], out * cotangent, 0.0))

      grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
      return lambda q, k, v: grad(q, k, v, cotangent)

    reference = jax.jit(lambda q, k, v: run("xla", jnp.float32, q, k, v))(q, k, v)
    reference_grads = loss_and_grads("xla", jnp.float32)(q, k, v)[1]
    scale = float(jnp.max(jnp.abs(reference)))
    for dtype in (jnp.bfloat16,) if args.smoke else (jnp.bfloat16, jnp.float16):  # XLA:CPU has no float16 dot.
      errors, grad_errors, finite, seconds = {}, {}, {}, {}
      for side in ("xla", fused):
        forward = jax.jit(lambda q, k, v, side=side, dtype=dtype: run(side, dtype, q, k, v))
        out = forward(q, k, v)
        errors[side] = float(jnp.max(jnp.abs(jnp.where(real[:, :, None, None], out - reference, 0.0))))
        finite[side] = bool(jnp.all(jnp.isfinite(out)))
        both = loss_and_grads(side, dtype)
        grads = both(q, k, v)[1]
        grad_errors[side] = max(
          float(jnp.max(jnp.abs(g - r)) / jnp.max(jnp.abs(r))) for g, r in zip(grads, reference_grads)
        )
        seconds[side] = (timed(forward, q, k, v, repeats=repeats), timed(both, q, k, v, repeats=repeats))
      # Both sides round their inputs and output to 16 bits: the fused side passes within 4x XLA's own error
      # (and one 16-bit rounding of the largest output, should XLA's error happen to be tiny).
      eps = float(jnp.finfo(dtype).eps)
      ok = (
        finite[fused]
        and errors[fused] <= 4 * errors["xla"] + eps * scale
        and grad_errors[fused] <= 4 * grad_errors["xla"] + eps
      )
      failures += not ok
      name = jnp.dtype(dtype).name
      print(
        f"{layout:13s} {name:8s} rows {rows} x {length}: max|out - f32| xla {errors['xla']:.2e} {fused} "
        f"{errors[fused]:.2e} (|out| <= {scale:.2f}); grads rel xla {grad_errors['xla']:.2e} {fused} "
        f"{grad_errors[fused]:.2e}; finite {finite[fused]}; ms fwd xla {seconds['xla'][0] * 1e3:.3f} {fused} "
        f"{seconds[fused][0] * 1e3:.3f}, fwd+bwd xla {seconds['xla'][1] * 1e3:.3f} {fused} "
        f"{seconds[fused][1] * 1e3:.3f}; {'ok' if ok else 'FAIL'}"
      )
  print(f"attention check: {failures} failed")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
