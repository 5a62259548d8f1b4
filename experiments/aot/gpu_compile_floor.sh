#!/usr/bin/env bash
# probe which jax version's CUDA plugin compiles for jaxcse's H100 spec on a CPU
for v in "$@"; do
  d=/tmp/venv-gpu-$v
  [ -x $d/bin/python ] || ~/.pyenv/versions/3.13.0/bin/python3.13 -m venv $d
  $d/bin/pip install -q "jax[cuda12-local]==$v" "jaxlib==$v" > $d.install.log 2>&1 || { echo "$v install failed"; continue; }
  out=$(cd /work/main && JAX_PLATFORMS=cpu PYTHONPATH=/work/main $d/bin/python -c "
from jax.experimental import topologies
from jaxcse.compile import targets
text = targets.gpu_config_text(targets.TARGETS['h100'].gpu_config)
d = topologies.get_topology_desc(platform='cuda', topology_name='1x1x1', topology='1x1x1', target_config=text).devices
import jax
print('COMPILE', jax.jit(lambda x: x*2).trace(jax.ShapeDtypeStruct((4,), 'float32')).lower(lowering_platforms=('cuda',)).compile is not None, d)
" 2>&1)
  echo "== $v: $(echo "$out" | grep -E 'COMPILE|no field named|Error|Unable' | head -3)"
done
