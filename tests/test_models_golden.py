"""jaxcse's BERT and RoBERTa equal transformers 4.57's Flax classes on the same weights (a recorded comparison).

transformers 5 has no Flax models, so what its Flax BERT and RoBERTa classes (base and masked-LM) computed
was recorded once by tests/fixtures/make_flax_golden.py (its docstring: versions and command) in
tests/fixtures/flax_golden/: their weights as transformers' Flax classes saved them (flax_model.msgpack) and their
outputs on a padded batch in float64 and float32. Loading those folders also checks jaxcse's reading of the Flax
msgpack format and of a masked-LM checkpoint's prefixed names.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from transformers import AutoConfig

from jaxcse.core import compat
from jaxcse.models import bert, weights

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "flax_golden")
FAMILIES = {"bert": bert.BertForMaskedLM, "roberta": bert.RobertaForMaskedLM}
# The same operations in the same order: equal up to how another CPU's vectorised kernels order a sum. A reordered
# sum of n terms moves by at most n * eps relative to the sum of magnitudes; the widest sum here is the vocabulary
# projection (16 terms) and the attention (8 keys), two layers deep: 4 * 16 * eps bounds each output relative to
# its scale (O(1) after LayerNorm; logits O(1)).
BOUND = {"float64": 64 * np.finfo(np.float64).eps, "float32": 64 * np.finfo(np.float32).eps}


def _outputs(family: str, dtype):
  folder = os.path.join(GOLDEN, family)
  golden = np.load(os.path.join(folder, "golden.npz"))
  config = AutoConfig.from_pretrained(folder)
  state = weights.read_state(folder)
  ids, mask = golden["input_ids"], golden["attention_mask"]
  cast = lambda tree: jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), tree)  # noqa: E731
  base = bert.BertModel(config, dtype)
  shapes = jax.eval_shape(lambda: base.init(jax.random.key(0), ids, mask))["params"]
  params, absent, _ = weights.fill(
    shapes, state, prefixes=("", FAMILIES[family].backbone_prefix + "."), optional=("pooler",), where=folder
  )
  assert absent == ["pooler"]  # A masked-LM checkpoint has no NSP pooler; the recording gave it one.
  params["pooler"] = {"dense": {"kernel": golden["pooler_kernel"], "bias": golden["pooler_bias"]}}
  out = base.apply({"params": cast(params)}, ids, mask, output_hidden_states=True)
  mlm = FAMILIES[family](config, dtype)
  mlm_shapes = jax.eval_shape(lambda: mlm.init(jax.random.key(0), ids, mask))["params"]
  mlm_params, _, used = weights.fill(mlm_shapes, state, where=folder)
  weights.check_all_used(state, used, ignored=(), where=folder)  # Every recorded tensor is a parameter of ours.
  logits = mlm.apply({"params": cast(mlm_params)}, ids, mask)
  ours = {
    "last_hidden_state": out.last_hidden_state,
    "pooler_output": out.pooler_output,
    "hidden_states": np.stack(out.hidden_states),
    "logits": logits,
  }
  return golden, ours


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_equal_to_transformers_flax_classes(family, dtype):
  with compat.enable_x64(dtype == "float64"):
    golden, ours = _outputs(family, jnp.dtype(dtype))
    for name, value in ours.items():
      reference = golden[f"{name}_{dtype}"]
      assert value.dtype == reference.dtype
      np.testing.assert_allclose(np.asarray(value), reference, rtol=BOUND[dtype], atol=BOUND[dtype], err_msg=name)
