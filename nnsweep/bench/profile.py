"""Per-operator time share of one artifact, from its runtime's own profiler.

A runtime's profiler hook (:attr:`~nnsweep.core.runtimes.RuntimeInfo.profiler`) turns the
events its profiler records into :class:`OpTime` entries with :func:`aggregate`; a
:class:`Profile` holds them with what the profiling run cost. Quantize, dequantize and
layout-conversion kernels are summed apart (:meth:`Profile.overhead_ms`): they are the
usual reason an int8 model runs slower than its fp32 original.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "OVERHEAD_KINDS",
    "OVERHEAD_PREFIXES",
    "OpTime",
    "Profile",
    "aggregate",
    "by_kind",
    "is_overhead",
]

OVERHEAD_KINDS = frozenset(
    {
        # ONNX Runtime: QDQ pairs, dynamic quantization, its NHWC/NCHWc layout conversions
        "quantizelinear",
        "dequantizelinear",
        "dynamicquantizelinear",
        "transpose",
        "reorderinput",
        "reorderoutput",
        # PyTorch: (de)quantizing tensors between float and quantized ops, and their layout copies
        "aten::quantize_per_tensor",
        "aten::quantize_per_tensor_dynamic",
        "aten::quantize_per_channel",
        "aten::dequantize",
        "aten::contiguous",
        "quantized_decomposed::quantize_per_tensor",
        "quantized_decomposed::dequantize_per_tensor",
        "quantized_decomposed::quantize_per_channel",
        "quantized_decomposed::dequantize_per_channel",
        # Arm NN: its Quantize/Dequantize layers, and the copies between backends
        "quantize",
        "dequantize",
        "copymemgeneric",
    }
)
"""Operator kinds (lower case) counted as quantize/dequantize/layout-conversion overhead."""


OVERHEAD_PREFIXES = ("convert (", "transpose (")
"""Kind prefixes counted as overhead: XNNPACK's operators that convert between float and int8
(``Convert (NC, F32, QD8)``) and its layout transposes (``Transpose (ND, X32)``)."""


def is_overhead(kind: str) -> bool:
    """Whether an operator of ``kind`` only converts between representations (q/dq, layout)."""
    lowered = kind.lower()
    return lowered in OVERHEAD_KINDS or lowered.startswith(OVERHEAD_PREFIXES)


@dataclass(frozen=True)
class OpTime:
    """One operator (or delegated partition): its time per inference and its share of the profile."""

    name: str
    kind: str
    backend: str
    ms: float
    share: float

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "backend": self.backend, "ms": self.ms, "share": self.share}


def aggregate(events: Iterable[tuple[int, str, str, str, float]], runs: int) -> tuple[OpTime, ...]:
    """Per operator, the median over ``runs`` inferences of its ``(run, name, kind, backend, ms)`` events.

    The median, not the mean: on a busy machine one preempted run would otherwise weigh
    on every operator it touched, and the medians add up to a typical inference, which
    compares with the measured p50. An operator absent from a run counts 0 ms in it.

    Returns:
        One entry per ``(name, kind, backend)`` with its ms per inference and its share
        of the sum over all entries, the slowest first.
    """
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    per_run: dict[tuple[str, str, str], list[float]] = {}
    for run, name, kind, backend, ms in events:
        if not 0 <= run < runs:
            raise ValueError(f"event of run {run}, outside the {runs} profiled runs")
        per_run.setdefault((name, kind, backend), [0.0] * runs)[run] += ms
    medians = {key: statistics.median(values) for key, values in per_run.items()}
    whole = sum(medians.values())
    entries = [
        OpTime(name, kind, backend, ms, ms / whole if whole > 0 else 0.0)
        for (name, kind, backend), ms in medians.items()
    ]
    return tuple(sorted(entries, key=lambda e: (-e.ms, e.name)))


@dataclass(frozen=True)
class Profile:
    """A profiled run's operators, or why the runtime has none (``reason``).

    ``runs``: profiled inferences (after warm-up ones); ``wall_s``: what profiling cost,
    its process's start and the artifact's load included; ``source``: set when the table is
    an estimate (an NPU's compiler), not a profiler's measurement; ``emulated``: the board's
    kernels ran under emulation (qemu-user), so the shares are real but no board's times.
    """

    entries: tuple[OpTime, ...] = ()
    runs: int = 0
    wall_s: float = 0.0
    reason: str | None = None
    source: str | None = None
    emulated: bool = False

    @property
    def total_ms(self) -> float:
        """The profiled inference: every operator's ms per inference summed."""
        return sum(e.ms for e in self.entries)

    @property
    def overhead_ms(self) -> float:
        """Quantize/dequantize/layout-conversion operators' ms per inference."""
        return sum(e.ms for e in self.entries if is_overhead(e.kind))

    def to_dict(self) -> dict[str, object]:
        """The fields ``nnsweep bench --profile --json`` adds (``profile`` ``None`` with a reason)."""
        if self.reason is not None:
            return {"profile": None, "profile_unavailable": self.reason}
        total = self.total_ms
        return {
            "profile": [e.to_dict() for e in self.entries],
            "profile_total_ms": total,
            "profile_overhead_ms": self.overhead_ms,
            "profile_overhead_share": self.overhead_ms / total if total > 0 else 0.0,
            "profile_runs": self.runs,
            "profile_s": self.wall_s,
            **({"profile_estimated": True, "profile_source": self.source} if self.source else {}),
            **({"profile_emulated": True} if self.emulated else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Profile:
        """What the profiling process wrote (:meth:`to_dict`'s ``profile`` entries and ``runs``)."""
        raw = d.get("profile") or []
        assert isinstance(raw, list)
        entries = tuple(OpTime(**e) for e in raw)
        runs = d.get("profile_runs", 0)
        source = d.get("profile_source")
        return cls(
            entries,
            int(runs) if isinstance(runs, int | float) else 0,
            float(str(d.get("profile_s", 0.0))),
            source=str(source) if source else None,
            emulated=bool(d.get("profile_emulated", False)),
        )


def by_kind(profile: Profile) -> dict[str, float]:
    """Milliseconds per inference summed per operator kind (what a report compares across configurations)."""
    kinds: dict[str, float] = {}
    for e in profile.entries:
        kinds[e.kind] = kinds.get(e.kind, 0.0) + e.ms
    return kinds
