"""The notebooks in notebooks/ run top to bottom on CPU (tiny setting), so they cannot rot.

Each notebook is executed with nbclient in a kernel of this test's own Python
(the venv running pytest), with ``JAXCSE_NOTEBOOK_SMOKE=1``: a tiny random
BERT, a few steps, STS-B only. The TPU notebook runs on 4 simulated CPU
devices, so its mesh and the split of its global batch are those of a 4-device machine. That its real
configs fit today's Colab and Kaggle TPUs is checked by compiling them for v5e-1 and v5e-8
(tests/test_compile_accelerators.py).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from tests import helpers  # noqa: E402  (after the skips: only needed when the notebook tooling is there)

NOTEBOOKS = os.path.join(helpers.REPO, "notebooks")
KERNEL = "jaxcse-test-python"


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
  """A kernelspec that runs ipykernel with this interpreter, whatever kernels the machine has registered."""
  pytest.importorskip("ipykernel")
  spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
  spec_dir.mkdir(parents=True)
  (spec_dir / "kernel.json").write_text(
    json.dumps(
      {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jaxcse tests",
        "language": "python",
      }
    )
  )
  monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
  return KERNEL


def run_notebook(name: str, kernel: str, workdir: str, env: dict[str, str], monkeypatch) -> nbformat.NotebookNode:
  """Executes notebooks/<name> in its own folder; returns it with outputs. A failing cell raises with its traceback."""
  path = os.path.join(NOTEBOOKS, name)
  nb = nbformat.read(path, as_version=4)
  assert not any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), f"{path}: committed outputs"
  monkeypatch.setenv("JAXCSE_NOTEBOOK_SMOKE", "1")
  monkeypatch.setenv("JAXCSE_NOTEBOOK_WORKDIR", workdir)
  monkeypatch.setenv("JAXCSE_DATA_DIR", helpers.shared_data_dir())
  for key, value in env.items():
    monkeypatch.setenv(key, value)
  client = nbclient.NotebookClient(nb, kernel_name=kernel, timeout=300, resources={"metadata": {"path": NOTEBOOKS}})
  client.execute()
  return nb


def text_output(nb) -> str:
  """All stdout of the executed notebook."""
  return "".join(
    out.get("text", "")
    for cell in nb.cells
    if cell.cell_type == "code"
    for out in cell.outputs
    if out.output_type == "stream" and out.name == "stdout"
  )


def test_quickstart_notebook(kernel, tmp_path, monkeypatch):
  workdir = str(tmp_path / "quickstart")
  nb = run_notebook("quickstart.ipynb", kernel, workdir, {}, monkeypatch)
  out = text_output(nb)
  assert "smoke setting: True" in out
  assert "kept: {" in out and "replaced" not in out  # The environment's jax, flax, transformers stay as they are.
  assert "STS-B dev before training:" in out and "best:" in out
  assert os.path.isfile(os.path.join(workdir, "sts.json"))
  assert os.path.isfile(os.path.join(workdir, "plots", "quickstart_training.png"))
  assert "(8, 32) float32" in out  # 8 sentences encoded by the tiny BERT (hidden 32) into emb.npy.
  assert "Someone is making music." in out


def test_tpu_notebook_on_four_devices_keeps_the_global_batch(kernel, tmp_path, monkeypatch):
  # The smoke setting's global batch is 8 on any device count (the real one 64, as the paper): on 4 devices, 2
  # rows each; a per-device batch times the device count would make it 16 here (and 8 on one v5e chip).
  workdir = str(tmp_path / "tpu")
  nb = run_notebook("tpu.ipynb", kernel, workdir, {"XLA_FLAGS": helpers.simulated_devices(4)}, monkeypatch)
  out = text_output(nb)
  assert "4 cpu devices; mesh axes {'data': 4}" in out
  assert "rows 0:2, shape (2, 1, 32)" in out and "rows 6:8, shape (2, 1, 32)" in out
  assert "trained 2 steps of global batch 8 on 4 devices" in out
  assert os.path.isfile(os.path.join(workdir, "sts.json"))


@pytest.mark.parametrize("inline_choice", ["", "0"])
def test_a_jupyter_kernel_keeps_xlas_cpu_buffers(kernel, monkeypatch, inline_choice):
  """In a Jupyter kernel (its threads allocated before the first cell), a program's 128 MiB temporary buffer is
  not mapped afresh every call (issue 68): glibc's one-arena setting cannot reach the kernel's threads' arenas, so
  jaxcse runs CPU programs inline there. With ``JAXCSE_INLINE_CPU=0`` the kernel pays one fault per page a call, as
  every notebook did before."""
  from tests import test_platforms

  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("PYTHONPATH", helpers.REPO)
  monkeypatch.delenv("JAXCSE_MALLOPT", raising=False)
  monkeypatch.setenv("JAXCSE_INLINE_CPU", inline_choice)
  code = "import sys\nsys.argv = ['kernel', 'kernel']\n" + test_platforms._FAULTS_PER_CALL
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
  nbclient.NotebookClient(nb, kernel_name=kernel, timeout=300).execute()
  temp, *calls = text_output(nb).split()
  pages = int(temp) / 4096
  assert pages >= 2**15  # Over glibc's 64 MiB arena heap.
  test_platforms.assert_mapped_afresh_every_call([int(c) for c in calls], pages, expected=inline_choice == "0")
