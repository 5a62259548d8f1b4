"""Every example in README.md and docs/*.md runs, so that none can rot (docs/development.md).

Every fenced block tagged ``python``, ``bash``, ``sh`` or ``console`` is run, each page's in its order: shell
blocks with ``bash -e -o pipefail``, Python blocks each in a fresh interpreter, all in a scratch folder that holds
symlinks to the checkout's top-level folders (commands run as from a checkout; what they write stays in the scratch
folder). Any other fenced block must be tagged ``text`` (outputs, file layouts), so no command can hide in an
untagged one. The README's quickstart trains ``workdirs/quickstart`` (once per session, under a file lock); each
docs page is a test of its own, in a scratch folder of its own with a copy of it. HTML comments on the lines right
before a block adapt it to CI, visibly in the page's source:

  <!-- no-ci: REASON -->           not run (a TPU, a GPU, the network, hours); the count per page is pinned below
  <!-- ci-replace: OLD => NEW -->  run with OLD replaced by NEW (fewer steps, a smaller size); OLD must occur
  <!-- ci-data-root: REASON -->    run with $JAXCSE_DATA_DIR set to the full data root; without it, a block runs
                                   with no data root, as a new user's would
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

import filelock
import pytest

from tests.helpers import REPO

DOCUMENTS = ["README.md"] + sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
RUN = {"python", "bash", "sh", "console"}
SHOWN = {"text"}  # Outputs and layouts: shown, never run.
# Blocks CI cannot run, per page. Raising a number is a decision: say why in the marker, and prefer a ci-replace.
NO_CI = {
  "README.md": 3,  # pip install from the index (.ci/fresh_install does it from the wheel); the aot extra; the
  # contributors' install and test commands (.ci/run runs them: the suite cannot run itself)
  "docs/benchmarks.md": 1,  # a SimCSE checkout
  "docs/compile.md": 2,  # the aot extra from the index; hours of compiling
  "docs/data.md": 2,  # the hub; a user's TFDS dataset
  "docs/development.md": 3,  # CI itself, the aot venv, this test
  "docs/embeddings.md": 1,  # MTEB's data from the hub
  "docs/evaluation.md": 1,  # 26 minutes
  "docs/install.md": 2,  # pip install from the index; PyTorch's CPU-only build from PyTorch's index
  "docs/methods.md": 1,  # 50 minutes of pretraining
  "docs/mteb.md": 2,  # pip install mteb; MTEB's data from the hub
  "docs/own_data.md": 1,  # the page's one install, from the index (.ci/run installs these extras)
  "docs/training.md": 3,  # the paper's run; a TPU pod; GPU nodes
}
# The checkout as a user's working folder sees it (the scratch folder links these).
CHECKOUT_FOLDERS = ("configs", "experiments", "benchmarks", "notebooks", "tests")
BLOCK_TIMEOUT_S = 900

FENCE = re.compile(r"^(\s*)(`{3,})\s*([^`\s]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(no-ci|ci-replace|ci-data-root)\s*:\s*(.*?)\s*-->\s*$")
ANY_CI_COMMENT = re.compile(r"<!--\s*(no-ci|ci-)")


@dataclasses.dataclass(frozen=True)
class Block:
  document: str  # Relative to the checkout.
  line: int  # The opening fence's line, 1-based.
  language: str
  code: str
  no_ci: str | None = None
  replacements: tuple[tuple[str, str], ...] = ()
  data_root: str | None = None

  @property
  def where(self) -> str:
    return f"{self.document}:{self.line}"


class MarkupError(ValueError):
  pass


def parse(document: str) -> list[Block]:
  """The fenced blocks of one page with their markers; a malformed marker or an untagged fence is an error."""
  with open(os.path.join(REPO, document), encoding="utf-8") as f:
    lines = f.read().split("\n")
  blocks, pending, i = [], [], 0
  while i < len(lines):
    line = lines[i]
    marker = MARKER.match(line)
    if marker:
      pending.append((i + 1, marker.group(1), marker.group(2)))
      i += 1
      continue
    if line.strip().startswith("<!--") and ANY_CI_COMMENT.search(line):
      raise MarkupError(f"{document}:{i + 1}: not a marker this test knows: {line.strip()}")
    fence = FENCE.match(line)
    if not fence:
      if pending and line.strip():
        raise MarkupError(f"{document}:{pending[0][0]}: a marker must stand right before a fenced block")
      i += 1
      continue
    indent, ticks, language = fence.groups()
    close = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks), None)
    if close is None:
      raise MarkupError(f"{document}:{i + 1}: the fenced block is never closed")
    if language not in RUN | SHOWN:
      raise MarkupError(
        f"{document}:{i + 1}: fenced block tagged {language!r}: tag it one of "
        f"{sorted(RUN)} (run by CI) or 'text' (shown only)"
      )
    code = "\n".join(l[len(indent) :] if l.startswith(indent) else l for l in lines[i + 1 : close]) + "\n"
    fields = {"no_ci": None, "replacements": [], "data_root": None}
    for line_no, kind, value in pending:
      if language not in RUN:
        raise MarkupError(f"{document}:{line_no}: {kind} before a block that is not run ({language!r})")
      if kind == "ci-replace":
        old, sep, new = value.partition(" => ")
        if not sep or not old:
          raise MarkupError(f"{document}:{line_no}: ci-replace needs 'OLD => NEW'")
        fields["replacements"].append((old, new))
      elif not value:
        raise MarkupError(f"{document}:{line_no}: {kind} needs a reason")
      else:
        fields["no_ci" if kind == "no-ci" else "data_root"] = value
    blocks.append(
      Block(document, i + 1, language, code, fields["no_ci"], tuple(fields["replacements"]), fields["data_root"])
    )
    pending, i = [], close + 1
  if pending:
    raise MarkupError(f"{document}:{pending[0][0]}: a marker must stand right before a fenced block")
  return blocks


def runnable_code(block: Block) -> str:
  """The block as CI runs it: its replacements applied (each must apply), a console block's `$ ` lines only."""
  code = block.code
  for old, new in block.replacements:
    if old not in code:
      raise MarkupError(f"{block.where}: ci-replace's {old!r} does not occur in the block")
    code = code.replace(old, new)
  if block.language == "console":
    code = "\n".join(l[2:] for l in code.split("\n") if l.startswith("$ ")) + "\n"
  return code


