"""The runtime registry: what each runtime can do, and where its code lives.

Capabilities are plain data so that configurations are validated without
importing torch, ExecuTorch or ONNX Runtime. Every piece of code of a runtime
(converter, runner, probe, layer ranking, device tool) is named by
``"module:attribute"`` and imported only when used. The built-in runtimes are
defined in their folders (``nnsweep/runtimes/<name>/info.py``); third-party
runtimes register a :class:`RuntimeInfo` through the ``nnsweep.runtimes``
entry point group, with the same hooks. A duplicate name is an error.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol

from nnsweep.core.errors import SpecError
from nnsweep.core.options import RefusedOptions, normalized
from nnsweep.core.quant import (
    Calibration,
    Granularity,
    Interface,
    OptionValue,
    PartitionLimits,
    QuantConfig,
    QuantMode,
    QuantOption,
)

__all__ = [
    "ETHOS_U_TARGETS",
    "INT8_GRANULARITIES",
    "NO_GRANULARITY",
    "Deployment",
    "RefusedOptions",
    "RuntimeInfo",
    "get",
    "listed_names",
    "load_object",
    "names",
    "npu_target",
    "probe",
]


class Deployment(Protocol):
    """What :meth:`RuntimeInfo.normalize` reads of a :class:`~nnsweep.core.config.DeploymentConfig`
    (named here so the registry need not import the module that imports it)."""

    @property
    def backends(self) -> tuple[str, ...]: ...

    @property
    def quant(self) -> QuantConfig: ...

    @property
    def partitions(self) -> PartitionLimits: ...


@dataclass(frozen=True)
class RuntimeInfo:
    """What a runtime supports, as data.

    ``backends`` are in default preference order; ``fallback`` runs any op and closes every
    order (``None``: none). ``modes`` maps each quantization mode to its granularities,
    ``unsupported`` the others to reasons shown to the user; ``full_interface`` lists modes
    that take quantized inputs; ``delegates`` says whether partition limits apply (else
    ``no_partitions`` says why); ``engine_backends``: backends matter only for int8 (torch's
    quantized engine). ``converter``/``runner`` are ``"module:Class"``; ``packages`` enter the
    artifact key; ``python`` is the interpreter for a runtime outside the environment
    (PyArmNN). ``probe`` is ``"module:function"``: given a dict to add versions to, it returns
    the backends that load here (fallback included) or ``None``; empty means the runtime
    loads wherever its runner imports, with all its backends.
    """

    name: str
    backends: tuple[str, ...]
    fallback: str | None
    modes: Mapping[QuantMode, frozenset[Granularity]]
    unsupported: Mapping[QuantMode, str]
    full_interface: frozenset[QuantMode]
    calibrations: frozenset[Calibration]
    delegates: bool
    converter: str
    runner: str
    packages: tuple[str, ...]
    engine_backends: bool = False
    artifact_suffix: str = ".bin"
    default_backends: tuple[str, ...] = field(default=())
    python: str | None = None
    probe: str = ""
    no_partitions: str = "it does not delegate ops in partitions"
    whole_model: Mapping[str, Mapping[QuantMode, frozenset[Granularity]]] = field(default_factory=dict)
    """Backends that take the whole model when first in the order, each with the modes
    (and granularities) it can do: these replace :attr:`modes` for such a config."""
    mixed_precision: str | None = "its converter does not keep chosen layers in float"
    """Why this runtime cannot keep chosen layers in float inside an int8 model
    (``quant.float_layers``); ``None``: it can (its converter honours the list)."""
    float_layers_refused: Mapping[QuantMode, str] = field(default_factory=dict)
    """Int8 modes in which a runtime that keeps layers float (:attr:`mixed_precision` ``None``)
    cannot, each with why."""
    runtime_only: frozenset[str] = frozenset({"threads"})
    """Fields of :class:`~nnsweep.core.config.DeploymentConfig` that change how the artifact
    runs, not its bytes: left out of the artifact key (one conversion serves them all),
    kept in everything that tells measurements apart."""
    quant_options: tuple[QuantOption, ...] = ()
    """The runtime's own quantizer options (``quant.options``), in the order a sweep draws them."""
    refused_options: tuple[RefusedOptions, ...] = ()
    """Combinations of :attr:`quant_options` its toolchain refuses."""
    sensitivity: str = ""
    """``"module:function"`` that builds its layer ranking's evaluator (``nnsweep sensitivity``,
    and ``float_layers`` in a sweep): called with the model's bundle, the scored split, whether
    weights are per channel and the :class:`~nnsweep.sensitivity.scoring.Scoring` (which
    outputs of a quantized model to take, and their score: top-1 or the sweep's own metric),
    it returns a callable from the layers kept float to a
    :class:`~nnsweep.sensitivity.rank.Score` (an attribute ``mode``, when
    it has one, names the int8 mode it ranked in). Empty: its layers are not ranked."""
    sensitivity_settings: Mapping[str, str] = field(default_factory=dict)
    """What else tells its rankings apart in their cache key (how its evaluator scores)."""
    measure_peak_mb: Mapping[str, int] = field(default_factory=dict)
    """Peak resident memory (MB) of its measuring process on a small board, by runner: ``""``
    its :attr:`runner`; another key, a runner its probe picked instead and recorded under that
    key in the versions it fills. A board with less memory than that plus headroom does not
    offer the runtime; no entry: every board does."""
    preload: tuple[str, ...] = ()
    """Modules its runner imports when it loads a first artifact: a warm measuring worker
    imports them before it forks, where the first of them is installed."""
    failure_detail: str = ""
    """``"module:function"`` that adds what the runtime's own log says to a failed
    measurement's message: called with the message and the measuring process's stderr."""
    same_release: str = ""
    """The package whose release a device must share with the host that converts (its
    artifacts' format changes between releases and an older runtime misreads a newer one);
    a device with another version of it is refused the runtime. Empty: any release."""
    device_tool: str = ""
    """``"module:attribute"`` of the :class:`~nnsweep.agents.DeviceTool` that measures its
    artifacts on a device without nnsweep (over adb or ssh). Empty: no such tool."""

    profiler: str = ""
    """``"module:function"`` that profiles its artifacts per operator (``nnsweep bench --profile``):
    called in a process of the runtime's interpreter with an unloaded runner, a few float inputs
    (batch first), the profiled runs and the warm-up runs before them, it returns
    :class:`~nnsweep.bench.profile.OpTime` entries (:func:`~nnsweep.bench.profile.aggregate`).
    Empty: :attr:`no_profiler` says why there is no profile."""
    no_profiler: str = "no per-operator profiler in its Python runtime"
    """Why the runtime has no :attr:`profiler`, as ``--profile`` prints it."""
    explainer: str = ""
    """``"module:function"`` that exposes its artifacts' intermediate outputs (``nnsweep bench
    --explain``): called in the measuring host's process with the model's bundle, the
    configuration, the artifact's path, its :class:`~nnsweep.core.artifact.IOSpec` and a few
    float inputs (batch first), it returns the intermediates in graph order as
    :data:`~nnsweep.bench.divergence.Observed` pairs, and a note on how they were had (or
    ``None``); it raises :class:`~nnsweep.core.errors.BenchmarkError` when it cannot.
    Empty: :attr:`no_explainer` says why there is no divergence by layer."""
    no_explainer: str = "no way to read its intermediate outputs from its Python runtime"
    """Why the runtime has no :attr:`explainer`, as ``--explain`` prints it."""
    decoder: str = ""
    """``"module:function"`` that converts a decoder language model
    (:class:`~nnsweep.models.decoder.Decoder`): called with the decoder, the
    :class:`~nnsweep.core.quant.QuantConfig` and a folder, it writes ``prefill`` and ``decode``
    artifacts (:attr:`artifact_suffix`) there and returns the partition report's notes.
    Empty: :attr:`no_decoder` says why the runtime takes no decoder."""
    decoder_modes: frozenset[QuantMode] = frozenset()
    """The quantization modes its :attr:`decoder` builds."""
    no_decoder: str = "nnsweep has no decoder export for it"
    """Why the runtime takes no decoder language model, as ``nnsweep bench`` prints it."""

    def options_for(self, mode: QuantMode) -> tuple[QuantOption, ...]:
        """The quantizer options that apply to ``mode``."""
        return tuple(o for o in self.quant_options if mode in o.modes)

    def option_values(self, quant: QuantConfig) -> dict[str, OptionValue]:
        """Every option that applies to ``quant.mode``: its value in ``quant``, else its default."""
        given = dict(quant.options)
        return {o.name: given.get(o.name, o.default) for o in self.options_for(quant.mode)}

    def refusal(self, chosen: Mapping[str, OptionValue]) -> str | None:
        """Why the toolchain refuses the options ``chosen`` (``None``: it does not)."""
        return next((r.reason for r in self.refused_options if r.matches(chosen)), None)

    def normalize_options(self, quant: QuantConfig) -> tuple[tuple[str, OptionValue], ...]:
        """``quant.options`` checked against this runtime, less the values equal to their
        defaults (:func:`nnsweep.core.options.normalized`).

        Raises:
            SpecError: naming ``quant.options.<name>`` and what is allowed.
        """

        def elsewhere(name: str) -> list[str]:
            return [i.name for i in _load().values() if name in {o.name for o in i.quant_options}]

        return normalized(self.name, self.quant_options, self.refused_options, quant, elsewhere)

    def keeps_float(self, mode: QuantMode) -> bool:
        """Whether its converter keeps ``quant.float_layers`` in float in ``mode`` (an int8 mode,
        or ``int4_weight``: those linear layers stay float while the others go 4-bit)."""
        quantized = mode.is_int8 or mode.is_grouped
        return self.mixed_precision is None and quantized and mode not in self.float_layers_refused

    def modes_for(self, backends: tuple[str, ...]) -> Mapping[QuantMode, frozenset[Granularity]]:
        """The modes this runtime can do with ``backends`` first in its order."""
        if backends and backends[0] in self.whole_model:
            return self.whole_model[backends[0]]
        return self.modes

    def normalize(self, config: Deployment) -> tuple[tuple[str, ...], PartitionLimits]:
        """Validate ``config`` against these capabilities and return its canonical
        backend order and partition limits.

        Raises:
            SpecError: naming the field, what was wrong and what is allowed.
        """
        q = config.quant
        modes = self.modes_for(config.backends)
        who = f"{self.name} with {config.backends[0]}" if modes is not self.modes else self.name
        if q.mode not in modes:
            reason = self.unsupported.get(q.mode, "not implemented for this runtime")
            if modes is not self.modes:
                reason = f"not with {config.backends[0]} first in the order"
            allowed = ", ".join(m.value for m in modes)
            raise SpecError("quant.mode", f"{who} cannot do {q.mode.value}: {reason} (allowed: {allowed})")
        if q.granularity is not None and q.granularity not in modes[q.mode]:
            allowed = ", ".join(sorted(g.value for g in modes[q.mode]))
            raise SpecError(
                "quant.granularity",
                f"{who} {q.mode.value} supports {allowed}, not {q.granularity.value}",
            )
        if q.interface is Interface.FULL and q.mode not in self.full_interface:
            raise SpecError(
                "quant.interface",
                f"{self.name} has no quantized-in/out ('full') interface for {q.mode.value}; use 'core'",
            )
        if q.float_layers and npu_target(config) is not None:
            raise SpecError("quant.float_layers", f"{config.backends[0]} runs int8 only: no layer can stay float on it")
        if q.float_layers and self.mixed_precision is not None:
            can = ", ".join(info.name for info in _load().values() if info.mixed_precision is None) or "none"
            raise SpecError(
                "quant.float_layers", f"{self.name} cannot keep layers in float: {self.mixed_precision} (can: {can})"
            )
        if q.float_layers and q.mode in self.float_layers_refused:
            can = ", ".join(m.value for m in self.modes if self.keeps_float(m)) or "none"
            why = self.float_layers_refused[q.mode]
            message = f"{self.name} cannot keep layers in float in {q.mode.value}: {why} (can in: {can})"
            raise SpecError("quant.float_layers", message)
        if q.calibration is not None and q.calibration not in self.calibrations:
            allowed = ", ".join(sorted(c.value for c in self.calibrations))
            raise SpecError("quant.calibration", f"{self.name} calibrates with {allowed}, not {q.calibration.value}")

        backends = self._order(config.backends, q.mode)
        partitions = config.partitions if self.delegates else PartitionLimits()
        if not self.delegates and not config.partitions.is_default:
            honour = ", ".join(info.name for info in _load().values() if info.delegates)
            raise SpecError(
                "partitions", f"{self.name} takes no partition limits: {self.no_partitions}; they apply to: {honour}"
            )
        return backends, partitions

    def _order(self, given: tuple[str, ...], mode: QuantMode) -> tuple[str, ...]:
        order = given or self.default_backends or self.backends
        unknown = [b for b in order if b not in self.backends]
        if unknown:
            raise SpecError(
                "backends", f"unknown {self.name} backend {unknown[0]!r}; allowed: {', '.join(self.backends)}"
            )
        if len(set(order)) != len(order):
            raise SpecError("backends", f"lists a backend twice: {','.join(order)}")
        if self.engine_backends and not mode.is_int8:
            # The quantized engine does not matter to float models; a whole-model backend does.
            return (order[0],) if order[0] in self.whole_model else ()
        if self.fallback is not None:
            # The fallback runs every op, so nothing after it is ever reached.
            fb = self.fallback
            order = order[: order.index(fb) + 1] if fb in order else (*order, fb)
        return tuple(order)


