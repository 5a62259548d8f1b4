"""The numbers of an STS evaluation: cosine scores and their correlation with gold scores, Wang & Isola's
alignment and uniformity, the embeddings' largest angle (MixCSE's omega), and model selection during training.
Pure functions of embeddings (numpy); ``sts_data`` loads the pairs, ``evaluate`` runs the jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from jaxcse.evaluation.sts_data import PairSet
from jaxcse.inference import embedder as embedder_lib

Embed = Callable[[Sequence[str]], np.ndarray]  # Sentences -> [n, hidden] embeddings.

# SimCSE's positive pairs for alignment: STS-B pairs with a gold score of at least 4 (out of 5).
POSITIVE_MIN_SCORE = 4.0


def cosine_scores(e1: np.ndarray, e2: np.ndarray) -> np.ndarray:
  """Row-wise cosine similarity, as SentEval computes it (NaN-safe, in float64)."""
  e1 = np.nan_to_num(e1.astype(np.float64))
  e2 = np.nan_to_num(e2.astype(np.float64))
  denom = np.linalg.norm(e1, axis=1) * np.linalg.norm(e2, axis=1)
  return np.nan_to_num((e1 * e2).sum(axis=1) / denom)


def correlations(scores: np.ndarray, gold: np.ndarray) -> dict[str, float]:
  import scipy.stats  # Here, not at the top: it costs a second or two of every command's start-up.

  return {
    "pearson": float(scipy.stats.pearsonr(scores, gold)[0]),
    "spearman": float(scipy.stats.spearmanr(scores, gold)[0]),
    "nsamples": int(len(gold)),
  }


def embed_unique(embed: Embed, pair_sets: Sequence[PairSet]) -> dict[str, np.ndarray]:
  """Embeds every distinct sentence of ``pair_sets`` once."""
  return embedder_lib.embed_each_once(embed, (s for ps in pair_sets for s in (*ps.sent1, *ps.sent2)))


def score_pairs(table: dict[str, np.ndarray], pairs: PairSet) -> np.ndarray:
  e1 = np.stack([table[s] for s in pairs.sent1])
  e2 = np.stack([table[s] for s in pairs.sent2])
  return cosine_scores(e1, e2)


def _normalize_rows(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, np.float64)
  if x.ndim != 2:
    raise ValueError(f"expected embeddings of shape [n, dim], got {x.shape}")
  norms = np.linalg.norm(x, axis=1)
  if np.any(norms == 0) or not np.all(np.isfinite(norms)):
    raise ValueError("embeddings must be finite and non-zero to be normalised")
  return embedder_lib.normalize_rows(x)


def alignment(x: np.ndarray, y: np.ndarray, *, alpha: float = 2) -> float:
  """Wang & Isola's alignment: mean of ||f(x) - f(y)||^alpha over paired rows (lower is better).

  Args:
    x, y: ``[n, dim]`` embeddings; row i of ``x`` and of ``y`` form a positive pair. Rows are L2-normalised here.
    alpha: the exponent (2, as SimCSE).

  Returns:
    A float in [0, 2^alpha].
  """
  x, y = _normalize_rows(x), _normalize_rows(y)
  if x.shape != y.shape or len(x) == 0:
    raise ValueError(f"alignment needs two non-empty arrays of the same shape, got {x.shape} and {y.shape}")
  return float(np.mean(np.linalg.norm(x - y, axis=1) ** alpha))


def uniformity(x: np.ndarray, *, t: float = 2) -> float:
  """Wang & Isola's uniformity: log of the mean of exp(-t ||f(a) - f(b)||^2) over all pairs i < j (lower is better).

  Args:
    x: ``[n, dim]`` embeddings, n >= 2; rows are L2-normalised here.
    t: the temperature (2, as SimCSE).

  Returns:
    A float in [-4t, 0]: 0 when all rows are equal.
  """
  x = _normalize_rows(x)
  if len(x) < 2:
    raise ValueError(f"uniformity needs at least 2 embeddings, got {len(x)}")
  import scipy.spatial.distance  # As correlations: only when asked for.

  sq_dists = scipy.spatial.distance.pdist(x, "sqeuclidean")  # [n (n - 1) / 2], the pairs i < j.
  return float(np.log(np.mean(np.exp(-t * sq_dists))))


def largest_angle_deg(x: np.ndarray) -> float:
  """The largest angle between any two rows of ``[n, hidden]`` embeddings (n >= 2), in degrees.

  The MixCSE paper's omega (Fig. 4b): the biggest angle between any two
  sentences' embeddings of STS-B, taken as the opening of the spherical cap the
  embeddings fill; contrastive training widens it.
  """
  x = np.asarray(x, np.float64)
  if x.ndim != 2 or len(x) < 2:
    raise ValueError(f"need [n >= 2, hidden] embeddings, got {x.shape}")
  unit = embedder_lib.normalize_rows(x)
  cos = unit @ unit.T  # [n, n]
  np.fill_diagonal(cos, np.inf)  # A row with itself is not a pair.
  return float(np.degrees(np.arccos(np.clip(cos.min(), -1.0, 1.0))))


def dev_dynamics(table: dict[str, np.ndarray], stsb_dev: PairSet) -> dict[str, float]:
  """Geometry of the STS-B dev embeddings the dev evaluation computed (no second encoding).

  Returns ``omega_deg`` (``largest_angle_deg`` over its distinct sentences),
  ``alignment`` over its pairs with gold score >= 4 and ``uniformity`` over its
  distinct sentences (Wang & Isola, ``alignment``/``uniformity``, as
  ``evaluate_align_uniform`` measures them on the test split).

  Args:
    table: ``{sentence: [hidden] vector}`` covering the STS-B dev sentences (other sentences are ignored).
    stsb_dev: the STS-B dev pairs.
  """
  sentences = list(dict.fromkeys((*stsb_dev.sent1, *stsb_dev.sent2)))
  everything = np.stack([table[s] for s in sentences])
  positive = np.flatnonzero(stsb_dev.gold >= POSITIVE_MIN_SCORE)
  dynamics = {"omega_deg": largest_angle_deg(everything), "uniformity": uniformity(everything)}
  if len(positive):  # A cut-down dev set may have no such pair; then there is no alignment to report.
    dynamics["alignment"] = alignment(
      np.stack([table[stsb_dev.sent1[i]] for i in positive]), np.stack([table[stsb_dev.sent2[i]] for i in positive])
    )
  return dynamics


def dev_scores_and_embeddings(
  embed: Embed, dev_sets: dict[str, PairSet]
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
  """Spearman (not x100) on each dev set, as model selection during training uses them, and the embeddings they
  were computed from: ``{sentence: [hidden] vector}``, each once."""
  table = embed_unique(embed, list(dev_sets.values()))
  scores = {name: correlations(score_pairs(table, ps), ps.gold)["spearman"] for name, ps in dev_sets.items()}
  return scores, table


# The numbers of your own dev sets (dev_sets.py; config.eval.pairs and config.eval.retrieval), reported as
# pairs_<name> and retrieval_<name>: sentence-transformers' EmbeddingSimilarityEvaluator (cosine) and
# InformationRetrievalEvaluator (its default ks).
OWN_PAIR_METRICS = ("spearman", "pearson")
OWN_RETRIEVAL_METRICS = (
  "ndcg@10",
  "mrr@10",
  "map@100",
  "accuracy@1",
  "accuracy@3",
  "accuracy@5",
  "accuracy@10",
  "precision@1",
  "precision@3",
  "precision@5",
  "precision@10",
  "recall@1",
  "recall@3",
  "recall@5",
  "recall@10",
)
# Selection by one of them needs its dev set: the metric's name -> the config.eval field.
OWN_SELECTION_NEEDS = {
  **{f"pairs_{m}": "pairs" for m in OWN_PAIR_METRICS},
  **{f"retrieval_{m}": "retrieval" for m in OWN_RETRIEVAL_METRICS},
}


def _score(name: str) -> Callable[[dict[str, float]], float]:
  return lambda scores: scores[name]


# Model selection during training (``config.eval.metric``): the number to maximise, from an evaluation's scores.
SELECTION_METRICS: dict[str, Callable[[dict[str, float]], float]] = {
  "stsb_dev": lambda scores: scores["stsb_dev"],  # SimCSE, MixCSE.
  "stsb_sickr_dev": lambda scores: (scores["stsb_dev"] + scores["sickr_dev"]) / 2,  # DCLR.
  "heldout_mlm_accuracy": lambda scores: scores["heldout_mlm_accuracy"],  # MLM pretraining.
  **{name: _score(name) for name in OWN_SELECTION_NEEDS},  # Your own dev sets.
}
