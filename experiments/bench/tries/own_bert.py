"""A hand-written BERT forward (same Flax params, fused QKV with FUSE=1) against FlaxBertModel's, fwd+bwd with
dropout, interleaved in one process; first checks both give the same deterministic output.

  FUSE=1 python experiments/bench/tries/own_bert.py; FUSE=0 python experiments/bench/tries/own_bert.py
"""

import os
import time
import statistics
import jax
import jax.numpy as jnp
from jaxcse import bench
from transformers import FlaxBertModel

shape = bench.SHAPES["minilm"]
cfg = shape.bert_config()
hf = FlaxBertModel(cfg, seed=0)
params = hf.params
ids, mask = bench.random_batch(shape, 128, 32)
ids, mask = jnp.asarray(ids), jnp.asarray(mask)
H, NH = cfg.hidden_size, cfg.num_attention_heads
p_drop = cfg.hidden_dropout_prob
FUSE_QKV = int(os.environ.get("FUSE", 1))


def ln(x, p, eps=cfg.layer_norm_eps):
  m = x.mean(-1, keepdims=True)
  v = jnp.square(x - m).mean(-1, keepdims=True)
  return (x - m) * jax.lax.rsqrt(v + eps) * p["scale"] + p["bias"]


def dense(x, p):
  return x @ p["kernel"] + p["bias"]


def dropout(x, key, rate):
  if key is None:
    return x
  keep = jax.random.bernoulli(key, 1 - rate, x.shape)
  return jnp.where(keep, x / (1 - rate), 0)


def layer(x, p, bias, key):
  B, L, _ = x.shape
  ks = jax.random.split(key, 3) if key is not None else [None] * 3
  a = p["attention"]["self"]
  if FUSE_QKV:
    w = jnp.concatenate([a["query"]["kernel"], a["key"]["kernel"], a["value"]["kernel"]], 1)
    b = jnp.concatenate([a["query"]["bias"], a["key"]["bias"], a["value"]["bias"]])
    qkv = (x @ w + b).reshape(B, L, 3, NH, H // NH)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
  else:
    q, k, v = (dense(x, a[n]).reshape(B, L, NH, H // NH) for n in ("query", "key", "value"))
  s = jnp.einsum("bqhd,bkhd->bhqk", q / jnp.sqrt(H // NH).astype(x.dtype), k) + bias
  pr = jax.nn.softmax(s, -1)
  pr = dropout(pr, ks[0], p_drop)
  o = jnp.einsum("bhqk,bkhd->bqhd", pr, v).reshape(B, L, H)
  x = ln(dropout(dense(o, p["attention"]["output"]["dense"]), ks[1], p_drop) + x, p["attention"]["output"]["LayerNorm"])
  h = jax.nn.gelu(dense(x, p["intermediate"]["dense"]), approximate=False)
  return ln(dropout(dense(h, p["output"]["dense"]), ks[2], p_drop) + x, p["output"]["LayerNorm"])


def own(params, ids, mask, key):
  e = params["embeddings"]
  pos = jnp.arange(ids.shape[1])
  x = (
    e["word_embeddings"]["embedding"][ids]
    + e["position_embeddings"]["embedding"][pos][None]
    + e["token_type_embeddings"]["embedding"][0]
  )
  x = ln(x, e["LayerNorm"])
  keys = jax.random.split(key, cfg.num_hidden_layers + 1) if key is not None else [None] * (cfg.num_hidden_layers + 1)
  x = dropout(x, keys[-1], p_drop)
  bias = jnp.where(mask[:, None, None, :] > 0, 0.0, jnp.finfo(x.dtype).min).astype(x.dtype)
  for i in range(cfg.num_hidden_layers):
    x = layer(x, params["encoder"]["layer"][str(i)], bias, keys[i])
  return x


def hfrun(params, ids, mask, key):
  kw = dict(
    token_type_ids=jnp.zeros_like(ids),
    position_ids=jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape),
    head_mask=None,
  )
  if key is None:
    return hf.module.apply({"params": params}, ids, mask, deterministic=True, **kw).last_hidden_state
  return hf.module.apply(
    {"params": params}, ids, mask, deterministic=False, rngs={"dropout": key}, **kw
  ).last_hidden_state


a = jax.jit(lambda p: hfrun(p, ids, mask, None))(params)
b = jax.jit(lambda p: own(p, ids, mask, None))(params)
print("det max diff", float(jnp.abs(a - b).max()))


def lossf(f):
  return jax.jit(jax.value_and_grad(lambda p, k: (f(p, ids, mask, k)[:, 0] ** 2).sum()))


fns = {"hf": lossf(hfrun), "own": lossf(own)}
for f in fns.values():
  jax.block_until_ready(f(params, jax.random.key(0)))
ts = {n: [] for n in fns}
for r in range(int(os.environ.get("N", 4))):
  for n, f in fns.items():
    t = time.perf_counter()
    jax.block_until_ready(f(params, jax.random.key(r)))
    ts[n].append(time.perf_counter() - t)
for n in ts:
  print(n, "fwd+bwd median %.3f" % statistics.median(ts[n]))
print("ratio hf/own %.2f" % (statistics.median(ts["hf"]) / statistics.median(ts["own"])))
