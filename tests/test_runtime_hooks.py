"""A runtime registered beside the built-in ones is as capable as they are: what differs per
runtime is a hook of its RuntimeInfo (the layer ranking, the peak memory of its measuring
process, the release a device must share, what a warm worker preloads, what its log says
about a failure, its device tool), never a branch on its name."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nnsweep.core import runtimes
from nnsweep.core.quant import QuantMode
from nnsweep.core.runtimes import RuntimeInfo
from nnsweep.sensitivity.rank import Score

CALLS: list[frozenset[str]] = []


def ranked_by_name(bundle, split, per_channel, reference):  # type: ignore[no-untyped-def]
    """A ranking that scores a layer by its name's length: what the hook returns is used as it is."""

    def evaluate(keep: frozenset[str]) -> Score:
        CALLS.append(keep)
        return Score(accuracy=0.5 + sum(len(name) for name in keep) / 1000, sqnr_db=30.0)

    return evaluate


def louder(message: str, stderr: str) -> str:
    return f"{message} (its log: {stderr.strip()})"


FAKE = RuntimeInfo(
    name="fake",
    backends=("cpu",),
    fallback="cpu",
    modes={QuantMode.FP32: frozenset(), QuantMode.STATIC_INT8: frozenset()},
    unsupported={},
    full_interface=frozenset(),
    calibrations=frozenset(),
    delegates=False,
    converter="nnsweep_fake:Converter",
    runner="nnsweep_fake:Runner",
    packages=(),
    mixed_precision=None,
    sensitivity=f"{__name__}:ranked_by_name",
    sensitivity_settings={"scored": "names"},
    measure_peak_mb={"": 2000, "fake-lite": 100},
    preload=("json", "csv"),
    failure_detail=f"{__name__}:louder",
    same_release="fake-toolchain",
    device_tool="nnsweep.runtimes.litert.device_tool:TOOL",
)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> RuntimeInfo:
    monkeypatch.setattr(runtimes, "_registry", {**runtimes._load(), "fake": FAKE})
    return FAKE


def test_its_ranking_is_measured_through_its_hook_and_kept(registered, digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.sensitivity.ranking import cached_ranking, ranked_runtimes, ranking

    CALLS.clear()
    assert "fake" in ranked_runtimes()
    report, hit = ranking(digits, "fake", None, tmp_path)
    assert not hit and len(CALLS) == len(report.layers) + 2  # whole int8, all float, each layer alone
    # quantized alone, a layer costs its name's length: the longest name is the most sensitive
    lengths = [len(layer) for layer in report.ranked()]
    assert lengths[0] == max(lengths) and lengths[-1] == min(lengths)
    kept = cached_ranking(digits.digest, "fake", None, tmp_path)
    assert kept is not None and kept.ranked() == report.ranked() and kept.whole_int8 == report.whole_int8
    # its settings are in the entry's key: another scoring is another entry
    other = dataclasses.replace(registered, sensitivity_settings={"scored": "other"})
    runtimes._load()["fake"] = other
    assert cached_ranking(digits.digest, "fake", None, tmp_path) is None


def test_a_runtime_without_a_ranking_is_refused_naming_those_with_one(registered, digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.core.errors import SpecError
    from nnsweep.sensitivity.ranking import ranking

    runtimes._load()["fake"] = dataclasses.replace(registered, sensitivity="")
    with pytest.raises(SpecError, match="no per-layer sensitivity for fake; it has one for: executorch"):
        ranking(digits, "fake", None, tmp_path)


def test_its_peak_memory_decides_which_boards_offer_it(registered) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.agents._capabilities import MEASURE_HEADROOM_MB, runtimes_that_fit

    board = 1024
    assert runtimes_that_fit({"fake": ("cpu",)}, board) == ({}, {"fake": 2000 + MEASURE_HEADROOM_MB})
    assert runtimes_that_fit({"fake": ("cpu",)}, board, {"fake": "fake-lite"}) == ({"fake": ("cpu",)}, {})


def test_a_device_with_another_release_is_refused_it(registered) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.agents._capabilities import Capabilities, refuse_version_skew

    caps = Capabilities("b", "b", "aarch64", "A72", 4, 1024, {"fake": ("cpu",)}, versions={"fake-toolchain": "1"})
    refused = refuse_version_skew(caps, {"fake-toolchain": "2"})
    assert refused.runtimes == {} and "fake-toolchain 2" in refused.refused["fake"]


def test_a_warm_worker_preloads_what_it_names(registered) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.bench import _zygote

    assert _zygote._preload("fake") == ("json", "csv")


def test_a_failed_measurement_says_what_its_log_says(registered, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.bench._isolated import _read_result
    from nnsweep.core.errors import BenchmarkError

    (tmp_path / "result.json").write_text('{"error": "RuntimeError", "message": "load failed"}')
    with pytest.raises(BenchmarkError, match=r"RuntimeError: load failed \(its log: bad opcode\)"):
        _read_result("fake", tmp_path, 1, "bad opcode\n")


def test_a_bridge_runs_its_device_tool(registered) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.agents import AdbTransport

    bridge = AdbTransport(serial="s1", tools={"fake": "/data/local/tmp/benchmark_model"})
    assert bridge.backends("fake") == ("cpu",)
    with pytest.raises(ValueError, match="no benchmark tool is known for runtime"):
        AdbTransport(serial="s1", tools={"onnxruntime": "/x"})
