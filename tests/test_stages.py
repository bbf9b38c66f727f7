"""The stage store: intermediate results of conversions kept in the artifact cache, whole
or not at all, checked on every use, shared by the conversions (and processes) that need them."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nnsweep.artifacts.key import stage_key
from nnsweep.artifacts.stages import CachedStages, StageStore
from nnsweep.core.quant import PartitionLimits, QuantConfig
from nnsweep.runtimes.common.converter import Converter, Stages, quant_settings

TOOLS = {"torch": "2.14.1", "converters": "0" * 16}
MODEL = "m" * 64


def _writer(payload: bytes, calls: list[int]):  # type: ignore[no-untyped-def]
    def build(directory: Path) -> None:
        calls.append(1)
        (directory / "program.pt2").write_bytes(payload)
        (directory / "sub").mkdir()
        (directory / "sub" / "extra.bin").write_bytes(payload[::-1])

    return build


def _stages(root: Path) -> CachedStages:
    return CachedStages(StageStore(root), MODEL, TOOLS)


def test_stage_key_is_a_full_sha256_over_model_stage_settings_and_toolchain() -> None:
    key = stage_key(MODEL, "executorch.program", {"quant": {"mode": "fp32"}}, TOOLS)
    assert len(key) == 64 and int(key, 16) >= 0
    assert stage_key("n" * 64, "executorch.program", {"quant": {"mode": "fp32"}}, TOOLS) != key
    assert stage_key(MODEL, "litert.tflite", {"quant": {"mode": "fp32"}}, TOOLS) != key
    assert stage_key(MODEL, "executorch.program", {"quant": {"mode": "fp16"}}, TOOLS) != key
    assert stage_key(MODEL, "executorch.program", {"quant": {"mode": "fp32"}}, {**TOOLS, "torch": "2.15"}) != key
    assert stage_key(MODEL, "executorch.program", {"quant": {"mode": "fp32"}}, {**TOOLS, "converters": "1" * 16}) != key


def test_quant_settings_leave_out_the_interface_and_keep_float_layers_only_when_set() -> None:
    whole = quant_settings(QuantConfig("static_int8"))
    assert "interface" not in whole and "float_layers" not in whole
    assert whole == quant_settings(QuantConfig("static_int8", interface="full"))  # applied after the stage
    assert whole["mode"] == "static_int8" and whole["granularity"] == "per_channel"
    mixed = quant_settings(QuantConfig("static_int8", float_layers=("fc", "conv1")))
    assert mixed["float_layers"] == ["conv1", "fc"]
    keys = {stage_key(MODEL, "s", {"quant": q}, TOOLS) for q in (whole, mixed)}
    assert len(keys) == 2  # a mixed-precision variant is its own entry
    json.dumps(mixed)  # JSON-ready


def test_miss_builds_hit_reuses_and_meta_records_each_file(tmp_path: Path) -> None:
    stages, calls = _stages(tmp_path), []
    with stages.stage("executorch.program", {"q": 1}, _writer(b"abc", calls)) as first:
        assert (first / "program.pt2").read_bytes() == b"abc"
    with stages.stage("executorch.program", {"q": 1}, _writer(b"xyz", calls)) as second:
        assert second == first and (second / "program.pt2").read_bytes() == b"abc"
    with stages.stage("executorch.program", {"q": 2}, _writer(b"xyz", calls)) as other:
        assert other != first
    assert calls == [1, 1] and stages.hits == ["executorch.program"]
    assert first.is_relative_to(tmp_path / "stages" / "executorch.program")
    meta = json.loads((first / "meta.json").read_text())
    assert meta["settings"] == {"q": 1} and meta["toolchain"] == TOOLS and meta["model"] == MODEL
    assert set(meta["files"]) == {"program.pt2", "sub/extra.bin"}
    assert meta["files"]["program.pt2"][0] == 3
    assert not list((tmp_path / "staging").iterdir())  # nothing half-written left behind


@pytest.mark.parametrize("damage", ["truncate", "alter_byte", "meta", "missing", "extra"])
def test_a_damaged_entry_is_detected_removed_and_rebuilt_with_a_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    stages, calls = _stages(tmp_path), []
    payload = bytes(range(256)) * 64
    with stages.stage("litert.tflite", {}, _writer(payload, calls)) as entry:
        pass
    target = entry / "program.pt2"
    if damage == "truncate":
        target.write_bytes(payload[:100])
    elif damage == "alter_byte":
        data = bytearray(payload)
        data[5000] ^= 0x01  # same size, one bit changed
        target.write_bytes(bytes(data))
    elif damage == "meta":
        (entry / "meta.json").write_text('{"key": "trunc')
    elif damage == "missing":
        (entry / "sub" / "extra.bin").unlink()
    else:
        (entry / "stray.bin").write_bytes(b"?")
    with (
        caplog.at_level(logging.WARNING, logger="nnsweep.artifacts.stages"),
        stages.stage("litert.tflite", {}, _writer(payload, calls)) as rebuilt,
    ):
        assert (rebuilt / "program.pt2").read_bytes() == payload
    assert calls == [1, 1] and "corrupted" in caplog.text
    assert not (rebuilt / "stray.bin").exists()


def test_a_failed_build_leaves_no_entry(tmp_path: Path) -> None:
    stages = _stages(tmp_path)

    def broken(directory: Path) -> None:
        (directory / "program.pt2").write_bytes(b"partial")
        raise RuntimeError("quantizer died")

    with pytest.raises(RuntimeError), stages.stage("executorch.program", {}, broken):
        pass
    assert not (tmp_path / "stages" / "executorch.program").exists() or not any(
        (tmp_path / "stages" / "executorch.program").rglob("meta.json")
    )
    assert not list((tmp_path / "staging").iterdir())


def test_without_a_store_a_stage_is_built_for_each_use_and_removed() -> None:
    calls: list[int] = []
    with Stages().stage("executorch.program", {}, _writer(b"abc", calls)) as directory:
        assert (directory / "program.pt2").read_bytes() == b"abc"
    assert not directory.exists()
    with Stages().stage("executorch.program", {}, _writer(b"abc", calls)):
        pass
    assert calls == [1, 1]
    assert isinstance(Converter.stages, Stages) and not isinstance(Converter.stages, CachedStages)


_BUILDER = textwrap.dedent(
    """
    import hashlib, json, sys, time
    from pathlib import Path
    from nnsweep.artifacts.stages import CachedStages, StageStore

    root, go = Path(sys.argv[1]), Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.01)

    def build(directory):
        with open(directory / "program.pt2", "wb") as f:
            for i in range(64):  # 8 MiB, slowly: both processes are writing at once
                f.write(hashlib.sha256(str(i).encode()).digest() * 4096)
                f.flush()
                time.sleep(0.01)

    stages = CachedStages(StageStore(root), "m" * 64, {"torch": "x"})
    with stages.stage("executorch.program", {"q": 1}, build) as entry:
        data = (entry / "program.pt2").read_bytes()
        print(json.dumps({"entry": str(entry), "size": len(data), "sha": hashlib.sha256(data).hexdigest(),
                          "hit": bool(stages.hits)}))
    """
)


def test_two_processes_building_the_same_stage_both_get_one_whole_identical_entry(tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILDER, str(tmp_path / "cache"), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    go.touch()
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert outs[0]["entry"] == outs[1]["entry"]
    assert outs[0]["sha"] == outs[1]["sha"] and outs[0]["size"] == outs[1]["size"] == 64 * 32 * 4096
    assert sorted(o["hit"] for o in outs) == [False, True]  # one built it, the other used the winner's
    entries = [m.parent for m in (tmp_path / "cache" / "stages").rglob("meta.json")]
    assert len(entries) == 1 and not list((tmp_path / "cache" / "staging").iterdir())


_SECOND = {  # runtime -> (a first configuration, another one that shares its stages)
    "executorch": (
        {"backends": ("xnnpack", "portable")},
        {"backends": ("xnnpack", "portable"), "partitions": PartitionLimits(1, 1)},
    ),
    "onnxruntime": ({"backends": ("cpu",)}, {"backends": ("xnnpack", "cpu")}),
    "litert": ({"backends": ("xnnpack", "cpu")}, {"backends": ("cpu",)}),
}
_ENTRIES = {"executorch": {"executorch.program"}, "onnxruntime": {"onnxruntime.export", "onnxruntime.model"}}


@pytest.mark.slow
@pytest.mark.parametrize("runtime", sorted(_SECOND))
def test_another_order_or_limit_reuses_the_stages_and_gives_a_fresh_conversions_bytes(
    digits, tmp_path: Path, runtime: str
) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core import runtimes
    from nnsweep.core.config import DeploymentConfig

    cache = ArtifactCache(tmp_path / "cache")
    quant = QuantConfig("static_int8", calibration_batches=2)
    first, second = (DeploymentConfig(runtime, quant=quant, **kw) for kw in _SECOND[runtime])
    built, _ = deploy.convert(digits, first, cache)
    reused, hit = deploy.convert(digits, second, cache)
    assert not hit and reused.path != built.path
    stored = {m.parent.parent.parent.name for m in (cache.root / "stages").rglob("meta.json")}
    assert stored == _ENTRIES.get(runtime, {"litert.tflite"})  # one of each: the second conversion built none
    # The bytes a conversion without any stage store writes (as before stages existed).
    converter = runtimes.load_object(runtimes.get(runtime).converter)()
    assert type(converter).stages is Converter.stages
    fresh = converter.convert(digits, second, tmp_path)
    assert (tmp_path / fresh.filename).read_bytes() == reused.path.read_bytes()
    assert fresh.partitions == reused.partitions


_FROM_MEMORY = [  # ExecuTorch quantizations, each converted from a fresh stage and again from the stored one
    QuantConfig("static_int8", calibration_batches=2, float_layers=("features.3.0",), interface="full"),
    QuantConfig("dynamic_int8"),
    QuantConfig("fp32"),
]


@pytest.mark.slow
@pytest.mark.parametrize("quant", _FROM_MEMORY, ids=lambda q: q.mode.value)
def test_a_program_lowered_as_built_gives_the_bytes_of_the_one_read_back_from_its_stage(
    digits, tmp_path: Path, quant: QuantConfig, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The conversion that builds a program stage lowers the program it has in memory; a later
    one of the same stage reads it back from its ``.pt2``: both must give the same artifact."""
    import shutil

    import torch

    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig

    loads: list[object] = []
    load = torch.export.load
    monkeypatch.setattr(torch.export, "load", lambda *a, **k: loads.append(a) or load(*a, **k))
    config = DeploymentConfig("executorch", ("xnnpack", "portable"), quant)
    built, hit = deploy.convert(digits, config, ArtifactCache(tmp_path / "first"))
    assert not hit and not loads  # lowered as built
    shutil.copytree(tmp_path / "first" / "stages", tmp_path / "second" / "stages")  # the stage only
    read_back, hit = deploy.convert(digits, config, ArtifactCache(tmp_path / "second"))
    assert not hit and len(loads) == 1  # the second conversion read the stored program back
    assert read_back.path.read_bytes() == built.path.read_bytes()
    assert read_back.partitions == built.partitions


