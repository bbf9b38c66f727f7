"""A full disk, for real: a small tmpfs (mounting it needs root, as the emulated board's
tests do), filled to the last byte, under the artifact cache or the sweep's folder.

Before these tests, ExecuTorch's, torch's and LiteRT's conversions ended their process on
a full cache disk (torch's zip writer aborts, SIGABRT, and `nnsweep bench` exited 134;
LLVM's file stream exits 1; a sweep's conversion worker died as a lost agent), and a sweep
whose folder could not take its HTML report ended on a bare OSError without printing its
results.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts a tmpfs of the size given (``"8m"``) at ``tmp_path/disk``; unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()

    def mount(size: str) -> Path:
        command = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)]
        mounted = subprocess.run(command, capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
        return disk

    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)


def _fill(disk: Path, leave: int = 0) -> None:
    """Write to ``disk`` until it is full, then give back ``leave`` bytes."""
    with open(disk / "filler", "wb", buffering=0) as f:  # unbuffered: nothing left for close to fail on
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    assert shutil.disk_usage(disk).free < 65536
    if leave:
        os.truncate(disk / "filler", os.path.getsize(disk / "filler") - leave)


def _one_trial_sweep(name: str, disk: Path, models_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A one-trial ONNX Runtime sweep's spec in ``disk`` (``sweep.yaml``); its cache apart
    in ``tmp_path``. Returns (disk, cache)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    _write_one_trial_spec(name, disk)
    return disk, cache


def _write_one_trial_spec(name: str, folder: Path) -> None:
    spec = {
        "name": name,
        "model": "digits",
        "space": {"runtime": ["onnxruntime"], "quant": ["fp32"], "threads": [1]},
        "budget": {"trials": 1},
        "measure": {"warmup": 2, "iters": 20, "remeasure": 0},
    }
    (folder / "sweep.yaml").write_text(yaml.safe_dump(spec))


def _runs_once_there_is_room(disk: Path, cache: Path) -> None:
    (disk / "filler").unlink()
    again = _nnsweep("run", "sweep.yaml", "--executor", "local", cwd=disk, cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Trials: 1 measured" in again.stdout


def _nnsweep(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NNSWEEP_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "nnsweep", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.parametrize("runtime", ["torch", "executorch", "litert"])
def test_a_conversion_on_a_full_cache_disk_fails_with_the_reason_and_leaves_nothing(
    runtime: str, small_disk: Callable[[str], Path], models_dir: Path, tmp_path: Path
) -> None:
    """torch writes its artifact with torch.jit.save, ExecuTorch its program stage with
    torch.export.save, litert-torch its .tflite through LLVM's stream: each used to end
    the process here (SIGABRT; LiteRT: "LLVM ERROR: IO failure on output stream", exit 1)."""
    disk = small_disk("8m")
    (disk / "models").symlink_to(models_dir)  # digits trains once per test session, elsewhere
    _fill(disk)
    done = _nnsweep("bench", "--model", "digits", "--runtime", runtime, "--iters", "5", cwd=tmp_path, cache=disk)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith("nnsweep: error: cannot write the artifact at ")
    assert done.stderr.strip().endswith("No space left on device")
    assert "Traceback" not in done.stderr and "Aborted" not in done.stderr
    assert [p for p in disk.rglob("*") if p.is_file() and p.name != "filler" and "models" not in p.parts] == []


def test_a_sweep_whose_folder_cannot_take_its_report_prints_its_results_and_the_report_comes_later(
    small_disk: Callable[[str], Path], models_dir: Path, tmp_path: Path
) -> None:
    """The study and MLflow's database (about 1.3 MB) fit in 3 MiB, the report (plotly
    inlined, about 5 MB) does not: the sweep's results are printed, the missing report is named with the
    command that writes it, and once there is room that command writes it."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    spec = {
        "name": "full",
        "model": "digits",
        "devices": ["host"],
        "objectives": {"accuracy": "maximize", "latency_p50_ms": "minimize"},
        "space": {"runtime": ["onnxruntime"], "quant": ["fp32", "dynamic_int8"], "threads": [1]},
        "budget": {"trials": 2},
        "measure": {"warmup": 2, "iters": 20},
        "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "full"},
        "storage": "journal",
    }
    disk = small_disk("3m")
    (disk / "sweep.yaml").write_text(yaml.safe_dump(spec))
    done = _nnsweep("run", "sweep.yaml", "--executor", "local", cwd=disk, cache=cache)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Trials: 2 measured" in done.stdout
    assert "nnsweep run: cannot write the report at reports/full.html: No space left on device" in done.stderr
    assert "`nnsweep report sweep.yaml` writes it" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (disk / "reports" / "full.html").exists()  # nothing half-written

    subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
    written = _nnsweep("report", "sweep.yaml", cwd=disk, cache=cache)
    assert written.returncode == 0, written.stderr[-3000:]
    assert (disk / "reports" / "full.html").stat().st_size > 1_000_000
    again = _nnsweep("run", "sweep.yaml", "--executor", "local", cwd=disk, cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Trials: 2 measured" in again.stdout  # the budget was spent: nothing measured twice


@pytest.mark.parametrize(("room", "written"), [(0, "run.owner"), (4096, "optuna.journal")])
def test_a_sweep_that_cannot_write_its_state_names_the_file_and_runs_once_there_is_room(
    room: int, written: str, small_disk: Callable[[str], Path], models_dir: Path, tmp_path: Path
) -> None:
    """The folder is full before the run's first write: the run lock's owner file (no room
    at all) or the study's first record (a few KB left) failed with a bare
    `OSError: [Errno 28] No space left on device` (no file named, "run again with -v")."""
    disk, cache = _one_trial_sweep("nospace", small_disk("8m"), models_dir, tmp_path)
    _fill(disk, leave=room)
    done = _nnsweep("run", "sweep.yaml", "--executor", "local", cwd=disk, cache=cache)
    assert done.returncode == 1, done.stderr[-3000:]
    state = disk / ".nnsweep" / "nospace"
    assert done.stderr.strip().splitlines()[-1] == (
        f"nnsweep: error: cannot write the sweep's state at {state / written}: No space left on device; "
        "what it recorded before is kept: make room and run the sweep again"
    )
    assert "Traceback" not in done.stderr
    assert not (state / "run.owner").exists() and not (state / "run.tmp").exists()  # no run left behind

    _runs_once_there_is_room(disk, cache)


def test_an_mlflow_database_the_disk_cannot_hold_is_not_left_half_created(
    small_disk: Callable[[str], Path], models_dir: Path, tmp_path: Path
) -> None:
    """300 KB free: the run lock and the study fit, MLflow's tables do not. MLflow's
    migrations, committed one by one, left a half-created mlflow.db, and every later run
    failed with "table _alembic_tmp_model_version_tags already exists" until the file was
    found and removed."""
    disk, cache = _one_trial_sweep("nodb", small_disk("8m"), models_dir, tmp_path)
    _fill(disk, leave=300_000)
    done = _nnsweep("run", "sweep.yaml", "--executor", "local", cwd=disk, cache=cache)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"nnsweep: error: cannot create the MLflow database at {disk / 'mlflow.db'}: database or disk is full; "
        "nothing was written there: make room and run again"
    )
    assert not (disk / "mlflow.db").exists()
    assert [p.name for p in disk.iterdir() if "mlflow" in p.name] == []

    _runs_once_there_is_room(disk, cache)


