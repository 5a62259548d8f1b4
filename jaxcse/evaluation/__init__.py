"""Evaluation: SentEval's STS and transfer tasks, and the dev-set evaluation during training.

  sts_data.py     STS12-16, STS-B, SICK-R as SentEval loads them; the training dev sets
  sts_metrics.py  cosine scores, correlations, alignment/uniformity, the model-selection metrics
  transfer.py     SentEval's seven transfer tasks: loading, its validation schemes, scores
  probe.py        SentEval's classifier (nhid=0) as a JAX probe, many fits at once
  validation.py   evaluation during training: dev scores, held-out MLM, the best-checkpoint selection
  dev_sets.py     your own dev sets: scored pairs and a retrieval set, as sentence-transformers' evaluators

The command is ``jaxcse/evaluate.py`` (``python -m jaxcse.evaluate``).
"""
