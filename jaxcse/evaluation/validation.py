"""Evaluation during training: dev-set scores, held-out MLM, and the best-checkpoint selection.

``Evaluator(...)(step, params, best)`` scores the params being trained on the STS-B (and SICK-R) dev sets (and,
for masked-LM pretraining, a held-out corpus), writes the record, and saves the params as the best checkpoint
when the config's selection metric (``sts_metrics.SELECTION_METRICS``) beats ``best``, the run's ``BestSoFar``.
``BestSoFar`` is a value: the loop threads it through the evaluations and into every latest checkpoint's
metadata, so a resumed run continues the same selection.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable

import jax
import ml_collections
import numpy as np

from jaxcse import data as data_lib, models
from jaxcse.evaluation import dev_sets as dev_sets_lib, sts_data, sts_metrics
from jaxcse.inference import embedder as embedder_lib
from jaxcse.models import mlm
from jaxcse.storage import checkpoints

log = logging.getLogger("jaxcse")


@dataclasses.dataclass(frozen=True)
class BestSoFar:
  """A run's model selection so far: its best evaluation (the best checkpoint's step) and its first evaluation."""

  step: int | None = None  # The step of the best evaluation so far (its params are the best checkpoint); None: none.
  metric: float | None = None  # Its selection metric (``eval.metric``).
  first_eval: dict | None = None  # The first evaluation's step and scores (the run's summary reports it).

  def improved_by(self, metric: float) -> bool:
    """Whether an evaluation scoring ``metric`` becomes the best: never a non-finite one (NaN from a degenerate
    evaluation, e.g. a collapsed encoder's constant similarities), and always a finite one over a non-finite best
    (an older jaxcse kept NaN as best, which nothing could beat)."""
    if metric is None or not math.isfinite(metric):
      return False
    return self.metric is None or not math.isfinite(self.metric) or metric > self.metric

  def after(self, step: int, metric: float, scores: dict[str, float]) -> BestSoFar:
    """The selection after an evaluation at ``step``: its first evaluation kept, ``step`` the best if it improved."""
    first_eval = self.first_eval if self.first_eval is not None else {"step": step, **scores}
    if self.improved_by(metric):
      return BestSoFar(step, metric, first_eval)
    return dataclasses.replace(self, first_eval=first_eval)

  def to_meta(self) -> dict:
    """The latest checkpoints' metadata (the keys every jaxcse version wrote, so old workdirs resume)."""
    return {"best_metric": self.metric, "best_step": self.step, "first_eval": self.first_eval}

  @classmethod
  def from_meta(cls, meta: dict) -> BestSoFar:
    return cls(step=meta["best_step"], metric=meta["best_metric"], first_eval=meta["first_eval"])


class HeldoutMLM:
  """Masked-LM loss and accuracy on a held-out corpus: the same packed sequences and masks at every evaluation."""

  def __init__(self, config: ml_collections.ConfigDict, spec: models.ModelSpec, corpus: data_lib.Corpus):
    batches = data_lib.PackedBatches(
      corpus,
      spec.tokenizer,
      batch_size=config.eval.batch_size,
      max_seq_len=config.data.max_seq_len,
      seed=config.seed,
      keep_last=True,
    )
    self.batches = [batches.batch(i)["input_ids"][:, 0] for i in range(batches.steps_per_epoch)]
    self.masks = [batches.batch(i)["attention_mask"][:, 0] for i in range(batches.steps_per_epoch)]
    masking = mlm.masking_settings(spec.tokenizer, spec.hf_config.vocab_size, config.mlm.probability)
    masking["num_predictions"] = mlm.pretraining_predictions(config)

    def sums(params, ids, mask, key):
      masked, positions, labels, weights = mlm.mask_positions(key, ids, mask, **masking)
      logits = models.mlm_logits_at(spec, params, masked, mask, positions, train=False)
      ce, correct = mlm.cross_entropy_sums(logits, labels, weights)
      return ce, correct, weights.sum()

    self._sums = jax.jit(sums)
    self._key = jax.random.key(config.seed + 1)  # Fixed masks, apart from the training masks.

  def __call__(self, params) -> dict[str, float]:
    totals = np.zeros(3)
    for i, (ids, mask) in enumerate(zip(self.batches, self.masks)):
      totals += np.asarray(jax.device_get(self._sums(params, ids, mask, jax.random.fold_in(self._key, i))), np.float64)
    ce, correct, count = totals
    return {
      "heldout_mlm_loss": float(ce / count),
      "heldout_mlm_accuracy": float(correct / count),
      "heldout_mlm_tokens": int(count),
    }


class Evaluator:
  """Runs the evaluation during training: STS-B/SICK-R dev (+ its dynamics), held-out MLM; saves the best params.

  ``attend_padding``: whether the trained model attends padding (the method's choice, ``objectives``), so the dev
  sets are embedded as it trains. ``own``: the config's own dev sets (``eval.pairs``, ``eval.retrieval``), scored
  as ``pairs_*`` and ``retrieval_*``. ``write``: where an evaluation's record goes (the run's ``metrics.jsonl``).
  """

  def __init__(
    self,
    config: ml_collections.ConfigDict,
    spec: models.ModelSpec,
    *,
    attend_padding: bool,
    heldout: data_lib.Corpus | None,
    dev_sets: dict[str, sts_data.PairSet],
    best_manager,
    run_id: str | None,
    write: Callable[[dict], None],
    own: dev_sets_lib.OwnDevSets | None = None,
  ):
    self.dev_sets = dev_sets  # sts_data.load_dev_sets, read before the run wrote anything.
    self.own = own or dev_sets_lib.OwnDevSets()  # dev_sets.OwnDevSets.load, read then too.
    # Padded, not packed: a run's model selection keeps the shapes its config.json and its earlier evaluations
    # had (packing moves scores by float32 rounding, enough to flip a near tie for best), and jaxcse.compile
    # --inference lowers this same padded forward.
    self.embedder = embedder_lib.BucketedEmbedder(
      spec, spec.pooling.dev_pooler, batch_size=config.eval.batch_size, attend_padding=attend_padding, packed=False
    )
    self.heldout = HeldoutMLM(config, spec, heldout) if heldout is not None else None
    self.select = sts_metrics.SELECTION_METRICS[config.eval.metric]
    self.best_manager, self.run_id, self.write = best_manager, run_id, write

  def __call__(self, step: int, params, best: BestSoFar, *, log_record: bool = True) -> BestSoFar:
    """Evaluates ``params`` as of ``step``; saves them as the best checkpoint if they beat ``best``; returns the
    selection after this evaluation.

    ``log_record=False`` (a re-evaluation of a resume point) leaves metrics.jsonl alone: its lines are the run's
    scheduled evaluations.
    """
    t0 = time.time()
    scores, table = sts_metrics.dev_scores_and_embeddings(lambda s: self.embedder(s, params), self.dev_sets)
    # The training dynamics of the MixCSE paper (Fig. 4b) and Wang & Isola's map, from the same embeddings.
    dynamics = sts_metrics.dev_dynamics(table, self.dev_sets["stsb_dev"])
    if self.heldout is not None:
      scores.update(self.heldout(params))
    scores.update(self.own(lambda s: self.embedder(s, params)))
    metric = self.select(scores)
    record = {
      "step": step,
      "eval/metric": metric,
      **{f"eval/{k}": v for k, v in scores.items()},
      **{f"eval/{k}": v for k, v in dynamics.items()},
      "eval/seconds": round(time.time() - t0, 2),
    }
    if log_record:
      self.write(record)
    log.info("step %d: %s", step, {k: round(v, 4) for k, v in scores.items()})
    if not math.isfinite(metric):
      log.warning(
        "step %d: the dev evaluation's %s is %s (a degenerate evaluation: e.g. every sentence embedded as "
        "the same vector); this step cannot become the best checkpoint",
        step,
        "eval/metric",
        metric,
      )
    if best.improved_by(metric):
      checkpoints.save(
        self.best_manager, step, meta={"step": step, "metric": metric, **scores}, run_id=self.run_id, params=params
      )
    return best.after(step, metric, scores)
