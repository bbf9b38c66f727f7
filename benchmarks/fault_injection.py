"""Kill `nnsweep run` at random points, resume each time, then check the record.

    python benchmarks/fault_injection.py [--kills 20] [--trials 10] [--seed 0]

Runs one sweep (the digits model over ONNX Runtime's quantization space, local
executor, MLflow in sqlite, the Optuna journal) as a separate process and kills
it ``--kills`` times, alternating SIGKILL and SIGTERM, each at a random moment
between 1 s and 15 s after it started (start-up, recovery, conversion, measurement,
telling); after each kill the same command runs again. A last run goes to the end undisturbed. Then it prints:

* kills survived — runs killed and resumed;
* trials lost — COMPLETE trials without their MLflow run FINISHED with the same
  latency, and the budget short of its count (distinct measured + failed configurations);
* trials duplicated — a configuration measured twice (two `ok` records with one
  digest), or two MLflow runs for one trial;
* disagreements — MLflow runs left RUNNING, FINISHED runs whose trial is not
  COMPLETE, failed trials whose run is not FAILED.

All four but the first must be 0. Needs the project installed (`make install`).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

SPEC = """name: faults
model: digits
space:
  runtime: [onnxruntime]
  quant: [fp32, fp16, dynamic_int8, static_int8]
  granularity: [per_tensor, per_channel]
  calibration: [minmax, entropy, percentile]
  threads: [1, 2]
constraints: {{max_accuracy_drop: 0.02}}
budget: {{trials: {trials}}}
measure: {{warmup: 2, iters: 50}}
tracking: {{uri: sqlite:///mlflow.db, experiment: faults}}
"""


def _run(work: Path, env: dict[str, str], kill_after: float | None, sig: int) -> tuple[int, float]:
    cmd = [sys.executable, "-m", "nnsweep.cli", "run", "faults.yaml", "--executor", "local", "--json"]
    started = time.monotonic()
    with open(work / "runs.log", "ab") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=log)
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(sig)
            proc.wait()
    return proc.returncode, time.monotonic() - started


def check(work: Path, trials: int) -> dict[str, int]:
    """Compare the Optuna study with the MLflow runs."""
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.storages.journal import JournalFileBackend

    from nnsweep.core.results import TrialStatus
    from nnsweep.sweep import studies

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(work / ".nnsweep/faults/optuna.journal")))
    study = optuna.load_study(study_name="faults/host", storage=storage)
    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("faults")
    sweep_id = studies.sweep_id_of(study)
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.`nnsweep.kind` = 'trial' and tags.`nnsweep.sweep_id` = '{sweep_id}'"
    )
    by_number: dict[int, list] = {}
    for run in runs:
        by_number.setdefault(int(run.data.tags["nnsweep.trial"]), []).append(run)
    out = Counter[str]()
    out["mlflow runs left RUNNING"] = sum(1 for r in runs if r.info.status == "RUNNING")
    out["trials with two MLflow runs"] = sum(1 for rs in by_number.values() if len(rs) > 1)
    records = studies.study_records(study)
    ok_digests = Counter(r.config.digest() for r in records if r.status is TrialStatus.OK)
    out["configurations measured twice"] = sum(n - 1 for n in ok_digests.values())
    counted = sum(1 for r in records if r.status in (TrialStatus.OK, TrialStatus.FAILED))
    out["budget short"] = max(0, trials - counted)
    for t in study.get_trials(deepcopy=False):
        record = studies.record_of(t)
        runs_of = by_number.get(t.number, [])
        if t.state.name == "COMPLETE":
            ok = [r for r in runs_of if r.info.status == "FINISHED"]
            if not ok or record is None:
                out["COMPLETE trials without a FINISHED run"] += 1
            elif abs(ok[0].data.metrics.get("latency_p50_ms", -1) - record.metrics["latency_p50_ms"]) > 1e-9:
                out["FINISHED runs whose metrics differ"] += 1
        elif (
            record is not None
            and record.status is TrialStatus.FAILED
            and not any(r.info.status == "FAILED" for r in runs_of)
        ):
            out["failed trials whose run is not FAILED"] += 1
        if t.state.name != "COMPLETE" and any(r.info.status == "FINISHED" for r in runs_of):
            out["FINISHED runs of trials that are not COMPLETE"] += 1
    out["told trials"] = len(records)
    return dict(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="nnsweep-faults-"))
    (work / "faults.yaml").write_text(SPEC.format(trials=args.trials))
    env = dict(os.environ, NNSWEEP_CACHE=str(work / "cache"))
    started = time.monotonic()
    kills = Counter[str]()
    finished_early = 0
    for i in range(args.kills):
        sig = signal.SIGKILL if i % 2 == 0 else signal.SIGTERM
        code, took = _run(work, env, rng.uniform(1.0, 15.0), sig)
        name = signal.Signals(sig).name
        if code in (-signal.SIGKILL, 130, -signal.SIGTERM):
            kills[name] += 1
        elif code == 0:
            finished_early += 1  # the sweep was done before the kill landed
        else:
            print(f"run {i} exited {code} after {took:.1f} s; see {work / 'runs.log'}")
        print(f"run {i + 1}: {name} after {took:.1f} s (exit {code})", flush=True)
    code, took = _run(work, env, None, signal.SIGKILL)
    print(f"final run: exit {code} in {took:.1f} s")
    figures = check(work, args.trials)
    wall = time.monotonic() - started
    survived = sum(kills.values())
    lost = figures.get("COMPLETE trials without a FINISHED run", 0) + figures.get("budget short", 0)
    duplicated = figures.get("configurations measured twice", 0) + figures.get("trials with two MLflow runs", 0)
    disagreements = sum(
        figures.get(k, 0)
        for k in (
            "mlflow runs left RUNNING",
            "FINISHED runs whose metrics differ",
            "failed trials whose run is not FAILED",
            "FINISHED runs of trials that are not COMPLETE",
        )
    )
    print(f"\nkills survived: {survived} ({kills['SIGKILL']} SIGKILL, {kills['SIGTERM']} SIGTERM)")
    print(f"trials lost: {lost}")
    print(f"trials duplicated: {duplicated}")
    print(f"MLflow/Optuna disagreements: {disagreements}")
    print(f"runs that finished before their kill: {finished_early}")
    print(f"told trials: {figures.get('told trials', 0)}; final run exit code {code}; wall time {wall:.0f} s")
    print("details:", {k: v for k, v in figures.items() if v})
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}")
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")


if __name__ == "__main__":
    main()
