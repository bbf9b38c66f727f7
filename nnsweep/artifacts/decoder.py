"""A decoder language model deployed end to end: convert (through a content-addressed
folder of the cache) and measure its per-token figures on this machine.

``nnsweep bench`` keeps a decoder in ``ROOT/decoders/<key>/``; a sweep keeps it in the
artifact cache (:func:`convert_cached`), as every other artifact: the prefill graph is the
artifact's file, the decode graph its sidecar, so a cache hit, a remote conversion shipped
back and a measurement request carry both.

``ROOT/decoders/<key>/`` holds ``prefill`` and ``decode`` artifacts (the runtime's
suffix) and ``meta.json`` (the configuration, the notes, each file's sha256); the key is
:func:`~nnsweep.artifacts.key.artifact_key` of the decoder's digest and the configuration.
A folder is built beside its place and renamed into it, so a reader sees all of it or none.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nnsweep.artifacts.cache import Artifact, ArtifactCache
from nnsweep.artifacts.deploy import for_config, toolchain_failure
from nnsweep.artifacts.key import artifact_key
from nnsweep.bench import MachineLock
from nnsweep.bench.decoding import DecodeSettings, DecodeTiming, measure_decoder
from nnsweep.core import runtimes
from nnsweep.core.artifact import IOSpec, PartitionReport
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.digests import file_sha256
from nnsweep.core.errors import ConversionError, SpecError, TrialError
from nnsweep.models.decoder import Decoder
from nnsweep.runtimes.common.converter import ConversionResult, native_stderr_to_debug_log

__all__ = ["DecoderArtifact", "check_runtime", "convert", "convert_cached", "decode_sidecar", "measure"]

_log = logging.getLogger(__name__)

_META = "meta.json"
_GRAPHS = ("prefill", "decode")


@dataclass(frozen=True)
class DecoderArtifact:
    """The two graphs of one decoder configuration, and what its conversion said."""

    directory: Path
    config: DeploymentConfig
    suffix: str
    notes: tuple[str, ...]
    cache_hit: bool

    def path(self, graph: str) -> Path:
        return self.directory / f"{graph}{self.suffix}"

    @property
    def size_bytes(self) -> int:
        """Both graphs' bytes (each holds the weights: a runtime with two methods in one file shares them)."""
        return sum(self.path(g).stat().st_size for g in _GRAPHS)


def check_runtime(config: DeploymentConfig) -> None:
    """Refuse, before loading anything, a runtime that takes no decoder, or not at this mode.

    Raises:
        SpecError: naming the runtime and why (its :attr:`~nnsweep.core.runtimes.RuntimeInfo.no_decoder`),
            or the modes it builds a decoder at.
    """
    info = runtimes.get(config.runtime)
    if not info.decoder:
        raise SpecError("runtime", f"{info.name} takes no decoder language model: {info.no_decoder}")
    if config.quant.mode not in info.decoder_modes:
        modes = ", ".join(sorted(m.value for m in info.decoder_modes))
        raise SpecError(
            "quant.mode", f"{info.name} builds a decoder language model at {modes}, not {config.quant.mode.value}"
        )


def convert(decoder: Decoder, config: DeploymentConfig, root: Path) -> DecoderArtifact:
    """``config``'s artifacts of ``decoder`` under ``root``, converted unless a whole entry is there.

    Raises:
        SpecError: the runtime takes no decoder.
        ConversionError: the runtime's decoder conversion failed.
    """
    check_runtime(config)
    info = runtimes.get(config.runtime)
    key, _ = artifact_key(decoder.digest, config)
    entry = root / "decoders" / key
    if _whole(entry, info.artifact_suffix):
        notes = tuple(json.loads((entry / _META).read_text())["notes"])
        return DecoderArtifact(entry, config, info.artifact_suffix, notes, cache_hit=True)
    entry.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{key[:12]}."))
    try:
        notes = tuple(runtimes.load_object(info.decoder)(decoder, config.quant, building))
        sums = {g: file_sha256(building / f"{g}{info.artifact_suffix}") for g in _GRAPHS}
        meta = {"config": config.to_dict(), "notes": list(notes), "sha256": sums}
        (building / _META).write_text(json.dumps(meta, indent=2, sort_keys=True))
        shutil.rmtree(entry, ignore_errors=True)  # a partial entry a reader refused
        os.replace(building, entry)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return DecoderArtifact(entry, config, info.artifact_suffix, notes, cache_hit=False)


def decode_sidecar(runtime: str) -> str:
    """The name the decode graph travels under beside a sweep's prefill artifact (its file name)."""
    return f"decode{runtimes.get(runtime).artifact_suffix}"


def convert_cached(decoder: Decoder, config: DeploymentConfig, cache: ArtifactCache) -> tuple[Artifact, bool]:
    """``config``'s two graphs of ``decoder`` as one entry of the artifact cache (the prefill
    graph the artifact, the decode graph its :func:`decode_sidecar`), converted unless there.

    Returns:
        The artifact and whether it came from the cache.

    Raises:
        SpecError: the runtime takes no decoder, or not at this mode.
        ConversionError: the runtime's decoder conversion failed.
    """
    check_runtime(config)
    info = runtimes.get(config.runtime)
    key, toolchain = artifact_key(decoder.digest, config)

    def build(out_dir: Path) -> ConversionResult:
        try:
            notes = tuple(runtimes.load_object(info.decoder)(decoder, config.quant, out_dir))
        except TrialError:
            raise
        except Exception as exc:  # toolchain code: whatever it raises fails this conversion only
            raise ConversionError(toolchain_failure(config, toolchain, exc)) from exc
        report = PartitionReport(backends=config.backends, nodes_by_backend={}, notes=notes)
        sidecar = decode_sidecar(config.runtime)
        return ConversionResult(f"prefill{info.artifact_suffix}", report, sidecars={sidecar: sidecar})

    artifact, hit = cache.get_or_build(key, config, toolchain, build)
    return for_config(artifact, config), hit


def _whole(entry: Path, suffix: str) -> bool:
    """Whether ``entry`` holds both graphs with the checksums its meta recorded."""
    try:
        sums = json.loads((entry / _META).read_text())["sha256"]
        return all(file_sha256(entry / f"{g}{suffix}") == sums[g] for g in _GRAPHS)
    except (OSError, ValueError, KeyError):
        return False


def measure(decoder: Decoder, artifact: DecoderArtifact, settings: DecodeSettings | None = None) -> DecodeTiming:
    """Load both graphs with the runtime's runner (its thread count set first) and measure them,
    holding the machine's measurement lock (:class:`~nnsweep.bench.MachineLock`) as every
    measurement does: no other measurement times on these cores meanwhile.

    Raises:
        BenchmarkError: a graph did not load or run here.
    """
    config = artifact.config
    runner_class = runtimes.load_object(runtimes.get(config.runtime).runner)
    runner_class.set_threads(config.threads)
    prefill, decode = (runner_class(artifact.path(g), IOSpec(), config.threads, config.backends) for g in _GRAPHS)
    with MachineLock().hold(f"nnsweep bench {decoder.name} {config.label()}"):
        # in this process, not a measuring child's: what a runtime writes as it loads goes to the log
        with native_stderr_to_debug_log(_log, f"loading {config.runtime}"):
            prefill.load()
            decode.load()
        return measure_decoder(
            prefill, decode, decoder.held_out, decoder.prompt_len, decoder.cache, settings or DecodeSettings()
        )