# The weight granularities of an int8 mode, and the none of a float one.
INT8_GRANULARITIES = frozenset({Granularity.PER_CHANNEL, Granularity.PER_TENSOR})
NO_GRANULARITY: frozenset[Granularity] = frozenset()

# Arm Ethos-U NPU configurations ExecuTorch's Arm backend compiles for (with Vela). Here, not
# in nnsweep/runtimes/ethosu/, so that a spec's NPU targets are checked without importing a runtime.
ETHOS_U_TARGETS = (
    "ethos-u55-32",
    "ethos-u55-64",
    "ethos-u55-128",
    "ethos-u55-256",
    "ethos-u65-256",
    "ethos-u65-512",
    "ethos-u85-128",
    "ethos-u85-256",
    "ethos-u85-512",
    "ethos-u85-1024",
    "ethos-u85-2048",
)
ETHOS_U_PROFILER = "nnsweep.runtimes.ethosu.profile:vela_profile"
"""``(artifact, target) -> Profile``: an Ethos-U artifact's per-operator table, from Vela's estimate."""


def npu_target(config: Deployment) -> str | None:
    """The Ethos-U NPU ``config``'s backend order starts with, or ``None``."""
    first = config.backends[:1]
    return first[0] if first and first[0] in ETHOS_U_TARGETS else None


