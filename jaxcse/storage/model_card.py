"""The model card (README.md) of an exported encoder, laid out as sentence-transformers writes one.

Front matter the hub reads (library, pipeline, tags, ``base_model``, the dev metrics as ``model-index`` results),
then what the model is (base model, dimension, sequence length, pooling, prompts), how to load it (sentence-
transformers and plain transformers), and, for a model trained by jaxcse, how it was trained: the data (source,
examples, columns), the method and its loss settings, every hyperparameter that changes the result, the dev metrics
at the exported step beside those before training, and the library versions. Everything is read from the workdir
(``config.json``, ``summary.json``, ``metrics.jsonl``), so the card states what the run recorded, not what a
default would have been.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from jaxcse.core import files

# The config sections that hold a method's loss settings, by method ("loss" is every contrastive method's).
LOSS_SECTIONS = {
  "simcse": ("loss",),
  "mixcse": ("loss", "mixcse"),
  "dclr": ("loss", "dclr"),
  "mlm": ("mlm",),
  "mnrl": ("mnrl",),
  "cosent": ("cosent",),
  "gist": ("gist",),
}
# Hyperparameters that change the result, by config path, in the order the card lists them.
HYPERPARAMETERS = (
  "train.batch_size",
  "train.learning_rate",
  "train.warmup_steps",
  "train.max_steps",
  "train.num_epochs",
  "train.weight_decay",
  "train.adam_b1",
  "train.adam_b2",
  "train.adam_eps",
  "train.max_grad_norm",
  "train.grad_cache_chunk",
  "data.max_seq_len",
  "data.no_duplicates",
  "model.pooler",
  "model.dropout",
  "model.attention_dropout_per_element",
  "model.dtype",
  "seed",
)
# Papers whose method a card names, for its citation section.
REFERENCES = {
  "simcse": "Gao, Yao and Chen. SimCSE: Simple Contrastive Learning of Sentence Embeddings. EMNLP 2021.",
  "mixcse": "Zhang et al. Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives. "
  "AAAI 2022.",
  "dclr": "Zhou et al. Debiased Contrastive Learning of Unsupervised Sentence Representations. ACL 2022.",
  "mnrl": "Henderson et al. Efficient Natural Language Response Suggestion for Smart Reply. 2017 (the "
  "MultipleNegativesRankingLoss of sentence-transformers).",
  "cosent": "Su. CoSENT: a more efficient sentence vector scheme than Sentence-BERT. 2022.",
  "matryoshka": "Kusupati et al. Matryoshka Representation Learning. NeurIPS 2022.",
  "gist": "Solatorio. GISTEmbed: Guided In-sample Selection of Training Negatives for Text Embedding Fine-tuning. "
  "arXiv 2402.16829, 2024 (the GISTEmbedLoss of sentence-transformers).",
}


@dataclasses.dataclass(frozen=True)
class TrainingRun:
  """What a jaxcse workdir recorded about its run, as the card reports it."""

  workdir: str  # As the user named it.
  step: int  # The exported checkpoint's step.
  checkpoints: str  # "best" or "latest": which of the workdir's checkpoints it is.
  config: dict  # The run's config.json.
  summary: dict  # summary.json ({} while the run has not finished).
  evals: list[dict]  # metrics.jsonl's evaluation records, in step order.

  @classmethod
  def read(cls, workdir_path: str, shown: str, step: int, checkpoints: str) -> TrainingRun:
    """Reads a workdir's records; ``shown`` is the workdir as the card names it."""
    with open(os.path.join(workdir_path, "config.json")) as f:
      config = json.load(f)
    summary = {}
    if os.path.isfile(os.path.join(workdir_path, "summary.json")):
      with open(os.path.join(workdir_path, "summary.json")) as f:
        summary = json.load(f)
    metrics = os.path.join(workdir_path, "metrics.jsonl")
    records = files.read_jsonl(metrics) if os.path.isfile(metrics) else []
    evals = sorted((r for r in records if any(k.startswith("eval/") for k in r)), key=lambda r: r["step"])
    return cls(shown, step, checkpoints, config, summary, evals)

  def value(self, path: str) -> Any:
    node: Any = self.config
    for key in path.split("."):
      if not isinstance(node, dict) or key not in node:
        return None
      node = node[key]
    return node

  def eval_at(self, step: int) -> dict[str, float]:
    """The dev metrics recorded at ``step`` (the last record of that step), without timings; {} if none."""
    found = [r for r in self.evals if r["step"] == step]
    if not found:
      return {}
    return {
      k.removeprefix("eval/"): v
      for k, v in found[-1].items()
      if k.startswith("eval/") and k not in ("eval/seconds", "eval/metric")
    }


