"""A runtime's own quantizer options (``quant.options``): checking a configuration's against
what the runtime declares, drawing them for a sweep, and the CPU flags that decide how int8 runs.

:class:`~nnsweep.core.quant.QuantOption` declares one option; a runtime lists its own in
:attr:`~nnsweep.core.runtimes.RuntimeInfo.quant_options` and the combinations its toolchain
refuses in :attr:`~nnsweep.core.runtimes.RuntimeInfo.refused_options`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nnsweep.core.errors import SpecError
from nnsweep.core.quant import OptionValue, QuantConfig, QuantMode, QuantOption

__all__ = [
    "INT8_FLAGS",
    "SATURATION",
    "RefusedOptions",
    "draw",
    "int8_flags",
    "normalized",
    "saturating_int8",
    "shown",
    "unguarded_saturation",
    "x86_without_vnni",
]


@dataclass(frozen=True)
class RefusedOptions:
    """A combination of a runtime's quantizer options that its toolchain refuses, and why:
    no configuration holds it, no space draws it."""

    values: tuple[tuple[str, OptionValue], ...]
    reason: str

    def matches(self, chosen: Mapping[str, OptionValue]) -> bool:
        return all(chosen.get(name) == value for name, value in self.values)


def shown(value: OptionValue) -> str:
    """An option's value as a spec writes it (``true``, ``qdq``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def normalized(
    runtime: str,
    declared: Sequence[QuantOption],
    refused: Sequence[RefusedOptions],
    quant: QuantConfig,
    elsewhere: Callable[[str], list[str]],
) -> tuple[tuple[str, OptionValue], ...]:
    """``quant.options`` checked against ``runtime``'s ``declared`` options, less the values
    equal to their defaults (so a configuration at every default keeps the digest it had
    before the options existed). ``elsewhere(name)``: the runtimes that have option ``name``.

    Raises:
        SpecError: naming ``quant.options.<name>``: an option the runtime lacks, one that
            does not apply to the mode, a value it does not take, or a refused combination.
    """
    if not quant.options:
        return ()
    by_name = {o.name: o for o in declared}
    for name, value in quant.options:
        field_name = f"quant.options.{name}"
        option = by_name.get(name)
        if option is None:
            has = f"it has {', '.join(by_name)}" if by_name else "it has none"
            others = elsewhere(name)
            where = f"; {', '.join(others)} {'has' if len(others) == 1 else 'have'} it" if others else ""
            raise SpecError(field_name, f"{runtime} has no quantizer option {name!r} ({has}{where})")
        if quant.mode not in option.modes:
            modes = ", ".join(m.value for m in QuantMode if m in option.modes)
            raise SpecError(field_name, f"{runtime} {quant.mode.value} has no {name}: it applies to {modes}")
        if isinstance(option.default, bool) and not isinstance(value, bool):
            raise SpecError(field_name, f"must be true or false, got {value!r}")
        if value not in option.values or type(value) is not type(option.default):
            raise SpecError(
                field_name, f"unknown value {shown(value)}; allowed: {', '.join(map(shown, option.values))}"
            )
    given = dict(quant.options)
    chosen = {o.name: given.get(o.name, o.default) for o in declared if quant.mode in o.modes}
    refusal = next((r for r in refused if r.matches(chosen)), None)
    if refusal is not None:
        named = next((n for n, _ in refusal.values if n in given), refusal.values[0][0])
        raise SpecError(f"quant.options.{named}", refusal.reason)
    return tuple((n, v) for n, v in quant.options if v != by_name[n].default)