# The built-in runtimes, each defined in its folder (nnsweep/runtimes/<name>/info.py) and
# imported when the registry is first read; a plug-in registers through the entry point.
_BUILTIN: dict[str, str] = {
    "executorch": "nnsweep.runtimes.executorch.info:INFO",
    "onnxruntime": "nnsweep.runtimes.onnxruntime.info:INFO",
    "torch": "nnsweep.runtimes.torch.info:INFO",
    "litert": "nnsweep.runtimes.litert.info:INFO",
    "armnn": "nnsweep.runtimes.armnn.info:INFO",
}

_registry: dict[str, RuntimeInfo] | None = None


def _load() -> dict[str, RuntimeInfo]:
    global _registry
    if _registry is None:
        found: dict[str, RuntimeInfo] = {}
        for name, reference in _BUILTIN.items():
            info = load_object(reference)
            if not isinstance(info, RuntimeInfo) or info.name != name:
                raise TypeError(f"{reference} must be the RuntimeInfo of {name!r}")
            found[name] = info
        for entry in metadata.entry_points(group="nnsweep.runtimes"):
            info = entry.load()
            if not isinstance(info, RuntimeInfo):
                raise TypeError(f"entry point {entry.name!r} must be a RuntimeInfo, got {type(info).__name__}")
            if info.name in found:
                raise ValueError(f"runtime {info.name!r} is registered twice (entry point {entry.value})")
            found[info.name] = info
        _registry = found
    return _registry


def names() -> tuple[str, ...]:
    """Registered runtime names."""
    return tuple(_load())


def listed_names() -> tuple[str, ...]:
    """Registered runtime names without importing any plug-in (for help texts)."""
    plugins = (entry.name for entry in metadata.entry_points(group="nnsweep.runtimes"))
    return tuple(dict.fromkeys((*_BUILTIN, *plugins)))


def get(name: str) -> RuntimeInfo:
    """The capabilities of runtime ``name``.

    Raises:
        SpecError: ``name`` is not registered.
    """
    registry = _load()
    if name not in registry:
        raise SpecError("runtime", f"unknown runtime {name!r}; allowed: {', '.join(registry)}")
    return registry[name]


def probe(info: RuntimeInfo, versions: dict[str, str]) -> tuple[str, ...] | None:
    """The backends of ``info`` that load on this machine (``None``: the runtime does not load here)."""
    if info.probe:
        found: tuple[str, ...] | None = load_object(info.probe)(versions)
        return found
    try:
        importlib.import_module(info.runner.partition(":")[0])
    except ImportError:
        return None
    return info.backends


def load_object(reference: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute."""
    module_name, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module_name), attr)
