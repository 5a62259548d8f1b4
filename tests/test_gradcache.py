"""GradCache step (config.train.grad_cache_chunk): the full-batch step's gradients in one chunk's memory.

``python tests/test_gradcache.py MODEL_DIR DATA_DIR OUT.npz`` runs the cached
step of ``MESH_METHOD`` on every visible device and saves its result (the
2-device check runs it with XLA_FLAGS simulating two CPU devices).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import flax
import jax
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":
  sys.path.insert(0, REPO)

from jaxcse.core import compat  # noqa: E402
from jaxcse import data as data_lib, models
from jaxcse.training import distributed, train_step
from jaxcse.storage import loading
from tests import helpers  # noqa: E402

BATCH = 16
CHUNK = 4  # 4 chunks of the 16-example batch.

# Every objective: sup SimCSE, MixCSE, DCLR with its frozen complementary model, unsup SimCSE with the MLM loss.
METHODS = {
  "simcse_sup": ("simcse_sup", {"loss.hard_negative_weight": 1.0}),
  "mixcse": ("mixcse", {}),
  "dclr": ("dclr", {"dclr.loss_form": "infonce"}),
  "simcse_mlm": ("base", {"mlm.enabled": True}),
}
MESH_METHOD = "simcse_mlm"


@functools.lru_cache(maxsize=None)
def _one_step(
  model_dir: str, data_dir: str, method: str, *, dropout: float, chunk: int, cache_gradients: bool = True
) -> tuple[dict, dict]:
  """One SGD step at lr 1 on all devices (the update is minus the gradient); returns (metrics, flat new params).

  In float64 (``helpers.in_float64``): chunked and whole-batch steps, or 1 and 2 devices, differ only in the
  order of their sums, which float64 leaves at ~1e-15 on any CPU.
  """
  with compat.enable_x64(True):
    return _one_step_float64(model_dir, data_dir, method, dropout=dropout, chunk=chunk, cache_gradients=cache_gradients)


def _one_step_float64(
  model_dir: str, data_dir: str, method: str, *, dropout: float, chunk: int, cache_gradients: bool
) -> tuple[dict, dict]:
  config_name, overrides = METHODS[method]
  config = helpers.tiny_config(
    model_dir, data_dir, config_name, **{"train.batch_size": BATCH, "train.grad_cache_chunk": chunk, **overrides}
  )
  pooling = models.PoolerSpec(config.model.pooler, config.model.mlp_only_train)
  spec, params = helpers.in_float64(
    *models.load_pretrained(model_dir, pooling, dropout=dropout, seed=config.seed, with_mlm_head=config.mlm.enabled)
  )
  corpus = data_lib.load_corpus(config.data.train, root=data_dir)
  batch = data_lib.Batches(corpus, spec.tokenizer, batch_size=BATCH, max_seq_len=16, seed=config.seed).batch(0)
  mesh = distributed.make_mesh()
  replicated = NamedSharding(mesh, PartitionSpec())
  complementary, comp_params = None, None
  if config.method == "dclr":
    loaded = loading.load_model(config.dclr.complementary_model)
    complementary, comp_params = helpers.in_float64(loaded.spec, loaded.params)
    comp_params = jax.device_put(comp_params, replicated)
  tx = optax.sgd(1.0)
  state = jax.device_put(train_step.TrainState(step=np.int32(0), params=params, opt_state=tx.init(params)), replicated)
  step = jax.jit(
    train_step.make_train_step(config, spec, tx, complementary, cache_gradients=cache_gradients), donate_argnums=0
  )
  state, metrics = step(state, jax.device_put(batch, NamedSharding(mesh, PartitionSpec("data"))), comp_params)
  return jax.device_get(metrics), flax.traverse_util.flatten_dict(jax.device_get(state.params), sep="/")


# Float64 sums of at most ~1e3 O(1) terms reordered (chunks, devices): ~1e3 * 2**-53 * O(10) amplification through the
# tiny network, ~1e-12 (measured: ~1e-15). A defect (a chunk with other dropout masks, negatives missing across
# chunks or devices) moves losses and gradients by 1e-3 or more.
RTOL, ATOL = 1e-10, 1e-12


def _assert_same_step(actual: tuple[dict, dict], expected: tuple[dict, dict]) -> None:
  (m1, p1), (m2, p2) = actual, expected
  assert set(m1) == set(m2)
  for key in m1:
    np.testing.assert_allclose(m1[key], m2[key], rtol=RTOL, atol=ATOL, err_msg=key)
  assert set(p1) == set(p2)
  for key in p1:  # Params moved by exactly the gradient (SGD, lr 1): a gradient check.
    assert p1[key].dtype == np.float64, key
    np.testing.assert_allclose(p1[key], p2[key], rtol=RTOL, atol=ATOL, err_msg=key)


@pytest.mark.parametrize("method", list(METHODS))
def test_grad_cache_without_dropout_equals_full_batch_step(tiny_model_dir, small_data_dir, method):
  # Without dropout the chunks cannot change the math: the cached step is the plain full-batch step.
  plain = _one_step(tiny_model_dir, small_data_dir, method, dropout=0.0, chunk=0)
  cached = _one_step(tiny_model_dir, small_data_dir, method, dropout=0.0, chunk=CHUNK)
  _assert_same_step(cached, plain)
  assert {"pos_score", "neg_score", "contrastive_loss"} <= set(cached[0])


def test_grad_cache_replays_dropout(tiny_model_dir, small_data_dir):
  # With dropout each chunk draws its masks from its own key, in both passes: the cached step equals the same
  # chunked embeddings differentiated as one graph (full-batch memory), for the embeddings and the MLM loss.
  reference = _one_step(tiny_model_dir, small_data_dir, "simcse_mlm", dropout=0.1, chunk=CHUNK, cache_gradients=False)
  cached = _one_step(tiny_model_dir, small_data_dir, "simcse_mlm", dropout=0.1, chunk=CHUNK)
  _assert_same_step(cached, reference)
  # The masks matter at this tolerance (so a pass that drew other masks would fail the check above).
  no_dropout = _one_step(tiny_model_dir, small_data_dir, "simcse_mlm", dropout=0.0, chunk=CHUNK)
  assert abs(float(no_dropout[0]["loss"]) - float(cached[0]["loss"])) > 1e-3


def test_grad_cache_on_two_devices(tiny_model_dir, small_data_dir, tmp_path):
  # The batch sharded over a 2-device data mesh: chunks span both devices, the compiler does the rest.
  out = str(tmp_path / "two.npz")
  env = {
    **os.environ,
    "XLA_FLAGS": helpers.simulated_devices(2),
    "JAX_PLATFORMS": "cpu",
    "JAX_ENABLE_X64": "1",
  }
  subprocess.run(
    [sys.executable, os.path.abspath(__file__), tiny_model_dir, small_data_dir, out], env=env, check=True, cwd=REPO
  )
  two = np.load(out)
  assert int(two["devices"]) == 2
  metrics, params = _one_step(tiny_model_dir, small_data_dir, MESH_METHOD, dropout=0.1, chunk=CHUNK)
  np.testing.assert_allclose(two["loss"], metrics["loss"], rtol=RTOL)
  for key, value in params.items():
    # Sums over the batch reduced in another order across devices (in float64, see RTOL); a structural error
    # (negatives or masks not spanning both devices) moves gradients by orders of magnitude more.
    np.testing.assert_allclose(two[key], value, rtol=RTOL, atol=ATOL, err_msg=key)


def _compiled_bytes(spec: models.ModelSpec, params, config, batch_size: int, chunk: int) -> int:
  """Arguments + temporaries of the compiled AdamW train step (donated state), from XLA's memory analysis."""
  config = config.copy_and_resolve_references()
  config.train.grad_cache_chunk = chunk
  tx = train_step.make_optimizer(config.train, 10)
  state = jax.eval_shape(lambda p: train_step.TrainState(step=np.int32(0), params=p, opt_state=tx.init(p)), params)
  shape = jax.ShapeDtypeStruct((batch_size, 1, config.data.max_seq_len), np.int32)
  batch = {"input_ids": shape, "attention_mask": shape}
  compiled = jax.jit(train_step.make_train_step(config, spec, tx), donate_argnums=0).lower(state, batch).compile()
  stats = compiled.memory_analysis()
  return stats.argument_size_in_bytes + stats.temp_size_in_bytes


