"""The machine-wide measurement lock: exclusive across processes, released by the kernel
when its holder is killed, and the wait is measured."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nnsweep.bench._machine_lock import MachineLock, default_lock_path
from nnsweep.core.errors import InfrastructureError

_HOLDER = """
import sys, time
from pathlib import Path
from nnsweep.bench._machine_lock import MachineLock
with MachineLock(Path(sys.argv[1])).hold("holder test"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""

_INTERVALS = """
import json, sys, time
from pathlib import Path
from nnsweep.bench._machine_lock import MachineLock
out = []
time.sleep(max(float(sys.argv[3]) - time.monotonic(), 0))  # both start together
for _ in range(int(sys.argv[2])):
    with MachineLock(Path(sys.argv[1])).hold("interval test") as wait:
        start = time.monotonic()
        time.sleep(0.03)
        out.append((start, time.monotonic(), wait.waited_ms))
print(json.dumps(out))
"""


def _holder(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_free_lock_is_taken_at_once(tmp_path: Path) -> None:
    with MachineLock(tmp_path / "m.lock").hold("me") as wait:
        assert wait.holder == "" and wait.waited_ms < 1000
        assert (tmp_path / "m.lock").read_text() == f"{os.getpid()} me"


def test_a_busy_lock_names_its_holder_and_a_killed_holder_releases_it(tmp_path: Path) -> None:
    path = tmp_path / "m.lock"
    proc = _holder(path, 60)
    try:
        with pytest.raises(InfrastructureError, match="holder test"), MachineLock(path).hold(timeout_s=0.2):
            pass
        os.kill(proc.pid, signal.SIGKILL)  # no clean-up runs: the kernel must release the flock
        proc.wait()
        with MachineLock(path).hold(timeout_s=5) as wait:
            assert wait.waited_ms < 5000
    finally:
        proc.kill()
        proc.communicate()


def test_a_waiter_gets_the_lock_when_the_holder_ends_and_counts_the_wait(tmp_path: Path) -> None:
    path = tmp_path / "m.lock"
    proc = _holder(path, 0.5)
    try:
        with MachineLock(path).hold() as wait:
            assert wait.waited_ms > 200 and "holder test" in wait.holder
    finally:
        proc.communicate()


def test_two_processes_never_hold_it_at_once(tmp_path: Path) -> None:
    path = tmp_path / "m.lock"
    go = str(time.monotonic() + 3)
    procs = [
        subprocess.Popen([sys.executable, "-c", _INTERVALS, str(path), "5", go], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    intervals = sorted(iv for p in procs for iv in json.loads(p.communicate(timeout=60)[0]))
    assert len(intervals) == 10
    for (_, end, _), (start, _, _) in itertools.pairwise(intervals):
        assert start >= end  # CLOCK_MONOTONIC is one clock for the whole machine
    assert any(waited > 10 for _, _, waited in intervals)  # they did contend


def test_the_default_lock_is_machine_wide() -> None:
    path = default_lock_path()
    assert path.name == "nnsweep-measure.lock"
    assert os.access(path.parent, os.W_OK)
