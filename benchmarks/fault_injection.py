"""Kill `nnsweep run` in each of its phases, resume each time, then check the record; exit 1 on any fault.

    python benchmarks/fault_injection.py [--executor local|ray] [--kills 20] [--trials 16] [--seed 0]

Runs one sweep (the digits model over ONNX Runtime's quantization space, MLflow in
sqlite, the Optuna journal) as a separate process with ``-v`` and kills it ``--kills``
times, alternating SIGKILL and SIGTERM. Each kill aims at a phase in turn (converting,
measuring, start-up, recovery; the last fifth at finishing, which a run reaches only once
the budget is spent): it lands a random 0–0.5 s after the run logs that it entered the
phase and is counted in the phase the run's own log last named when the signal went out.
Those ``phase: …`` lines (``-v``) come from the sweep's progress snapshots, taken at
least once a second, so a phase shorter than that can go unseen: each measurement here
lasts at least 1 s (``min_duration_s``) for the kills aimed at it to find it. After each kill the
same command runs again; a last run goes to the end undisturbed. With ``--executor ray``
each run starts its own local Ray cluster (in a private ``HOME`` under the working
directory); whatever a killed run left in its session is killed after it.

Then every trial the study told is compared with its MLflow run: status, every param,
tag and metric :class:`nnsweep.tracking.MlflowTracker` logs for it, the front's
``pareto``/``best`` marks and re-measured figures. It prints the kills per phase and:

* lost — a told trial without its MLflow run, and the budget short of its count
  (distinct measured + failed configurations);
* duplicated — a configuration measured twice (two ``ok`` records with one digest), or
  two MLflow runs for one trial;
* disagreements — runs left RUNNING, trials left RUNNING in the study, a run's status,
  params, tags or metrics other than its record's, a run for a trial the study did not tell,
  a killed run that exited other than by its signal or 130 (or 0 after a SIGTERM once its
  loop was over: it finishes then), a final run that did not exit 0.

The exit code is 1 when any of the three is not 0 (the report says which trial and
field), else 0. Needs the project installed (`make install`). tests/test_fault_injection.py
runs a short version of it in `make test`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC = """name: faults
model: digits
devices: [host]
space:
  runtime: [onnxruntime]
  quant: [fp32, fp16, dynamic_int8, static_int8]
  granularity: [per_tensor, per_channel]
  calibration: [minmax, entropy, percentile]
  threads: [1, 2]
