"""The PyTorch and SentEval baselines that ``python -m jaxcse.bench`` measures jaxcse against.

They live outside the ``jaxcse`` package, which never imports torch,
sentence-transformers or SentEval. ``jaxcse.bench`` imports this module
lazily; run the benchmarks from a checkout of the repository (its root on
``sys.path``, as ``python -m`` puts it), with ``pip install -e ".[torch]"``.
Every baseline returns callables the benchmark times the same way as jaxcse's
side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence

import numpy as np

SENTEVAL_DIR_ENV = "JAXCSE_SENTEVAL_DIR"


@dataclasses.dataclass(frozen=True)
class TorchSetup:
  """Where the PyTorch side runs and in which precision: its fastest usual form on jaxcse's device.

  ``device`` is ``"cuda"``, ``"cpu"``, or None when there is no fair PyTorch side (``reason`` says why);
  ``autocast_dtype`` is the ``torch.autocast`` dtype (None: float32); ``grad_scaler`` is True for float16, whose
  gradients underflow without loss scaling (SimCSE's ``--fp16``: HF Trainer's native AMP with a GradScaler).
  """

  device: str | None
  autocast_dtype: str | None = None
  grad_scaler: bool = False
  reason: str = ""

  def describe(self) -> str:
    if self.device is None:
      return f"PyTorch not run: {self.reason}"
    precision = f"autocast {self.autocast_dtype}" if self.autocast_dtype else "float32"
    scaler = " + GradScaler" if self.grad_scaler else ""
    return f"PyTorch on {self.device}, {precision}{scaler} ({self.reason})"


def choose_torch_setup(
  jax_platform: str, cuda_available: bool, bf16_supported: bool, device_name: str = ""
) -> TorchSetup:
  """The PyTorch side for a jaxcse run on ``jax_platform``, from the facts about torch's devices (no torch here).

  The two sides must share the device: on a GPU, CUDA with automatic mixed precision, bfloat16 autocast where the
  GPU has bfloat16 units (as ``--bf16`` trains), else float16 with a GradScaler (SimCSE's ``--fp16``); on a CPU,
  float32 (bfloat16 autocast on a CPU without bfloat16 units would only emulate it). A TPU, or a GPU that torch
  cannot see (a CPU-only torch build), has no PyTorch side: timing torch on another device would compare devices,
  not libraries.
  """
  if jax_platform == "tpu":
    return TorchSetup(None, reason="torch cannot use a TPU; jaxcse runs alone")
  if jax_platform == "gpu":
    if not cuda_available:
      return TorchSetup(None, reason="jax runs on a GPU but torch sees none (install a CUDA build of torch)")
    if bf16_supported:
      return TorchSetup("cuda", "bfloat16", False, f"{device_name or 'the GPU'} supports bfloat16")
    return TorchSetup(
      "cuda", "float16", True, f"{device_name or 'the GPU'} has no bfloat16: float16 as SimCSE's --fp16"
    )
  return TorchSetup(
    "cpu", None, False, "jax runs on the CPU" + (" (torch sees a GPU, left unused)" if cuda_available else "")
  )


def torch_device_facts() -> dict:
  """What ``choose_torch_setup`` needs to know about torch's devices, asked of torch.

  bfloat16 counts only in hardware (compute capability 8.0 and up): ``is_bf16_supported()`` alone also says yes
  on a V100 or T4, which emulate it slower than float16 runs.
  """
  import torch

  cuda = torch.cuda.is_available()
  bf16 = cuda and torch.cuda.is_bf16_supported(including_emulation=False)  # torch >= 2.3; the extra needs 2.4.
  return {
    "cuda_available": cuda,
    "bf16_supported": bool(bf16),
    "device_name": torch.cuda.get_device_name(0) if cuda else "",
  }


def torch_setup(jax_platform: str) -> TorchSetup:
  """``choose_torch_setup`` on this machine; on a TPU without asking torch (it need not be installed there)."""
  if jax_platform == "tpu":
    return choose_torch_setup(jax_platform, False, False)
  return choose_torch_setup(jax_platform, **torch_device_facts())


CPU_FLOAT32 = TorchSetup("cpu", None, False, "float32 on the CPU")


def set_threads(threads: int) -> str:
  """Sets torch's intra-op threads (0: leave torch's default); returns what the benchmark prints of torch."""
  import torch

  if threads:
    torch.set_num_threads(threads)
  return f"torch {torch.__version__} with {torch.get_num_threads()} threads"


def free_memory() -> None:
  """Collects released tensors and hands CUDA's cached blocks back, so the next side starts from an empty device."""
  import gc

  import torch

  gc.collect()
  if torch.cuda.is_available():
    torch.cuda.empty_cache()


