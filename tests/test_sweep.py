"""The coordinator on real conversions and measurements (local executor: threads)."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path

import pytest
from fakes.tracking import RecordingTracker

from nnsweep.agents import LocalTransport
from nnsweep.core.errors import ConversionError, ConversionStorageError, InfrastructureError
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.execution import ConvertRequest, LocalExecutor
from nnsweep.spec import parse_spec
from nnsweep.sweep.loop import Sweep, open_study, study_records
from nnsweep.sweep.moves import neighbours
from nnsweep.sweep.space import device_space

pytestmark = pytest.mark.integration


def _spec(tmp_path: Path, trials: int, remeasure: int = 0, **space: object) -> object:
    # remeasure 0 unless a test checks the end's fresh-process spread: 3 processes per front
    # candidate and the baseline cost a sweep of digits about 15 s on a 2-core machine like CI's.
    # ONNX Runtime unless a test is about another runtime's dimensions: the coordinator treats
    # every runtime alike, and ONNX Runtime converts digits in about 1 s where ExecuTorch's
    # XNNPACK lowering takes about 15 s. ExecuTorch through the whole sweep is the quickstart's
    # (tests/test_examples.py), the emulated board's and test_cluster.py's.
    base = {"runtime": ["onnxruntime"], "quant": ["fp32", "static_int8"], "threads": [1]}
    base.update(space)
    return parse_spec(
        {
            "name": "t",
            "model": "digits",
            "budget": {"trials": trials},
            "measure": {"warmup": 1, "iters": 20, "remeasure": remeasure},
            "constraints": {"max_accuracy_drop": 0.01},
            "space": base,
        }
    )


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path) -> Path:
    monkeypatch.chdir(tmp_path)  # the spec's state (.nnsweep/) lives in the working directory
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)  # digits is trained once per session
    return tmp_path


def test_a_baseline_on_the_front_is_measured_again_once_in_a_run_that_resumes(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    # Run again, the scheduler's baseline record (read before the last run's re-measured
    # figures) no longer equalled the front's, so "baseline not in front" held and the fp32
    # baseline was measured again twice, and printed twice.
    spec = _spec(workdir, trials=2, remeasure=3, runtime=["onnxruntime"], quant=["fp32", "dynamic_int8"])
    for _ in range(2):
        (host,) = Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
        numbers = [x.number for x in host.spread]
        assert host.baseline is not None and host.baseline.number in numbers
        assert len(numbers) == len(set(numbers))


def test_sweep_measures_tells_and_reuses(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    # 5 configurations: fp32, and static int8 x {per_tensor, per_channel} x {minmax, percentile}
    spec = _spec(
        workdir, trials=4, remeasure=3, granularity=["per_tensor", "per_channel"], calibration=["minmax", "percentile"]
    )
    tracker = RecordingTracker()
    results = Sweep(spec, LocalExecutor(), tracker, workdir / "cache").run()  # type: ignore[arg-type]
    (host,) = results
    assert len(tracker.finished) == len(host.records)
    statuses = Counter(r.status for r in host.records)
    # the budget is spent on distinct configurations; repeats are told, but free
    assert statuses[TrialStatus.OK] + statuses[TrialStatus.FAILED] == 4
    assert statuses[TrialStatus.OK] >= 2  # fp32 baseline and static int8 at least
    assert statuses[TrialStatus.FAILED] == 0
    for r in host.records:
        if r.status is TrialStatus.OK:
            assert r.metrics["latency_p50_ms"] > 0 and 0.9 < r.metrics["accuracy"] <= 1
            assert r.feasible is not None and len(r.samples_ms) == 20
        if r.status is TrialStatus.REUSED:
            earlier = next(x for x in host.records if x.number == r.reused_from)
            assert earlier.metrics["latency_p50_ms"] == r.metrics["latency_p50_ms"]
    # measured once per distinct deployment
    digests = [r.config.digest() for r in host.records if r.status is TrialStatus.OK]
    assert len(digests) == len(set(digests))
    assert host.baseline is not None and host.baseline.number == 0
    assert host.best is not None and host.best.feasible
    assert tracker.front["host"][1] == host.best.number and tracker.closed["host"] == "FINISHED"
    # the Pareto candidates and the baseline were measured again, 3 fresh processes each (the
    # default); their pooled medians decide, and are what the tracker logged on their runs
    assert host.baseline.number in {x.number for x in host.spread}
    for x in host.spread:
        assert len(x.p50_ms) == 3 and all(p > 0 for p in x.p50_ms) and x.cv is not None and not x.error
        decided = next(r for r in host.records if r.number == x.number)
        assert decided.metrics["latency_p50_ms"] == x.median_ms == decided.metrics["latency_p50_ms_remeasured"]
        assert tracker.remeasured["host"][x.number]["latency_p50_ms_remeasured"] == x.median_ms
    base = host.baseline.metrics["latency_p50_ms"]
    for r in host.records:
        if "speedup_vs_fp32" in r.metrics:  # every speed-up divides by the baseline's decided figure
            assert r.metrics["speedup_vs_fp32"] == pytest.approx(base / r.metrics["latency_p50_ms"])
    # the host measured: the tracker's background writes were held meanwhile, and released
    assert True in tracker.quiet_calls and tracker.quiet_calls[-1] is False
    # every trial says why it exists
    assert {r.tags["role"] for r in tracker.finished} <= {"baseline", "default", "start", "repair", "refine", "search"}
    assert all("role" in r.tags for r in [*tracker.finished, *host.records])
    assert next(r for r in host.records if r.number == host.baseline.number).tags["role"] == "baseline"


def test_a_finite_space_is_exhausted_not_repeated(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(workdir, trials=6)  # fp32 and static int8: 2 configurations
    results = Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    measured = [r for r in results[0].records if r.status is TrialStatus.OK]
    assert sorted(r.config.quant.mode.value for r in measured) == ["fp32", "static_int8"]


def test_an_sqnr_constraint_decides_feasibility_and_is_told_to_the_study(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    # A model whose outputs are not classes is judged by SQNR: int8 far below the floor is
    # infeasible, and the study holds the constraint under its own name.
    spec = parse_spec(
        {
            "name": "t",
            "model": "digits",
            "objectives": {"sqnr_db": "maximize", "latency_p50_ms": "minimize"},
            "constraints": {"min_sqnr_db": 80},  # fp32 is ~130 dB, any int8 far below
            "budget": {"trials": 2},
            "measure": {"warmup": 1, "iters": 20, "remeasure": 0},
            "space": {"runtime": ["onnxruntime"], "quant": ["fp32", "static_int8"], "granularity": ["per_tensor"]},
        }
    )
    (host,) = Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    by_mode = {r.config.quant.mode.value: r for r in host.records if r.status is TrialStatus.OK}
    assert by_mode["fp32"].feasible is True and by_mode["fp32"].metrics["sqnr_db"] > 80
    assert by_mode["static_int8"].feasible is False and by_mode["static_int8"].metrics["sqnr_db"] < 80
    told = {t.number: t.constraints for t in open_study(spec, "host").trials}  # type: ignore[arg-type]
    for r in by_mode.values():
        assert set(told[r.number]) == {"sqnr_db"}
        assert told[r.number]["sqnr_db"] == pytest.approx(80 - r.metrics["sqnr_db"])
    assert host.best is not None and host.best.config.quant.mode.value == "fp32"


def test_after_the_starts_the_coordinator_refines_the_best(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    # the baseline (fp32) and the static int8 start, then (once results are told; trials
    # asked ahead meanwhile are the sampler's) a neighbour of the best so far
    spec = _spec(
        workdir, trials=6, granularity=["per_tensor", "per_channel"], calibration=["minmax", "entropy", "percentile"]
    )
    results = Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    records = sorted(results[0].records, key=lambda r: r.number)
    assert [r.tags["role"] for r in records[:2]] == ["baseline", "start"]
    refined = [r for r in records if r.tags["role"] == "refine"]
    assert refined, [(r.number, r.tags["role"]) for r in records]
    space = device_space(spec, "host", {"onnxruntime": ("cpu",)}, cores=1)  # type: ignore[arg-type]
    earlier = [r for r in records if r.number < refined[0].number and r.status is TrialStatus.OK]
    assert any(refined[0].config in neighbours(r.config, space) for r in earlier)


def test_interrupted_sweep_resumes_to_exactly_the_budget(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(workdir, trials=4, granularity=["per_tensor", "per_channel"], calibration=["minmax", "percentile"])
    first = RecordingTracker(stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        Sweep(spec, LocalExecutor(), first, workdir / "cache").run()  # type: ignore[arg-type]
    assert first.closed["host"] == "KILLED"
    # A coordinator killed with SIGKILL leaves a RUNNING trial behind: make one.
    study = open_study(spec, "host")  # type: ignore[arg-type]
    left_running = study.ask()
    left_running.suggest_categorical("onnxruntime.quant", ["fp32", "static_int8"])

    second = RecordingTracker()
    results = Sweep(spec, LocalExecutor(), second, workdir / "cache").run()  # type: ignore[arg-type]
    records = results[0].records
    # The budget counts configurations measured or failed; repeats of a measured one are free.
    counted = [r for r in records if r.status in (TrialStatus.OK, TrialStatus.FAILED)]
    assert len(counted) == spec.budget.trials  # type: ignore[attr-defined]
    numbers = [r.number for r in records]
    assert len(numbers) == len(set(numbers))
    # nothing finished in the first run was run again
    finished_first = {r.number for r in first.finished if r.status is not TrialStatus.INTERRUPTED}
    assert not finished_first & {n for _, n in second.started}
    assert left_running.number not in {r.number for r in counted}
    assert len(study_records(open_study(spec, "host"))) == len(records)  # type: ignore[arg-type]


class FailingConversions(LocalExecutor):
    """Stands at the executor seam: static int8 conversions fail, as a broken toolchain would."""

    asked = 0  # static int8 conversions asked for

    def convert(self, request: ConvertRequest, machine: str | None = None) -> Future:  # type: ignore[type-arg]
        if request.config.quant.mode.value == "static_int8":
            self.asked += 1
            failed: Future = Future()  # type: ignore[type-arg]
            failed.set_exception(ConversionError("static int8 toolchain unavailable"))
            return failed
        return super().convert(request, machine)


def test_failed_conversion_fails_that_trial_and_the_sweep_goes_on(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(workdir, trials=4, quant=["static_int8", "fp32"])
    tracker = RecordingTracker()
    results = Sweep(spec, FailingConversions(), tracker, workdir / "cache").run()  # type: ignore[arg-type]
    records = results[0].records
    failed = [r for r in records if r.status is TrialStatus.FAILED]
    assert failed and all("toolchain unavailable" in (r.reason or "") for r in failed)
    assert any(r.status is TrialStatus.OK for r in records)
    # The space holds 2 configurations: each tried once, whatever the budget (4); a repeat of
    # the failing one is told as failed at once, without converting again or spending budget.
    tried = [r for r in records if r.reused_from is None]
    assert sorted(r.status.value for r in tried) == ["failed", "ok"]
    repeats = [r for r in records if r.reused_from is not None]
    assert all(r.status is not TrialStatus.FAILED or "failed in trial" in (r.reason or "") for r in repeats)


class StartUpOrder(LocalExecutor):
    """Stands at the executor seam: records what the sweep asks of the conversion workers
    at start-up, and when the coordinator loads the model."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    def import_converters(self, runtimes):  # type: ignore[no-untyped-def]
        self.events.append(f"import {','.join(runtimes)}")

    def warm_converters(self, source, runtimes):  # type: ignore[no-untyped-def]
        self.events.append(f"warm {source.ref}")
        return {}


