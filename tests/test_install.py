"""The constraints file (requirements.txt) installs on any machine: its pins are PyPI's, and CI proves it."""

from __future__ import annotations

import os
import re

from packaging.requirements import Requirement

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pins() -> list[Requirement]:
  with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as f:
    return [Requirement(line) for line in (raw.split("#", 1)[0].strip() for raw in f) if line]


def test_every_pin_is_exact_and_has_no_local_version_label():
  """A local label (``torch==2.13.0+cpu``) names a build no package index but its maker's holds: pip then finds no
  match on PyPI (ResolutionImpossible for ``pip install -c requirements.txt``). Without the label the pin still
  accepts such a build where one is installed (PEP 440: ``==2.13.0`` matches ``2.13.0+cpu``)."""
  pins = _pins()
  assert len(pins) > 50
  for pin in pins:
    (specifier,) = pin.specifier
    assert specifier.operator == "==", f"{pin}: pin an exact version"
    assert "+" not in specifier.version, (
      f"{pin}: a local version label is on no package index; pin {pin.name}=={specifier.version.split('+')[0]}"
    )
  torch = next(p for p in pins if p.name == "torch")
  assert torch.specifier.contains("2.13.0+cpu") and torch.specifier.contains("2.13.0")


def test_ci_resolves_the_pins_without_this_machines_pip_configuration():
  with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
    script = f.read().replace("\\\n", " ")
  (line,) = [line for line in script.splitlines() if "--dry-run" in line]
  assert "PIP_CONFIG_FILE=/dev/null" in line and "-u PIP_FIND_LINKS" in line
  assert re.search(r"-r requirements\.txt", line) and "--ignore-installed" in line
  assert script.index("--dry-run") < script.index('pip install -q -e ".[dev]"'), "check the pins before installing"
