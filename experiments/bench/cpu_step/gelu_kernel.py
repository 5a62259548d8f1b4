import functools
import time
import statistics
import os
import jax
import jax.numpy as jnp
import numpy as np


def pytorch_gelu(x):
  """The exact GELU as PyTorch writes it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
  return x * 0.5 * (1 + jax.lax.erf(x * np.sqrt(0.5).astype(x.dtype)))


x = jax.random.normal(jax.random.key(0), (128, 32, 1536))
fns = {
  n: jax.jit(jax.grad(lambda v, fn=fn: jnp.sum(fn(v) * v)))
  for n, fn in (("erfc", functools.partial(jax.nn.gelu, approximate=False)), ("erf", pytorch_gelu))
}
for f in fns.values():
  f(x).block_until_ready()
cpu = {n: [] for n in fns}
for r in range(10):
  for n, f in fns.items():
    c = time.process_time()
    f(x).block_until_ready()
    cpu[n].append(time.process_time() - c)
m = {n: statistics.median(v) for n, v in cpu.items()}
print(
  f"gelu forward+grad [128,32,1536]: erfc {m['erfc'] * 1e3:.1f} ms, erf {m['erf'] * 1e3:.1f} ms CPU, ratio {m['erf'] / m['erfc']:.2f}, load {os.getloadavg()[0]:.1f}"
)
