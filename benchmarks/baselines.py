"""The PyTorch and SentEval baselines that ``python -m jaxcse.bench`` measures jaxcse against.

They live outside the ``jaxcse`` package, which never imports torch,
sentence-transformers or SentEval. ``jaxcse.bench`` imports this module
lazily; run the benchmarks from a checkout of the repository (its root on
``sys.path``, as ``python -m`` puts it), with ``pip install -e ".[torch]"``.
Every baseline returns callables the benchmark times the same way as jaxcse's
side.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

import numpy as np

SENTEVAL_DIR_ENV = "JAXCSE_SENTEVAL_DIR"


def set_threads(threads: int) -> str:
  """Sets torch's intra-op threads (0: leave torch's default); returns what the benchmark prints of torch."""
  import torch

  if threads:
    torch.set_num_threads(threads)
  return f"torch {torch.__version__} with {torch.get_num_threads()} threads"


def torch_train_step(shape, ids: np.ndarray, mask: np.ndarray, *, steps: int
                     ) -> tuple[Callable[[], None], Callable[[], float], Callable[[], None]]:
  """SimCSE's unsupervised step in PyTorch (its ``cl_forward`` with HF Trainer's AdamW, clipping and schedule)."""
  import torch
  import torch.nn.functional as F
  from transformers import BertModel

  torch.manual_seed(0)
  hf_config = shape.bert_config()
  bert = BertModel(hf_config, add_pooling_layer=False)
  mlp = torch.nn.Linear(shape.hidden, shape.hidden)
  params = list(bert.parameters()) + list(mlp.parameters())
  optimizer = torch.optim.AdamW(params, lr=3e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))
  bert.train()
  mlp.train()
  batch_size, length = ids.shape
  # SimCSE duplicates each sentence into [batch, 2, len] and flattens to [2 * batch, len]: rows 2i and 2i+1 are views.
  input_ids = torch.from_numpy(np.repeat(ids, 2, axis=0)).long()
  attention_mask = torch.from_numpy(np.repeat(mask, 2, axis=0)).long()
  token_type_ids = torch.zeros_like(input_ids)
  labels = torch.arange(batch_size)
  last = {"loss": None}

  def run():
    out = bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    z = torch.tanh(mlp(out.last_hidden_state[:, 0])).view(batch_size, 2, shape.hidden)
    sim = F.cosine_similarity(z[:, 0].unsqueeze(1), z[:, 1].unsqueeze(0), dim=-1) / 0.05
    loss = F.cross_entropy(sim, labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    last["loss"] = loss.item()

  def release():
    optimizer.state.clear()

  return run, lambda: last["loss"], release


def torch_mlm_step(shape, ids: np.ndarray, *, steps: int, dropout: float = 0.1
                   ) -> tuple[Callable[[], None], Callable[[], float], Callable[[], None]]:
  """A PyTorch ``BertForMaskedLM`` step as Hugging Face's run_mlm.py trains: AdamW, clipping, linear schedule.

  The 15% masking is drawn once (the data collator's work, on the CPU, is left out of the timing); the loss is
  transformers' own (logits at every position, -100 labels ignored).
  """
  import torch
  from transformers import BertForMaskedLM

  torch.manual_seed(0)
  model = BertForMaskedLM(shape.bert_config(dropout))
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))
  model.train()
  rng = np.random.default_rng(1)
  chosen = (rng.random(ids.shape) < 0.15) & (ids > 3)
  input_ids = torch.from_numpy(np.where(chosen, 3, ids)).long()
  labels = torch.from_numpy(np.where(chosen, ids, -100)).long()
  attention_mask = torch.ones_like(input_ids)
  last = {"loss": None}

  def run():
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    last["loss"] = loss.item()

  return run, lambda: last["loss"], optimizer.state.clear


def sentence_transformers_encode(model_path: str, sentences: Sequence[str], *, batch_size: int,
                                 max_seq_len: int | None) -> tuple[Callable[[], np.ndarray], int]:
  """sentence-transformers' ``encode`` of ``sentences`` (unit vectors): ``(run, its max_seq_length)``."""
  from sentence_transformers import SentenceTransformer

  st = SentenceTransformer(model_path, device="cpu")
  st.max_seq_length = max_seq_len or st.max_seq_length

  def run():
    return st.encode(sentences, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True)

  return run, st.max_seq_length


def senteval_checkout(senteval_dir: str | None) -> str:
  """The SimCSE checkout whose ``SentEval/`` copy the evaluate benchmark drives: the flag, else the environment."""
  path = senteval_dir or os.environ.get(SENTEVAL_DIR_ENV)
  if not path:
    raise SystemExit(f"error: pass --senteval_dir (or set ${SENTEVAL_DIR_ENV}) to a checkout of "
                     "https://github.com/princeton-nlp/SimCSE, whose SentEval/ folder is the baseline")
  if not os.path.isdir(os.path.join(path, "SentEval", "senteval")):
    raise SystemExit(f"error: {path}/SentEval/senteval: not found; --senteval_dir must be a SimCSE checkout")
  return path


def senteval_sts(senteval_dir: str, data_root: str, model_path: str, pooler: str, tasks: Sequence[str],
                 batch_size: int) -> Callable[[], dict]:
  """SentEval's STS run as SimCSE's ``evaluation.py`` (test mode) drives it, with a PyTorch ``AutoModel``."""
  import torch
  from transformers import AutoModel, AutoTokenizer

  sys.path.insert(0, os.path.join(senteval_dir, "SentEval"))
  try:
    import senteval
  except ImportError as e:
    raise SystemExit(f"{senteval_dir}/SentEval: no SentEval checkout there ({e}); pass --senteval_dir") from None
  tokenizer = AutoTokenizer.from_pretrained(model_path)
  has_torch_weights = any(os.path.isfile(os.path.join(model_path, f))
                          for f in ("model.safetensors", "pytorch_model.bin"))
  model = AutoModel.from_pretrained(model_path, from_flax=not has_torch_weights).eval()

  def batcher(params, batch):
    if batch and batch[0] and isinstance(batch[0][0], bytes):
      batch = [[w.decode("utf-8") for w in s] for s in batch]
    enc = tokenizer([" ".join(s) for s in batch], return_tensors="pt", padding=True)
    with torch.no_grad():
      out = model(**enc, output_hidden_states=True, return_dict=True)
    if pooler == "avg":
      m = enc["attention_mask"].unsqueeze(-1)
      return ((out.last_hidden_state * m).sum(1) / m.sum(1)).cpu()
    if pooler == "cls_before_pooler":
      return out.last_hidden_state[:, 0].cpu()
    raise ValueError(f"the SentEval side supports poolers avg and cls_before_pooler, not {pooler!r}")

  params = {"task_path": os.path.join(data_root, "senteval"), "usepytorch": True, "kfold": 10, "batch_size": batch_size,
            "classifier": {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4}}

  def run():
    return {task: senteval.engine.SE(params, batcher, lambda p, s: None).eval(task) for task in tasks}

  return run
