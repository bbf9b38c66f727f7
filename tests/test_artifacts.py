from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.artifacts.key import cache_key, toolchain_versions
from nnsweep.convert import ConversionResult, PartitionReport
from nnsweep.core.config import DeploymentConfig, QuantConfig

CFG = DeploymentConfig("executorch", ("xnnpack",))
TOOLS = {"torch": "2.14.1", "executorch": "1.5.1"}


def _builder(payload: bytes, calls: list[int]):  # type: ignore[no-untyped-def]
    def build(out: Path) -> ConversionResult:
        calls.append(1)
        (out / "model.pte").write_bytes(payload)
        return ConversionResult("model.pte", PartitionReport(CFG.backends, {"xnnpack": 3}))

    return build


def test_key_is_a_full_sha256_over_model_config_and_toolchain() -> None:
    key = cache_key("m" * 64, CFG, TOOLS)
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache_key("n" * 64, CFG, TOOLS) != key
    assert cache_key("m" * 64, DeploymentConfig("executorch", ("portable",)), TOOLS) != key
    assert cache_key("m" * 64, CFG, {**TOOLS, "executorch": "1.6.0"}) != key


def test_toolchain_versions_are_read_from_installed_metadata() -> None:
    versions = toolchain_versions(("executorch", "no-such-package"))
    assert versions["executorch"] == "1.5.1"
    assert versions["no-such-package"] == "absent"
    assert "python" in versions and "nnsweep" in versions


