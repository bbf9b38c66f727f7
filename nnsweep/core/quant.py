"""Quantization settings and partition limits: the parts of a deployment configuration
that every runtime's capabilities are declared in (:mod:`nnsweep.core.runtimes` imports
this module; :mod:`nnsweep.core.config` builds on both)."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nnsweep.core.errors import SpecError

__all__ = [
    "Calibration",
    "Granularity",
    "Interface",
    "OptionValue",
    "PartitionLimits",
    "QuantConfig",
    "QuantMode",
    "QuantOption",
]


class QuantMode(enum.StrEnum):
    """How weights and activations are represented."""

    FP32 = "fp32"
    FP16 = "fp16"
    DYNAMIC_INT8 = "dynamic_int8"
    STATIC_INT8 = "static_int8"
    QAT_INT8 = "qat_int8"
    INT4_WEIGHT = "int4_weight"
    A16W8 = "a16w8"

    @property
    def is_static(self) -> bool:
        """True for modes with calibrated activation ranges (static PTQ and QAT)."""
        return self in (QuantMode.STATIC_INT8, QuantMode.QAT_INT8)

    @property
    def observes_activations(self) -> bool:
        """True for modes whose activation ranges are observed on calibration samples: the
        static ones and a16w8 (whose 16-bit activations are calibrated as int8's are)."""
        return self.is_static or self is QuantMode.A16W8

    @property
    def is_int8(self) -> bool:
        return self in (QuantMode.DYNAMIC_INT8, QuantMode.STATIC_INT8, QuantMode.QAT_INT8)

    @property
    def is_grouped(self) -> bool:
        """True for modes whose linear weights are quantized in groups of ``quant.group_size``."""
        return self is QuantMode.INT4_WEIGHT


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


OptionValue = str | bool
"""The value of a runtime's own quantizer option (:class:`QuantOption`): a name or a flag."""


@dataclass(frozen=True)
class QuantOption:
    """One of a runtime's own quantizer settings that changes accuracy or speed, declared by
    the runtime (:attr:`~nnsweep.core.runtimes.RuntimeInfo.quant_options`), e.g. ONNX
    Runtime's ``quant_format``.

    Args:
        name: the key in ``quant.options``, the spec's ``space.quant_options.<runtime>`` and
            the trial parameter ``<runtime>.<name>``.
        values: every value the runtime takes, the default first.
        modes: the quantization modes it applies to.
        doc: what it does, one line (``nnsweep devices`` and the docs show it).
    """

    name: str
    values: tuple[OptionValue, ...]
    modes: frozenset[QuantMode]
    doc: str

    @property
    def default(self) -> OptionValue:
        """Today's behaviour: a configuration that leaves the option out gets it."""
        return self.values[0]


@dataclass(frozen=True)
class QuantConfig:
    """Quantization settings.

    ``mode`` is the numeric representation; ``granularity`` (int8) per-tensor or per-channel
    weight scales; ``calibration`` and ``calibration_batches`` (of
    :data:`CALIBRATION_BATCH_SIZE` samples) for ``static_int8``; ``interface`` ``core`` or
    ``full`` (static modes); ``calibration_batches`` for ``a16w8`` too (16-bit activations,
    int8 weights; min/max ranges); ``qat_epochs`` for ``qat_int8``; ``group_size`` for
    ``int4_weight``: input features sharing one 4-bit weight scale (:attr:`GROUP_SIZES`).
    ``float_layers`` are module paths kept float in an int8 model (runtimes with :attr:`RuntimeInfo.mixed_precision`)
    or linear layers left out of an ``int4_weight`` model's 4-bit ones,
    sorted so the same set is the same configuration. ``options`` are the runtime's own
    quantizer options that differ from their defaults, as sorted ``(name, value)`` pairs (a
    mapping is taken too); defaults are dropped
    (:meth:`~nnsweep.core.runtimes.RuntimeInfo.normalize_options`), so a configuration at
    every default keeps its digest.
    """

    mode: QuantMode = QuantMode.FP32
    granularity: Granularity | None = Granularity.PER_CHANNEL
    calibration: Calibration | None = Calibration.MINMAX
    calibration_batches: int | None = 8
    interface: Interface | None = Interface.CORE
    qat_epochs: int | None = 3
    group_size: int | None = 32
    float_layers: tuple[str, ...] = ()
    options: tuple[tuple[str, OptionValue], ...] = ()

    CALIBRATION_BATCH_SIZE = 16
    # What every runtime's 4-bit path takes: ai-edge-quantizer's blockwise granularities (LiteRT)
    GROUP_SIZES = (32, 64, 128, 256)

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
        size = self.group_size
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size not in self.GROUP_SIZES):
            allowed = ", ".join(map(str, self.GROUP_SIZES))
            raise SpecError("quant.group_size", f"must be one of {allowed}, got {size!r}")
        set_(self, "float_layers", _layer_names(self.float_layers) if mode.is_int8 or mode.is_grouped else ())
        set_(self, "options", _option_pairs(self.options))
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        relevant = {
            "granularity": mode.is_int8,
            # QAT learns its ranges while fine-tuning: no calibration pass
            "calibration": mode is QuantMode.STATIC_INT8,
            "calibration_batches": mode in (QuantMode.STATIC_INT8, QuantMode.A16W8),
            "interface": mode.is_static,
            "qat_epochs": mode is QuantMode.QAT_INT8,
            "group_size": mode.is_grouped,
        }
        for name, applies in relevant.items():
            if not applies:
                set_(self, name, None)
            elif getattr(self, name) is None:
                set_(self, name, defaults[name])


# A module path as model.named_modules() names it: components joined by dots, each a word
# that may hold hyphens after its first character (torchvision's RegNet: ``block1-0``).
_LAYER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*")


def _layer_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise SpecError("quant.float_layers", f"must be a list of module paths, got {value!r}")
    for name in value:
        if not isinstance(name, str) or len(name) > 300 or not _LAYER.fullmatch(name):
            raise SpecError("quant.float_layers", f"{name!r} is not a module path such as blocks.2.pw")
    return tuple(sorted(set(value)))


_OPTION = re.compile(r"[a-z][a-z0-9_]{0,63}")


def _option_pairs(value: Any) -> tuple[tuple[str, OptionValue], ...]:
    """``quant.options`` as sorted ``(name, value)`` pairs, each name once."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise SpecError("quant.options", f"must be a mapping of option names to values, got {value!r}")
    for name, item in pairs:
        if not isinstance(name, str) or not _OPTION.fullmatch(name):
            raise SpecError("quant.options", f"{name!r} is not an option name such as quant_format")
        if not isinstance(item, str | bool):
            raise SpecError(f"quant.options.{name}", f"must be a name or true/false, got {item!r}")
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise SpecError("quant.options", f"names an option twice: {', '.join(names)}")
    return tuple(sorted((str(n), v) for n, v in pairs))


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
