"""experiments/aot/table.py on fake reports: a cell's searches merged, smaller failures shown, what is missing."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from tests import helpers

SCRIPT = os.path.join(helpers.REPO, "experiments", "aot", "table.py")


@pytest.fixture
def table(tmp_path, monkeypatch):
  spec = importlib.util.spec_from_file_location("aot_table", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  monkeypatch.setattr(module, "RESULTS", str(tmp_path))
  return module


def _write(root, name, data):
  path = os.path.join(root, name)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(data, f)


def _search(largest, tried):
  return {"max_batch": [{"variant": "plain", "max_batch_size": largest, "tried": tried}]}


def test_a_cells_searches_are_merged_and_smaller_failures_shown(table):
  root = table.RESULTS
  report = {
    "batch_size": 512,
    "fits": True,
    "flops_per_device": 25.56e12,
    "roofline_step_seconds": 0.02583,
    "roofline_bound": "compute",
    "memory_bytes": {"total": 23.57 * 2**30, "device_limit": 59.33 * 2**30},
  }
  _write(root, "simcse_sup/h100.json", report)
  assert "| not compiled yet |" in table.rows(("h100",))[2]
  # The search from the config's batch stops at the first failure; the one around a guess finds more.
  _write(
    root, "simcse_sup/h100.max_batch.json", _search(1336, [[512, True], [1024, True], [1344, False], [1336, True]])
  )
  assert "| 1336 |" in table.rows(("h100",))[2]
  _write(
    root,
    "simcse_sup/h100.max_batch_near.json",
    _search(3768, [[2888, True], [3904, False], [3768, True], [3784, False], [3776, False]]),
  )
  line = table.rows(("h100",))[2]
  assert "| 3768 (1344 not) |" in line and line.startswith("| `simcse_sup` (512) | h100 | 23.57 of 59.33 GiB |")
  # 1,614 steps at the 25.83 ms bound: 42 s; at 40% of it: 104 s.
  assert line.endswith("| 42 s | 104 s |")
  others = ", ".join(t for t in table.TARGETS if t != "h100")
  assert table.missing()[1] == f"- `simcse_sup`: not compiled on {others}"


def test_missing_names_only_the_gaps(table, monkeypatch):
  monkeypatch.setattr(table, "TARGETS", ("v5e-1", "h100"))
  monkeypatch.setattr(table, "CONFIGS", ("base",))
  assert table.missing() == ["- `base`: not compiled on v5e-1, h100"]
  _write(table.RESULTS, "base/v5e-1.json", {"batch_size": 64, "fits": True})
  assert table.missing() == ["- `base`: not compiled on h100; no largest batch on v5e-1"]
  _write(table.RESULTS, "base/h100.json", {"batch_size": 64, "fits": True})
  _write(table.RESULTS, "base/v5e-1.max_batch.json", _search(1240, [[1240, True]]))
  assert table.missing() == ["- `base`: no largest batch on h100"]
  _write(table.RESULTS, "base/h100.max_batch.json", _search(2008, [[2008, True]]))
  assert table.missing() == ["- `base`: every target compiled, each with its largest batch"]


def test_nothing_fits_reads_as_none(table):
  _write(table.RESULTS, "base/v5e-1.json", {"batch_size": 64, "fits": False})
  _write(table.RESULTS, "base/v5e-1.max_batch.json", _search(None, [[64, False], [32, False], [8, False]]))
  assert table.rows(("v5e-1",))[2] == "| `base` (64) | v5e-1 | does not fit | | | none | | |"
