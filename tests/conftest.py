"""Shared fixtures: a tiny random BERT with bert-base-uncased's tokenizer, a small corpus and a small data root, an
uninterrupted reference run, and a small disk to fill."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # For `configs` and `tests.helpers`.

from tests import helpers  # noqa: E402  (after the path above)


@pytest.fixture(scope="session")
def real_data_dir() -> str:
  return helpers.shared_data_dir()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
  return helpers.make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny_bert")))


@pytest.fixture(scope="session")
def small_data_dir(tmp_path_factory) -> str:
  """A data root with a 400-sentence corpus and the first rows of STS-B and SICK (fast evaluations)."""
  root = str(tmp_path_factory.mktemp("data"))
  real = helpers.shared_data_dir()
  sts_dst = os.path.join(root, "senteval", "downstream", "STS", "STSBenchmark")
  sick_dst = os.path.join(root, "senteval", "downstream", "SICK")
  os.makedirs(sts_dst)
  os.makedirs(sick_dst)
  for src, dst, n in [
    (os.path.join(real, "senteval/downstream/STS/STSBenchmark/sts-dev.csv"), os.path.join(sts_dst, "sts-dev.csv"), 60),
    (
      os.path.join(real, "senteval/downstream/STS/STSBenchmark/sts-test.csv"),
      os.path.join(sts_dst, "sts-test.csv"),
      60,
    ),
    (os.path.join(real, "senteval/downstream/SICK/SICK_trial.txt"), os.path.join(sick_dst, "SICK_trial.txt"), 41),
    (
      os.path.join(real, "senteval/downstream/SICK/SICK_test_annotated.txt"),
      os.path.join(sick_dst, "SICK_test_annotated.txt"),
      41,
    ),
  ]:
    with open(src, encoding="utf-8") as f:
      lines = f.readlines()[:n]
    with open(dst, "w", encoding="utf-8") as f:
      f.writelines(lines)
  os.makedirs(os.path.join(root, "corpora"))
  with open(os.path.join(real, "corpora", "wiki_offline.txt"), encoding="utf-8") as f:
    head = [next(f) for _ in range(400)]
  with open(os.path.join(root, "corpora", "small.txt"), "w", encoding="utf-8") as f:
    f.writelines(head)
  # Triplets for the supervised configs: (sentence, next sentence, the one after), quoted as csv.
  import csv

  with open(os.path.join(root, "corpora", "small_nli.csv"), "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["sent0", "sent1", "hard_neg"])
    lines = [line.strip() for line in head]
    writer.writerows((lines[i], lines[i + 1], lines[i + 2]) for i in range(0, 300, 3))
  return root


@pytest.fixture
def fresh_workdir(tmp_path) -> str:
  path = tmp_path / "workdir"
  yield str(path)
  shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def tokenizer():
  """bert-base-uncased's tokenizer (all-MiniLM-L6-v2's), from tests/fixtures."""
  from transformers import AutoTokenizer

  return AutoTokenizer.from_pretrained(helpers.BERT_UNCASED_TOKENIZER)


def _tree_state(root: str) -> dict[str, tuple[int, int]]:
  """Every file under ``root``: its size and modification time (what a write into the tree changes)."""
  state = {}
  for folder, _, files in os.walk(root):
    for name in files:
      path = os.path.join(folder, name)
      stat = os.stat(path)
      state[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns)
  return state


@pytest.fixture(scope="session")
def _reference_run(tiny_model_dir, small_data_dir, tmp_path_factory):
  from jaxcse import train

  workdir = str(tmp_path_factory.mktemp("fault") / "reference")
  summary = train.train_and_evaluate(helpers.tiny_config(tiny_model_dir, small_data_dir, **helpers.SCHEDULE), workdir)
  return workdir, summary, _tree_state(workdir)


@pytest.fixture
def reference(_reference_run):
  """An uninterrupted run of helpers.SCHEDULE: (workdir, summary), trained once per test process (each test module
  used to train its own). Tests copy it, never change it: a test that writes into it fails here."""
  import copy

  workdir, summary, state = _reference_run
  yield workdir, copy.deepcopy(summary)
  assert _tree_state(workdir) == state, f"this test changed the shared reference run in {workdir}: copy it first"


@pytest.fixture
def small_disk(tmp_path):
  """``small_disk("32m")``: the path of a tmpfs of that size (a real file system to fill), unmounted after the test.
  Skips the test where mounting one needs root."""
  mounted = []

  def mount(size: str) -> str:
    path = str(tmp_path / f"disk{len(mounted)}")
    os.makedirs(path)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True).returncode:
      pytest.skip("cannot mount a small tmpfs here (needs root)")
    mounted.append(path)
    return path

  yield mount
  for path in mounted:
    subprocess.run(["umount", path], capture_output=True)


# The slowest tests (minutes each on one core), longest first: run first, so that with ``-n 2`` neither worker is
# left with one of them at the end while the other waits (the suite's wall time is the busier worker's).
SLOW_FIRST = (
  "tests/test_docs_examples.py::test_every_readme_example_runs",  # Every docs page waits for it (a file lock).
  "tests/test_train.py::test_two_devices_equal_one_device_for_every_method",
  "tests/test_docs_examples.py::test_every_example_of_a_docs_page_runs[docs/own_data.md]",
  "tests/test_docs_examples.py::test_every_example_of_a_docs_page_runs[docs/training.md]",
  "tests/test_docs_examples.py::test_every_example_of_a_docs_page_runs[docs/evaluation.md]",
  "tests/test_docs_examples.py::test_every_example_of_a_docs_page_runs",
  "tests/test_train.py::test_resume_after_kill_matches_uninterrupted_run",
  "tests/test_train.py::test_smoke_train_save_evaluate",
  "tests/test_ablation_switches.py::test_mlm_augmentation_trains_end_to_end_and_needs_a_pretrained_head",
  "tests/test_ranking_losses.py::test_two_devices_equal_one_device",
  "tests/test_multihost.py::test_two_processes_equal_one_process_and_resume",
  "tests/test_ablation_switches.py::test_same_dropout_mask_gives_identical_views_and_the_two_pass_gradient",
  "tests/test_nothing_lost.py::test_ctrl_c_at_any_moment_is_one_line_and_resumable",
  "tests/test_nothing_lost.py::test_ctrl_c_in_a_gc_callback_or_twice_is_one_line_and_resumable",
  "tests/test_notebooks.py::test_quickstart_notebook",
  "tests/test_notebooks.py::test_tpu_notebook_on_four_devices_keeps_the_global_batch",
)


def pytest_collection_modifyitems(config, items):
  """Moves ``SLOW_FIRST``'s tests to the front, in its order (a name without ``[...]``: every parametrization not
  named on its own); the rest keep theirs."""
  del config
  rank = {name: i for i, name in enumerate(SLOW_FIRST)}
  order = {id(item): rank.get(item.nodeid, rank.get(item.nodeid.split("[")[0], len(rank))) for item in items}
  items.sort(key=lambda item: order[id(item)])  # Stable: ties keep the collection order.