def test_a_ranking_measured_on_a_full_cache_disk_is_still_printed(
    small_disk: Callable[[str], Path], models_dir: Path, tmp_path: Path
) -> None:
    """The ranking is minutes of work on a real model, the cache entry only saves the next run
    from it: a disk that cannot take the entry is a warning (it was `nnsweep: error: OSError`
    after the measuring, the ranking lost)."""
    disk = small_disk("8m")
    (disk / "models").symlink_to(models_dir)
    _fill(disk)
    done = _nnsweep("sensitivity", "--model", "digits", "--runtime", "onnxruntime", cwd=tmp_path, cache=disk)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cannot keep the onnxruntime ranking at " in done.stderr and "No space left on device" in done.stderr
    assert "1. " in done.stdout  # the ranking, first layer


def test_a_sweep_whose_cache_disk_is_full_waits_and_measures_once_room_is_made(
    small_disk: Callable[[str], Path], digits: object, models_dir: Path, tmp_path: Path
) -> None:
    """The artifact cache's disk is full when the sweep converts: the conversion is retried
    after a pause (5 s, then 30 s), not at once, so room made meanwhile (here, by this test,
    as a cleaner would) lets the same run measure instead of ending on three failures in a
    fraction of a second."""
    cache = small_disk("8m")
    (cache / "models").symlink_to(models_dir)
    work = tmp_path / "work"
    work.mkdir()
    _write_one_trial_spec("waits", work)
    _fill(cache)
    env = {**os.environ, "NNSWEEP_CACHE": str(cache)}
    run = subprocess.Popen(
        [sys.executable, "-m", "nnsweep", "run", "sweep.yaml", "--executor", "local"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert run.stderr is not None
    seen = []
    for line in run.stderr:  # until the first retry is announced
        seen.append(line)
        if "converting again in 5 s" in line:
            break
    assert "No space left on device" in seen[-1], "".join(seen)[-3000:]
    (cache / "filler").unlink()  # a cleaner makes room during the pause
    out, err = run.communicate(timeout=900)
    assert run.returncode == 0, err[-3000:]
    assert "Trials: 1 measured" in out
    assert "conversion failed" not in err
