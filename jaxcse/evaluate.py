r"""Evaluation as SimCSE runs SentEval: STS12-16, STS-B and SICK-R, unsupervised.

Each sentence pair is scored by the cosine similarity of its two embeddings,
and the scores are correlated with the gold scores (Spearman; Pearson too).
Loading follows SentEval: pairs with an empty gold score are dropped, every
sentence is split on whitespace and re-joined with single spaces, STS12-16
report ``all`` (one correlation over all subsets of the year), ``mean`` and
``wmean``; STS-B and SICK-R report dev and test (SentEval also scores their
train splits, which no unsupervised result uses; we skip them for speed).
``align_uniform`` adds Wang & Isola's alignment and uniformity on STS-B test,
as SimCSE uses them (see ``evaluate_align_uniform``). ``transfer`` runs
SentEval's seven transfer tasks (MR ... MRPC) with a JAX logistic-regression
probe (``jaxcse.evaluation.transfer``); ``all`` = STS + transfer.

  python -m jaxcse.evaluate --model PATH_OR_ID [--pooler P] --tasks sts,align_uniform --output results.json

``--model`` is a Hugging Face folder or hub id, or a jaxcse workdir (its best
checkpoint, else its latest) or one of its checkpoint folders. The STS test sets
ship with jaxcse (``jaxcse/data/quickstart/README.md`` says which and under which
licences), so ``--tasks sts`` needs no data root; a data root that has a task's
folder is read instead. The transfer tasks need ``jaxcse-data download senteval``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from jaxcse import data as data_lib
from jaxcse.core import errors, files, platforms, provenance
from jaxcse.core.errors import JaxcseError
from jaxcse.core.progress import Progress
from jaxcse.evaluation import dev_sets as dev_sets_lib, transfer as transfer_lib
from jaxcse.evaluation.sts_data import STS_TASKS, STS_YEARS, load_stsb, load_task, task_files, task_root
from jaxcse.evaluation.sts_metrics import (
  POSITIVE_MIN_SCORE,
  Embed,
  alignment,
  correlations,
  embed_unique,
  score_pairs,
  uniformity,
)

SUMMARY_NAMES = (*STS_TASKS, "Avg")
ALIGN_UNIFORM = "align_uniform"


def evaluate_sts(embed: Embed, root: str | None, tasks: Sequence[str] = STS_TASKS) -> dict:
  """Runs the STS tasks; returns SentEval-shaped results per task.

  Each task is read from ``root`` (None: ``$JAXCSE_DATA_DIR``) if it has the task's folder, else from the copy
  shipped with jaxcse (``sts_data.task_root``).
  """
  loaded = {task: load_task(task_root(task, root), task) for task in tasks}
  table = embed_unique(embed, [ps for subsets in loaded.values() for ps in subsets.values()])
  results = {}
  for task, subsets in loaded.items():
    res, all_scores, all_gold = {}, [], []
    for name, pairs in subsets.items():
      scores = score_pairs(table, pairs)
      res[name] = correlations(scores, pairs.gold)
      all_scores.append(scores)
      all_gold.append(pairs.gold)
    if task in STS_YEARS:
      weights = [res[n]["nsamples"] for n in subsets]
      res["all"] = {}
      for metric in ("pearson", "spearman"):
        values = [res[n][metric] for n in subsets]
        res["all"][metric] = {
          "all": correlations(np.concatenate(all_scores), np.concatenate(all_gold))[metric],
          "mean": float(np.mean(values)),
          "wmean": float(np.average(values, weights=weights)),
        }
      res["all"]["nsamples"] = int(sum(weights))
    results[task] = res
  return results


def evaluate_align_uniform(embed: Embed, root: str | None) -> dict:
  """Alignment and uniformity on STS-B test, as SimCSE measures them.

  Alignment is over the test pairs with gold score >= 4 (``POSITIVE_MIN_SCORE``) and uniformity over all pairs
  of the distinct sentences of the test split (both sides of every pair, after SentEval's whitespace
  normalisation, each sentence once). Embeddings are L2-normalised; alpha = 2, t = 2.

  Returns:
    ``{"alignment", "uniformity", "n_positive_pairs", "n_sentences"}``.
  """
  root = task_root("STSBenchmark", root)
  test = load_stsb(root)["test"]
  table = embed_unique(embed, [test])
  positive = np.flatnonzero(test.gold >= POSITIVE_MIN_SCORE)
  if len(positive) == 0:
    raise data_lib.DataError(f"STS-B test has no pair with gold score >= {POSITIVE_MIN_SCORE} under {root}")
  e1 = np.stack([table[test.sent1[i]] for i in positive])
  e2 = np.stack([table[test.sent2[i]] for i in positive])
  return {
    "alignment": alignment(e1, e2),
    "uniformity": uniformity(np.stack(list(table.values()))),
    "n_positive_pairs": int(len(positive)),
    "n_sentences": len(table),
  }


def evaluate_own(embed: Embed, own: dev_sets_lib.OwnDevSets, paths: dict[str, str]) -> dict:
  """Your own dev sets' numbers, as sentence-transformers' evaluators compute them (``dev_sets``):
  ``{"pairs": {spearman, pearson, nsamples, path}, "retrieval": {ndcg@10, ..., queries, documents, path}}``, each
  present when given."""
  scores = own(embed)
  results = {}
  if own.pairs is not None:
    results["pairs"] = {
      **{m: scores[f"pairs_{m}"] for m in dev_sets_lib.PAIR_METRICS},
      "nsamples": len(own.pairs),
      "path": paths["pairs"],
    }
  if own.retrieval is not None:
    results["retrieval"] = {
      **{m: scores[f"retrieval_{m}"] for m in dev_sets_lib.RETRIEVAL_METRICS},
      "queries": len(own.retrieval.queries),
      "documents": len(own.retrieval.corpus),
      "path": paths["retrieval"],
    }
  return results


def summarize(results: dict) -> dict[str, float]:
  """The numbers SimCSE's evaluation.py prints: Spearman x100, 2 decimals, STS12-16 'all', test splits.

  With ``results["align_uniform"]``, also its alignment and uniformity, rounded to 4 decimals.
  """
  summary = {}
  for task in STS_TASKS:
    if task not in results:
      continue
    r = results[task]
    value = r["all"]["spearman"]["all"] if task in STS_YEARS else r["test"]["spearman"]
    summary[task] = round(value * 100, 2)
  if all(t in summary for t in STS_TASKS):
    summary["Avg"] = round(sum(summary[t] for t in STS_TASKS) / len(STS_TASKS), 2)
  if ALIGN_UNIFORM in results:
    for key in ("alignment", "uniformity"):
      summary[key] = round(results[ALIGN_UNIFORM][key], 4)
  # Transfer accuracies (x100, 2 decimals) and Avg_transfer, the mean of the seven rounded values.
  summary.update(transfer_lib.summarize_transfer(results))
  # Your own dev sets: as sentence-transformers reports them (not x100), 4 decimals; pairs_spearman, ...
  numbers = (*dev_sets_lib.PAIR_METRICS, *dev_sets_lib.RETRIEVAL_METRICS)
  summary.update(
    {
      f"{kind}_{k}": round(v, 4)
      for kind in OWN_TASKS
      if kind in results
      for k, v in results[kind].items()
      if k in numbers
    }
  )
  return summary


def format_table(summary: dict[str, float], names: Sequence[str] = SUMMARY_NAMES) -> str:
  names = [n for n in names if n in summary]
  widths = [max(len(n), 6) for n in names]
  line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
  head = "|" + "|".join(f" {n:>{w}} " for n, w in zip(names, widths)) + "|"
  row = "|" + "|".join(f" {summary[n]:>{w}.2f} " for n, w in zip(names, widths)) + "|"
  return "\n".join([line, head, line, row, line])


TASK_GROUPS = {
  "sts": STS_TASKS,
  "transfer": transfer_lib.TRANSFER_TASKS,
  "all": (*STS_TASKS, *transfer_lib.TRANSFER_TASKS),
}
TRANSFER_SUMMARY_NAMES = (*transfer_lib.TRANSFER_TASKS, "Avg_transfer")


class TaskError(JaxcseError, ValueError):
  """An unknown evaluation task name."""


# The folder of senteval/downstream each transfer task reads (its files' sha256 go into the results' provenance).
TRANSFER_FOLDERS = {
  "MR": "MR",
  "CR": "CR",
  "SUBJ": "SUBJ",
  "MPQA": "MPQA",
  "SST2": os.path.join("SST", "binary"),
  "TREC": "TREC",
  "MRPC": "MRPC",
}


# Your own dev sets as tasks: ``pairs=PATH`` (a scored-pairs file), ``retrieval=PATH`` (a retrieval folder).
OWN_TASKS = ("pairs", "retrieval")


def own_task(task: str) -> tuple[str, str] | None:
  """``(kind, path)`` of an own dev set's task (``pairs=PATH``, ``retrieval=PATH``), else None."""
  kind, sep, path = task.partition("=")
  return (kind, path) if sep and kind in OWN_TASKS else None


