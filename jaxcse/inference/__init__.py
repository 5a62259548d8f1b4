"""Inference: sentences to vectors with a model spec and params, and what is computed from the vectors.

encoder.py         the user's ``Encoder`` (``from jaxcse import Encoder``): embeddings, similarities, exact search
embedder.py        the jitted, length-bucketed forward pass
mteb_model.py      an encoder as an MTEB 2 model
hard_negatives.py  negatives chosen from embeddings by sentence-transformers' rules (jaxcse-mine's selection)
"""
