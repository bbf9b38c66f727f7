"""CI cannot go quietly green: a skip of a test whose real parts the machine must have fails
`make test`, whatever the environment's variables (tests/conftest.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import MUST_RUN, strict_skips

ROOT = Path(__file__).resolve().parent.parent


def test_make_test_is_strict_whatever_ci_says() -> None:
    recipe = re.search(r"^test:.*?(?=^\S)", (ROOT / "Makefile").read_text(), re.S | re.M)
    assert recipe is not None
    runs = [line for line in recipe.group(0).splitlines() if "pytest" in line]
    assert len(runs) == 2 and all("NNSWEEP_STRICT_SKIPS=1" in line for line in runs)


def test_which_skips_fail() -> None:
    assert strict_skips({}) == set()  # a developer's own pytest run: skips are skips
    assert strict_skips({"NNSWEEP_STRICT_SKIPS": "1"}) == set(MUST_RUN)
    assert strict_skips({"CI": "true"}) == set(MUST_RUN)
    board_left_out = strict_skips({"NNSWEEP_STRICT_SKIPS": "1", "NNSWEEP_ARM_SIM_TESTS": "0"})
    assert board_left_out == set(MUST_RUN) - {"test_arm_sim.py"}
    assert {"test_arm_sim.py", "test_browser.py", "test_team.py", "test_full_disk.py"} <= set(MUST_RUN)


def test_a_skip_of_a_must_run_test_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "fakes").symlink_to(ROOT / "tests" / "fakes")
    (tmp_path / "test_full_disk.py").write_text("import pytest\n\ndef test_x():\n    pytest.skip('no tmpfs')\n")
    (tmp_path / "test_other.py").write_text("import pytest\n\ndef test_y():\n    pytest.skip('fine')\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "NNSWEEP_STRICT_SKIPS": "1", "PYTHONPATH": str(tmp_path)},
        timeout=120,
    )
    assert run.returncode == 1, run.stdout
    assert "1 failed, 1 skipped" in run.stdout  # the other file's skip stays a skip
    assert "FAILED test_full_disk.py::test_x - skipped where its real parts must run" in run.stdout
