"""Typed, frozen deployment configurations.

A :class:`DeploymentConfig` is everything that decides *how* a model is deployed
(quantization, runtime, backend order, partition limits, threads), validated against the
runtime's capabilities when built and normalised (fields that do not apply are cleared),
so two configurations that deploy the same way are equal and share a digest.

Example:
    >>> from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
    >>> cfg = DeploymentConfig(runtime="executorch", backends=("xnnpack",),
    ...                        quant=QuantConfig(mode=QuantMode.STATIC_INT8))
    >>> cfg.backends          # the runtime's CPU fallback closes every order
    ('xnnpack', 'portable')
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nnsweep.core.errors import SpecError
from nnsweep.core.quant import Calibration, Granularity, Interface, PartitionLimits, QuantConfig, QuantMode

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


_Part = TypeVar("_Part", QuantConfig, PartitionLimits)


def _part(name: str, value: Any, part_cls: type[_Part]) -> _Part:
    """``value`` as ``part_cls`` (a :class:`QuantConfig` or :class:`PartitionLimits`): itself, or
    built from a mapping of its fields.

    Raises:
        SpecError: ``value`` is neither, or the mapping has a field ``part_cls`` lacks.
    """
    if isinstance(value, part_cls):
        return value
    if part_cls is QuantConfig and isinstance(value, str):  # quant="static_int8": the mode, as on the command line
        value = {"mode": value}
    if not isinstance(value, Mapping):
        what = "a mode name or a mapping" if part_cls is QuantConfig else "a mapping"
        raise SpecError(name, f"must be {what}, got {value!r}")
    allowed = {f.name for f in dataclasses.fields(part_cls)}  # type: ignore[arg-type]
    extra = sorted(set(value) - allowed)
    if extra:
        raise SpecError(f"{name}.{extra[0]}", f"unknown field; allowed: {', '.join(sorted(allowed))}")
    return part_cls(**value)


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

        # A mapping (``quant={"mode": "static_int8"}`` from the Python API) is read as from_dict
        # does; a mode name (``quant="static_int8"``) as the mapping of that mode.
        object.__setattr__(self, "quant", _part("quant", self.quant, QuantConfig))
        object.__setattr__(self, "partitions", _part("partitions", self.partitions, PartitionLimits))
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1:
            raise SpecError("threads", f"must be an integer >= 1, got {self.threads!r}")
        if isinstance(self.backends, str) or not all(isinstance(b, str) for b in self.backends):
            raise SpecError("backends", f"must be a list of backend names, got {self.backends!r}")
        object.__setattr__(self, "backends", tuple(self.backends))
        info = runtimes.get(self.runtime)
        backends, partitions = info.normalize(self)
        object.__setattr__(self, "backends", backends)
        object.__setattr__(self, "partitions", partitions)
        options = info.normalize_options(self.quant)
        if options != self.quant.options:  # the defaults dropped: equal deployments, equal digests
            object.__setattr__(self, "quant", dataclasses.replace(self.quant, options=options))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` inverts it.

        ``quant.float_layers`` appears only when some layer is kept in float,
        ``quant.options`` (a mapping) only when some option differs from its default, and
        ``quant.group_size`` only in a mode that groups weights (``int4_weight``), so every
        whole-model configuration at the runtime's default quantizer options keeps the
        digest, artifact key and study parameters it had before any of them existed.
        """
        data: dict[str, Any] = _plain(dataclasses.asdict(self))
        if self.quant.group_size is None:
            del data["quant"]["group_size"]
        if not self.quant.float_layers:
            del data["quant"]["float_layers"]
        if self.quant.options:
            data["quant"]["options"] = dict(self.quant.options)
        else:
            del data["quant"]["options"]
        return data

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
        return cls(
            runtime=data["runtime"],
            backends=tuple(data.get("backends") or ()),
            quant=_part("quant", data.get("quant") or {}, QuantConfig),
            partitions=_part("partitions", data.get("partitions") or {}, PartitionLimits),
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
        """A short human-readable name: ``executorch/xnnpack>portable/static_int8(per_channel)/t1``
        (``int4_weight(g32)`` for a grouped mode)."""
        q = self.quant
        quant = q.mode.value + (f"({q.granularity.value})" if q.granularity else "")
        if q.group_size is not None:
            quant += f"(g{q.group_size})"
        if q.interface is Interface.FULL:
            quant += "[full]"
        if q.float_layers:  # mixed precision: how many layers stay float (the params name them)
            quant += f"+{len(q.float_layers)}float"
        if q.options:  # the runtime's quantizer options that differ from its defaults
            quant += "{" + ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in q.options) + "}"
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