def all_blocks() -> list[Block]:
  return [block for document in DOCUMENTS for block in parse(document)]


# --------------------------------------------------------------------------
# The markup: cheap, and what keeps the examples honest.


def test_every_fenced_block_is_tagged_and_every_marker_is_well_formed():
  blocks = all_blocks()
  assert sum(b.language in RUN for b in blocks) > 20  # The parser found the examples.
  for block in blocks:
    if block.no_ci is None:
      runnable_code(block)  # Every replacement applies.


def test_the_blocks_ci_cannot_run_are_few_and_each_says_why():
  counts: dict[str, int] = {}
  for block in all_blocks():
    if block.no_ci is not None:
      assert len(block.no_ci.split()) >= 3, f"{block.where}: say why CI cannot run it: {block.no_ci!r}"
      counts[block.document] = counts.get(block.document, 0) + 1
  assert counts == NO_CI, "blocks marked no-ci per page changed: update NO_CI only if no ci-replace can do"


def _anchors(document: str) -> set[str]:
  """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
  with open(os.path.join(REPO, document), encoding="utf-8") as f:
    text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
  return {
    re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
    for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)
  }


# Every Markdown page of the checkout whose links a reader follows: the docs and the experiments' and benchmarks' READMEs.
LINKED_DOCUMENTS = sorted(
  os.path.relpath(p, REPO)
  for pattern in (
    "*.md",
    "docs/*.md",
    "experiments/**/*.md",
    "benchmarks/**/*.md",
    "notebooks/**/*.md",
    "jaxcse/**/*.md",
  )
  for p in glob.glob(os.path.join(REPO, pattern), recursive=True)
)


def test_every_relative_link_and_anchor_resolves():
  broken = []
  for document in LINKED_DOCUMENTS:
    with open(os.path.join(REPO, document), encoding="utf-8") as f:
      text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
      if re.match(r"[a-z]+:", target):
        continue
      path, _, anchor = target.partition("#")
      resolved = os.path.normpath(os.path.join(os.path.dirname(document), path)) if path else document
      if not os.path.exists(os.path.join(REPO, resolved)):
        broken.append(f"{document}: {target} (no {resolved})")
      elif anchor and resolved.endswith(".md") and anchor not in _anchors(resolved):
        broken.append(f"{document}: {target} (no heading #{anchor} in {resolved})")
  assert not broken, "broken links:\n" + "\n".join(broken)


# --------------------------------------------------------------------------
# Running them.


def _scratch(path: str) -> str:
  os.makedirs(path)
  for folder in CHECKOUT_FOLDERS:
    os.symlink(os.path.join(REPO, folder), os.path.join(path, folder))
  return path


def _environment(cache_dir: str) -> dict[str, str]:
  env = dict(os.environ)
  env.pop("JAXCSE_DATA_DIR", None)  # A new user's: no data root unless a block is marked ci-data-root.
  # The commands of this interpreter's environment (jaxcse-train, ...) on this checkout's code.
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
  env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  # Nothing may reach the network: an example that needs it must say so (no-ci) instead of hanging CI.
  env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MPLBACKEND="Agg")
  # The blocks compile the same programs (the quickstart model's forward at each length) in many processes: one
  # persistent compilation cache serves them all (CI's own, when it sets one).
  if "JAX_COMPILATION_CACHE_DIR" not in env:
    env.update(
      JAX_COMPILATION_CACHE_DIR=cache_dir,
      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
    )
  return env


def _children_cpu_seconds() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def _run(block: Block, folder: str, env: dict[str, str], data_root: str) -> str | None:
  """Runs one block; None when it succeeds, else what failed."""
  code = runnable_code(block)
  if block.language == "python":
    command = [sys.executable, "-c", code]
  else:
    command = ["bash", "-e", "-o", "pipefail", "-c", code]
  if block.data_root is not None:
    env = {**env, "JAXCSE_DATA_DIR": data_root}
  try:
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
  except subprocess.TimeoutExpired:
    return f"{block.where} ({block.language}): still running after {BLOCK_TIMEOUT_S} s"
  if result.returncode != 0:
    output = (result.stdout + result.stderr)[-3000:]
    return f"{block.where} ({block.language}): exit status {result.returncode}\n{code}--- output (end):\n{output}"
  return None


def _run_page(document: str, folder: str, env: dict[str, str], data_root: str) -> tuple[list[str], str]:
  """Runs a page's blocks in order in ``folder``: (what failed, what each block cost in CPU and wall seconds)."""
  failures, costs = [], []
  for block in parse(document):
    if block.language in RUN and block.no_ci is None:
      cpu, wall = _children_cpu_seconds(), time.monotonic()
      failure = _run(block, folder, env, data_root)
      costs.append((block.where, _children_cpu_seconds() - cpu, time.monotonic() - wall))
      if failure:
        failures.append(failure)
        if document == "README.md" and "jaxcse-train" in block.code:
          break  # The quickstart: nothing after it can run.
  report = "".join(f"\n{where:32} {cpu:7.1f} s CPU {wall:7.1f} s wall" for where, cpu, wall in costs)
  return failures, report