def _peak_bytes(device) -> Callable[[], int | None]:
  """This side's peak bytes allocated by torch on ``device``, counted from now (None on the CPU: no allocator stats).

  What other sides keep resident is subtracted; read it after this side's warm-up, before another side allocates.
  """
  import torch

  if device.type != "cuda":
    return lambda: None
  base = torch.cuda.memory_allocated(device)
  torch.cuda.reset_peak_memory_stats(device)
  return lambda: torch.cuda.max_memory_allocated(device) - base


class _Precision:
  """Autocast and loss scaling of one PyTorch side, as HF Trainer's native AMP applies them."""

  def __init__(self, setup: TorchSetup):
    import torch

    self.device = torch.device(setup.device)
    self.dtype = getattr(torch, setup.autocast_dtype) if setup.autocast_dtype else None
    self.scaler = torch.amp.GradScaler(self.device.type) if setup.grad_scaler else None

  def autocast(self):
    import torch

    if self.dtype is None:
      return contextlib.nullcontext()
    return torch.autocast(self.device.type, dtype=self.dtype)

  def step(self, loss, optimizer, params, max_norm: float) -> None:
    """Backward, clipping at ``max_norm`` (of the unscaled gradients) and the optimizer step."""
    import torch

    if self.scaler is None:
      loss.backward()
      torch.nn.utils.clip_grad_norm_(params, max_norm)
      optimizer.step()
      return
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    self.scaler.step(optimizer)
    self.scaler.update()


def _adamw(params, device, **kwargs):
  """``torch.optim.AdamW``, fused on CUDA (one kernel for all parameters: the fastest usual form there)."""
  import torch

  return torch.optim.AdamW(params, fused=device.type == "cuda", **kwargs)


def torch_train_step(
  shape,
  ids: np.ndarray,
  mask: np.ndarray,
  *,
  steps: int,
  setup: TorchSetup = CPU_FLOAT32,
  compile: bool = False,
  gradient_checkpointing: bool = False,
) -> tuple[Callable[[], None], Callable[[], float], Callable[[], None], Callable[[], int | None]]:
  """SimCSE's unsupervised step in PyTorch (its ``cl_forward`` with HF Trainer's AdamW, clipping and schedule).

  Returns (run one step, last loss, release, peak device bytes). ``setup`` picks the device and the mixed
  precision; ``compile`` runs the forward and loss through ``torch.compile`` (the optimizer step stays eager, as
  HF Trainer's ``torch_compile`` compiles the model); ``gradient_checkpointing`` is transformers' own
  (``gradient_checkpointing_enable``), as ``--gradient_checkpointing`` turns it on.
  """
  import torch
  import torch.nn.functional as F
  from transformers import BertModel

  torch.manual_seed(0)
  precision = _Precision(setup)
  device = precision.device
  peak = _peak_bytes(device)
  hf_config = shape.bert_config()
  bert = BertModel(hf_config, add_pooling_layer=False).to(device)
  if gradient_checkpointing:
    bert.gradient_checkpointing_enable()
  mlp = torch.nn.Linear(shape.hidden, shape.hidden).to(device)
  params = list(bert.parameters()) + list(mlp.parameters())
  optimizer = _adamw(params, device, lr=3e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))
  bert.train()
  mlp.train()
  batch_size, length = ids.shape
  # SimCSE duplicates each sentence into [batch, 2, len] and flattens to [2 * batch, len]: rows 2i and 2i+1 are views.
  input_ids = torch.from_numpy(np.repeat(ids, 2, axis=0)).long().to(device)
  attention_mask = torch.from_numpy(np.repeat(mask, 2, axis=0)).long().to(device)
  token_type_ids = torch.zeros_like(input_ids)
  labels = torch.arange(batch_size, device=device)

  def forward(input_ids, attention_mask, token_type_ids, labels):
    out = bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    z = torch.tanh(mlp(out.last_hidden_state[:, 0])).view(batch_size, 2, shape.hidden)
    sim = F.cosine_similarity(z[:, 0].unsqueeze(1), z[:, 1].unsqueeze(0), dim=-1) / 0.05
    return F.cross_entropy(sim, labels)

  forward = torch.compile(forward) if compile else forward
  last = {"loss": None}

  def run():
    with precision.autocast():
      loss = forward(input_ids, attention_mask, token_type_ids, labels)
    precision.step(loss, optimizer, params, 1.0)
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    last["loss"] = loss.item()  # Waits for the device: the step is done when the timer stops.

  def release():
    optimizer.state.clear()
    params.clear()

  return run, lambda: last["loss"], release, peak


