"""``nnsweep bench --profile``: per-operator times aggregated from each runtime's profiler,
the q/dq overhead apart, and a runtime without a profiler saying why in one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
from fakes.bench import bench_json

from nnsweep.bench.profile import OpTime, Profile, aggregate, is_overhead
from nnsweep.core import runtimes

# What ONNX Runtime 1.2x writes for a QDQ model: one warm-up run, then two profiled ones.
ORT_TRACE = [
    {"cat": "Session", "name": "session_initialization", "ts": 5, "dur": 5000},
    {"cat": "Session", "name": "model_run", "ts": 100, "dur": 900},
    {"cat": "Node", "name": "x_QuantizeLinear_kernel_time", "ts": 110, "dur": 500,
     "args": {"op_name": "QuantizeLinear", "provider": "CPUExecutionProvider"}},
    {"cat": "Node", "name": "x_QuantizeLinear_fence_before", "ts": 109, "dur": 0,
     "args": {"op_name": "QuantizeLinear"}},
    {"cat": "Session", "name": "model_run", "ts": 2000, "dur": 100},
    {"cat": "Node", "name": "x_QuantizeLinear_kernel_time", "ts": 2010, "dur": 10,
     "args": {"op_name": "QuantizeLinear", "provider": "CPUExecutionProvider"}},
    {"cat": "Node", "name": "node_Conv_1_kernel_time", "ts": 2030, "dur": 60,
     "args": {"op_name": "QLinearConv", "provider": "CPUExecutionProvider"}},
    {"cat": "Node", "name": "out_DequantizeLinear_kernel_time", "ts": 2095, "dur": 10,
     "args": {"op_name": "DequantizeLinear", "provider": "CPUExecutionProvider"}},
    {"cat": "Session", "name": "model_run", "ts": 3000, "dur": 100},
    {"cat": "Node", "name": "x_QuantizeLinear_kernel_time", "ts": 3010, "dur": 10,
     "args": {"op_name": "QuantizeLinear", "provider": "CPUExecutionProvider"}},
    {"cat": "Node", "name": "node_Conv_1_kernel_time", "ts": 3030, "dur": 80,
     "args": {"op_name": "QLinearConv", "provider": "XnnpackExecutionProvider"}},
    {"cat": "Node", "name": "out_DequantizeLinear_kernel_time", "ts": 3095, "dur": 10,
     "args": {"op_name": "DequantizeLinear", "provider": "CPUExecutionProvider"}},
]  # fmt: skip


def test_ort_trace_is_summed_per_node_without_the_warm_up_run() -> None:
    from nnsweep.runtimes.onnxruntime.profile import node_events

    entries = aggregate(node_events(ORT_TRACE, skip_runs=1), runs=2)
    by_key = {(e.name, e.backend): e for e in entries}
    # the warm-up run's 500 us QuantizeLinear is left out; fences are no kernels
    assert by_key[("x_QuantizeLinear", "cpu")].ms == pytest.approx(0.010)
    assert by_key[("x_QuantizeLinear", "cpu")].kind == "QuantizeLinear"
    # the node ran on another provider in each run: one entry per provider, absent runs count 0
    assert by_key[("node_Conv_1", "cpu")].ms == pytest.approx(0.030)
    assert by_key[("node_Conv_1", "xnnpack")].ms == pytest.approx(0.040)
    assert sum(e.share for e in entries) == pytest.approx(1.0)
    assert entries[0].name == "node_Conv_1" and entries[0].backend == "xnnpack"


def test_the_median_run_keeps_a_preempted_one_out() -> None:
    events = [(run, "conv", "Conv", "cpu", ms) for run, ms in enumerate([1.0, 1.1, 50.0])]
    events += [(run, "q", "QuantizeLinear", "cpu", 0.5) for run in range(3)]
    entries = aggregate(events, runs=3)
    assert [e.name for e in entries] == ["conv", "q"]
    assert entries[0].ms == pytest.approx(1.1)
    assert entries[1].share == pytest.approx(0.5 / 1.6)
    with pytest.raises(ValueError, match="outside"):
        aggregate([(3, "conv", "Conv", "cpu", 1.0)], runs=3)


def test_torch_key_averages_count_self_time_and_name_the_quantized_engine() -> None:
    from nnsweep.runtimes.torch.profile import op_events

    row = SimpleNamespace
    rows = [
        row(key="quantized::conv2d_relu", self_cpu_time_total=300.0),
        row(key="aten::quantize_per_tensor", self_cpu_time_total=50.0),
        row(key="aten::conv2d", self_cpu_time_total=0.0),  # its time is its callees'
        row(key="aten::dequantize", self_cpu_time_total=150.0),
    ]
    entries = aggregate(op_events(0, rows, "x86"), runs=1)
    assert [(e.name, e.backend) for e in entries] == [
        ("quantized::conv2d_relu", "x86"),
        ("aten::dequantize", "cpu"),
        ("aten::quantize_per_tensor", "cpu"),
    ]
    profile = Profile(entries, runs=1, wall_s=2.0)
    assert profile.total_ms == pytest.approx(0.5)
    assert profile.overhead_ms == pytest.approx(0.2)
    fields = profile.to_dict()
    assert fields["profile_total_ms"] == pytest.approx(0.5) and fields["profile_overhead_share"] == pytest.approx(0.4)
    assert Profile.from_dict(fields).entries == entries


def test_overhead_kinds_are_conversions_not_compute() -> None:
    assert is_overhead("QuantizeLinear") and is_overhead("DequantizeLinear") and is_overhead("aten::dequantize")
    assert is_overhead("ReorderOutput") and is_overhead("Transpose")
    assert not is_overhead("QLinearConv") and not is_overhead("quantized::linear") and not is_overhead("Reshape")


def test_the_summary_lists_the_top_operators_then_the_overhead_and_the_coverage() -> None:
    from nnsweep.cli._bench_profile import profile_fields, profile_lines

    events = [(0, f"op{i}", "Conv", "cpu", 1.0) for i in range(5)] + [(0, "q", "QuantizeLinear", "cpu", 1.0)]
    profile = Profile(aggregate(events, runs=1), runs=1, wall_s=0.5)
    lines = profile_lines(profile, p50_ms=8.0, top=3)
    assert "(3 more operators)" in lines[-3]
    assert lines[-2].lstrip().startswith("quantize/dequantize overhead (1 ops: QuantizeLinear)")
    assert "16.7 %" in lines[-2]
    assert "75 % of the measured p50" in lines[-1]
    assert profile_fields(profile, 8.0)["profile_coverage"] == pytest.approx(0.75)


def test_a_runtime_without_a_profiler_says_why_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnsweep.bench._profiling import profile_in_subprocess
    from nnsweep.cli._bench_profile import profile_lines

    plain = dataclasses.replace(runtimes.get("onnxruntime"), name="plain", profiler="", no_profiler="no profiler here")
    monkeypatch.setattr(runtimes, "_registry", {**runtimes._load(), "plain": plain})
    profile = profile_in_subprocess(
        runtime="plain",
        artifact=Path("x"),
        io=None,
        threads=1,
        backends=(),
        inputs=np.zeros((1, 2)),  # type: ignore[arg-type]
    )
    assert profile.to_dict() == {"profile": None, "profile_unavailable": "plain: no profiler here"}
    assert profile_lines(profile, 1.0) == ["Profile: none (plain: no profiler here)"]


def fake_profiler(runner, inputs, runs, warmup):  # type: ignore[no-untyped-def]
    """A plug-in's profiler: what it returns is the profile as it is; an artifact named bad* fails."""
    if runner.path.name.startswith("bad"):
        raise RuntimeError(f"cannot profile {runner.path.name}")
    return (OpTime(f"{runner.path.name}:{len(inputs)}x{runs}+{warmup}", "Fake", "cpu", 1.0, 1.0),)


