"""Inference: sentences to vectors with a model spec and params (the ``Encoder`` is ``jaxcse/encode.py``'s).

embedder.py    the jitted, length-bucketed forward pass
mteb_model.py  an encoder as an MTEB 2 model
"""
