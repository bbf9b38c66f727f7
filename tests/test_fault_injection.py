"""benchmarks/fault_injection.py, short, on each executor: `nnsweep run` killed with SIGKILL and
SIGTERM in two of its phases and resumed each time loses, duplicates and misstates nothing
(the study against every param, tag and metric of its MLflow runs); and the check it ends
with fails on a record that is off."""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Two kills per executor, one of each signal, each in a phase of its own: four phases in all.
KILLS = {
    "local": [("converting", signal.SIGKILL), ("measuring", signal.SIGTERM)],
    "ray": [("measuring", signal.SIGTERM), ("recovery", signal.SIGKILL)],
}


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fault_injection", ROOT / "benchmarks" / "fault_injection.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_killed_and_resumed_sweep_loses_nothing(executor: str, tmp_path: Path, models_dir: Path) -> None:
    faults = _script()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)  # digits trains once per test session
    figures = faults.inject(tmp_path, executor, KILLS[executor], trials=3, seed=0)
    print("\n" + faults.summary(executor, figures))
    assert [k.signal for k in figures.kills] == [s.name for _, s in KILLS[executor]], "a run ended before its kill"
    assert figures.final_exit == 0
    assert figures.told >= 3
    assert (figures.lost, figures.duplicated, figures.disagreements) == ([], [], [])
    if executor == "local":
        _the_check_fails_on_a_record_that_is_off(faults, tmp_path, figures)


def _the_check_fails_on_a_record_that_is_off(faults: ModuleType, work: Path, clean: object) -> None:
    from mlflow.tracking import MlflowClient

    final = json.loads(sorted(work.glob("run*.json"))[-1].read_text())
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(faults.SWEEP)
    first, second = client.search_runs([experiment.experiment_id], "tags.`nnsweep.kind` = 'trial'")[:2]
    client.log_metric(first.info.run_id, "latency_p50_ms", 1e6)
    client.set_tag(first.info.run_id, "runtime", "torch")
    client.delete_run(second.info.run_id)
    figures = faults.Figures()
    faults.check(work, 3, final, figures)
    assert figures.failed
    assert len(figures.lost) == 1 and "no MLflow run" in figures.lost[0]
    assert sorted(d.split(": ", 1)[1].split(":")[0] for d in figures.disagreements) == [
        "metric latency_p50_ms",
        "tag runtime",
    ]