def draw(
    runtime: str,
    options: Sequence[QuantOption],
    refused: Sequence[RefusedOptions],
    listed: Mapping[str, tuple[OptionValue, ...]],
    choose: Callable[[str, tuple[OptionValue, ...]], OptionValue],
) -> tuple[tuple[str, OptionValue], ...]:
    """One value of each of ``options`` (those of one mode, in the runtime's order), each
    chosen by ``choose(parameter, values)`` from the values in ``listed`` (an option not
    there: its default) that some combination the toolchain takes still has after the
    earlier choices. An option whose values that narrows gets a parameter named by them
    (``onnxruntime.weight_type[int8]``), so no parameter ever changes its choices within a
    study; ``choose`` is called for every option, one value or more.

    Raises:
        SpecError: no combination of the listed values is taken.
    """
    names = tuple(o.name for o in options)
    lists = [listed.get(o.name, (o.default,)) for o in options]
    valid = [
        combo
        for combo in itertools.product(*lists)
        if not any(r.matches(dict(zip(names, combo, strict=True))) for r in refused)
    ]
    chosen: list[OptionValue] = []
    for i, name in enumerate(names):
        values = tuple(dict.fromkeys(combo[i] for combo in valid if list(combo[:i]) == chosen))
        if not values:
            raise SpecError(f"space.quant_options.{runtime}", f"no combination of {', '.join(names)} is taken")
        parameter = f"{runtime}.{name}" if values == lists[i] else f"{runtime}.{name}[{','.join(map(shown, values))}]"
        chosen.append(choose(parameter, values))
    return tuple(zip(names, chosen, strict=True))


# The CPU flags (as /proc/cpuinfo names them) that decide how int8 runs: x86's AVX2 and VNNI
# (int8 dot products that add into int32, where AVX2's u8s8 kernels add pairs in int16),
# Arm's dot product (asimddp) and 8-bit matrix multiply (i8mm).
INT8_FLAGS = ("avx2", "avx512_vnni", "avx_vnni", "asimddp", "i8mm")


def int8_flags(cpuinfo: str) -> tuple[str, ...] | None:
    """The :data:`INT8_FLAGS` (and any other VNNI flag) that a ``/proc/cpuinfo`` text lists on
    its first ``flags`` (x86) or ``Features`` (Arm) line; ``None``: it has no such line.

    Example:
        >>> int8_flags("flags : fpu sse2 avx2 fma"), int8_flags("processor : 0")
        (('avx2',), None)
    """
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            listed = value.split()
            return tuple(f for f in INT8_FLAGS if f in listed) + tuple(
                sorted(f for f in set(listed) if "vnni" in f and f not in INT8_FLAGS)
            )
    return None


def saturating_int8(arch: str, flags: tuple[str, ...] | None) -> bool:
    """Whether an ``arch`` CPU with ``flags`` (:func:`int8_flags`) is an x86 CPU without VNNI,
    whose u8s8 int8 kernels add products in pairs in int16 and can saturate: ``reduce_range``'s
    reason. False where the flags are unknown (``None``)."""
    return arch in ("x86_64", "AMD64") and flags is not None and not any("vnni" in f for f in flags)


def x86_without_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """:func:`saturating_int8` for this machine. False where ``cpuinfo`` cannot be read or
    lists no CPU flags."""
    import platform

    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    return saturating_int8(platform.machine(), int8_flags(text))


# What happens on an x86 CPU without VNNI (said after naming such a CPU).
SATURATION = (
    "ONNX Runtime's int8 kernels add uint8 x int8 products in pairs in int16 here, which can saturate and cost accuracy"
)


def unguarded_saturation(modes: Sequence[QuantMode], options: Mapping[str, Sequence[OptionValue]]) -> bool:
    """Whether an ONNX Runtime space (its ``modes`` and quantizer ``options``) holds int8
    configurations that :data:`SATURATION` hits and none measured beside them that it does
    not: static or dynamic int8 with int8 weights, without ``reduce_range: true`` (7-bit
    weights) or ``weight_type: uint8``."""
    int8 = any(m in (QuantMode.STATIC_INT8, QuantMode.DYNAMIC_INT8) for m in modes)
    guarded = True in options.get("reduce_range", ()) or "uint8" in options.get("weight_type", ())
    return int8 and not guarded
