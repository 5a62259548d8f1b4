"""On a machine without an accelerator, jaxcse asks jax for its CPU only, so installed compilers stay silent.

jax starts every platform plugin it finds the first time a program asks for devices. The compile extra
(``pip install "jaxcse[aot]"``) installs two of them, libtpu and the CUDA plugin, only so that ``jaxcse-compile`` can
compile for TPUs and GPUs that are not here; on a machine without either, starting them prints about 36 lines of
errors ("Unable to load CUDA", "unexpected worker hostname") and costs tens of seconds in every command. So when
this machine has no accelerator device and nobody chose the platforms (``JAX_PLATFORMS`` unset), importing jaxcse
sets ``JAX_PLATFORMS=cpu`` -- what jax would end up using anyway. ``jaxcse-compile`` is unaffected: it builds its
TPU and GPU devices through ``jax.experimental.topologies``, which does not need the platforms started.

Left alone: any ``JAX_PLATFORMS`` the user set (an empty value included: jax's own discovery), any machine with an
accelerator device node, and programs that imported jax before jaxcse (their platforms are jax's to choose).
"""

from __future__ import annotations

import glob
import os
import sys

# Device nodes of the accelerators jax has platforms for: TPU VMs (v2-v4 /dev/accel*, v5e/v6e VFIO groups),
# NVIDIA GPUs (Linux and WSL), AMD GPUs (ROCm's kernel driver).
ACCELERATOR_DEVICE_NODES = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/dxg",
                            "/dev/kfd")


def has_accelerator(patterns: tuple[str, ...] = ACCELERATOR_DEVICE_NODES) -> bool:
  """Whether any accelerator device node exists on this machine."""
  return any(glob.glob(pattern) for pattern in patterns)


def cpu_only_without_accelerators(environ=os.environ, patterns: tuple[str, ...] = ACCELERATOR_DEVICE_NODES,
                                  modules=sys.modules) -> bool:
  """Sets ``JAX_PLATFORMS=cpu`` when no accelerator is present and the choice is still open; returns whether it did."""
  if "JAX_PLATFORMS" in environ or "jax" in modules or has_accelerator(patterns):
    return False
  environ["JAX_PLATFORMS"] = "cpu"
  return True
