"""Other processes' work on the measuring cores during the timed runs: read from the
kernel's per-CPU counters, judged against the cores the runtime's threads leave spare."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from nnsweep.bench import MeasureSettings, Runner, time_runner
from nnsweep.bench._contention import TOLERANCE_CORES, CoreClock, contended, others_cores


def _phases(others: float, spare: float, timed: float = 1000.0, uncertainty: float = 40.0) -> dict[str, float]:
    return {"timed": timed, "timed_others_cpu": others, "timed_spare_cpu": spare,
            "timed_others_cpu_uncertainty": uncertainty}  # fmt: skip


def test_work_that_fits_in_the_spare_cores_is_not_contention() -> None:
    assert others_cores(_phases(900.0, 1000.0)) == pytest.approx(0.9)
    assert not contended(_phases(1000.0 + 1000.0 * TOLERANCE_CORES, 1000.0))  # within the tolerance
    assert contended(_phases(1200.0, 1000.0))  # 1.2 cores of others, 1 spare
    assert contended(_phases(200.0, 0.0))  # two threads on two cores: 0.2 cores taken from them
    # A tick or two on a short window is below what the counters can tell.
    assert not contended(_phases(20.0, 0.0, timed=5.0, uncertainty=40.0))
    assert others_cores({"timed": 10.0}) is None and not contended({})


class _Spin(Runner):
    """A runner whose every run spins the CPU for 2 ms in this process."""

    name = "spin"

    def __init__(self) -> None:
        self.threads = 1

    def load(self) -> None:
        pass

    def prepare(self, x: np.ndarray) -> object:
        return x

    def run(self, prepared: object) -> object:
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        return prepared


@pytest.mark.skipif(not os.path.exists("/proc/stat") or not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_a_timed_loop_beside_busy_processes_on_its_cores_is_said_to_be_contended() -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > 4:
        pytest.skip("the busy processes below fill at most 4 cores")
    settings = MeasureSettings(warmup=1, iters=300)  # 0.6 s of timed runs
    quiet = time_runner(_Spin(), np.zeros(1, np.float32), settings)
    assert quiet.others_cores is not None
    assert quiet.phases_ms["timed_others_cpu_uncertainty"] == pytest.approx(CoreClock().uncertainty_ms)
    # One busy process per core, plus one: the spare cores (all but the runner's one) are
    # full, and the runner's core is shared too.
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(len(cores) + 1)]
    try:
        time.sleep(0.3)
        loaded = time_runner(_Spin(), np.zeros(1, np.float32), settings)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"others on the measuring cores: quiet {quiet.others_cores:.2f}, busy {loaded.others_cores:.2f}")
    assert loaded.contended and loaded.others_cores is not None and loaded.others_cores > len(cores) - 1