_CONVERTER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig, PartitionLimits, QuantConfig
    from nnsweep.models import load_model

    root, models, go, limit = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    bundle = load_model("digits", cache_dir=models)
    config = DeploymentConfig(
        "executorch", ("xnnpack", "portable"), QuantConfig("static_int8", calibration_batches=2),
        partitions=PartitionLimits(limit, 1),
    )
    (go.parent / f"ready-{limit}").touch()
    while not go.exists():
        time.sleep(0.01)
    artifact, _ = deploy.convert(bundle, config, ArtifactCache(root))
    print(json.dumps({"sha": artifact.sha256, "count": artifact.partitions.count}))
    """
)


@pytest.mark.slow
def test_two_processes_converting_variants_of_one_model_at_once_share_one_whole_stage(
    digits, models_dir: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    go, root = tmp_path / "go", tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERTER, str(root), str(models_dir), str(go), str(limit)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for limit in (0, 1)
    ]
    deadline = time.monotonic() + 300
    while not all((tmp_path / f"ready-{limit}").exists() for limit in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()  # both have imported torch and loaded the model: they start converting together
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    # digits is one XNNPACK partition already: the limit drops nothing, so both lower the same edge
    # program to the same bytes (nnsweep.runtimes.executorch.lowering), under two artifact keys
    assert outs[0] == outs[1] == {"sha": outs[0]["sha"], "count": 1}
    entries = [m.parent for m in (root / "stages").rglob("meta.json")]
    assert len(entries) == 1 and not list((root / "staging").iterdir())
    store = StageStore(root)
    assert store.get("executorch.program", entries[0].name) == entries[0]  # whole: every checksum holds