def expand_tasks(spec: str) -> list[str]:
  tasks = []
  for item in spec.split(","):
    item = item.strip()
    if own := own_task(item):
      if not own[1]:
        raise TaskError(f"task {item!r} names no file: give {own[0]}=PATH")
      if any(own_task(t) and own_task(t)[0] == own[0] for t in tasks):
        raise TaskError(f"task {own[0]}= is given twice; evaluate one {own[0]} dev set at a time")
      tasks.append(item)
    elif item in TASK_GROUPS:
      tasks.extend(TASK_GROUPS[item])
    elif item in STS_TASKS or item in transfer_lib.TRANSFER_TASKS or item == ALIGN_UNIFORM:
      tasks.append(item)
    else:
      raise TaskError(
        f"unknown task {item!r}; choose from {sorted(TASK_GROUPS)}, {STS_TASKS}, "
        f"{transfer_lib.TRANSFER_TASKS}, {ALIGN_UNIFORM!r}, pairs=PATH or retrieval=PATH"
      )
  return list(dict.fromkeys(tasks))


def task_data(root: str | None, tasks: Sequence[str]) -> dict[str, str]:
  """Where the tasks' data is read from, checked before anything runs: ``{path under a data root: path}``.

  STS tasks (and align_uniform, on STS-B's files) come from the data root if it has their folder, else from the
  copy shipped with jaxcse (``sts_data.task_root``); the transfer tasks are not shipped (see the data README), so
  they need a data root. Raises ``DataError`` naming the first missing folder or file and the download of it.
  """
  paths = {}
  for task in tasks:
    if own := own_task(task):  # Read (and checked) by own_dev_sets; its files keyed by the path as given.
      given = data_lib.resolve(own[1], root)
      if own[0] == "pairs":
        paths[own[1]] = given
      elif os.path.isdir(given):
        for name in sorted(os.listdir(given)):
          if name.endswith(dev_sets_lib.TABLE_SUFFIXES):
            paths[f"{own[1].rstrip('/')}/{name}"] = os.path.join(given, name)
      continue
    if task in TRANSFER_FOLDERS:
      given = data_lib.data_dir(root)  # The error without a root names the download.
      folder = os.path.join(given, "senteval", "downstream", TRANSFER_FOLDERS[task])
      if not os.path.isdir(folder):
        raise data_lib.DataError(
          f"{folder}: missing ({task}'s data); `jaxcse-data download senteval --data_dir "
          f"{given}` fetches every evaluation task"
        )
      for name in sorted(os.listdir(folder)):
        if os.path.isfile(os.path.join(folder, name)):
          paths[os.path.relpath(os.path.join(folder, name), given).replace(os.sep, "/")] = os.path.join(folder, name)
      continue
    sts = "STSBenchmark" if task == ALIGN_UNIFORM else task
    read_from = task_root(sts, root)
    for relpath in task_files(sts):
      path = os.path.join(read_from, *relpath.split("/"))
      if not os.path.isfile(path):
        raise data_lib.DataError(
          f"{path}: missing ({task}'s data); `jaxcse-data download senteval --data_dir "
          f"{read_from}` fetches every evaluation task"
        )
      paths[relpath] = path
  return paths


