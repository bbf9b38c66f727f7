"""The sweep's state directory: one run at a time, and results tied to their model and settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nnsweep.sweep.state import SweepBusy, SweepChanged, SweepLock, check_fingerprint

HOLD = """
import sys, time
from pathlib import Path
from nnsweep.sweep.state import SweepLock
lock = SweepLock(Path(sys.argv[1]), "demo")
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def _holder(state: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(state)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    state = tmp_path / ".nnsweep" / "demo"
    holder = _holder(state)
    try:
        started = time.monotonic()
        with pytest.raises(SweepBusy) as caught:
            SweepLock(state, "demo").acquire()
        assert time.monotonic() - started < 1.0
        assert f"pid {holder.pid}" in str(caught.value) and "already running" in str(caught.value)
    finally:
        holder.kill()
        holder.communicate()


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    state = tmp_path / "s"
    holder = _holder(state)
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate()
    assert (state / "run.lock").exists()  # the file stays; the kernel dropped the flock
    with SweepLock(state, "demo"):
        assert f'"pid": {os.getpid()}' in (state / "run.owner").read_text()
    assert not (state / "run.owner").exists()


FP = {
    "model": "digits",
    "model_digest": "a" * 64,
    "model_code": "b" * 64,
    "measure": "warmup=5 iters=200 min_duration_s=0",
    "objectives": "accuracy:maximize,latency_p50_ms:minimize",
    "constraints": "max_accuracy_drop=0.01",
    "space": "c" * 64,
}


def test_an_unchanged_fingerprint_resumes() -> None:
    check_fingerprint("demo", dict(FP), dict(FP))


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("model_digest", "d" * 64, "model weights, architecture or data (aaaaaaaaaaaa -> dddddddddddd)"),
        ("objectives", "accuracy:maximize", "objectives (accuracy:maximize,latency_p50_ms:minimize -> accuracy:max"),
        ("measure", "warmup=5 iters=50 min_duration_s=0", "measure settings"),
        ("space", "e" * 64, "search space"),
    ],
)
def test_a_changed_fingerprint_names_what_changed_and_how_to_start_fresh(key: str, value: str, said: str) -> None:
    with pytest.raises(SweepChanged) as caught:
        check_fingerprint("demo", dict(FP), {**FP, key: value})
    assert said in str(caught.value) and "--fresh" in str(caught.value)


def test_a_study_without_fingerprint_is_from_an_older_nnsweep() -> None:
    with pytest.raises(SweepChanged, match="older nnsweep"):
        check_fingerprint("demo", None, dict(FP))


SPEC = """name: locked
model: {model}
space: {{runtime: [onnxruntime], quant: [fp32, dynamic_int8], granularity: [per_tensor, per_channel]}}
budget: {{trials: 3}}
measure: {{warmup: 1, iters: {iters}, remeasure: 0}}
tracking: {{uri: sqlite:///mlflow.db}}
"""


@pytest.mark.integration
def test_two_runs_of_one_spec_and_a_changed_model(tmp_path: Path, models_dir: Path) -> None:
    """The second `nnsweep run` exits 2 at once naming the first, which finishes undisturbed;
    running the finished spec again after changing `model:` exits 2 naming the change."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    spec = tmp_path / "sweeps" / "locked.yaml"
    spec.parent.mkdir()
    spec.write_text(SPEC.format(model="digits", iters=2000))
    env = dict(os.environ, NNSWEEP_CACHE=str(cache))
    cmd = [sys.executable, "-m", "nnsweep.cli", "run", str(spec), "--executor", "local", "--json"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owner = spec.parent / ".nnsweep" / "locked" / "run.owner"  # beside the spec, wherever it runs from
    deadline = time.monotonic() + 120
    while not owner.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    second = subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 2
    line = second.stderr.strip()
    assert "\n" not in line and f"pid {first.pid}" in line and "already running" in line
    assert not (elsewhere / ".nnsweep").exists() and not (elsewhere / "mlflow.db").exists()

    spec.write_text(SPEC.format(model="digits_gn", iters=2000))
    changed = subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert changed.returncode == 2
    assert "model" in changed.stderr and "--fresh" in changed.stderr and "Traceback" not in changed.stderr
    fresh = subprocess.run([*cmd, "--fresh"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    import json

    (host,) = json.loads(fresh.stdout)
    before = {t["config"]["runtime"] + str(t["metrics"].get("latency_p50_ms")) for t in json.loads(out)[0]["trials"]}
    assert host["trials"] and all(
        t["status"] != "reused" or t["reused_from"] in {x["number"] for x in host["trials"]} for t in host["trials"]
    )
    after = {t["config"]["runtime"] + str(t["metrics"].get("latency_p50_ms")) for t in host["trials"]}
    assert not (before & after)  # nothing of the digits sweep was reused for digits_gn