def _front_matter(tags: list[str], base_model: str | None, run: TrainingRun | None, metrics: dict[str, float]) -> str:
  lines = [
    "---",
    "library_name: sentence-transformers",
    "pipeline_tag: sentence-similarity",
    "tags: [" + ", ".join(tags) + "]",
  ]
  if base_model:
    lines.append(f"base_model: {base_model}")
  if run and metrics:
    # The hub's evaluation results: the dev metrics at the exported step (jaxcse's names, x1 as recorded).
    lines += [
      "model-index:",
      "- name: " + os.path.basename(os.path.normpath(run.workdir)),
      "  results:",
      "  - task: {type: sentence-similarity, name: Semantic Similarity}",
      "    dataset: {name: dev, type: dev}",
      "    metrics:",
    ]
    lines += [f"    - {{type: {name}, value: {value:.6g}, name: {name}}}" for name, value in sorted(metrics.items())]
  lines.append("---")
  return "\n".join(lines)


def _usage(pooling_lines: str, prompts: dict[str, str]) -> str:
  prompt_note = ""
  if prompts:
    first = next(iter(prompts))
    prompt_note = (
      f"\n# Its prompts are applied by name (see Model details), e.g.:\n"
      f'query_embeddings = model.encode(["How do I play a guitar?"], prompt_name={first!r})'
    )
  return f"""## Usage

### sentence-transformers

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("PATH_TO_THIS_FOLDER")
embeddings = model.encode(["A man is playing a guitar.", "Someone plays music."])
similarities = model.similarity(embeddings, embeddings){prompt_note}
```

### transformers (PyTorch)

```python
import torch
from transformers import AutoModel, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("PATH_TO_THIS_FOLDER")
model = AutoModel.from_pretrained("PATH_TO_THIS_FOLDER").eval()
batch = tokenizer(["A man is playing a guitar.", "Someone plays music."], padding=True, truncation=True,
                  return_tensors="pt")
with torch.no_grad():
  outputs = model(**batch)
{pooling_lines}
```

### jaxcse

```python
from jaxcse import Encoder
encoder = Encoder.load("PATH_TO_THIS_FOLDER")
embeddings = encoder.encode(["A man is playing a guitar.", "Someone plays music."])
```
"""


def _format(value: Any) -> str:
  return f"`{json.dumps(value)}`" if not isinstance(value, str) else (f"`{value}`" if value else "(none)")


def _training(run: TrainingRun) -> str:
  method = run.value("method") or "?"
  out = ["## Training details", "", "### Training data", ""]
  source = run.value("data.train")
  out.append(
    f"- Source: {_format(source)}"
    + (f" (data root {_format(run.value('data.data_dir'))})" if run.value("data.data_dir") else "")
  )
  examples = run.summary.get("train_examples")
  out.append(f"- Examples: {examples:,}" if isinstance(examples, int) else "- Examples: not recorded by this run")
  columns = run.summary.get("train_columns")
  if columns:
    out.append("- Columns, in order: " + ", ".join(f"`{c}`" for c in columns))
  digests = (run.summary.get("provenance") or {}).get("data") or {}
  for name, digest in sorted(digests.items()):
    out.append(f"- sha256 of `{name}`: `{digest}`")
  out += ["", "### Training objective", "", f"- Method: `{method}`"]
  for section in LOSS_SECTIONS.get(method, ("loss",)):
    settings = run.value(section)
    if isinstance(settings, dict):
      out.append(f"- `{section}`: " + ", ".join(f"{k}={_format(v)}" for k, v in sorted(settings.items())))
  nested = run.value("matryoshka") or {}
  if nested.get("dims"):  # The loss at each of these prefix sizes too: the model serves them (truncate_dim).
    out.append("- Matryoshka: " + ", ".join(f"{k}={_format(v)}" for k, v in sorted(nested.items())))
  augment = {k: v for k, v in (run.value("augment") or {}).items() if v not in (0, 0.0, False, "", None)}
  if augment:
    out.append("- Augmentations: " + ", ".join(f"{k}={_format(v)}" for k, v in sorted(augment.items())))
  out += ["", "### Hyperparameters", "", "| setting | value |", "|---|---|"]
  for path in HYPERPARAMETERS:
    value = run.value(path)
    if value is not None:
      out.append(f"| `{path}` | {_format(value)} |")
  devices = (run.summary.get("provenance") or {}).get("devices") or {}
  if devices:
    out.append(
      f"| devices | {devices.get('count', '?')} x {devices.get('kind', '?')} "
      f"({devices.get('processes', 1)} process(es)) |"
    )
  steps, seconds = run.summary.get("steps"), (run.summary.get("provenance") or {}).get("wall_seconds")
  if steps is not None:
    out.append(f"| steps trained | {steps:,} |")
  if seconds is not None:
    out.append(f"| wall time | {seconds:,.0f} s |")
  out += ["", "### Dev metrics", ""]
  exported = run.eval_at(run.step)
  first = run.evals[0]["step"] if run.evals else None
  before = run.eval_at(first) if first is not None and first != run.step else {}
  if exported:
    selection = run.value("eval.metric")
    out.append(
      f"At the exported step {run.step:,} (the workdir's {run.checkpoints} checkpoint"
      + (f"; checkpoints are selected by `{selection}`" if selection else "")
      + "):"
    )
    out += [
      "",
      "| metric | at step {:,} |".format(run.step) + (f" at step {first:,} |" if before else ""),
      "|---|---|" + ("---|" if before else ""),
    ]
    for name, value in sorted(exported.items()):
      out.append(
        f"| `{name}` | {value:.4f} |" + (f" {before[name]:.4f} |" if name in before else (" |" if before else ""))
      )
  else:
    out.append(f"No evaluation was recorded at the exported step {run.step:,}.")
  versions = (run.summary.get("provenance") or {}).get("libraries") or {}
  jaxcse_version = (run.summary.get("provenance") or {}).get("jaxcse")
  if versions or jaxcse_version:
    out += ["", "### Framework versions", ""]
    if jaxcse_version:
      out.append(f"- jaxcse: {jaxcse_version}")
    out += [f"- {name}: {version}" for name, version in sorted(versions.items()) if version]
  return "\n".join(out) + "\n"