def torch_mlm_step(
  shape, ids: np.ndarray, *, steps: int, dropout: float = 0.1, setup: TorchSetup = CPU_FLOAT32, compile: bool = False
) -> tuple[Callable[[], None], Callable[[], float], Callable[[], None], Callable[[], int | None]]:
  """A PyTorch ``BertForMaskedLM`` step as Hugging Face's run_mlm.py trains: AdamW, clipping, linear schedule.

  The 15% masking is drawn once (the data collator's work, on the CPU, is left out of the timing); the loss is
  transformers' own (logits at every position, -100 labels ignored). ``setup`` and ``compile`` as in
  ``torch_train_step``; returns (run one step, last loss, release, peak device bytes).
  """
  import torch
  from transformers import BertForMaskedLM

  torch.manual_seed(0)
  precision = _Precision(setup)
  device = precision.device
  peak = _peak_bytes(device)
  model = BertForMaskedLM(shape.bert_config(dropout)).to(device)
  optimizer = _adamw(model.parameters(), device, lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))
  model.train()
  rng = np.random.default_rng(1)
  chosen = (rng.random(ids.shape) < 0.15) & (ids > 3)
  input_ids = torch.from_numpy(np.where(chosen, 3, ids)).long().to(device)
  labels = torch.from_numpy(np.where(chosen, ids, -100)).long().to(device)
  attention_mask = torch.ones_like(input_ids)

  def forward(input_ids, attention_mask, labels):
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

  forward = torch.compile(forward) if compile else forward
  last = {"loss": None}

  def run():
    with precision.autocast():
      loss = forward(input_ids, attention_mask, labels)
    precision.step(loss, optimizer, model.parameters(), 1.0)
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    last["loss"] = loss.item()

  return run, lambda: last["loss"], optimizer.state.clear, peak


def sentence_transformers_encode(
  model_path: str,
  sentences: Sequence[str],
  *,
  batch_size: int,
  max_seq_len: int | None,
  setup: TorchSetup = CPU_FLOAT32,
) -> tuple[Callable[[], np.ndarray], int, Callable[[], int | None]]:
  """sentence-transformers' ``encode`` of ``sentences`` (float32 unit vectors): ``(run, max_seq_length, peak bytes)``.

  On a GPU the model is cast to the setup's half precision, as sentence-transformers users serve it
  (``model.half()``, or bfloat16 where the GPU has it); on the CPU it stays float32.
  """
  import torch
  from sentence_transformers import SentenceTransformer

  device = torch.device(setup.device)
  peak = _peak_bytes(device)
  st = SentenceTransformer(model_path, device=setup.device)
  if setup.autocast_dtype and device.type == "cuda":
    st = st.to(getattr(torch, setup.autocast_dtype))
  st.max_seq_length = max_seq_len or st.max_seq_length

  def run():
    out = st.encode(sentences, batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True)
    return out.float().cpu().numpy()  # Waits for the device; half-precision tensors have no numpy view.

  return run, st.max_seq_length, peak


def senteval_checkout(senteval_dir: str | None) -> str:
  """The SimCSE checkout whose ``SentEval/`` copy the evaluate benchmark drives: the flag, else the environment."""
  path = senteval_dir or os.environ.get(SENTEVAL_DIR_ENV)
  if not path:
    raise SystemExit(
      f"error: pass --senteval_dir (or set ${SENTEVAL_DIR_ENV}) to a checkout of "
      "https://github.com/princeton-nlp/SimCSE, whose SentEval/ folder is the baseline"
    )
  if not os.path.isdir(os.path.join(path, "SentEval", "senteval")):
    raise SystemExit(f"error: {path}/SentEval/senteval: not found; --senteval_dir must be a SimCSE checkout")
  return path


def senteval_sts(
  senteval_dir: str, data_root: str, model_path: str, pooler: str, tasks: Sequence[str], batch_size: int
) -> Callable[[], dict]:
  """SentEval's STS run as SimCSE's ``evaluation.py`` (test mode) drives it, with a PyTorch ``AutoModel``."""
  import torch
  from transformers import AutoModel, AutoTokenizer

  sys.path.insert(0, os.path.join(senteval_dir, "SentEval"))
  try:
    import senteval
  except ImportError as e:
    raise SystemExit(f"{senteval_dir}/SentEval: no SentEval checkout there ({e}); pass --senteval_dir") from None
  tokenizer = AutoTokenizer.from_pretrained(model_path)
  has_torch_weights = any(
    os.path.isfile(os.path.join(model_path, f)) for f in ("model.safetensors", "pytorch_model.bin")
  )
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

  params = {
    "task_path": os.path.join(data_root, "senteval"),
    "usepytorch": True,
    "kfold": 10,
    "batch_size": batch_size,
    "classifier": {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4},
  }

  def run():
    return {task: senteval.engine.SE(params, batcher, lambda p, s: None).eval(task) for task in tasks}

  return run
