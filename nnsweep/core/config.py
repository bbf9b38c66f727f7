"""Typed, frozen deployment configurations.

A :class:`DeploymentConfig` is everything that decides *how* a model is deployed:
quantization, runtime, backend preference order, partition limits and threads.
It is validated against the runtime's declared capabilities when it is built, and
normalised so that two configurations that deploy the same way compare equal and
have the same :meth:`DeploymentConfig.digest` (fields that do not apply, such as
the granularity of an fp32 model, are cleared).

Example:
    >>> from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
    >>> cfg = DeploymentConfig(runtime="executorch", backends=("xnnpack",),
    ...                        quant=QuantConfig(mode=QuantMode.STATIC_INT8))
    >>> cfg.backends          # the runtime's CPU fallback closes every order
    ('xnnpack', 'portable')
    >>> len(cfg.digest())
    64
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nnsweep.core.errors import SpecError

__all__ = [
    "Calibration",
    "DeploymentConfig",
    "Granularity",
    "Interface",
    "PartitionLimits",
    "QuantConfig",
    "QuantMode",
    "canonical_json",
]


class QuantMode(enum.StrEnum):
    """How weights and activations are represented."""

    FP32 = "fp32"
    FP16 = "fp16"
    DYNAMIC_INT8 = "dynamic_int8"
    STATIC_INT8 = "static_int8"
    QAT_INT8 = "qat_int8"

    @property
    def is_static(self) -> bool:
        """True for modes with calibrated activation ranges (static PTQ and QAT)."""
        return self in (QuantMode.STATIC_INT8, QuantMode.QAT_INT8)

    @property
    def is_int8(self) -> bool:
        return self in (QuantMode.DYNAMIC_INT8, QuantMode.STATIC_INT8, QuantMode.QAT_INT8)


class Granularity(enum.StrEnum):
    """Weight quantization granularity."""

    PER_TENSOR = "per_tensor"
    PER_CHANNEL = "per_channel"


class Interface(enum.StrEnum):
    """What a quantized model takes and returns (the NNAPI preparation script's terms).

    ``core``: float in and out, quantize/dequantize inside the model.
    ``full``: quantized in and out; the caller quantizes inputs and dequantizes outputs.
    """

    CORE = "core"
    FULL = "full"


class Calibration(enum.StrEnum):
    """How activation ranges are chosen from calibration data."""

    MINMAX = "minmax"
    HISTOGRAM = "histogram"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"


def _enum_value(enum_type: type[enum.Enum], value: Any, field_name: str) -> Any:
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum_type)
        raise SpecError(field_name, f"unknown value {value!r}; allowed: {allowed}") from None


@dataclass(frozen=True)
class QuantConfig:
    """Quantization settings.

    Args:
        mode: the numeric representation.
        granularity: weight scales per tensor or per output channel (int8 modes).
        calibration: activation range method (``static_int8``).
        calibration_batches: calibration batches of :data:`CALIBRATION_BATCH_SIZE`
            samples (``static_int8``).
        interface: ``core`` or ``full`` (static modes).
        qat_epochs: fine-tuning epochs with fake quantization (``qat_int8``).
    """

    mode: QuantMode = QuantMode.FP32
    granularity: Granularity | None = Granularity.PER_CHANNEL
    calibration: Calibration | None = Calibration.MINMAX
    calibration_batches: int | None = 8
    interface: Interface | None = Interface.CORE
    qat_epochs: int | None = 3

    CALIBRATION_BATCH_SIZE = 16

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        mode = _enum_value(QuantMode, self.mode, "quant.mode")
        set_(self, "mode", mode)
        # Check every value given, then clear what does not apply to this mode, so
        # equal deployments have equal digests.
        for name, kind in (("granularity", Granularity), ("calibration", Calibration), ("interface", Interface)):
            value = getattr(self, name)
            if value is not None:
                set_(self, name, _enum_value(kind, value, f"quant.{name}"))
        for name in ("calibration_batches", "qat_epochs"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SpecError(f"quant.{name}", f"must be an integer >= 1, got {value!r}")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        relevant = {
            "granularity": mode.is_int8,
            # QAT learns its ranges while fine-tuning: no calibration pass
            "calibration": mode is QuantMode.STATIC_INT8,
            "calibration_batches": mode is QuantMode.STATIC_INT8,
            "interface": mode.is_static,
            "qat_epochs": mode is QuantMode.QAT_INT8,
        }
        for name, applies in relevant.items():
            if not applies:
                set_(self, name, None)
            elif getattr(self, name) is None:
                set_(self, name, defaults[name])


@dataclass(frozen=True)
class PartitionLimits:
    """TFLite-style delegate partition limits.

    Args:
        max_delegated_partitions: keep only the N largest delegated partitions
            of a backend; 0 means no limit.
        min_nodes_per_partition: smaller partitions are not delegated and fall
            through to the next backend in the preference order.
    """

    max_delegated_partitions: int = 0
    min_nodes_per_partition: int = 1

    def __post_init__(self) -> None:
        for name, low in (("max_delegated_partitions", 0), ("min_nodes_per_partition", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise SpecError(f"partitions.{name}", f"must be an integer >= {low}, got {value!r}")

    @property
    def is_default(self) -> bool:
        return self == PartitionLimits()


@dataclass(frozen=True)
class DeploymentConfig:
    """One way to deploy a model: the unit a sweep proposes and a device measures.

    Args:
        runtime: a runtime name from :mod:`nnsweep.core.runtimes` (``executorch``,
            ``onnxruntime``, ``torch``, or one added by an entry point).
        backends: backend preference order; each op goes to the first backend that
            supports it. Empty means the runtime's default order.
        quant: quantization settings.
        partitions: delegate partition limits (runtimes that delegate only).
        threads: CPU threads the runtime may use.

    Raises:
        SpecError: the runtime cannot do this combination; the message says why.
    """

    runtime: str
    backends: tuple[str, ...] = ()
    quant: QuantConfig = field(default_factory=QuantConfig)
    partitions: PartitionLimits = field(default_factory=PartitionLimits)
    threads: int = 1

    def __post_init__(self) -> None:
        from nnsweep.core import runtimes  # runtimes declares capabilities in terms of this module

        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1:
            raise SpecError("threads", f"must be an integer >= 1, got {self.threads!r}")
        if isinstance(self.backends, str) or not all(isinstance(b, str) for b in self.backends):
            raise SpecError("backends", f"must be a list of backend names, got {self.backends!r}")
        object.__setattr__(self, "backends", tuple(self.backends))
        info = runtimes.get(self.runtime)
        backends, partitions = info.normalize(self)
        object.__setattr__(self, "backends", backends)
        object.__setattr__(self, "partitions", partitions)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` inverts it."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeploymentConfig:
        """Build a config from :meth:`to_dict` output (or the same shape written by hand).

        Raises:
            SpecError: a field is unknown or invalid.
        """
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(unknown[0], f"unknown field; allowed: {', '.join(sorted(known))}")
        if "runtime" not in data:
            raise SpecError("runtime", "is required")
        quant = data.get("quant") or {}
        parts = data.get("partitions") or {}
        for name, sub, sub_cls in (("quant", quant, QuantConfig), ("partitions", parts, PartitionLimits)):
            if not isinstance(sub, Mapping):
                raise SpecError(name, f"must be a mapping, got {sub!r}")
            allowed = {f.name for f in dataclasses.fields(sub_cls)}
            extra = sorted(set(sub) - allowed)
            if extra:
                raise SpecError(f"{name}.{extra[0]}", f"unknown field; allowed: {', '.join(sorted(allowed))}")
        return cls(
            runtime=data["runtime"],
            backends=tuple(data.get("backends") or ()),
            quant=QuantConfig(**quant),
            partitions=PartitionLimits(**parts),
            threads=data.get("threads", 1),
        )

    def canonical_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace. Equal configs give equal text."""
        return canonical_json(self.to_dict())

    def digest(self) -> str:
        """Full sha256 hex digest of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def flat(self) -> dict[str, str]:
        """Flattened ``{"quant.mode": "static_int8", ...}`` for MLflow params and tables."""
        out: dict[str, str] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for key, sub in value.items():
                    walk(f"{prefix}.{key}" if prefix else key, sub)
            elif isinstance(value, list):
                out[prefix] = ",".join(str(v) for v in value)
            else:
                out[prefix] = "" if value is None else str(value)

        walk("", self.to_dict())
        return out

    def label(self) -> str:
        """A short human-readable name: ``executorch/xnnpack>portable/static_int8(per_channel)/t1``."""
        q = self.quant
        quant = q.mode.value + (f"({q.granularity.value})" if q.granularity else "")
        if q.interface is Interface.FULL:
            quant += "[full]"
        text = f"{self.runtime}/{'>'.join(self.backends) or '-'}/{quant}"
        if not self.partitions.is_default:
            p = self.partitions
            text += f"/max{p.max_delegated_partitions},min{p.min_nodes_per_partition}"
        return f"{text}/t{self.threads}"


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, enums as their values: the text hashed for digests."""
    return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), allow_nan=False)