class WorkdirConfigError(errors.JaxcseError, ValueError):
  """The training config of the workdir being evaluated (its config.json) cannot be read."""


def _workdir_config(model: str) -> dict | None:
  """The training config of a jaxcse workdir model (its config.json), else None.

  Raises:
    WorkdirConfigError: the workdir's config.json cannot be read (the message names it).
  """
  from jaxcse.storage.workdir import CONFIG_FILE, Workdir

  workdir = Workdir.find(model) if os.path.exists(model) else None
  path = workdir.join(CONFIG_FILE) if workdir else None
  if not path or not os.path.isfile(path):
    return None
  try:
    with open(path) as f:
      config = json.load(f)
    if not isinstance(config, dict):
      raise ValueError("not a JSON object")
  except (OSError, ValueError) as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
    raise WorkdirConfigError(
      f"{path}: unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
      "the results' provenance records the workdir's training config: put the file back as "
      "the run wrote it, or leave --output out"
    ) from None
  return config


@errors.cli
def main(argv: Sequence[str] | None = None) -> int:
  from jaxcse.inference import embedder as embedder_lib, encoder as encoder_lib
  from jaxcse.models import poolers
  from jaxcse.storage import loading

  parser = errors.ArgumentParser(prog=errors.command_name("jaxcse.evaluate"), description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="HF folder or hub id, or a jaxcse workdir or checkpoint folder")
  parser.add_argument(
    "--pooler",
    choices=poolers.names(),
    default=None,
    help="test-time pooler; default: the one saved with a jaxcse model, the sentence-transformers "
    "pooling config of a HF folder, else cls (SimCSE's evaluation.py default)",
  )
  parser.add_argument("--checkpoint", default="best", help="for a workdir: best (default), latest or a step number")
  parser.add_argument("--revision", default=None, help="for a hub id: the branch, tag or commit (default: main)")
  parser.add_argument(
    "--tasks",
    default="sts",
    help=f"comma-separated: sts, transfer, all (sts + transfer), task names "
    f"{','.join(STS_TASKS + transfer_lib.TRANSFER_TASKS)}, {ALIGN_UNIFORM} (STS-B test), or "
    "your own dev sets: pairs=FILE (sentence1, sentence2, score), retrieval=FOLDER (queries, "
    "corpus, qrels)",
  )
  parser.add_argument(
    "--transfer_mode",
    choices=sorted(transfer_lib.MODES),
    default="test",
    help="SentEval's classifier protocol for transfer tasks: test (adam, batch 64, 10 folds; the "
    "papers' numbers) or dev (rmsprop, batch 128, 5 folds; fast)",
  )
  parser.add_argument(
    "--transfer_seed",
    type=int,
    default=transfer_lib.DEFAULT_SEED,
    help="seed of the transfer probes (initialisation, shuffling, k-fold of TREC/MRPC)",
  )
  parser.add_argument(
    "--data_dir",
    default=None,
    help=f"data root (default ${data_lib.DATA_DIR_ENV}); without one, the STS tasks (STS12-16, "
    "STS-B, SICK-R, align_uniform) are read from the copy shipped with jaxcse, and the transfer "
    "tasks need `jaxcse-data download senteval --data_dir DIR`",
  )
  parser.add_argument("--batch_size", type=int, default=128, help="sentences per forward pass (at least 1)")
  parser.add_argument(
    "--packed",
    action="store_true",
    help="embed with the sentences packed end to end into rows of real tokens (docs/models.md, Packed rows) "
    "instead of sorted padded batches: the same scores to float32 rounding",
  )
  parser.add_argument(
    "--truncate_dim",
    type=int,
    default=None,
    help="evaluate the first this many dims of each embedding (a Matryoshka-trained model at a smaller size); "
    "default: the model's own (a sentence-transformers folder's truncate_dim), else all",
  )
  parser.add_argument(
    "--output",
    default=None,
    help="write the full results as JSON here (its folders are created; an existing file is refused)",
  )
  parser.add_argument(
    "--overwrite",
    action="store_true",
    help="replace an existing --output; without it, it is refused before the model loads",
  )
  args = parser.parse_args(argv)
  platforms.use_compilation_cache()

  tasks = expand_tasks(args.tasks)
  if args.output:
    errors.check_output(args.output, folder=False)
    if os.path.exists(args.output) and not args.overwrite:
      raise errors.OutputError(
        f"{args.output} exists (the results of an earlier evaluation); pass --overwrite to "
        "replace it, or choose another --output"
      )
  embedder_lib.check_settings(args.batch_size)
  start = time.time()
  with data_lib.notes_held():  # A refusal below is the only line; the shipped-data note follows the checks.
    root = data_lib.given_root(args.data_dir)
    data_files = task_data(root, tasks)  # Before the model loads and anything runs.
    own_paths = dict(own for own in map(own_task, tasks) if own)
    own = dev_sets_lib.OwnDevSets.load(own_paths.get("pairs", ""), own_paths.get("retrieval", ""), root)
    workdir_config = _workdir_config(args.model) if args.output else None  # Likewise: before the evaluation runs.
    loaded = loading.load_model(args.model, checkpoint=args.checkpoint, pooler=args.pooler, revision=args.revision)
  pooler = args.pooler or loaded.spec.pooling.test_pooler
  if args.pooler and loaded.described and args.pooler != loaded.spec.pooling.test_pooler:
    print(
      f"warning: evaluating with pooler {args.pooler!r}, but this model was saved with test pooler "
      f"{loaded.spec.pooling.test_pooler!r}",
      file=sys.stderr,
    )
  embed_with = embedder_lib.BucketedEmbedder(loaded.spec, pooler, batch_size=args.batch_size, packed=args.packed)
  truncate_dim = args.truncate_dim if args.truncate_dim is not None else loaded.truncate_dim
  if truncate_dim is not None:
    encoder_lib.check_truncate_dim(truncate_dim, loaded.spec.hidden_size)

  def embedder(sentences):
    with Progress(len(sentences), unit="sent", desc="embedding") as bar:
      full = embed_with(sentences, loaded.params, progress=bar)
    return np.ascontiguousarray(full[:, :truncate_dim]) if truncate_dim else full

  sts_tasks = [t for t in tasks if t in STS_TASKS]
  transfer_tasks = [t for t in tasks if t in transfer_lib.TRANSFER_TASKS]
  results = evaluate_sts(embedder, root, sts_tasks) if sts_tasks else {}
  if transfer_tasks:
    with Progress(len(transfer_tasks), unit="task", desc=f"transfer probes ({args.transfer_mode} mode)") as bar:
      results.update(
        transfer_lib.evaluate_transfer(
          embedder,
          data_lib.data_dir(root),
          transfer_tasks,
          mode=args.transfer_mode,
          seed=args.transfer_seed,
          progress=bar,
        )
      )
  if ALIGN_UNIFORM in tasks:
    results[ALIGN_UNIFORM] = evaluate_align_uniform(embedder, root)
  # The model's own prompts for a retrieval set's queries and documents, as it was trained and is served.
  own = dataclasses.replace(
    own, query_prompt=loaded.prompts.get("query", ""), document_prompt=loaded.prompts.get("document", "")
  )
  results.update(evaluate_own(embedder, own, own_paths))
  summary = summarize(results)
  wall = time.time() - start
  dims = (f"  truncate_dim: {truncate_dim}" if truncate_dim else "") + ("  packed rows" if embed_with.packed else "")
  print(f"model: {args.model}  pooler: {pooler}{dims}  ({wall:.1f} s)")
  if sts_tasks:
    print(format_table(summary))
  if transfer_tasks:
    print(f"transfer ({args.transfer_mode} mode, seed {args.transfer_seed}):")
    print(format_table(summary, TRANSFER_SUMMARY_NAMES))
  if ALIGN_UNIFORM in results:
    au = results[ALIGN_UNIFORM]
    print(
      f"alignment: {summary['alignment']:.4f}  uniformity: {summary['uniformity']:.4f}  (STS-B test: "
      f"{au['n_positive_pairs']} pairs with score >= {POSITIVE_MIN_SCORE:g}, {au['n_sentences']} sentences)"
    )
  for kind in OWN_TASKS:
    if kind in results:
      numbers = "  ".join(f"{k}: {v:.4f}" for k, v in summary.items() if k.startswith(f"{kind}_"))
      print(f"{kind} ({results[kind]['path']}): {numbers}")
  if args.output:
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    record = {
      "model": args.model,
      "pooler": pooler,
      **({"truncate_dim": truncate_dim} if truncate_dim else {}),
      **({"packed": True} if embed_with.packed else {}),  # A layout: the same scores to float32 rounding.
      "tasks": results,
      "summary": summary,
      "wall_seconds": round(wall, 1),
    }
    if transfer_tasks:
      record["transfer"] = {"mode": args.transfer_mode, "seed": args.transfer_seed}
    # Keyed by path under senteval/downstream (as before the STS sets shipped): the same files give the same record
    # wherever they were read from.
    digests = {
      relpath.removeprefix("senteval/downstream/"): files.file_sha256(path)
      for relpath, path in sorted(data_files.items())
    }
    record["provenance"] = provenance.provenance(
      model=args.model,
      checkpoint_step=loaded.step,
      revision=loaded.spec.revision,
      config=workdir_config,
      data=digests,
      wall_seconds=wall,
    )
    files.write_json(args.output, record)
  return 0


if __name__ == "__main__":
  sys.exit(main())
