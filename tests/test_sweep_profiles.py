"""A sweep with ``search.profile`` profiles its front, best and fp32 baseline per operator
after every timed run, keeps each profile on the study, attaches it to the trial's run, and
the report shows where the time goes (real ONNX Runtime profiler, digits)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.tracking import RecordingTracker

from nnsweep.bench.profile import OpTime, Profile
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.profiles import PROFILE_ARTIFACT, profiled


def _record(number: int, p50: float, *, status: TrialStatus = TrialStatus.OK, **fields: object) -> TrialRecord:
    config = DeploymentConfig(runtime="onnxruntime")
    return TrialRecord(
        sweep="p", device="host", number=number, config=config, status=status, metrics={"latency_p50_ms": p50}, **fields
    )  # type: ignore[arg-type]


def test_the_front_the_best_and_the_baseline_are_profiled_each_once() -> None:
    records = [_record(0, 2.0), _record(1, 1.0), _record(2, 3.0), _record(3, 1.0, status=TrialStatus.FAILED)]
    front, best = [records[1]], records[1]
    assert [r.number for r in profiled(records, front, best, 0, every=False)] == [0, 1]
    assert [r.number for r in profiled(records, front, best, 0, every=True)] == [0, 1, 2]
    assert profiled(records, [], None, None, every=False) == []
    reused, estimated = _record(4, 1.0, reused_from=1), _record(5, 0.5, estimated=True)
    chosen = profiled([reused, estimated], [reused, estimated], estimated, None, every=False)
    assert [r.number for r in chosen] == [5]  # an NPU's table is Vela's estimate: nothing to run


class _Host:
    """The coordinator's side as profile_trials sees it: every artifact cached."""

    snapshot = None

    def cached(self, config: object) -> object:
        return object()

    def measure_request(self, config: object) -> str:
        return f"request for {config}"


def test_a_boards_trials_are_profiled_by_its_agent_and_a_lost_agent_costs_only_the_profile() -> None:
    """A board's artifacts go to its agent (an emulated board shares this machine's name:
    profiling them here would time the x86 host and show it as the board's)."""
    from concurrent.futures import Future

    import optuna

    from nnsweep.core.errors import AgentLost
    from nnsweep.sweep import studies
    from nnsweep.sweep.profiles import profile_trials

    sent: list[object] = []
    board = Profile((OpTime("conv", "Conv", "cpu", 1.0, 1.0),), runs=20, emulated=True)

    def on_device(request: object) -> Future[Profile]:
        sent.append(request)
        future: Future[Profile] = Future()
        if len(sent) == 1:
            future.set_result(board)
        else:
            future.set_exception(AgentLost("agent lost: ActorDiedError"))
        return future

    study = optuna.create_study()
    tracker = RecordingTracker()
    records = [_record(0, 1.0), _record(1, 2.0)]
    got = profile_trials("rpi", records, _Host(), study, tracker, 60.0, on_device=on_device)  # type: ignore[arg-type]
    assert len(sent) == 2 and all(str(r).startswith("request for") for r in sent)
    assert got[0] == board and got[0].to_dict()["profile_emulated"] is True
    assert got[1].reason == "the device's agent could not profile: agent lost: ActorDiedError"
    assert studies.stored_profiles(study)[0]["profile_emulated"] is True
    assert PROFILE_ARTIFACT in tracker.artifacts["rpi#0"] and PROFILE_ARTIFACT in tracker.artifacts["rpi#1"]


def test_an_emulated_devices_agent_labels_its_profiles_and_a_transport_without_one_says_why() -> None:
    from nnsweep.agents import Capabilities, DeviceAgent
    from nnsweep.agents._transport import Transport

    class Board(Transport):
        name = "fake-board"

        def __init__(self, emulated: bool) -> None:
            self.emulated = emulated

        def probe(self, device: str) -> Capabilities:
            return Capabilities(device, "rpi", "aarch64", "Cortex-A72", 4, 4096, {}, emulated=self.emulated)

        def measure(self, request: object) -> object:
            raise AssertionError("not measured")

    profile = Profile((OpTime("conv", "Conv", "cpu", 1.0, 1.0),), runs=3)

    class Profiling(Board):
        def profile(self, request: object) -> Profile:
            return profile

    assert DeviceAgent("rpi", Profiling(emulated=True)).profile(None).emulated is True  # type: ignore[arg-type]
    assert DeviceAgent("rpi", Profiling(emulated=False)).profile(None) == profile  # type: ignore[arg-type]
    reason = DeviceAgent("phone", Board(emulated=False)).profile(None).reason  # type: ignore[arg-type]
    assert reason == "the fake-board transport takes no per-operator profile on its device"


