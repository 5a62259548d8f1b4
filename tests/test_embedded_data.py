"""The quickstart data shipped inside the package: pinned, attributed, and where relative data paths fall back to."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from jaxcse.training import configuration
from jaxcse.evaluation import sts_data
from jaxcse import data
from jaxcse.core import files
from jaxcse.data import DataError, downloads, manifest, root
from tests import helpers

REAL_ROOT = os.environ.get("JAXCSE_DATA_DIR") or helpers.SHARED_DATA  # Read before the fixture below unsets it.
CORPUS = "corpora/wiki_offline_20k.txt"
STSB_DEV = sts_data.STSB_DEV_FILE


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
  """No data root, and the once-per-process checks and notices forgotten, as in a fresh process."""
  monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
  monkeypatch.setattr(root, "_embedded_checked", set())
  monkeypatch.setattr(root, "_announced", set())


def _files(folder: str) -> list[str]:
  return sorted(
    os.path.relpath(os.path.join(d, f), folder).replace(os.sep, "/") for d, _, files in os.walk(folder) for f in files
  )


def test_every_shipped_file_is_pinned_and_matches():
  assert _files(data.EMBEDDED_ROOT) == sorted(manifest.EMBEDDED_SHA256)
  for relpath, digest in manifest.EMBEDDED_SHA256.items():
    assert files.file_sha256(os.path.join(data.EMBEDDED_ROOT, relpath)) == digest, relpath


def test_shipped_stsb_dev_is_the_downloaded_file():
  # The same bytes as the senteval download's pinned member, so results on it equal results on a full data root.
  pinned = dict(downloads.DOWNLOADS["senteval"][0].verified_members)["STS/STSBenchmark/sts-dev.csv"]
  assert manifest.EMBEDDED_SHA256[STSB_DEV] == pinned
  assert len(sts_data.load_dev_sets(sickr=False)["stsb_dev"]) == 1500


def test_shipped_corpus_is_the_head_of_wiki_offline():
  corpus = data.load_corpus(CORPUS)
  assert len(corpus) == 20_000 and not corpus.skipped_empty_lines
  real = os.path.join(REAL_ROOT, "corpora", "wiki_offline.txt")
  if not os.path.isfile(real):
    pytest.skip("wiki_offline.txt is not on this machine")
  with open(real, encoding="utf-8") as f:
    head = [next(f).rstrip("\n") for _ in range(20_000)]
  assert corpus.columns["sent0"] == head


def test_readme_states_the_licences():
  text = open(os.path.join(data.EMBEDDED_ROOT, "README.md"), encoding="utf-8").read()
  for needed in ("CC BY-SA 4.0", "Wikipedia's contributors", "LICENSE.txt", "creativecommons.org/licenses/by-sa/4.0"):
    assert needed in text


def test_no_root_reads_the_shipped_files_with_one_line(tmp_path, monkeypatch, caplog):
  monkeypatch.chdir(tmp_path)
  with caplog.at_level(logging.INFO, logger="jaxcse"):
    assert data.resolve(CORPUS) == os.path.join(data.EMBEDDED_ROOT, "corpora", "wiki_offline_20k.txt")
    assert data.data_file(STSB_DEV) == os.path.join(data.EMBEDDED_ROOT, *STSB_DEV.split("/"))
  lines = [(r.levelno, r.getMessage()) for r in caplog.records]
  # A note, not a warning: nothing is missing (the shipped data is where a command without a data root reads).
  assert lines == [
    (
      logging.INFO,
      "reading the data shipped with jaxcse (a 20,000-sentence corpus, STS-B dev, the STS test sets; --data_dir "
      "DIR or $JAXCSE_DATA_DIR reads another data root)",
    )
  ]


def test_the_shipped_data_note_follows_a_commands_checks_and_only_when_they_pass(tmp_path, monkeypatch, caplog):
  monkeypatch.chdir(tmp_path)
  with caplog.at_level(logging.INFO, logger="jaxcse"):
    with pytest.raises(DataError, match="a refusal"), data.notes_held():
      data.resolve(CORPUS)
      raise DataError("a refusal")  # The command's error is its only line.
    assert not caplog.records
    with data.notes_held():
      data.resolve(CORPUS)
      assert not caplog.records  # Held while the command checks.
    assert len(caplog.records) == 1 and "reading the data shipped with jaxcse" in caplog.records[0].getMessage()


def test_a_given_root_wins_and_lacking_files_fall_back_with_a_line(tmp_path, caplog):
  helpers.write_text(str(tmp_path / "r" / "corpora" / "wiki_offline_20k.txt"), "mine\n")
  assert data.resolve(CORPUS, str(tmp_path / "r")) == str(tmp_path / "r" / CORPUS)
  with caplog.at_level(logging.WARNING, logger="jaxcse"):
    assert data.data_file(STSB_DEV, str(tmp_path / "r")).startswith(data.EMBEDDED_ROOT)
  assert [r.getMessage() for r in caplog.records] == [
    f"{STSB_DEV}: not in the data root {tmp_path / 'r'}, so it is read from the quickstart data shipped with "
    f"jaxcse ({data.EMBEDDED_ROOT})"
  ]
  with pytest.raises(DataError, match="does not exist"):  # A mistyped root never falls back silently.
    data.resolve(CORPUS, str(tmp_path / "typo"))


def test_other_files_name_the_download(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(
    DataError,
    match=r"corpora/wiki1m_for_simcse.txt: no such file .*no data root is given.*"
    r"`jaxcse-data download wiki1m --data_dir DIR` fetches it",
  ):
    data.resolve("corpora/wiki1m_for_simcse.txt")
  with pytest.raises(DataError, match=r"`jaxcse-data download senteval --data_dir DIR` fetches it"):
    data.data_file("senteval/downstream/MR/rt-polarity.pos")  # The transfer tasks are not shipped.
  with pytest.raises(DataError, match=r"no jaxcse-data download provides it"):
    data.resolve("corpora/mine.txt")
  (tmp_path / "r").mkdir()
  with pytest.raises(
    DataError,
    match=rf"looked in the current directory and in {tmp_path / 'r'}/corpora/nli_for_simcse"
    rf".csv\); `jaxcse-data download nli --data_dir {tmp_path / 'r'}` fetches it",
  ):
    data.resolve("corpora/nli_for_simcse.csv", str(tmp_path / "r"))


def test_a_damaged_shipped_file_is_an_error(tmp_path, monkeypatch):
  copy = tmp_path / "quickstart"
  shutil.copytree(data.EMBEDDED_ROOT, copy)
  with open(copy / "corpora" / "wiki_offline_20k.txt", "r+b") as f:
    f.write(b"X")
  monkeypatch.setattr(root, "EMBEDDED_ROOT", str(copy))
  with pytest.raises(
    DataError, match=r"wiki_offline_20k.txt: sha256 [0-9a-f]{64}, not the 39150c05.* reinstall jaxcse"
  ):
    data.resolve(CORPUS)
  assert data.data_file(STSB_DEV).startswith(str(copy))  # Each file is checked on its own.


def test_quickstart_configs_need_no_data_root():
  for name in ("quickstart", "quickstart_minilm"):
    config = __import__(f"jaxcse.configs.{name}", fromlist=["get_config"]).get_config()
    assert config.data.train == CORPUS and not config.data.data_dir and not config.eval.sickr_dev
    data.resolve(config.data.train)
    sts_data.load_dev_sets(sickr=config.eval.sickr_dev)


def test_a_metric_needing_sickr_dev_needs_it_scored():
  config = __import__("jaxcse.configs.dclr", fromlist=["get_config"]).get_config()
  config.eval.sickr_dev = False
  with pytest.raises(configuration.ConfigError, match="eval.metric=stsb_sickr_dev needs eval.sickr_dev=True"):
    configuration.validate(config)


def test_shipped_sts_test_sets_are_the_downloaded_files():
  # Every file the STS evaluation reads ships, pinned to the same sha256 as the senteval download's member.
  pinned = dict(downloads.DOWNLOADS["senteval"][0].verified_members)
  for task in sts_data.STS_TASKS:
    for relpath in sts_data.task_files(task):
      member = relpath.removeprefix("senteval/downstream/")
      assert manifest.EMBEDDED_SHA256[relpath] == pinned[member], relpath


def test_readme_states_which_sets_ship_and_their_licences():
  text = open(os.path.join(data.EMBEDDED_ROOT, "README.md"), encoding="utf-8").read()
  for needed in (
    "CC BY-NC-SA 3.0",
    "CC BY-NC-SA 2.0 UK",
    "mteb/sickr-sts",
    "SentEval",
    "Not shipped",
    "STS.answers-forums.zip",
    "jaxcse-data download senteval",
  ):
    assert needed in text, needed