def _session_folder(tmp_path_factory):
  """The folder of the whole test session: under ``pytest -n`` the workers' base folders sit side by side in it."""
  base = tmp_path_factory.getbasetemp()
  return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _readme(tmp_path_factory, data_root: str) -> tuple[str, list[str], str]:
  """The README's blocks, run once per test session (``pytest -n``: once for all workers, under a file lock):
  (its scratch folder, with the trained ``workdirs/quickstart`` every page starts from; what failed; the costs)."""
  shared = _session_folder(tmp_path_factory)
  folder, record = str(shared / "docs-README"), str(shared / "docs-README.json")
  with filelock.FileLock(record + ".lock"):
    if not os.path.exists(record):
      env = _environment(str(shared / "docs-jax_cache"))
      failures, report = _run_page("README.md", _scratch(folder), env, data_root)
      with open(record, "w", encoding="utf-8") as f:
        json.dump({"failures": failures, "report": report}, f)
    with open(record, encoding="utf-8") as f:
      ran = json.load(f)
  return folder, ran["failures"], ran["report"]


def _require_extras():
  # Blocks import what the dev extra installs; a venv without it cannot run them (CI's has it).
  for module in ("sentence_transformers", "mteb", "matplotlib"):
    pytest.importorskip(module, reason=f"the docs' examples use {module} (pip install -e '.[dev]')")


def test_every_readme_example_runs(real_data_dir, tmp_path_factory):
  _require_extras()
  _, failures, report = _readme(tmp_path_factory, real_data_dir)
  print(report)  # What each block costs (CPU seconds of its processes, and wall), to keep this test cheap: -s.
  assert not failures, f"{len(failures)} README example(s) failed:\n\n" + "\n\n".join(failures)


# Each page runs on its own (in parallel under ``pytest -n``), from a copy of the README's trained quickstart.
@pytest.mark.parametrize(
  "document", [d for d in DOCUMENTS[1:] if any(b.language in RUN and b.no_ci is None for b in parse(d))]
)
def test_every_example_of_a_docs_page_runs(document, real_data_dir, tmp_path, tmp_path_factory):
  _require_extras()
  readme, _, _ = _readme(tmp_path_factory, real_data_dir)
  quickstart = os.path.join(readme, "workdirs", "quickstart")
  if not os.path.isdir(quickstart):
    pytest.fail("the README's quickstart failed (test_every_readme_example_runs says how): no page can run")
  folder = _scratch(str(tmp_path / "page"))
  # A copy (64 MB), not links: a page may change it (docs/data.md resumes the finished quickstart) while others read.
  shutil.copytree(quickstart, os.path.join(folder, "workdirs", "quickstart"))
  env = _environment(str(_session_folder(tmp_path_factory) / "docs-jax_cache"))  # The README's cache too.
  failures, report = _run_page(document, folder, env, real_data_dir)
  print(report)
  assert not failures, f"{len(failures)} example(s) of {document} failed:\n\n" + "\n\n".join(failures)


def test_no_script_hard_codes_a_temporary_folder():
  """Scripts a user runs from a checkout default to the platform's temporary folder (``tempfile.gettempdir()``),
  which is not /tmp everywhere (macOS, Windows, a $TMPDIR)."""
  scripts = [
    p
    for folder in ("experiments", "benchmarks", "jaxcse", "configs")
    for p in glob.glob(os.path.join(REPO, folder, "**", "*.py"), recursive=True)
  ]
  hard_coded = [
    os.path.relpath(p, REPO) for p in scripts if re.search(r"""["']/tmp(/|["'])""", open(p, encoding="utf-8").read())
  ]
  assert not hard_coded, f"hard-coded /tmp in {', '.join(sorted(hard_coded))}"
