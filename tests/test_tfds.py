"""The ``tfds:NAME[:split]`` training source, on a local TFDS builder prepared from a text file in the test.

The builder is prepared as ArrayRecord and read back through
``tfds.data_source`` by name and data_dir only (it is not registered), as any
prepared dataset would be; TensorFlow is never imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from jaxcse import data
from jaxcse.data import Batches, DataError

tfds = pytest.importorskip("tensorflow_datasets")

NAME = "jaxcse_test_lines"
LINES = [f"Sentence {i} of the corpus, café déjà vu " + "word " * (i % 7) for i in range(230)]


class JaxcseTestLines(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """One ``text`` record per line of ``source`` (set before preparing), in file order, plus its line number."""

  VERSION = tfds.core.Version("1.0.0")
  disable_shuffling = True  # Records in file order, so record i is line i (DatasetInfo must say it too).
  source = ""

  def _info(self):
    features = tfds.features.FeaturesDict({"text": tfds.features.Text(), "line": tfds.features.Scalar(dtype=np.int64)})
    return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    with open(self.source, encoding="utf-8") as f:
      for i, line in enumerate(f):
        yield i, {"text": line.removesuffix("\n"), "line": i}


def _prepare(tmp_path_factory, lines: list[str]) -> tuple[str, str]:
  """(text file, TFDS data_dir) with the dataset prepared from that file as ArrayRecord."""
  folder = tmp_path_factory.mktemp("tfds")
  text_path = str(folder / "lines.txt")
  with open(text_path, "w", encoding="utf-8") as f:
    f.writelines(line + "\n" for line in lines)
  JaxcseTestLines.source = text_path
  builder = JaxcseTestLines(data_dir=str(folder / "tfds_data"), file_format="array_record")
  builder.download_and_prepare()
  assert "tensorflow" not in sys.modules  # Building and reading must not need TensorFlow.
  return text_path, str(folder / "tfds_data")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  return _prepare(tmp_path_factory, LINES)


def test_tfds_corpus_equals_the_text_file(prepared):
  text_path, tfds_dir = prepared
  corpus = data.load_corpus(f"tfds:{NAME}:train", tfds_data_dir=tfds_dir)
  assert corpus.path == f"tfds:{NAME}:train"
  assert corpus.columns == data.load_corpus(text_path).columns == {"sent0": LINES}
  assert corpus.skipped_empty_lines == []


def test_training_batches_through_tfds_equal_those_of_the_text_file(prepared, tokenizer):
  text_path, tfds_dir = prepared
  options = dict(batch_size=16, max_seq_len=24, seed=3)
  from_tfds = Batches(data.load_corpus(f"tfds:{NAME}", tfds_data_dir=tfds_dir), tokenizer, **options)
  from_text = Batches(data.load_corpus(text_path), tokenizer, **options)
  assert from_tfds.steps_per_epoch == from_text.steps_per_epoch == 230 // 16
  for step in (0, 5, 13, 14, 30):  # Across epochs 0, 1 and 2.
    a, b = from_tfds.batch(step), from_text.batch(step)
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    np.testing.assert_array_equal(a["attention_mask"], b["attention_mask"])


@pytest.mark.parametrize(
  "spec, expected",
  [
    (f"tfds:{NAME}:1.0.0:train", LINES),  # A version in the name.
    (f"tfds:{NAME}:train[10:20]", LINES[10:20]),  # A slice with a colon in the split.
    (f"tfds:{NAME}:train[:5]+train[-3:]", LINES[:5] + LINES[-3:]),
  ],
)
def test_spec_versions_and_split_slices(prepared, spec, expected):
  assert data.load_corpus(spec, tfds_data_dir=prepared[1]).columns["sent0"] == expected


def test_missing_feature_lists_the_available_ones(prepared):
  with pytest.raises(
    DataError,
    match=rf"tfds:{NAME}:train: no feature 'sentence'; set data.tfds_text_feature to one "
    r"of: line \(Scalar\), text \(Text\)",
  ):
    data.load_corpus(f"tfds:{NAME}:train", tfds_data_dir=prepared[1], tfds_text_feature="sentence")


def test_non_text_feature_is_refused(prepared):
  with pytest.raises(DataError, match=r"feature 'line' is Scalar, not Text \(Text features: text\)"):
    data.load_corpus(f"tfds:{NAME}", tfds_data_dir=prepared[1], tfds_text_feature="line")


def test_unknown_dataset_and_split(prepared):
  with pytest.raises(DataError, match=r"tfds:no_such_dataset_here: tfds.data_source\('no_such_dataset_here'"):
    data.load_corpus("tfds:no_such_dataset_here", tfds_data_dir=prepared[1])
  with pytest.raises(DataError, match=rf"tfds:{NAME}:validation: tfds.data_source\('{NAME}', split='validation'\)"):
    data.load_corpus(f"tfds:{NAME}:validation", tfds_data_dir=prepared[1])


@pytest.mark.parametrize("spec", ["tfds:", "tfds::train", "tfds:a[1]"])
def test_malformed_spec(spec):
  with pytest.raises(DataError, match=r"expected tfds:NAME\[:split\]"):
    data.load_corpus(spec)


def test_empty_texts_are_skipped_and_counted_or_an_error(tmp_path_factory, caplog):
  lines = ["first sentence", "", "third sentence", "   ", "fifth sentence"]
  _, tfds_dir = _prepare(tmp_path_factory, lines)
  corpus = data.load_corpus(f"tfds:{NAME}", tfds_data_dir=tfds_dir)
  assert corpus.columns["sent0"] == ["first sentence", "third sentence", "fifth sentence"]
  assert corpus.skipped_empty_lines == [1, 3]  # Record indices.
  assert "skipped 2 empty text(s) (records 1, 3)" in caplog.text
  with pytest.raises(DataError, match=rf"tfds:{NAME}: record 1: empty text \(set data.skip_empty_lines=True"):
    data.load_corpus(f"tfds:{NAME}", tfds_data_dir=tfds_dir, skip_empty_lines=False)


def test_package_works_without_tfds_and_names_the_pip_package():
  # A fresh interpreter where `import tensorflow_datasets` fails, as on a machine without it.
  code = (
    "import sys; sys.modules['tensorflow_datasets'] = None\n"
    "from jaxcse import data\n"
    "assert data.load_corpus('corpora/nli_sample.csv', root=sys.argv[1]).columns['sent0']\n"
    "try:\n"
    "  data.load_corpus('tfds:imdb_reviews:train')\n"
    "except data.DataError as e:\n"
    "  print(e)\n"
  )
  root = os.environ.get("JAXCSE_DATA_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
  if not os.path.isfile(os.path.join(root, "corpora", "nli_sample.csv")):
    pytest.skip(f"no corpora/nli_sample.csv under {root}")
  out = subprocess.run(
    [sys.executable, "-c", code, root],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
  )
  assert out.returncode == 0, out.stderr
  assert (
    "tfds:imdb_reviews:train: reading TFDS datasets needs the tensorflow-datasets and array-record packages "
    "(pip install tensorflow-datasets array-record)"
  ) in out.stdout