class FakeRunner:
    threads: ClassVar[list[int]] = []

    def __init__(self, path, io, threads, backends):  # type: ignore[no-untyped-def]
        self.path = path

    @classmethod
    def set_threads(cls, threads: int) -> None:
        cls.threads.append(threads)


def test_one_profiling_process_takes_several_artifacts_and_a_failing_one_costs_only_itself(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nnsweep.bench import _profiling
    from nnsweep.core.artifact import IOSpec

    fake = dataclasses.replace(
        runtimes.get("onnxruntime"), name="fake", runner=f"{__name__}:FakeRunner", profiler=f"{__name__}:fake_profiler"
    )
    monkeypatch.setattr(runtimes, "_registry", {**runtimes._load(), "fake": fake})
    monkeypatch.setattr(FakeRunner, "threads", [])
    np.save(tmp_path / "in.npy", np.zeros((3, 4), dtype=np.float32))
    io = IOSpec(input_dtype="float32").to_dict()
    request = {
        "runtime": "fake",
        "threads": 2,
        "jobs": [{"artifact": str(tmp_path / n), "io": io, "backends": []} for n in ("a.bin", "bad.bin", "c.bin")],
        "inputs": str(tmp_path / "in.npy"),
        "runs": 7,
        "result": str(tmp_path / "result.json"),
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    assert _profiling.main(["x", str(tmp_path / "request.json")]) == 0
    results = json.loads((tmp_path / "result.json").read_text())
    assert [r.get("profile", [{}])[0].get("name") for r in results] == [
        f"a.bin:3x7+{_profiling.WARMUP_RUNS}",
        None,
        f"c.bin:3x7+{_profiling.WARMUP_RUNS}",
    ]
    assert results[1]["error"] == "RuntimeError" and "bad.bin" in results[1]["message"]
    assert all(r["profile_s"] >= 0 for r in results)
    assert FakeRunner.threads == [2]  # the process's threads are set once, before any runner


def test_a_job_that_ends_its_process_fails_alone_and_the_rest_run_in_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nnsweep.bench import _profiling
    from nnsweep.bench.profile import Profile

    calls: list[list[str]] = []

    def one_process(info, threads, jobs, inputs, timeout_s, runs, lock):  # type: ignore[no-untyped-def]
        names = [j.artifact.name for j in jobs]
        calls.append(names)
        done = []
        for name in names:
            if name.startswith("crash"):
                return done, "profiling process exited with -11: Segmentation fault"
            done.append(Profile((OpTime(name, "Conv", "cpu", 1.0, 1.0),), runs=1))
        return done, ""

    monkeypatch.setattr(_profiling, "_one_process", one_process)
    jobs = [
        _profiling.ProfileJob("onnxruntime", Path(n), None, t, ())
        for n, t in (("a", 1), ("crash", 1), ("c", 1), ("d", 2))
    ]
    profiles = _profiling.profile_jobs(jobs, np.zeros((1, 2)))
    assert [p.entries[0].name if p.entries else p.reason for p in profiles] == [
        "a",
        "onnxruntime: profiling process exited with -11: Segmentation fault",
        "c",
        "d",
    ]
    assert calls == [["a", "crash", "c"], ["c"], ["d"]]  # one process per thread count; after the crash, a new one


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnxruntime", "torch"])
def test_bench_profile_json_on_digits(runtime: str, tmp_path: Path, models_dir: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    result = bench_json(
        cache, "digits", "--runtime", runtime, "--quant", "static_int8", "--iters", "20", "--profile", "--json"
    )
    entries = result["profile"]
    assert entries and {"name", "kind", "backend", "ms", "share"} <= set(entries[0])
    assert sum(e["ms"] for e in entries) == pytest.approx(result["profile_total_ms"], rel=1e-6)
    assert sum(e["share"] for e in entries) == pytest.approx(1.0, abs=1e-6)
    # a static int8 model quantizes its input and dequantizes its output
    assert 0 < result["profile_overhead_ms"] < result["profile_total_ms"]
    assert result["profile_coverage"] == pytest.approx(result["profile_total_ms"] / result["latency_ms"]["p50"])
    assert result["profile_runs"] > 0 and result["profile_s"] > 0


def _event(name, start, end, delegate=None):  # type: ignore[no-untyped-def]
    profile_event = SimpleNamespace(name=name, start_time=start, end_time=end, delegate_debug_id_str=delegate)
    return SimpleNamespace(profile_event=profile_event)


def test_etdump_runs_split_delegate_operators_from_the_delegate_call() -> None:
    from nnsweep.runtimes.executorch.profile import etdump_events

    load = SimpleNamespace(events=[_event("Method::init", 0, 9_000_000), _event("Program::load_method", 0, 9_000_000)])

    def run(conv_ns: int) -> SimpleNamespace:
        return SimpleNamespace(
            events=[
                _event(None, 0, 3000, "Convert (NC, F32, QD8) #1"),
                _event(None, 3000, 3000 + conv_ns, "Convolution (NHWC, QC8) IGEMM #1"),
                _event("DELEGATE_CALL", 0, 5000 + conv_ns),
                _event("native_call_quantized_decomposed.dequantize_per_tensor.out", 0, 1000),
                _event("Method::execute", 0, 7000 + conv_ns),
            ]
        )

    # the load, one warm-up execution (a slow one), then two profiled executions
    entries = aggregate(etdump_events([load, run(90_000), run(10_000), run(20_000)], 1, "xnnpack"), runs=2)
    by_name = {e.name: e for e in entries}
    assert by_name["Convolution (NHWC, QC8) IGEMM #1"].ms == pytest.approx(0.015)
    assert by_name["Convolution (NHWC, QC8) IGEMM #1"].kind == "Convolution (NHWC, QC8) IGEMM"
    assert by_name["DELEGATE_CALL"].ms == pytest.approx(0.002)  # its 5 us less its operators' 3 us
    dq = by_name["quantized_decomposed.dequantize_per_tensor.out"]
    assert (dq.kind, dq.backend) == ("quantized_decomposed::dequantize_per_tensor", "portable")
    profile = Profile(entries, runs=2)
    assert profile.overhead_ms == pytest.approx(0.003 + 0.001)  # XNNPACK's Convert and the portable dequantize


@pytest.mark.slow
def test_a_devices_agent_profiles_the_artifact_it_is_sent(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What a board's agent does with a profile request: the artifact's bytes written there and
    profiled with its runtime's profiler, as the sweep asks for its front on that board."""
    from nnsweep.agents import DeviceAgent, LocalTransport, MeasureRequest
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings
    from nnsweep.core.config import DeploymentConfig, QuantConfig

    config = DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8"))  # type: ignore[arg-type]
    artifact, _ = deploy.convert(digits, config, ArtifactCache(tmp_path))
    request = MeasureRequest.of(artifact, digits.dataset.evaluation.inputs, MeasureSettings(warmup=1, iters=5))
    profile = DeviceAgent("board", LocalTransport(warm=False)).profile(request)
    assert profile.reason is None and not profile.emulated
    assert {"QLinearConv", "QuantizeLinear"} <= {e.kind for e in profile.entries}
    assert profile.runs > 0 and profile.wall_s > 0