def test_batch_512_in_chunks_of_64_needs_the_memory_of_batch_64(tiny_model_dir, small_data_dir):
  config = helpers.tiny_config(tiny_model_dir, small_data_dir)
  spec, params = models.load_pretrained(tiny_model_dir, models.PoolerSpec("cls", True), dropout=0.1, seed=0)
  plain_64 = _compiled_bytes(spec, params, config, 64, 0)
  cached_512 = _compiled_bytes(spec, params, config, 512, 64)
  plain_512 = _compiled_bytes(spec, params, config, 512, 0)
  param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
  print(
    f"\ntiny model ({param_bytes / 2**20:.2f} MiB params), len 16, AdamW: arguments + temporaries "
    f"plain batch 64 {plain_64 / 2**20:.2f} MiB, cached batch 512 / chunk 64 {cached_512 / 2**20:.2f} MiB, "
    f"plain batch 512 {plain_512 / 2**20:.2f} MiB"
  )
  # One chunk's activations as the plain batch-64 step, plus at most the gradient accumulator of the scan.
  assert cached_512 <= plain_64 + param_bytes
  assert cached_512 < plain_512 / 3


def _main(model_dir: str, data_dir: str, out: str) -> None:
  metrics, params = _one_step(model_dir, data_dir, MESH_METHOD, dropout=0.1, chunk=CHUNK)
  np.savez(out, devices=np.asarray(jax.device_count()), loss=np.asarray(metrics["loss"]), **params)


