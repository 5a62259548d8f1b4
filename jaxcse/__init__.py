"""jaxcse: contrastive sentence embeddings (SimCSE and friends) in JAX/Flax."""

__version__ = "0.1.0"