def test_the_workers_import_their_converters_before_the_coordinator_loads_the_model(
    workdir: Path,
    digits,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nnsweep.sweep.host import HostSide

    events: list[str] = []
    load = HostSide.load

    def recorded(host: HostSide) -> None:
        events.append("coordinator loads the model")
        load(host)

    monkeypatch.setattr(HostSide, "load", recorded)
    spec = _spec(workdir, trials=1, runtime=["onnxruntime", "torch"])
    Sweep(spec, StartUpOrder(events), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    # The model waits for the coordinator's load: a built-in model's first load writes the cache.
    assert events == ["import onnxruntime,torch", "coordinator loads the model", "warm digits"]


class MemoryErrorOnce(LocalExecutor):
    """Stands at the executor seam: each static int8 configuration's first conversion runs
    out of memory on the worker (a MemoryError raised there), the next one works."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: set[str] = set()

    def convert(self, request: ConvertRequest, machine: str | None = None) -> Future:  # type: ignore[type-arg]
        digest = request.config.digest()
        if request.config.quant.mode.value == "static_int8" and digest not in self.failed:
            self.failed.add(digest)
            oom: Future = Future()  # type: ignore[type-arg]
            oom.set_exception(MemoryError("cannot allocate 2 GiB"))
            return oom
        return super().convert(request, machine)


def test_a_transient_failure_is_retried_and_measured_a_deterministic_one_recorded_once(
    workdir: Path,
    digits,  # type: ignore[no-untyped-def]
) -> None:
    # A deterministic failure (the toolchain refuses): recorded once with its kind, and on a
    # resume it is reused, not converted again. (First: the cache then holds no static int8.)
    spec2 = parse_spec(
        {
            "name": "t2",
            "model": "digits",
            "budget": {"trials": 4},
            "measure": {"warmup": 1, "iters": 20, "remeasure": 0},
            "constraints": {"max_accuracy_drop": 0.01},
            "space": {"runtime": ["onnxruntime"], "quant": ["static_int8", "fp32"], "threads": [1]},
        }
    )
    first = Sweep(spec2, FailingConversions(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    failed = [r for r in first[0].records if r.status is TrialStatus.FAILED and r.reused_from is None]
    assert len(failed) == 1 and failed[0].tags["failure_kind"] == "deterministic"
    counting = FailingConversions()
    again = Sweep(spec2, counting, RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    assert [r.number for r in again[0].records if r.status is TrialStatus.FAILED and r.reused_from is None] == [
        failed[0].number
    ]
    assert counting.asked == 0  # the recorded failure answered for it
    # A transient one (a MemoryError on the worker): tried again in the run, then measured.
    spec = _spec(workdir, trials=2, quant=["static_int8", "fp32"])
    flaky = MemoryErrorOnce()
    results = Sweep(spec, flaky, RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    tried = [r for r in results[0].records if r.reused_from is None]
    assert flaky.failed and sorted(r.status.value for r in tried) == ["ok", "ok"]  # retried, then measured


class FlakyDisk(LocalExecutor):
    """Stands at the executor seam: each configuration's first conversion hits a full disk
    (``always``: every conversion does), as ``deploy.convert`` reports an OSError."""

    def __init__(self, always: bool = False) -> None:
        super().__init__()
        self.always = always
        self.failed: set[str] = set()
        self.asked: dict[str, list[float]] = {}  # digest -> when each conversion was asked

    def convert(self, request: ConvertRequest, machine: str | None = None) -> Future:  # type: ignore[type-arg]
        digest = request.config.digest()
        self.asked.setdefault(digest, []).append(time.monotonic())
        if self.always or digest not in self.failed:
            self.failed.add(digest)
            full: Future = Future()  # type: ignore[type-arg]
            full.set_exception(ConversionStorageError("cannot write the artifact at /cache/x: No space left on device"))
            return full
        return super().convert(request, machine)


def test_a_full_disk_is_retried_after_a_pause_not_recorded(workdir: Path, digits, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("nnsweep.sweep.handlers.CONVERT_BACKOFF_S", (0.4, 5.0))
    spec = _spec(workdir, trials=2)
    disk = FlakyDisk()
    results = Sweep(spec, disk, RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    assert [r.status for r in results[0].records if r.reused_from is None] == [TrialStatus.OK, TrialStatus.OK]
    assert sorted(len(asked) for asked in disk.asked.values()) == [2, 2]  # each failed once, then converted
    assert all(second - first >= 0.4 for first, second in disk.asked.values())  # not at once: after the pause


def test_a_disk_that_stays_full_ends_the_run_and_loses_nothing(workdir: Path, digits, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("nnsweep.sweep.handlers.CONVERT_BACKOFF_S", (0.1, 0.2))
    spec = _spec(workdir, trials=2)
    tracker = RecordingTracker()
    with pytest.raises(InfrastructureError, match="No space left on device"):
        Sweep(spec, FlakyDisk(always=True), tracker, workdir / "cache").run()  # type: ignore[arg-type]
    study = open_study(spec, "host")  # type: ignore[arg-type]
    assert study_records(study) == []  # nothing recorded as a result
    assert not [t for t in study.get_trials() if t.state.name == "RUNNING"]  # requeued, for the next run
    assert tracker.closed["host"] == "KILLED"


def test_a_new_study_measures_its_defaults_then_each_modes_default_first(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.core.config import PartitionLimits
    from nnsweep.sweep.studies import seeded

    spec = _spec(workdir, trials=4, runtime=["torch", "onnxruntime"])
    (host,) = Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    measured = sorted((r for r in host.records if r.reused_from is None), key=lambda r: r.number)
    # the budget of 4 went to the starts, in order: each runtime's fp32 default, then its static int8 default
    assert [(r.config.runtime, r.config.quant.mode.value) for r in measured] == [
        ("torch", "fp32"),
        ("onnxruntime", "fp32"),
        ("torch", "static_int8"),
        ("onnxruntime", "static_int8"),
    ]
    assert all(r.config.partitions == PartitionLimits() for r in measured)
    assert seeded(open_study(spec, "host", create=False)) == {0, 1, 2, 3}  # type: ignore[arg-type]
    # switched off in the spec: a new study is seeded with its default deployments only
    search = dataclasses.replace(spec.search, mode_starts=False)  # type: ignore[attr-defined]
    off = dataclasses.replace(spec, devices=("bare",), search=search)  # type: ignore[type-var]
    Sweep(off, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    assert seeded(open_study(off, "bare", create=False)) == {0, 1}  # type: ignore[arg-type]


def test_a_new_device_starts_from_the_front_the_other_devices_found(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.sweep.resume import WARM_SEEDS
    from nnsweep.sweep.studies import seeded

    space = {"quant": ["fp32", "static_int8"], "granularity": ["per_tensor", "per_channel"]}
    first = _spec(workdir, trials=3, **space)
    (host,) = Sweep(first, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    front = {r.config.digest() for r in host.pareto}
    assert front
    # the same sweep with a second device added: its new study is seeded with host's front
    second = dataclasses.replace(first, devices=("host", "twin"))  # type: ignore[type-var]
    results = Sweep(second, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    warm = {i for i in seeded(open_study(second, "twin", create=False)) if i >= WARM_SEEDS}  # type: ignore[arg-type]
    assert len(warm) == len(front)
    twin = next(r for r in results if r.device == "twin")
    assert front <= {r.config.digest() for r in twin.records}  # tried on the new device
    # switched off in the spec: a third device's new study is not seeded from the others
    search = dataclasses.replace(first.search, warm_start=False)  # type: ignore[attr-defined]
    off = dataclasses.replace(first, devices=("host", "third"), search=search)  # type: ignore[type-var]
    Sweep(off, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    assert not {i for i in seeded(open_study(off, "third", create=False)) if i >= WARM_SEEDS}  # type: ignore[arg-type]


def test_a_sweep_says_while_it_ranks_a_runtimes_layers(workdir: Path, digits, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # A ranking runs before a runtime's first float-layer trial and took minutes with nothing
    # shown (regnet_y_400mf through ExecuTorch: about 6 min a granularity).
    from nnsweep.core.options import x86_without_vnni
    from nnsweep.sweep.rankings import LayerRankings

    monkeypatch.setattr(LayerRankings, "NOTICE_EVERY_S", 0.0)  # every progress line, not one per 15 s
    spec = _spec(workdir, trials=3, runtime=["onnxruntime"], quant=["static_int8"], float_layers=[0, 1])
    notes: list[str] = []
    converting_then: list[int] = []  # conversions started when the ranking began

    def notice(text: str) -> None:
        converting_then.append(sweep.stats.conversions)
        notes.append(text)

    sweep = Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache", notice=notice)  # type: ignore[arg-type]
    results = sweep.run()
    # before the first trial, on an x86 CPU without VNNI (this CI's): its int8 kernels can saturate
    vnni = [n for n in notes if "an x86 CPU without VNNI" in n]
    assert vnni == ([notes[0]] if x86_without_vnni() else []), notes
    first = len(vnni)
    assert notes[first] == "ranking the layers of digits through onnxruntime's quantizer (once per model) ..."
    # the trials asked before it (fp32 and static int8, no layer float) were already converting
    assert converting_then[first] >= 1, converting_then
    assert any(n.startswith("onnxruntime: 1/") and n.endswith("quantize-and-evaluate runs") for n in notes), notes
    assert notes[-1].startswith("onnxruntime: ranked ") and " layers in " in notes[-1], notes
    mixed = [r for r in results[0].records if r.status is TrialStatus.OK and r.config.quant.float_layers]
    assert mixed, [(r.number, r.config.label()) for r in results[0].records]
    again: list[str] = []  # a second sweep of the model reads the ranking from the cache: nothing to say
    Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache", notice=again.append, fresh=True).run()  # type: ignore[arg-type]
    assert again == vnni


def test_a_journal_left_with_a_torn_last_record_resumes_without_it(
    workdir: Path, digits, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """What a write cut short leaves (nnsweep.sweep.journal): the next run, under the run
    lock, drops the torn bytes before it writes, so its records are not glued to them."""
    spec = _spec(workdir, trials=1)
    Sweep(spec, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    journal = workdir / ".nnsweep" / "t" / "optuna.journal"
    with open(journal, "ab") as f:
        f.write(b'{"op_code":6,"worker_id":"w","trial_id":0,"sta')  # cut off mid-record
    more = dataclasses.replace(spec, budget=dataclasses.replace(spec.budget, trials=2))  # type: ignore[type-var]
    (host,) = Sweep(more, LocalExecutor(), RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    assert "never completely written" in caplog.text
    assert len([r for r in host.records if r.reused_from is None]) == 2
    assert len(study_records(open_study(more, "host"))) == len(host.records)  # type: ignore[arg-type]
    assert journal.read_bytes().endswith(b"\n")


def test_a_study_restored_from_an_older_copy_takes_back_the_results_it_does_not_have(
    workdir: Path, digits, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """The remedy a damaged journal's error gives ("restore it from a copy"): the tracker
    then holds results the study does not. Left, a trial the copy had as running was
    measured again under a new number beside the old one's record (the same configuration
    twice in the UI); the resume takes those records back."""
    journal = workdir / ".nnsweep" / "t" / "optuna.journal"

    class CopyingTracker(RecordingTracker):
        copy = b""

        def start_trial(self, device: str, number: int, config: object) -> None:
            super().start_trial(device, number, config)
            if number == 1:  # the copy a user's backup made while trial 1 was converting
                self.copy = journal.read_bytes()

    spec = _spec(workdir, trials=2, quant=["fp32", "dynamic_int8"])
    tracker = CopyingTracker()
    Sweep(spec, LocalExecutor(), tracker, workdir / "cache").run()  # type: ignore[arg-type]
    assert tracker.logged("host") == {0: TrialStatus.OK, 1: TrialStatus.OK} and tracker.copy

    journal.write_bytes(tracker.copy)  # the user restores the copy
    Sweep(spec, LocalExecutor(), tracker, workdir / "cache").run()  # type: ignore[arg-type]
    assert "restored from an older copy" in caplog.text
    results = {n: s for n, s in tracker.logged("host").items() if s is not TrialStatus.INTERRUPTED}
    assert results == {r.number: r.status for r in study_records(open_study(spec, "host"))}  # type: ignore[arg-type]
    measured = [r.config.digest() for r in tracker.finished if r.status is TrialStatus.OK]
    assert len(measured) == len(set(measured)) == 2  # each configuration's result once


class CacheEmptiedAfterConverting(LocalExecutor):
    """Each configuration's first artifact leaves the cache the moment it is converted, as
    if a user's `rm -rf` or a cleaner took it before the coordinator read it for the device."""

    def __init__(self) -> None:
        super().__init__()
        self.converted: Counter[str] = Counter()

    def convert(self, request: ConvertRequest, machine: str | None = None) -> Future:  # type: ignore[type-arg]
        import shutil

        digest = request.config.digest()
        self.converted[digest] += 1
        inner = super().convert(request, machine)
        if self.converted[digest] > 1:
            return inner
        outer: Future = Future()  # type: ignore[type-arg]

        def emptied(done: Future) -> None:  # type: ignore[type-arg]
            shutil.rmtree(done.result()[0].path.parent)  # before the coordinator hears of it
            outer.set_result(done.result())

        inner.add_done_callback(emptied)
        return outer


def test_an_artifact_gone_from_the_cache_before_it_is_measured_is_converted_again(
    workdir: Path, digits, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(workdir, trials=2)
    executor = CacheEmptiedAfterConverting()
    (host,) = Sweep(spec, executor, RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    measured = [r for r in host.records if r.reused_from is None]
    assert [r.status for r in measured] == [TrialStatus.OK, TrialStatus.OK]  # nothing failed for it
    assert [executor.converted[r.config.digest()] for r in measured] == [2, 2]  # each converted once more
    assert "the artifact is gone from the cache" in caplog.text


def test_an_artifact_gone_under_several_thread_counts_is_one_retry_and_one_conversion(
    workdir: Path, digits, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    # Two thread counts share one artifact, which leaves the cache once: one event, one
    # conversion again for both, counted once. Counted per trial, threads [1, 2, 4] on a
    # 4-core machine would end the sweep ("conversion failed 3 times") for a single `rm`:
    # here, with one retry allowed, two counts would.
    monkeypatch.setattr("nnsweep.sweep.handlers.CONVERT_RETRIES", 1)
    spec = _spec(workdir, trials=2, quant=["fp32"], threads=[1, 2])
    executor = CacheEmptiedAfterConverting()
    (host,) = Sweep(spec, executor, RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
    measured = [r for r in host.records if r.reused_from is None]
    assert sorted(r.config.threads for r in measured) == [1, 2]
    assert all(r.status is TrialStatus.OK for r in measured)
    assert sum(executor.converted.values()) == 2
    gone = [r.getMessage() for r in caplog.records if "the artifact is gone" in r.getMessage()]
    assert len(gone) == 1 and gone[0].startswith("host trial 0, host trial 1:"), gone


def test_a_trial_that_breaks_a_quality_bound_on_the_host_is_never_timed_on_the_device(workdir: Path, digits) -> None:  # type: ignore[no-untyped-def]
    # SQNR 80 dB: every int8 deployment of digits is far below it, fp32 (the baseline) above
    def sweep(quality_first: bool, device: str) -> list[TrialRecord]:
        spec = parse_spec(
            {
                "name": f"gate{int(quality_first)}{device}",
                "model": "digits",
                "devices": [device],
                "objectives": {"accuracy": "maximize", "latency_p50_ms": "minimize"},
                "constraints": {"min": {"sqnr_db": 80}},
                "budget": {"trials": 3},
                "measure": {"warmup": 1, "iters": 20, "remeasure": 0},
                "search": {"quality_first": quality_first},
                "space": {
                    "runtime": ["onnxruntime"],
                    "quant": ["fp32", "static_int8"],
                    "granularity": ["per_tensor", "per_channel"],
                },
            }
        )
        # a board stand-in: it measures here but is another machine, whose time the gate saves
        executor = LocalExecutor({"board": LocalTransport(machine="board-sim")})
        (result,) = Sweep(spec, executor, RecordingTracker(), workdir / "cache").run()  # type: ignore[arg-type]
        assert result.best is not None and result.best.config.quant.mode.value == "fp32"
        return [r for r in result.records if r.status is TrialStatus.OK]

    gated = sweep(True, "board")
    int8 = [r for r in gated if r.config.quant.mode.is_int8]
    assert int8 and all(r.tags["quality_from"] == "host" for r in int8)
    assert all(r.feasible is False and not r.samples_ms and "latency_p50_ms" not in r.metrics for r in int8)
    assert all(r.metrics["sqnr_db"] < 80 for r in int8)
    timed = sweep(False, "board")
    assert all(r.samples_ms and "quality_from" not in r.tags for r in timed)
    # the same figures either way: the host ran the same artifact the device would have
    by_config = {r.config.digest(): r for r in timed}
    for r in int8:
        if r.config.digest() in by_config:
            assert r.metrics["sqnr_db"] == pytest.approx(by_config[r.config.digest()].metrics["sqnr_db"])
    # on the host itself the host's time is the device's: every trial is timed there
    assert all(r.samples_ms and "quality_from" not in r.tags for r in sweep(True, "host"))