if __name__ == "__main__":
  _main(*sys.argv[1:4])


def test_value_and_grad_on_a_linear_embedding_equals_the_plain_gradient():
  """gradcache alone, in float64: chunked = one graph = the plain gradient, for a batch loss and a summed loss."""
  from jaxcse.training import gradcache

  with compat.enable_x64(True):
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(6, 4)), "b": rng.normal(size=(4,))}
    xs = {"x": rng.normal(size=(12, 6))}

    def embed(p, chunk):
      return chunk["x"] @ p["w"] + p["b"]  # [rows, 4]

    def batch_loss(z):  # InfoNCE of each row against all rows: every chunk's gradient depends on every other chunk.
      logits = z @ z.T / 0.5
      return -jax.numpy.mean(
        jax.nn.log_softmax(logits - 1e3 * np.eye(len(z)), axis=1)[np.arange(len(z)), (np.arange(len(z)) + 1) % len(z)]
      ), {}

    def chunk_loss(p, chunk):
      return jax.numpy.sum(jax.numpy.tanh(embed(p, chunk)) ** 2), {"rows": jax.numpy.asarray(chunk["x"].shape[0])}

    weight = 0.3

    def plain(p):
      return batch_loss(embed(p, xs))[0] + weight * chunk_loss(p, xs)[0]

    want_value, want_grads = jax.value_and_grad(plain)(params)
    chunks = gradcache.to_chunks(xs, 3)
    np.testing.assert_array_equal(gradcache.from_chunks(chunks["x"]), xs["x"])  # Strided chunks, back in order.
    for cache in (True, False):
      (value, parts), grads = gradcache.value_and_grad(
        params, chunks, embed=embed, batch_loss=batch_loss, chunk_loss=chunk_loss, chunk_weight=weight, cache=cache
      )
      np.testing.assert_allclose(value, want_value, rtol=1e-12)
      assert int(parts.chunk_aux["rows"]) == 12
      for key in params:
        np.testing.assert_allclose(grads[key], want_grads[key], rtol=1e-12, atol=1e-14, err_msg=f"{key} cache={cache}")
    # Each part alone.
    (_, _), grads = gradcache.value_and_grad(params, chunks, embed=embed, batch_loss=batch_loss)
    only_batch = jax.grad(lambda p: batch_loss(embed(p, xs))[0])(params)
    np.testing.assert_allclose(grads["w"], only_batch["w"], rtol=1e-12, atol=1e-14)
    (_, _), grads = gradcache.value_and_grad(params, chunks, chunk_loss=chunk_loss, chunk_weight=weight)
    only_sum = jax.grad(lambda p: weight * chunk_loss(p, xs)[0])(params)
    np.testing.assert_allclose(grads["w"], only_sum["w"], rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="together"):
      gradcache.value_and_grad(params, chunks, embed=embed)
