#!/usr/bin/env bash
# Paired (experiments/own_encoders/README.md): the previous version (transformers' Flax BERT; /work/pc-code, venv-old) and today's (own BERT; /work/main,
# venv-new), alternated, each printing its own PyTorch baseline and ratio.
for round in 1 2; do
  echo "=== round $round: before (transformers 4.57 FlaxBertModel)"
  (cd /work/pc-code && JAXCSE_DATA_DIR=/work/shared/data /work/venv-old/bin/python -m benchmarks.bench train --shape minilm 2>&1 | tail -6)
  echo "=== round $round: after (jaxcse's own BERT)"
  (cd /work/main && JAXCSE_DATA_DIR=/work/shared/data /work/venv-new/bin/python -m benchmarks.bench train --shape minilm 2>&1 | tail -6)
done
