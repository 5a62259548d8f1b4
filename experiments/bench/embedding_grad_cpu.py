"""CPU seconds of value_and_grad of BertEmbeddings alone (MiniLM's width, batch 128 = 64 x 2 views, length 32).

  PYTHONPATH=CHECKOUT taskset -c 0 python experiments/bench/embedding_grad_cpu.py LABEL [bert|roberta]

Runs the embeddings of whichever jaxcse PYTHONPATH names (before ff54556's change the module took explicit token
types and positions: the fallback below gives it the ones BertModel gave it), in float32, training mode.
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from transformers import BertConfig, RobertaConfig
from jaxcse.models import bert

family = sys.argv[2] if len(sys.argv) > 2 else "bert"
kw = dict(hidden_size=384, num_hidden_layers=1, num_attention_heads=12, intermediate_size=1536)
c = (
  BertConfig(**kw)
  if family == "bert"
  else RobertaConfig(vocab_size=30522, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, **kw)
)
rng = np.random.default_rng(0)
lengths = rng.integers(8, 33, size=128)
ids = rng.integers(1000, 30522, size=(128, 32))
ids = jnp.asarray(np.where(np.arange(32)[None] < lengths[:, None], ids, c.pad_token_id), jnp.int32)
m = bert.BertEmbeddings(c, jnp.float32)
try:
  p = m.init(jax.random.key(0), ids, None, None, True)
  args = (ids, None, None, False)
except AttributeError:  # The module before the change: explicit inputs.
  args = (ids, jnp.zeros_like(ids), bert.default_position_ids(c, ids), False)
  p = m.init(jax.random.key(0), *args[:3], True)
cot = jnp.asarray(rng.normal(size=(128, 32, 384)), jnp.float32)
f = jax.jit(jax.value_and_grad(lambda p, k: jnp.sum(m.apply(p, *args, rngs={"dropout": k}) * cot)))
k = jax.random.key(1)
jax.block_until_ready(f(p, k))
ts = []
for _ in range(7):
  t0 = time.process_time()
  for _ in range(20):
    jax.block_until_ready(f(p, k))
  ts.append((time.process_time() - t0) / 20)
print(f"{sys.argv[1]} {family}: median {sorted(ts)[3] * 1e3:.2f} ms CPU per value_and_grad (min {min(ts) * 1e3:.2f})")
