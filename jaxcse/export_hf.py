r"""Export a jaxcse encoder as a Hugging Face / sentence-transformers folder, without torch.

  python -m jaxcse.export_hf WORKDIR_OR_MODEL OUT_DIR [--checkpoint best|latest|STEP] [--pooler P]

The folder loads in PyTorch with ``transformers.AutoModel.from_pretrained(OUT_DIR)``
and with ``sentence_transformers.SentenceTransformer(OUT_DIR)``; the latter
gives the same embeddings as jaxcse's test-time pooler (or ``--pooler``):

| pooler              | sentence-transformers modules                     | AutoModel output                          |
|---------------------|---------------------------------------------------|-------------------------------------------|
| `cls`               | Transformer, Pooling(cls), Dense(H, H, tanh)      | `pooler_output` (the MLP is `pooler.dense`) |
| `cls_before_pooler` | Transformer, Pooling(cls)                         | `last_hidden_state[:, 0]`                 |
| `avg`               | Transformer, Pooling(mean)                        | masked mean of `last_hidden_state`        |
| `avg_top2`          | Transformer, WeightedLayerPooling, Pooling(mean)  | masked mean of `(hidden_states[-1] + hidden_states[-2]) / 2` |
| `avg_first_last`    | Transformer, WeightedLayerPooling, Pooling(mean)  | masked mean of `(hidden_states[1] + hidden_states[-1]) / 2`  |

The module chains are ``st_format``'s; for the layer-average poolers
``config.json`` sets ``output_hidden_states`` so that both libraries return
every layer. Embeddings are not normalised (no ``Normalize`` module), as in
jaxcse. Weights are written as float32 ``model.safetensors`` with PyTorch's
parameter names, from numpy.
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import save_file

from jaxcse import models
from jaxcse.core import errors, files, platforms
from jaxcse.core.errors import JaxcseError
from jaxcse.models import poolers, weights
from jaxcse.storage import loading, model_card, st_format


class ExportError(JaxcseError, ValueError):
  """The model cannot be exported as asked (unsupported backbone, pooler without its head, ...)."""


def torch_state_dict(backbone_params: Any, mlp_params: Any = None) -> dict[str, np.ndarray]:
  """The PyTorch base model's state dict (float32 numpy) from jaxcse backbone params (``models.weights.to_state``).

  ``mlp_params`` (the ``cls`` pooler's Linear + tanh) replace the backbone's ``pooler.dense``, whose forward is
  the same Linear + tanh on the [CLS] state, so ``AutoModel``'s ``pooler_output`` is the embedding.

  Args:
    backbone_params: the ``backbone`` subtree of a jaxcse model's params.
    mlp_params: ``{"kernel": [H, H], "bias": [H]}`` or None to keep the backbone's pooler.
  """
  params = jax.device_get(backbone_params)
  if mlp_params is not None:
    params = {**params, "pooler": {"dense": jax.device_get(mlp_params)}}
  try:
    return weights.to_state(params)
  except weights.WeightsError as e:
    raise ExportError(str(e)) from None


_AUTOMODEL_POOLING = {
  "cls": "embeddings = outputs.pooler_output  # [CLS] state through the MLP (Linear + tanh), stored as pooler.dense",
  "cls_before_pooler": "embeddings = outputs.last_hidden_state[:, 0]",
  "avg": "h = outputs.last_hidden_state",
  "avg_top2": "h = (outputs.hidden_states[-1] + outputs.hidden_states[-2]) / 2",
  "avg_first_last": "h = (outputs.hidden_states[1] + outputs.hidden_states[-1]) / 2",
  "avg_embeddings_last": "h = (outputs.hidden_states[0] + outputs.hidden_states[-1]) / 2",
  "bert_pooler": "embeddings = outputs.pooler_output  # BERT's own pooler layer on [CLS]",
}


def _pooling_lines(pooler: str) -> str:
  """The PyTorch lines that turn ``outputs`` (and ``batch``) into ``embeddings`` as jaxcse's ``pooler`` does."""
  lines = _AUTOMODEL_POOLING[pooler]
  if pooler.startswith("avg"):
    lines += (
      "\nmask = batch['attention_mask'].unsqueeze(-1).float()"
      "\nembeddings = (h * mask).sum(1) / mask.sum(1).clamp(min=1)"
    )
  return lines


def _hub_id(source: str) -> str | None:
  """``source`` if it names a model on the Hugging Face hub (``owner/name``, not a local folder or jaxcse's own)."""
  if os.path.exists(source) or source.startswith("jaxcse/") or source.count("/") != 1:
    return None
  return source


def _write_folder(out_dir: str, hf_config, tokenizer, state: dict[str, np.ndarray], more) -> None:
  """Writes config, tokenizer, ``model.safetensors`` and ``more(folder)``'s files into a folder beside
  ``out_dir``, then renames it into place: ``out_dir`` is either complete or absent (never half-written).

  Raises:
    ExportError: a write failed (a full disk, a missing permission), naming ``out_dir`` and the cause; nothing is
      left behind.
  """
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".tmp-", dir=parent)
  try:
    hf_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    save_file(state, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    more(tmp)
    files.apply_umask(tmp)  # mkdtemp makes 0700 and safetensors writes 0600: an export is meant to be shared.
    if os.path.isdir(out_dir):
      os.rmdir(out_dir)  # Empty (the callers check); rename needs the name free.
    os.rename(tmp, out_dir)
  except BaseException as e:
    shutil.rmtree(tmp, ignore_errors=True)
    # The writers raise what they like for a full disk: OSError, safetensors' SafetensorError, the tokenizer's plain
    # Exception. Each is the machine's state, not a defect: one line.
    if isinstance(e, (OSError, SafetensorError)) or type(e) is Exception:
      text = str(e).strip().splitlines()
      raise ExportError(
        f"{out_dir}: could not write the export ({type(e).__name__}: {text[0] if text else ''}); "
        "nothing was left behind"
      ) from None
    raise


def export(
  spec: models.ModelSpec,
  params: Any,
  out_dir: str,
  pooler: str | None = None,
  *,
  trained: dict | None = None,
  prompts: dict[str, str] | None = None,
  truncate_dim: int | None = None,
  soup: dict | None = None,
) -> dict:
  """Writes a model (``spec`` and ``params``) with ``pooler`` (default: its test pooler) as a HF + ST folder.

  The folder is built next to ``out_dir`` and renamed into place, so
  ``out_dir`` is either complete or absent; an existing non-empty
  ``out_dir`` is an error (stale module folders would confuse a reader).

  ``trained``: for a model trained by jaxcse, ``{"workdir", "checkpoint", "step"}`` (its workdir as the user named it,
  ``best``/``latest``/a step, and the step restored) and optionally ``"path"`` (the workdir's folder); the model
  card and ``jaxcse_export.json`` then name it, its step and the base model it started from (``spec.source``), and
  with ``path`` the card also reports how it was trained (``model_card.TrainingRun``: data, loss, hyperparameters,
  dev metrics at that step, versions).

  ``prompts``: the model's prompts (``loading.Loaded.prompts``), written into ``config_sentence_transformers.json``
  so that sentence-transformers' ``encode(..., prompt_name=...)`` applies them as jaxcse does, and into the card.

  ``truncate_dim``: written into ``config_sentence_transformers.json``, so that sentence-transformers (and jaxcse's
  ``Encoder.load``) keep only the first ``truncate_dim`` dims of every embedding: a Matryoshka-trained model served
  at a smaller size. At most the model's width.

  Returns:
    A summary: ``{"out_dir", "pooler", "architecture", "modules"}``.

  Raises:
    ExportError: the backbone is not BERT/RoBERTa, or ``pooler`` is ``cls``
      and the model has no MLP head, or ``out_dir`` is not empty.
  """
  pooler = pooler or spec.pooling.test_pooler
  if pooler not in poolers.names():
    raise ExportError(f"unknown pooler {pooler!r}; choose one of {', '.join(poolers.names())}")
  if not poolers.exportable(pooler):
    raise ExportError(
      f"pooler {pooler!r} is a training-time pooler with no sentence-transformers chain; export the model's test pooler"
    )
  if pooler == "bert_pooler" and "pooler" not in params["backbone"]:
    raise ExportError("pooler 'bert_pooler' needs the backbone's pooler layer, and this model has none")
  if pooler == "cls" and "mlp" not in params:
    raise ExportError(
      "pooler 'cls' needs the model's MLP head, and this model has none "
      f"(it was trained with pooler {spec.pooling.pooler!r}); export another pooler"
    )
  if os.path.isdir(out_dir) and os.listdir(out_dir):
    raise ExportError(f"{out_dir}: exists and is not empty; choose a new folder or remove it")
  if truncate_dim is not None and not 1 <= truncate_dim <= spec.hidden_size:
    raise ExportError(f"truncate_dim must be in [1, {spec.hidden_size}] (the model's width), not {truncate_dim}")

  family = spec.family
  architecture = family.architecture
  # The Dense module of cls (SimCSE's MLP) or bert_pooler (the backbone's own pooler layer). A family with BERT's
  # pooler layer also stores the MLP there (AutoModel's pooler_output is then the embedding); one without
  # (ModernBERT) keeps it in the sentence-transformers Dense module only.
  dense = {"cls": params.get("mlp"), "bert_pooler": params["backbone"].get("pooler", {}).get("dense")}.get(pooler)
  mlp = None if dense is None else weights.to_state({"pooler": {"dense": jax.device_get(dense)}})
  state = torch_state_dict(params["backbone"], params["mlp"] if pooler == "cls" and family.has_pooler else None)
  hf_config = copy.deepcopy(spec.hf_config)
  hf_config.architectures = [architecture]
  # Both libraries return every layer's output only when the config asks; the layer-average poolers need them.
  hf_config.output_hidden_states = pooler in st_format.LAYER_AVERAGE_POOLERS
  tokenizer = copy.deepcopy(spec.tokenizer)
  tokenizer.model_max_length = spec.max_positions  # jaxcse cuts there; truncation=True in torch then agrees.

  modules = []

  def pooling_files(tmp: str) -> None:
    modules.extend(
      st_format.write_modules(
        tmp,
        pooler,
        hf_config.hidden_size,
        hf_config.num_hidden_layers,
        spec.max_positions,
        mlp,
        prompts,
        truncate_dim,
      )
    )
    base = f"`{spec.source}`" + (f" (hub revision {spec.revision})" if spec.revision else "")
    source = (
      f"trained with jaxcse in the workdir `{trained['workdir']}`, checkpoint step {trained['step']} (of its "
      f"{trained['checkpoint']} checkpoints), from the base model {base}"
      if trained
      else base
    )
    if soup:
      kept = ", ".join(f"`{path}`" for path in soup["kept"])
      source = f"a {soup['recipe']} model soup (the weights averaged) of {kept}, models of {base}"
    run = None
    if trained and trained.get("path"):
      run = model_card.TrainingRun.read(trained["path"], trained["workdir"], trained["step"], trained["checkpoint"])
    with open(os.path.join(tmp, "README.md"), "w") as f:
      f.write(
        model_card.model_card(
          pooler=pooler,
          pooling_lines=_pooling_lines(pooler),
          source=source,
          architecture=architecture,
          modules=modules,
          dim=hf_config.hidden_size,
          max_seq_len=spec.max_positions,
          base_model=_hub_id(spec.source),
          prompts=prompts,
          run=run,
          truncate_dim=truncate_dim,
        )
      )
    record = {"source": spec.source, "revision": spec.revision, "pooler": pooler, "truncate_dim": truncate_dim}
    if trained:
      record.update(
        workdir=trained["workdir"], checkpoint=trained["checkpoint"], step=trained["step"], base_model=spec.source
      )
    if soup:
      record["soup"] = soup
    if run is not None:  # The length it was trained at: sentence_bert_config.json's is the backbone's.
      record["trained_max_seq_len"] = run.value("data.max_seq_len")
    files.write_json(os.path.join(tmp, "jaxcse_export.json"), record)

  _write_folder(out_dir, hf_config, tokenizer, state, pooling_files)
  return {"out_dir": out_dir, "pooler": pooler, "architecture": architecture, "modules": modules}


def export_masked_lm(spec: models.ModelSpec, params: Any, out_dir: str, *, model_card: str = "") -> dict:
  """Writes the backbone with its masked-LM head as a Hugging Face ``*ForMaskedLM`` folder (no pooler chain).

  For an encoder pretrained with ``method="mlm"``: the folder is a raw encoder, loadable by transformers'
  ``AutoModel``/``AutoModelForMaskedLM`` (PyTorch) and by jaxcse as a model to fine-tune (``model.name``).
  PyTorch parameter names (``models.weights``), float32 ``model.safetensors`` written from numpy; a tied output
  projection is not stored, as ``save_pretrained`` does. ``model_card`` becomes README.md.
  """
  if spec.mlm is None or "mlm_head" not in params:
    raise ExportError("this model has no masked-LM head (train it with method mlm, or mlm.enabled)")
  if os.path.isdir(out_dir) and os.listdir(out_dir):
    raise ExportError(f"{out_dir}: exists and is not empty; choose a new folder or remove it")
  family = spec.family
  # The backbone's NSP pooler, if it has one, is kept (untrained by MLM; BertModel and RobertaModel need it).
  state = weights.to_state(params["backbone"], prefix=spec.mlm.prefix + ".")
  state.update(weights.to_state(params["mlm_head"]))  # e.g. cls.predictions.{transform.*, bias}, lm_head.*
  hf_config = copy.deepcopy(spec.hf_config)
  hf_config.architectures = [family.masked_lm_architecture]
  hf_config.tie_word_embeddings = spec.mlm.tied  # An untied head's output matrix is stored as decoder.weight.
  tokenizer = copy.deepcopy(spec.tokenizer)
  tokenizer.model_max_length = spec.max_positions

  def card(tmp: str) -> None:
    if model_card:
      with open(os.path.join(tmp, "README.md"), "w") as f:
        f.write(model_card)

  _write_folder(out_dir, hf_config, tokenizer, state, card)
  return {"out_dir": out_dir, "architecture": family.masked_lm_architecture, "tensors": len(state)}


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.export_hf"), description=__doc__.split("\n\n")[0])
  parser.add_argument("model", help="a jaxcse workdir or checkpoint folder, or a HF folder / hub id")
  parser.add_argument("out_dir", help="the folder to write (must not exist, or be empty)")
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step")
  parser.add_argument("--revision", default=None, help="for a hub id: the branch, tag or commit (default: main)")
  parser.add_argument("--pooler", choices=poolers.names(), default=None, help="default: the model's test pooler")
  parser.add_argument(
    "--masked_lm",
    action="store_true",
    help="write the backbone with its MLM head as a BertForMaskedLM folder (a pretrained encoder to "
    "fine-tune), not a sentence-transformers model",
  )
  parser.add_argument(
    "--truncate_dim",
    type=int,
    default=None,
    help="readers keep only the first this many dims of each embedding (a Matryoshka-trained model's smaller "
    "size): written into config_sentence_transformers.json",
  )
  args = parser.parse_args(argv)
  platforms.use_compilation_cache()
  errors.check_output(args.out_dir, folder=True)  # Before the slow part; export checks again.
  if os.path.isdir(args.out_dir) and os.listdir(args.out_dir):
    raise ExportError(f"{args.out_dir}: exists and is not empty; choose a new folder or remove it")
  # A HF folder has no saved pooler; `cls` is its own pooler layer (SimCSE's released checkpoints keep the MLP there).
  loaded = loading.load_model(args.model, checkpoint=args.checkpoint, pooler=args.pooler, revision=args.revision)
  if args.masked_lm:
    summary = export_masked_lm(loaded.spec, loaded.params, args.out_dir)
    print(f"wrote {summary['out_dir']}: {summary['architecture']}, {summary['tensors']} tensors")
    return 0
  if args.pooler and loaded.described and args.pooler != loaded.spec.pooling.test_pooler:
    print(
      f"warning: exporting with pooler {args.pooler!r}, not the model's saved test pooler "
      f"{loaded.spec.pooling.test_pooler!r}",
      file=sys.stderr,
    )
  # A trained model's card names its workdir (as given on the command line) and step, not only the base model.
  trained = None
  if loaded.step is not None:
    from jaxcse.storage.workdir import Workdir

    workdir = Workdir.find(args.model).path
    shown = os.path.relpath(workdir)  # As the user would name it from here; absolute when it lies elsewhere.
    trained = {
      "workdir": workdir if shown.startswith("..") else shown,
      "checkpoint": loaded.checkpoints,
      "step": loaded.step,
      "path": workdir,
    }
  summary = export(
    loaded.spec,
    loaded.params,
    args.out_dir,
    args.pooler,
    trained=trained,
    prompts=loaded.prompts,
    truncate_dim=args.truncate_dim if args.truncate_dim is not None else loaded.truncate_dim,
  )
  print(
    f"wrote {summary['out_dir']}: {summary['architecture']}, pooler {summary['pooler']}, "
    f"sentence-transformers modules Transformer + {' + '.join(summary['modules'])}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