constraints: {{max_accuracy_drop: 0.02}}
budget: {{trials: {trials}}}
measure: {{warmup: 2, iters: 50, min_duration_s: 1.0, remeasure: 1}}
tracking: {{uri: sqlite:///mlflow.db, experiment: faults}}
"""
SWEEP = "faults"
# The phases a kill aims at, in turn (`phase: host <activity>` lines name the others the loop passes through);
# a fifth of the kills aim at the end, last: a run reaches it only once the budget is spent.
TARGETS = ("converting", "measuring", "start-up", "recovery")
_PHASE = re.compile(r"phase: (?:host )?([\w-]+)")
# A killed run ends by its signal, or (SIGTERM, once its handler is in place) with 130 after winding down,
# or 0 when SIGTERM came once the loop was over: the run's next safe point is then its end.
_KILLED_CODES = {-signal.SIGKILL, -signal.SIGTERM, 130}
_TERMINATED_CODES = {*_KILLED_CODES, 0}


@dataclass
class Kill:
    signal: str
    target: str
    phase: str  # what the run's log last named when the signal went out
    after_s: float
    exit_code: int


@dataclass
class Figures:
    kills: list[Kill] = field(default_factory=list)
    finished_early: int = 0  # runs that ended before the phase their kill aimed at
    final_exit: int | None = None
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    told: int = 0
    wall_s: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.duplicated or self.disagreements)

    def per_phase(self) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {}
        for k in self.kills:
            out.setdefault(k.phase, Counter())[k.signal] += 1
        return out


def phase_in(log: str) -> str:
    """The phase a run's log (up to a moment) last named; ``start-up`` before it named any.

    Example:
        >>> phase_in("…INFO nnsweep.sweep.loop: phase: recovery (settling …)\\n…phase: host measuring\\n")
        'measuring'
        >>> phase_in("")
        'start-up'
    """
    found = _PHASE.findall(log)
    return found[-1] if found else "start-up"


class Sweeper:
    """Runs `nnsweep run` on the sweep in ``work`` with one executor, one process at a time."""

    def __init__(self, work: Path, executor: str) -> None:
        self.work, self.executor, self.runs = work, executor, 0
        home = work / "home"  # Ray writes its token and session files under HOME: keep them here
        home.mkdir(exist_ok=True)
        self.env = dict(os.environ, NNSWEEP_CACHE=str(work / "cache"), HOME=str(home))
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (_repo(), os.environ.get("PYTHONPATH", "")) if p)

    def _start(self) -> tuple[subprocess.Popen[bytes], Path]:
        self.runs += 1
        log = self.work / f"run{self.runs:02d}.log"
        cmd = [sys.executable, "-m", "nnsweep", "-v", "run", "faults.yaml", "--executor", self.executor, "--json"]
        with open(log, "wb") as out, open(self.work / f"run{self.runs:02d}.json", "wb") as stdout:
            proc = subprocess.Popen(cmd, cwd=self.work, env=self.env, stdout=stdout, stderr=out, start_new_session=True)
        return proc, log

    def kill(self, target: str, sig: signal.Signals, rng: random.Random, limit_s: float = 300.0) -> Kill | None:
        """One run, sent ``sig`` a random 0–0.5 s after it enters ``target``; ``None`` if it ended first."""
        proc, log = self._start()
        started = time.monotonic()
        delay = rng.uniform(0.0, 0.5)
        seen_at = None
        while proc.poll() is None and time.monotonic() - started < limit_s:
            if seen_at is None and target in _PHASE.findall(log.read_text(errors="replace")):
                seen_at = time.monotonic()
            if seen_at is not None and time.monotonic() - seen_at >= delay:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            self._reap(proc)
            return None
        text = log.read_text(errors="replace")  # before the signal: what the run had said
        proc.send_signal(sig)
        after = time.monotonic() - started
        try:
            code = proc.wait(timeout=120)  # SIGTERM: the run winds down first
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        self._reap(proc)
        return Kill(sig.name, target, phase_in(text), after, code)

    def finish(self) -> int:
        """A run to the end, undisturbed; its exit code."""
        proc, _ = self._start()
        code = proc.wait(timeout=1800)
        self._reap(proc)
        return code

    def final_output(self) -> list[dict[str, Any]]:
        return list(json.loads((self.work / f"run{self.runs:02d}.json").read_text()))

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        """Kill what a killed run left in its session (a local Ray cluster's processes)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _repo() -> str:
    return str(Path(__file__).resolve().parents[1])


def plan(kills: int) -> list[tuple[str, signal.Signals]]:
    """Which phase each kill aims at and its signal: SIGKILL first, then alternating.

    Example:
        >>> [(t, s.name) for t, s in plan(5)]  # doctest: +NORMALIZE_WHITESPACE
        [('converting', 'SIGKILL'), ('measuring', 'SIGTERM'), ('start-up', 'SIGKILL'),
         ('recovery', 'SIGTERM'), ('finishing', 'SIGKILL')]
    """
    at_end = kills // 5
    targets = [TARGETS[i % len(TARGETS)] for i in range(kills - at_end)] + ["finishing"] * at_end
    return [(t, signal.SIGKILL if i % 2 == 0 else signal.SIGTERM) for i, t in enumerate(targets)]


def inject(work: Path, executor: str, kills: list[tuple[str, signal.Signals]], trials: int, seed: int) -> Figures:
    """Kill the sweep as ``kills`` says (see :func:`plan`), finish it, check the record."""
    rng = random.Random(seed)
    (work / "faults.yaml").write_text(SPEC.format(trials=trials))
    sweeper = Sweeper(work, executor)
    figures = Figures()
    started = time.monotonic()
    for target, sig in kills:
        kill = sweeper.kill(target, sig, rng)
        if kill is None:
            figures.finished_early += 1
            print(f"run {sweeper.runs}: ended before {target}", flush=True)
            continue
        figures.kills.append(kill)
        print(
            f"run {sweeper.runs}: {kill.signal} aimed at {target}, landed in {kill.phase} "
            f"after {kill.after_s:.1f} s (exit {kill.exit_code})",
            flush=True,
        )
        if kill.exit_code not in (_TERMINATED_CODES if sig is signal.SIGTERM else _KILLED_CODES):
            figures.disagreements.append(f"run {sweeper.runs} exited {kill.exit_code} (see run{sweeper.runs:02d}.log)")
    figures.final_exit = sweeper.finish()
    print(f"final run {sweeper.runs}: exit {figures.final_exit}", flush=True)
    if figures.final_exit != 0:
        figures.disagreements.append(f"the final run exited {figures.final_exit} (see run{sweeper.runs:02d}.log)")
    else:
        check(work, trials, sweeper.final_output(), figures)
    figures.wall_s = time.monotonic() - started
    return figures


def check(work: Path, trials: int, final: list[dict[str, Any]], figures: Figures) -> None:
    """Compare the study (the record of truth) with the MLflow runs, trial by trial, field by field."""
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.storages.journal import JournalFileBackend

    from nnsweep.core.results import TrialStatus
    from nnsweep.sweep import studies

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(work / ".nnsweep" / SWEEP / "optuna.journal")))
    study = optuna.load_study(study_name=f"{SWEEP}/host", storage=storage)
    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(SWEEP)
    query = f"tags.`nnsweep.kind` = 'trial' and tags.`nnsweep.sweep_id` = '{studies.sweep_id_of(study)}'"
    runs = client.search_runs([experiment.experiment_id], query, max_results=5000)
    by_number: dict[int, list[Any]] = {}
    for run in runs:
        by_number.setdefault(int(run.data.tags["nnsweep.trial"]), []).append(run)
    figures.duplicated += [f"trial {n}: {len(rs)} MLflow runs" for n, rs in by_number.items() if len(rs) > 1]
    figures.disagreements += [f"trial {r.data.tags['nnsweep.trial']}: run left RUNNING" for r in runs if _running(r)]
    records = studies.study_records(study)
    ok = Counter(r.config.digest() for r in records if r.status is TrialStatus.OK)
    figures.duplicated += [f"configuration {d[:12]} measured {n} times" for d, n in ok.items() if n > 1]
    counted = sum(1 for r in records if r.status in (TrialStatus.OK, TrialStatus.FAILED) and r.reused_from is None)
    if counted < trials:
        figures.lost.append(f"budget short: {counted} of {trials} configurations measured or failed")
    (device,) = final
    front = {"pareto": set(device["pareto"]), "best": device["best"]["number"] if device["best"] else None}
    remeasured = studies.remeasured(study)
    told = set()
    for t in study.get_trials(deepcopy=False):
        record = studies.record_of(t)
        if t.state.name == "RUNNING":
            figures.disagreements.append(f"trial {t.number}: left RUNNING in the study")
        if record is None or t.state.name not in ("COMPLETE", "FAIL"):
            continue
        told.add(t.number)
        runs_of = by_number.get(t.number, [])
        if not runs_of:
            figures.lost.append(f"trial {t.number} ({record.status.value}): no MLflow run")
            continue
        figures.disagreements += _compare(record, runs_of[0], front, remeasured.get(t.number, {}))
    figures.told = len(told)
    for number, runs_of in by_number.items():
        if number not in told and any(r.info.status in ("FINISHED", "FAILED") for r in runs_of):
            figures.disagreements.append(
                f"trial {number}: run ended {runs_of[0].info.status}, the study did not tell it"
            )


def _running(run: Any) -> bool:
    return bool(run.info.status == "RUNNING")


def _compare(record: Any, run: Any, front: dict[str, Any], remeasured: dict[str, float]) -> list[str]:
    """Every difference between a told trial's record and its MLflow run."""
    from nnsweep.core.results import TrialStatus
    from nnsweep.tracking import trial_fields

    want = trial_fields(SWEEP, record)
    status = {TrialStatus.OK: "FINISHED", TrialStatus.REUSED: "FINISHED", TrialStatus.FAILED: "FAILED"}
    out = []
    if run.info.status != status.get(record.status):
        out.append(f"status {run.info.status}, record {record.status.value}")
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.") and k != "nnsweep.sweep_id"}
    want_tags = dict(want.tags)
    want_metrics = dict(want.metrics)
    if run.info.status == "FINISHED":  # the front's marks and its re-measured figures
        want_tags["pareto"] = str(record.number in front["pareto"]).lower()
        want_tags["best"] = str(record.number == front["best"]).lower()
        want_metrics.update({k: float(v) for k, v in remeasured.items() if math.isfinite(float(v))})
    out += _differ("param", want.params, run.data.params)
    out += _differ("tag", want_tags, tags)
    out += _differ("metric", want_metrics, run.data.metrics)
    return [f"trial {record.number}: {d}" for d in out]


def _differ(kind: str, want: dict[str, Any], have: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(want) | set(have)):
        a, b = want.get(key), have.get(key)
        same = (
            a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
            if kind == "metric"
            else a == b
        )
        if not same:
            out.append(f"{kind} {key}: record {a!r}, MLflow {b!r}")
    return out


def summary(executor: str, figures: Figures) -> str:
    """The figures, as printed (and read by tests/test_fault_injection.py through :class:`Figures`)."""
    phases = ", ".join(
        f"{phase} {sum(c.values())} ({', '.join(f'{n} {s}' for s, n in sorted(c.items()))})"
        for phase, c in sorted(figures.per_phase().items())
    )
    lines = [
        f"executor: {executor}",
        f"kills survived: {len(figures.kills)}; per phase: {phases or 'none'}",
        f"runs that ended before their kill: {figures.finished_early}; "
        f"SIGTERM'd runs that finished (exit 0): {sum(1 for k in figures.kills if k.exit_code == 0)}",
        f"trials lost: {len(figures.lost)}",
        f"trials duplicated: {len(figures.duplicated)}",
        f"disagreements: {len(figures.disagreements)}",
        f"told trials: {figures.told}; final run exit {figures.final_exit}; wall time {figures.wall_s:.0f} s",
    ]
    for what in ("lost", "duplicated", "disagreements"):
        lines += [f"  {what}: {item}" for item in getattr(figures, what)[:20]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--executor", choices=["local", "ray"], default="local")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="work here (kept) instead of in a temporary directory")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="nnsweep-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    figures = inject(work, args.executor, plan(args.kills), args.trials, args.seed)
    print()
    print(summary(args.executor, figures))
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}")
    if args.workdir is None and not figures.failed:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")
    return 1 if figures.failed else 0


if __name__ == "__main__":
    sys.exit(main())
