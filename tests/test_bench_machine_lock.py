"""The machine-wide measurement lock: exclusive across processes, released by the kernel
when its holder is killed, and the wait is measured; one path per machine whatever
``TMPDIR`` says, a file other users can lock but not write, no symlink followed."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nnsweep.bench import _machine_lock
from nnsweep.bench._machine_lock import FALLBACK, MachineLock, default_lock_path
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


def test_the_default_path_is_one_per_machine_never_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NNSWEEP_MEASURE_LOCK", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(_machine_lock, "RUN_LOCK", shared)
    assert default_lock_path() == shared / "nnsweep-measure.lock"
    shared.chmod(0o755)  # only root may write it: every user falls back, root too
    assert default_lock_path() == FALLBACK == Path("/tmp/nnsweep-measure.lock")
    monkeypatch.setattr(_machine_lock, "RUN_LOCK", tmp_path / "missing")
    assert default_lock_path() == FALLBACK
    monkeypatch.setenv("NNSWEEP_MEASURE_LOCK", str(tmp_path / "own.lock"))
    assert default_lock_path() == tmp_path / "own.lock"


_DEFAULT_LOCK = """
import sys, tempfile
from pathlib import Path
from nnsweep.bench import _machine_lock
from nnsweep.core.errors import InfrastructureError
if sys.argv[1]:
    _machine_lock.RUN_LOCK = Path(sys.argv[1])  # as on a machine whose /run/lock not everyone may write
lock = _machine_lock.MachineLock()
print(tempfile.gettempdir(), lock.path, flush=True)
if sys.argv[2] == "hold":
    with lock.hold("tmpdir holder"):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes stdin
else:
    try:
        with lock.hold(timeout_s=0.5):
            print("FREE", flush=True)
    except InfrastructureError as exc:
        print("BUSY", exc, flush=True)
"""


@pytest.mark.parametrize("run_lock", ["as it is", "not everyone's"])
def test_processes_with_different_tmpdirs_contend_for_one_lock(tmp_path: Path, run_lock: str) -> None:
    """Two real processes, each with its own TMPDIR, take the machine's one lock (the default path)."""
    private = ""
    if run_lock != "as it is":
        (tmp_path / "run-lock").mkdir(mode=0o755)
        private = str(tmp_path / "run-lock")
    env = {k: v for k, v in os.environ.items() if k != "NNSWEEP_MEASURE_LOCK"}
    tmpdirs = [tmp_path / "tmp-a", tmp_path / "tmp-b"]
    for tmpdir in tmpdirs:
        tmpdir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", _DEFAULT_LOCK, private, "hold"],
        env=dict(env, TMPDIR=str(tmpdirs[0])),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        holder_tmp, holder_path = holder.stdout.readline().split()
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.run(
            [sys.executable, "-c", _DEFAULT_LOCK, private, "try"],
            env=dict(env, TMPDIR=str(tmpdirs[1])),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.stdin.close()  # the holder reads to EOF, then releases
        holder.wait(timeout=60)
        holder.stdout.close()
    (waiter_tmp, waiter_path), outcome = (line.split(maxsplit=1) for line in waiter.stdout.splitlines()[:2])
    assert (holder_tmp, waiter_tmp) == tuple(map(str, tmpdirs))  # each process has its own TMPDIR ...
    assert holder_path == waiter_path  # ... and both take the same lock
    if run_lock != "as it is":
        assert Path(holder_path) == FALLBACK
    assert outcome[0] == "BUSY" and "tmpdir holder" in outcome[1], waiter.stdout + waiter.stderr


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_the_lock_file_is_0644_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "m.lock"
    old = os.umask(umask)
    try:
        with MachineLock(path).hold("me"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == ""  # the note is emptied on release: no stale holder for the next waiter


def test_a_file_an_older_version_left_0666_is_tightened_by_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "m.lock"
    path.write_text("")
    path.chmod(0o666)
    with MachineLock(path).hold():
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_symlink_at_the_lock_path_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("secret")
    victim.chmod(0o600)
    (tmp_path / "m.lock").symlink_to(victim)
    with (
        pytest.raises(InfrastructureError, match=r"symbolic link.*NNSWEEP_MEASURE_LOCK"),
        MachineLock(tmp_path / "m.lock").hold(),
    ):
        pass
    assert victim.read_text() == "secret" and stat.S_IMODE(victim.stat().st_mode) == 0o600


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("flock") is None,
    reason="needs root (to act as a second user) and util-linux flock",
)
def test_another_user_locks_the_file_it_can_only_read() -> None:
    """A lock file root made (0644) is locked by `nobody`, who can only open it read-only: and
    the two exclude each other."""
    folder = Path(tempfile.mkdtemp(prefix="nnsweep-lock-"))  # in /tmp, which `nobody` can traverse
    try:
        folder.chmod(0o755)  # `nobody` cannot create or write files here
        path = folder / "m.lock"
        flock = shutil.which("flock")
        assert flock is not None
        with MachineLock(path).hold("root's measurement"):
            busy = subprocess.run([flock, "-x", "-w", "0.3", str(path), "true"], user=65534, check=False)
            assert busy.returncode == 1  # flock(1): timed out waiting for root's lock
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        held = subprocess.Popen(
            [flock, "-x", str(path), "sh", "-c", "echo held; read _"],
            user=65534,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert held.stdin is not None and held.stdout is not None
        try:
            assert held.stdout.readline().strip() == "held"
            with pytest.raises(InfrastructureError, match="another user"), MachineLock(path).hold(timeout_s=0.3):
                pass
        finally:
            held.stdin.close()
            held.wait(timeout=30)
            held.stdout.close()
        with MachineLock(path).hold(timeout_s=5) as wait:
            assert wait.holder == ""
    finally:
        shutil.rmtree(folder)
