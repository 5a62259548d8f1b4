"""Inference: sentences to vectors with a model spec and params.

encoder.py     the user's ``Encoder`` (``from jaxcse import Encoder``): embeddings, similarities, exact search
embedder.py    the jitted, length-bucketed forward pass
mteb_model.py  an encoder as an MTEB 2 model
"""