def test_the_report_names_the_kinds_that_make_a_configuration_slower_than_fp32() -> None:
    from dashboards.operators import operator_section, slower_kinds

    fp32 = Profile((OpTime("conv1", "Conv", "cpu", 1.0, 1.0),), runs=20)
    int8 = Profile(
        (
            OpTime("conv1_q", "QLinearConv", "cpu", 0.5, 0.25),
            OpTime("q1", "QuantizeLinear", "cpu", 0.9, 0.45),
            OpTime("dq1", "DequantizeLinear", "cpu", 0.6, 0.3),
        ),
        runs=20,
    )
    assert [k for k, _ in slower_kinds(int8, fp32)] == ["QuantizeLinear", "DequantizeLinear", "QLinearConv"]
    records = [_record(0, 1.0), _record(1, 2.0)]
    html = operator_section("host", records, records[0], records[0], {0: fp32.to_dict(), 1: int8.to_dict()})
    assert "Where the time goes, per operator: host" in html and "slower than fp32" in html
    assert "<code>QuantizeLinear</code> +0.9000 ms" in html and "quantize/dequantize and layout 1.5000 ms" in html
    missing = operator_section("host", records, records[0], records[0], {1: Profile(reason="no profiler").to_dict()})
    assert "#1: no profile (no profiler)" in missing
    assert operator_section("host", records, records[0], records[0], {}) == ""
    vela = Profile((OpTime("t0", "Conv2D", "ethos-u55-128", 0.04, 1.0),), source="Vela's per-layer estimate")
    npu = operator_section("u55", records[:1], records[0], None, {0: vela.to_dict()})
    assert "Estimated, not measured: Vela&#x27;s per-layer estimate" in npu and "own profiler" not in npu
    assert Profile.from_dict(vela.to_dict()) == vela  # the estimate's label survives the study
    board = Profile((OpTime("conv1", "Conv", "cpu", 4.0, 1.0),), runs=20, emulated=True)
    emulated = operator_section("arm64-sim", records[:1], records[0], None, {0: board.to_dict()})
    assert "Emulated: the board's own kernels under qemu-user" in emulated and "own profiler" not in emulated
    assert Profile.from_dict(board.to_dict()) == board  # the emulated label survives the study


@pytest.mark.integration
def test_a_sweep_profiles_its_front_and_the_report_shows_it(tmp_path: Path, monkeypatch, models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.execution import LocalExecutor
    from nnsweep.report.html import load_device, render_report
    from nnsweep.spec import parse_spec
    from nnsweep.sweep import studies
    from nnsweep.sweep.loop import Sweep

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)
    spec = parse_spec(
        {
            "name": "p",
            "model": "digits",
            "budget": {"trials": 2},
            "measure": {"warmup": 1, "iters": 20, "remeasure": 0},
            "space": {"runtime": ["onnxruntime"], "quant": ["fp32", "dynamic_int8"], "threads": [1]},
            # the default profiles the front, the best and the baseline
        }
    )
    tracker = RecordingTracker()
    (host,) = Sweep(spec, LocalExecutor(), tracker, tmp_path / "cache").run()  # type: ignore[arg-type]
    study = studies.open_study(spec, "host", create=False)
    stored = studies.stored_profiles(study)
    wanted = {r.number for r in host.pareto} | {host.baseline.number}  # type: ignore[union-attr]
    assert set(stored) == wanted
    for number, profile in stored.items():
        assert profile["profile"] and profile["profile_runs"] > 0, profile
        assert PROFILE_ARTIFACT in tracker.artifacts[f"host#{number}"]
    html = render_report(spec, [load_device(spec, "host")])
    assert "Where the time goes, per operator: host" in html
    # the report `nnsweep run` writes from the sweep it just ran (no second read of the study) has it too
    from nnsweep.cli.run import _device_trials

    assert set(host.profiles) == wanted
    assert "Where the time goes, per operator: host" in render_report(spec, [_device_trials(host)])
