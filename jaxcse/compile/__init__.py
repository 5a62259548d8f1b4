"""Ahead-of-time compilation for TPU slices and GPUs that are not here (``jaxcse-compile``, docs/compile.md).

  lowering.py   the trainer's jitted step and the BucketedEmbedder's forward, lowered from shapes (no weights, no
                data) and compiled for a target; compilations cached by a fingerprint of the program
  analysis.py   what an executable says: memory per device, FLOPs and bytes, collectives, the roofline bound
  max_batch.py  the largest global batch that fits, by compiling only
  targets.py    TPU slices and GPUs, their peaks and sources, their compile-only devices; gpu_targets/*.txtpb
  __main__.py   the command: ``python -m jaxcse.compile``, ``jaxcse-compile``

Importing this package imports no jax: the command sets ``JAX_PLATFORMS`` and finds the CUDA plugin installed for
compiling before jax starts.
"""


def __getattr__(name):
  # The jaxcse-compile console script (pyproject.toml: jaxcse.compile:run), without importing __main__ here:
  # ``python -m jaxcse.compile`` imports this package first and runs __main__.py itself.
  if name == "run":
    from jaxcse.compile.__main__ import run

    return run
  raise AttributeError(f"module 'jaxcse.compile' has no attribute {name!r}")