def test_miss_builds_hit_reuses(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    calls: list[int] = []
    key = cache_key("m" * 64, CFG, TOOLS)
    _, hit1 = cache.get_or_build(key, CFG, TOOLS, _builder(b"abc", calls))
    second, hit2 = cache.get_or_build(key, CFG, TOOLS, _builder(b"xyz", calls))
    assert (hit1, hit2) == (False, True)
    assert calls == [1]
    assert second.path.read_bytes() == b"abc"
    assert second.config == CFG and second.partitions.nodes_by_backend == {"xnnpack": 3}
    assert not list((tmp_path / "staging").iterdir())  # nothing half-written left behind


@pytest.mark.parametrize("damage", ["payload", "truncate", "meta", "missing"])
def test_corrupted_entry_is_detected_and_rebuilt(tmp_path: Path, damage: str) -> None:
    cache = ArtifactCache(tmp_path)
    calls: list[int] = []
    key = cache_key("m" * 64, CFG, TOOLS)
    artifact, _ = cache.get_or_build(key, CFG, TOOLS, _builder(b"good bytes", calls))
    if damage == "payload":
        artifact.path.write_bytes(b"evil bytes")  # same size, other content
    elif damage == "truncate":
        artifact.path.write_bytes(b"good")
    elif damage == "meta":
        (artifact.path.parent / "meta.json").write_text("{not json")
    else:
        artifact.path.unlink()
    assert cache.get(key) is None
    rebuilt, hit = cache.get_or_build(key, CFG, TOOLS, _builder(b"good bytes", calls))
    assert not hit and calls == [1, 1]
    assert rebuilt.path.read_bytes() == b"good bytes"


def test_failed_build_leaves_no_entry(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key = cache_key("m" * 64, CFG, TOOLS)

    def broken(out: Path) -> ConversionResult:
        (out / "model.pte").write_bytes(b"partial")
        raise RuntimeError("converter died")

    with pytest.raises(RuntimeError):
        cache.get_or_build(key, CFG, TOOLS, broken)
    assert cache.get(key) is None
    assert not list((tmp_path / "staging").iterdir())


def test_meta_records_config_and_checksum(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    cfg = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"))
    key = cache_key("m" * 64, cfg, TOOLS)
    artifact, _ = cache.get_or_build(key, cfg, TOOLS, _builder(b"abc", []))
    meta = json.loads((artifact.path.parent / "meta.json").read_text())
    assert meta["config"]["quant"]["mode"] == "static_int8"
    assert meta["sha256"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert meta["toolchain"] == TOOLS


def test_the_key_covers_the_converter_code_not_only_package_versions() -> None:
    from nnsweep.artifacts.key import artifact_key
    from nnsweep.core.config import DeploymentConfig

    key, toolchain = artifact_key("m" * 64, DeploymentConfig("executorch"))
    assert len(toolchain["converters"]) == 16 and toolchain["executorch"] != "absent"
    # It digests the converters' files, not an empty folder (a path that moved would read none).
    assert toolchain["converters"] != hashlib.sha256().hexdigest()[:16]
    # Same model and config, other converter code: another entry.
    changed = dict(toolchain, converters="0" * 16)
    from nnsweep.artifacts.key import cache_key

    assert cache_key("m" * 64, DeploymentConfig("executorch"), changed) != key


def test_an_entry_packed_on_one_machine_unpacks_whole_into_another_cache(tmp_path: Path) -> None:
    from nnsweep.artifacts.cache import PackedArtifact
    from nnsweep.core.errors import CacheCorrupted

    there, here = ArtifactCache(tmp_path / "builder"), ArtifactCache(tmp_path / "coordinator")
    key = cache_key("m" * 64, CFG, TOOLS)
    built, _ = there.get_or_build(key, CFG, TOOLS, _builder(b"abc", []))
    packed = there.pack(built)
    got = here.unpack(packed)
    assert got.path.read_bytes() == b"abc" and got.sha256 == built.sha256 and got.path.is_relative_to(here.root)
    assert here.get(key) == got and here.unpack(packed) == got  # a second copy changes nothing

    other = ArtifactCache(tmp_path / "third")
    with pytest.raises(CacheCorrupted, match="checksum"):  # bytes damaged on the way
        other.unpack(PackedArtifact(key, {**packed.files, "model.pte": b"abd"}))
    with pytest.raises(CacheCorrupted, match="names the file"):  # a name that would leave the entry
        other.unpack(PackedArtifact(key, {**packed.files, "../evil": b""}))
    assert other.get(key) is None and not list((other.root / "staging").iterdir())


def test_threads_are_runtime_only_so_one_conversion_serves_every_thread_count() -> None:
    from nnsweep.artifacts.key import artifact_key

    one = artifact_key("m" * 64, DeploymentConfig("onnxruntime", threads=1))[0]
    assert artifact_key("m" * 64, DeploymentConfig("onnxruntime", threads=2))[0] == one
    # What changes the bytes still changes the key.
    assert artifact_key("m" * 64, DeploymentConfig("executorch", threads=1))[0] != one


@pytest.mark.slow
def test_a_cached_conversion_for_one_thread_count_is_a_hit_for_another(tmp_path: Path) -> None:
    from nnsweep.artifacts import deploy
    from nnsweep.models import load_model

    bundle = load_model("digits", cache_dir=tmp_path)
    cache = ArtifactCache(tmp_path)
    first, hit_first = deploy.convert(bundle, DeploymentConfig("onnxruntime", threads=1), cache)
    second, hit_second = deploy.convert(bundle, DeploymentConfig("onnxruntime", threads=2), cache)
    assert (hit_first, hit_second) == (False, True)
    assert first.path.read_bytes() == second.path.read_bytes()
    # The hit runs with the thread count asked for, not the one it was built with.
    assert (first.config.threads, second.config.threads) == (1, 2)


def test_a_toolchain_exception_becomes_one_line_naming_the_runtime_version_and_mode() -> None:
    from nnsweep.artifacts.deploy import toolchain_failure

    config = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"))
    exc = RuntimeError("\n  0 in strides is not supported for ExecuTorch.\nwhile lowering aten.mul\n" + "x" * 500)
    line = toolchain_failure(config, TOOLS, exc)
    assert line == (
        "executorch (executorch 1.5.1) cannot convert this model for static_int8: "
        "RuntimeError: 0 in strides is not supported for ExecuTorch."
    )
    long = toolchain_failure(DeploymentConfig("torch"), TOOLS, AttributeError("y" * 500))
    assert "\n" not in long and len(long) <= 300 and long.startswith("torch (torch 2.14.1) cannot convert")


def test_the_converter_digest_reads_every_runtime_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nnsweep.artifacts import key

    for rel in ("common/pt2e.py", "torch/converter.py", "litert/converter.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"# {rel}\n")
    monkeypatch.setattr(key, "_RUNTIMES", tmp_path)

    def digest() -> str:
        key._converter_sources.cache_clear()
        return key._converter_sources()

    first = digest()
    (tmp_path / "torch" / "converter.py").write_text("# edited\n")
    edited = digest()
    (tmp_path / "litert" / "converter.py").write_text("# edited\n")  # the same name in another folder
    assert len({first, edited, digest()}) == 3
    key._converter_sources.cache_clear()
