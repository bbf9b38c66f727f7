"""What a device's space can hold, runtime by runtime, and how large each runtime's space is
there: what ``nnsweep devices`` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nnsweep.agents import Capabilities
from nnsweep.core import runtimes
from nnsweep.core.config import Calibration, Granularity, Interface, QuantMode
from nnsweep.core.errors import SpecError
from nnsweep.spec import IntRange
from nnsweep.spec.settings import DEFAULT_GROUP_SIZES
from nnsweep.sweep.space import DeviceSpace, RuntimeChoices, default_orders, space_size

__all__ = ["accepted_values", "runtime_space_size", "saturation_notice"]


def accepted_values(available: Mapping[str, tuple[str, ...]], cores: int) -> dict[str, Any]:
    """What a device's space can hold, runtime by runtime: ``nnsweep devices`` prints it.

    Args:
        available: runtime -> the backends that load on the device (its capabilities).
        cores: the device's cores (``threads`` goes up to them).

    Returns:
        ``{"runtime": {name: {"backends", "quant", "calibration", "partition_limits",
        "float_layers", "whole_model", "quant_options", "refused_options", "size"}},
        "threads": [1, cores]}``; ``quant`` maps each mode to the granularities it allows
        (empty for fp32); ``float_layers`` is ``True`` or the reason the runtime cannot keep
        layers float; ``quant_options`` maps each of the runtime's own quantizer options to
        its ``values`` (the default first), ``modes`` and ``doc``; ``refused_options`` says
        which combinations its toolchain refuses; ``size`` counts the configurations
        (:func:`runtime_space_size`).
    """

    def modes(table: Mapping[QuantMode, frozenset[Granularity]]) -> dict[str, list[str]]:
        return {m.value: sorted(g.value for g in grans) for m, grans in table.items()}

    out: dict[str, Any] = {}
    for name, backends in available.items():
        try:
            info = runtimes.get(name)
        except SpecError:
            continue  # a runtime this nnsweep does not know (a newer agent): nothing to say
        out[name] = {
            "backends": list(backends),
            "quant": modes(info.modes),
            "calibration": sorted(c.value for c in info.calibrations),
            "partition_limits": info.delegates,
            # True: int8 configurations may keep layers float (space.float_layers); else why not
            "float_layers": True if info.mixed_precision is None else info.mixed_precision,
            # int8 modes in which it cannot, though it can in others, each with why
            "float_layers_refused": {m.value: why for m, why in info.float_layers_refused.items()},
            # a backend that takes the whole model allows its own modes when it comes first
            "whole_model": {b: modes(t) for b, t in info.whole_model.items() if b in backends},
            # its own quantizer options (space.quant_options), the default value first
            "quant_options": {
                o.name: {"values": list(o.values), "modes": [m.value for m in QuantMode if m in o.modes], "doc": o.doc}
                for o in info.quant_options
            },
            "refused_options": [r.reason for r in info.refused_options],
            "size": runtime_space_size(name, tuple(backends)),
        }
    return {"runtime": out, "threads": [1, max(1, cores)]}


def runtime_space_size(name: str, backends: tuple[str, ...]) -> int | None:
    """How many configurations runtime ``name`` can be deployed in on a device that has
    ``backends``: every mode, granularity, calibration, interface and quantizer option
    value it takes, with its default backend order, one thread count, default partition
    limits and no layer kept float (``None``: more than :func:`space_size` counts)."""
    info = runtimes.get(name)
    orders = default_orders(name, backends)
    if not orders:
        return 0
    int8 = [grans for mode, grans in info.modes.items() if mode.is_int8]
    granularities = tuple(g for g in Granularity if all(g in allowed for allowed in int8))
    choices = RuntimeChoices(
        modes=tuple(info.modes),
        granularities=granularities or tuple(sorted(set().union(*int8), key=str)) or (Granularity.PER_CHANNEL,),
        calibrations=tuple(sorted(info.calibrations)) or (Calibration.MINMAX,),
        interfaces=(Interface.CORE, Interface.FULL) if info.full_interface else (Interface.CORE,),
        orders=orders,
        max_partitions=(0,),
        min_nodes=IntRange(1, 1),
        delegates=info.delegates,
        options={o.name: o.values for o in info.quant_options},
        group_sizes=DEFAULT_GROUP_SIZES,
    )
    return space_size(DeviceSpace(device="", runtimes=(name,), choices={name: choices}, threads=(1,)))


def saturation_notice(caps: Capabilities, space: DeviceSpace) -> str | None:
    """What a sweep says before it starts when a device is an x86 CPU without VNNI and its space
    holds ONNX Runtime int8 configurations that can saturate there, with nothing measured
    beside them that does not (:func:`~nnsweep.core.options.unguarded_saturation`)."""
    from nnsweep.core.options import SATURATION, saturating_int8, unguarded_saturation

    choices = space.choices.get("onnxruntime")
    if choices is None or not saturating_int8(caps.arch, caps.int8_flags):
        return None
    if not unguarded_saturation(choices.modes, choices.options):
        return None
    return (
        f"{caps.device}: an x86 CPU without VNNI: {SATURATION}; add "
        "space.quant_options.onnxruntime.reduce_range: [false, true] to measure 7-bit weights beside them"
    )
