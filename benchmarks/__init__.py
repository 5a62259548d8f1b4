"""Baselines for ``python -m jaxcse.bench`` (PyTorch, sentence-transformers, SentEval); not part of jaxcse."""