def _width(dim: int, truncate_dim: int | None) -> str:
  """The embedding size the folder serves: sentence-transformers keeps the first ``truncate_dim`` of ``dim``."""
  if truncate_dim and truncate_dim < dim:
    return f"{truncate_dim} (the first {truncate_dim} of the backbone's {dim} dims: truncate_dim)"
  return str(dim)


def _length(max_seq_len: int, run: TrainingRun | None) -> str:
  """The longest input in tokens, and the length the run trained at when shorter (inputs past it embed, but the
  training never saw them)."""
  trained = run.value("data.max_seq_len") if run else None
  if isinstance(trained, int) and 0 < trained < max_seq_len:
    return (
      f"{max_seq_len} tokens (trained at {trained}: longer inputs are embedded up to {max_seq_len}, as jaxcse "
      "embeds them)"
    )
  return f"{max_seq_len} tokens"


def model_card(
  *,
  pooler: str,
  pooling_lines: str,
  source: str,
  architecture: str,
  modules: list[str],
  dim: int,
  max_seq_len: int,
  base_model: str | None,
  prompts: dict[str, str] | None = None,
  run: TrainingRun | None = None,
  truncate_dim: int | None = None,
) -> str:
  """The README.md of an exported folder.

  Args:
    pooler: the exported pooler; ``pooling_lines``: the PyTorch lines that pool ``outputs`` into ``embeddings``.
    source: one line saying where the weights come from (a base model, or a workdir and step).
    architecture, modules: the backbone's transformers class and the sentence-transformers modules after it.
    dim, max_seq_len: the embedding size and the longest input in tokens.
    base_model: a hub id for the front matter's ``base_model`` (None when the base is a local folder).
    prompts: name -> prompt string, as written into ``config_sentence_transformers.json``.
    run: the workdir's record for a model trained by jaxcse, else None.
    truncate_dim: the width the folder serves (``config_sentence_transformers.json``), when it keeps fewer dims
      than the backbone's ``dim``.
  """
  prompts = prompts or {}
  method = run.value("method") if run else None
  tags = ["sentence-transformers", "feature-extraction", "sentence-similarity", "jaxcse"] + ([method] if method else [])
  metrics = run.eval_at(run.step) if run else {}
  details = [
    "## Model details",
    "",
    f"- Source: {source}",
    f"- Backbone: `{architecture}`; pooler: `{pooler}` (the sentence vector jaxcse tests this model with)",
    f"- sentence-transformers modules: Transformer, {', '.join(m.split('_', 1)[1] for m in modules)}",
    f"- Output dimensionality: {_width(dim, truncate_dim)}",
    f"- Maximum sequence length: {_length(max_seq_len, run)}",
    "- Similarity function: cosine (embeddings are not normalised)",
  ]
  if run and run.step == 0 and (run.summary.get("steps") or 0) > 0:
    details.append(
      "- Step 0 is the model before training: no trained step of the run beat it on the dev set, so this is the "
      "base model's weights, untrained"
    )
  if prompts:
    details.append("- Prompts: " + ", ".join(f"`{name}` = {json.dumps(text)}" for name, text in prompts.items()))
  title = "# Sentence encoder trained with jaxcse" if run else "# Sentence encoder exported from jaxcse"
  parts = [
    _front_matter(tags, base_model, run, metrics),
    title,
    "",
    "\n".join(details),
    "",
    _usage(pooling_lines, prompts),
  ]
  if run:
    parts.append(_training(run))
  cited = [REFERENCES[method]] if method in REFERENCES else []
  if run and (run.value("matryoshka") or {}).get("dims"):
    cited.append(REFERENCES["matryoshka"])
  if cited:
    parts += ["## Citation", "", *(f"- {reference}" for reference in cited)]
    parts += ["- jaxcse: contrastive sentence embeddings in JAX/Flax.", ""]
  return "\n".join(parts)
