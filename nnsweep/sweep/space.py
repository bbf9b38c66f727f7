"""The search space of one device, and the Optuna trial -> DeploymentConfig mapping.

A device's space is the sweep's space narrowed to what the device has (its
agent's capabilities). It is define-by-run with conditional dimensions:
granularity only for int8 modes, calibration and interface only for static
modes, the weight group size only for ``int4_weight``, partition limits only
where the runtime delegates, a runtime's own quantizer options
(``onnxruntime.quant_format``) only for the modes they apply to and only in the
combinations its toolchain takes. Each runtime's
dimensions carry the runtime in their name (``executorch.quant``), so no
categorical ever changes its choices within a study (Optuna raises on that).

A backend preference order is one categorical over whole orders
(``"xnnpack>portable"``): with the handful of backends a runtime has, the
orders are few, and TPE models them as plain categories.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nnsweep.core import runtimes
from nnsweep.core.config import (
    Calibration,
    DeploymentConfig,
    Granularity,
    Interface,
    PartitionLimits,
    QuantConfig,
    QuantMode,
)
from nnsweep.core.errors import SpecError
from nnsweep.core.options import draw
from nnsweep.core.quant import OptionValue
from nnsweep.spec import IntRange, SweepSpec

if TYPE_CHECKING:
    import optuna

__all__ = [
    "DeviceSpace",
    "RuntimeChoices",
    "baseline_configs",
    "default_orders",
    "device_space",
    "keeps_float",
    "mode_starts",
    "params_for",
    "space_size",
    "suggest",
    "untried",
]

ORDER_SEP = ">"


@dataclass(frozen=True)
class RuntimeChoices:
    """What one runtime may choose on one device."""

    modes: tuple[QuantMode, ...]
    granularities: tuple[Granularity, ...]
    calibrations: tuple[Calibration, ...]
    interfaces: tuple[Interface, ...]
    orders: tuple[str, ...]
    max_partitions: tuple[int, ...]
    min_nodes: IntRange
    delegates: bool
    float_layers: tuple[int, ...] = (0,)
    options: Mapping[str, tuple[OptionValue, ...]] = field(default_factory=dict)
    """The runtime's own quantizer options to search, each with its values (the spec's
    ``space.quant_options``); an option not here stays at its default."""
    group_sizes: tuple[int, ...] = (QuantConfig.group_size or 32,)
    """Input features per 4-bit weight scale, for ``int4_weight`` (the spec's ``space.group_size``)."""


LayersFor = Callable[[str, Granularity | None, int, int | None], tuple[str, ...]]
"""(runtime, weight granularity, K, int4_weight's group size) -> the K layers to keep in float, most sensitive first."""


def placeholder_layers(runtime: str, granularity: Granularity | None, k: int, _: int | None = None) -> tuple[str, ...]:
    """K distinct stand-in names: enough to count and compare configurations (:func:`space_size`)."""
    return tuple(f"layer{i}" for i in range(k))


@dataclass(frozen=True)
class DeviceSpace:
    """The sweep's space on one device.

    Args:
        layers_for: names the layers a float-layer count keeps float (the coordinator's
            cached sensitivity ranking; stand-in names where only counting matters).
    """

    device: str
    runtimes: tuple[str, ...]
    choices: Mapping[str, RuntimeChoices]
    threads: tuple[int, ...]
    layers_for: LayersFor = placeholder_layers


def default_orders(runtime: str, available: tuple[str, ...]) -> tuple[str, ...]:
    """The runtime's default backend order as a device that has ``available`` runs it (none: empty)."""
    return _orders(runtime, None, available)


def _orders(runtime: str, wanted: tuple[str, ...] | None, available: tuple[str, ...]) -> tuple[str, ...]:
    info = runtimes.get(runtime)
    if wanted is None:
        base = tuple(b for b in (info.default_backends or info.backends) if b in available)
        return (ORDER_SEP.join(base),) if base else ()
    usable = tuple(b for b in wanted if b in available)
    if not usable:
        return ()
    seen: dict[str, None] = {}
    for perm in itertools.permutations(usable):
        if info.fallback in perm:  # nothing after the fallback is ever reached
            perm = perm[: perm.index(info.fallback) + 1]
        seen.setdefault(ORDER_SEP.join(perm), None)
    return tuple(seen)


def device_space(
    spec: SweepSpec,
    device: str,
    available: Mapping[str, tuple[str, ...]],
    cores: int,
    layers_for: LayersFor = placeholder_layers,
) -> DeviceSpace:
    """Narrow ``spec.space`` to a device that offers ``available`` (runtime -> backends).

    The fp32 mode is always included: it is the baseline that the accuracy
    constraint and the speedups refer to.

    Raises:
        SpecError: the device offers none of the sweep's runtimes.
    """
    s = spec.space
    choices: dict[str, RuntimeChoices] = {}
    for name in s.runtimes:
        if name not in available:
            continue
        info = runtimes.get(name)
        orders = _orders(name, s.backends.get(name), available[name])
        if not orders:
            continue
        calibrations = tuple(c for c in s.calibration if c in info.calibrations)
        npu_only = all(o.split(ORDER_SEP)[0] in runtimes.ETHOS_U_TARGETS for o in orders)
        built = info.decoder_modes if spec.decoder else info.modes  # a decoder's converter builds fewer
        modes = [m for m in s.quant if m in built and (m is not QuantMode.STATIC_INT8 or calibrations)]
        if QuantMode.FP32 not in modes:
            modes.insert(0, QuantMode.FP32)
        has_full = bool(info.full_interface)
        # Only the granularities every int8 mode of the runtime allows (Arm NN: per tensor).
        int8 = [info.modes[m] for m in modes if m.is_int8]
        granularities = tuple(g for g in s.granularity if all(g in allowed for allowed in int8))
        choices[name] = RuntimeChoices(
            modes=tuple(modes),
            granularities=granularities or tuple(sorted(set().union(*int8), key=str)) or s.granularity,
            calibrations=calibrations or tuple(sorted(info.calibrations))[:1],  # none: no static int8
            interfaces=tuple(i for i in s.interface if i is Interface.CORE or has_full) or (Interface.CORE,),
            orders=orders,
            max_partitions=s.max_delegated_partitions,
            min_nodes=s.min_nodes_per_partition,
            delegates=info.delegates,
            float_layers=s.float_layers if info.mixed_precision is None and not npu_only else (0,),
            options=dict(s.quant_options.get(name, {})),
            group_sizes=s.group_size,
        )
    if not choices:
        raise SpecError("space.runtime", _unservable(spec, device, available))
    threads = tuple(t for t in s.threads if t <= max(cores, 1)) or (min(s.threads),)
    return DeviceSpace(device=device, runtimes=tuple(choices), choices=choices, threads=threads, layers_for=layers_for)


def _unservable(spec: SweepSpec, device: str, available: Mapping[str, tuple[str, ...]]) -> str:
    """Why ``device`` can serve none of the sweep's runtimes, and what to write instead."""
    reasons = []
    for name in spec.space.runtimes:
        if name not in available:
            reasons.append(f"{name} does not load there")
            continue
        wanted = spec.space.backends.get(name)
        order = ", ".join(wanted or runtimes.get(name).default_backends)
        offered = ", ".join(available[name])
        reasons.append(
            f"{name} offers {offered} there, none of which its order ({order}"
            + ("" if wanted else ", the default")
            + f") names: write space.backends: {{{name}: [{offered}]}}"
        )
    has = ", ".join(f"{rt} ({', '.join(b)})" for rt, b in available.items()) or "nothing"
    return f"device {device!r} can run none of the sweep's runtimes: {'; '.join(reasons)} (it has: {has})"


def _pick(trial: optuna.Trial, name: str, options: tuple[Any, ...]) -> Any:
    if len(options) == 1:
        return options[0]
    values = [o.value if hasattr(o, "value") else o for o in options]
    chosen = trial.suggest_categorical(name, values)
    return options[values.index(chosen)]


def keeps_float(runtime: str, mode: QuantMode, c: RuntimeChoices) -> bool:
    """Whether a ``mode`` configuration of ``runtime`` takes a float-layer count from ``c``."""
    return c.float_layers != (0,) and runtimes.get(runtime).keeps_float(mode)


def suggest(trial: optuna.Trial, space: DeviceSpace) -> DeploymentConfig:
    """Ask ``trial`` for one configuration of ``space``.

    Raises:
        SpecError: the sampled combination is not valid for the runtime (the
            caller fails that trial; with the filtering above this should not happen).
    """
    runtime = _pick(trial, "runtime", space.runtimes)
    c = space.choices[runtime]
    order = _pick(trial, f"{runtime}.backends", c.orders)
    backends = tuple(order.split(ORDER_SEP))
    prefix, modes, granularities = _mode_choices(runtime, c, backends)
    mode: QuantMode = _pick(trial, f"{prefix}.quant", modes)
    granularity = _pick(trial, f"{prefix}.granularity", granularities) if mode.is_int8 else None
    calibration = _pick(trial, f"{runtime}.calibration", c.calibrations) if mode is QuantMode.STATIC_INT8 else None
    interface = _pick(trial, f"{runtime}.interface", c.interfaces) if mode.is_static else None
    group_size = _pick(trial, f"{runtime}.group_size", c.group_sizes) if mode.is_grouped else None
    if interface is Interface.FULL and mode not in runtimes.get(runtime).full_interface:
        interface = Interface.CORE
    options = _options(runtime, mode, c, lambda name, values: _pick(trial, name, values))
    threads = _pick(trial, "threads", space.threads)  # before the limits: they refine a known combination
    limits = PartitionLimits()
    fallback = runtimes.get(runtime).fallback
    if c.delegates and backends[0] != fallback:
        max_p = _pick(trial, f"{runtime}.max_delegated_partitions", c.max_partitions)
        if c.min_nodes.low == c.min_nodes.high:
            min_n = c.min_nodes.low
        else:
            min_n = trial.suggest_int(f"{runtime}.min_nodes_per_partition", c.min_nodes.low, c.min_nodes.high)
        limits = PartitionLimits(max_p, min_n)
    float_layers: tuple[str, ...] = ()
    if keeps_float(runtime, mode, c):
        k = _pick(trial, f"{runtime}.float_layers", c.float_layers)
        float_layers = space.layers_for(runtime, granularity, k, group_size) if k else ()
    quant = QuantConfig(
        mode=mode,
        granularity=granularity,
        calibration=calibration,
        interface=interface,
        group_size=group_size,
        float_layers=float_layers,
        options=options,
    )
    return DeploymentConfig(runtime, backends, quant, limits, threads)


def _options(
    runtime: str, mode: QuantMode, c: RuntimeChoices, choose: Callable[[str, tuple[OptionValue, ...]], OptionValue]
) -> tuple[tuple[str, OptionValue], ...]:
    """The runtime's quantizer options for ``mode``, each chosen by ``choose(parameter, values)``
    among the combinations its toolchain takes (:func:`nnsweep.core.options.draw`)."""
    info = runtimes.get(runtime)
    declared = info.options_for(mode)
    return draw(runtime, declared, info.refused_options, c.options, choose) if declared else ()


def _mode_choices(
    runtime: str, c: RuntimeChoices, backends: tuple[str, ...]
) -> tuple[str, tuple[QuantMode, ...], tuple[Granularity, ...]]:
    """Parameter prefix, modes and granularities for this order.

    A backend that takes the whole model (NNAPI) allows fewer modes; its choices get
    their own parameter names (``torch.nnapi.quant``), so no parameter ever changes
    its choices within a study.
    """
    info = runtimes.get(runtime)
    table = info.modes_for(backends)
    if table is info.modes:
        return runtime, c.modes, c.granularities
    modes = tuple(m for m in c.modes if m in table) or (QuantMode.FP32,)
    int8 = [g for m, g in table.items() if m.is_int8]
    grans = tuple(g for g in c.granularities if all(g in allowed for allowed in int8))
    return f"{runtime}.{backends[0]}", modes, grans or (Granularity.PER_TENSOR,)


def params_for(config: DeploymentConfig, space: DeviceSpace) -> dict[str, Any]:
    """The trial parameters that make :func:`suggest` return ``config`` (for ``enqueue_trial``)."""
    rt = config.runtime
    c = space.choices[rt]
    q = config.quant
    params: dict[str, Any] = {}

    def put(name: str, options: tuple[Any, ...], value: Any) -> None:
        # A value outside the choices cannot be enqueued (Optuna raises); the sampler picks instead.
        if len(options) > 1 and value in options:
            params[name] = value.value if hasattr(value, "value") else value

    put("runtime", space.runtimes, rt)
    prefix, modes, granularities = _mode_choices(rt, c, config.backends)
    put(f"{prefix}.quant", modes, q.mode)
    if q.granularity is not None:
        put(f"{prefix}.granularity", granularities, q.granularity)
    if q.calibration is not None:
        put(f"{rt}.calibration", c.calibrations, q.calibration)
    if q.interface is not None:
        put(f"{rt}.interface", c.interfaces, q.interface)
    if q.group_size is not None:
        put(f"{rt}.group_size", c.group_sizes, q.group_size)
    given = runtimes.get(rt).option_values(q)

    def option(name: str, values: tuple[OptionValue, ...]) -> OptionValue:
        value = given[name.split(".", 1)[1].split("[", 1)[0]]
        put(name, values, value)
        return value

    with contextlib.suppress(SpecError):  # options the space cannot hold: the sampler picks
        _options(rt, q.mode, c, option)
    order = next((o for o in c.orders if _order_matches(o, config)), c.orders[0])
    put(f"{rt}.backends", c.orders, order)
    if c.delegates and order.split(ORDER_SEP)[0] != runtimes.get(rt).fallback:
        put(f"{rt}.max_delegated_partitions", c.max_partitions, config.partitions.max_delegated_partitions)
        min_n = config.partitions.min_nodes_per_partition
        if c.min_nodes.low != c.min_nodes.high and c.min_nodes.low <= min_n <= c.min_nodes.high:
            params[f"{rt}.min_nodes_per_partition"] = min_n
    put("threads", space.threads, config.threads)
    if keeps_float(rt, q.mode, c):
        put(f"{rt}.float_layers", c.float_layers, len(q.float_layers))
    return params


def _order_matches(order: str, config: DeploymentConfig) -> bool:
    try:
        candidate = DeploymentConfig(config.runtime, tuple(order.split(ORDER_SEP)), config.quant, config.partitions, 1)
    except SpecError:
        return False  # this order cannot run the config's mode at all
    return candidate.backends == config.backends


def baseline_configs(space: DeviceSpace) -> list[DeploymentConfig]:
    """What every device measures first: the fp32 baseline (``torch`` eager when it is in
    the space, else the first runtime), then each runtime's default deployment (fp32,
    its first backend order that runs fp32, no partition limits).

    A device that runs no fp32 at all (an NPU) gets its runtimes' first int8
    deployment instead; the caller marks none of them as the fp32 baseline.
    """
    threads = space.threads[0]
    order = sorted(space.runtimes, key=lambda r: (r != "torch", space.runtimes.index(r)))
    configs = []
    for rt in order:
        info = runtimes.get(rt)
        orders = [tuple(o.split(ORDER_SEP)) for o in space.choices[rt].orders]
        floats = [o for o in orders if QuantMode.FP32 in info.modes_for(o)]
        if floats:
            quant = QuantConfig(QuantMode.FP32)
            backends = floats[0]
        else:
            backends = orders[0]
            quant = QuantConfig(next(m for m in space.choices[rt].modes if m in info.modes_for(backends)))
        configs.append(DeploymentConfig(rt, backends, quant, PartitionLimits(), threads))
    return configs


def mode_starts(space: DeviceSpace) -> list[DeploymentConfig]:
    """Each runtime's default deployment in each of its other quantization modes.

    What a device measures after :func:`baseline_configs`, before the sampler proposes:
    mode by mode (in :class:`QuantMode` order), runtime by runtime, the runtime's first
    backend order that runs the mode, :class:`QuantConfig`'s default granularity,
    calibration and interface where the space has them (else its first), no partition
    limits, no float layers. Quantization moves latency and accuracy most, and partition
    limits mostly give byte-identical artifacts, hence these starts
    (benchmarks/results/search.md measures them).
    """
    threads = space.threads[0]
    done = {c.digest() for c in baseline_configs(space)}
    configs = []
    for mode in QuantMode:
        for rt in space.runtimes:
            c = space.choices[rt]
            if mode not in c.modes:
                continue
            for order in c.orders:
                backends = tuple(order.split(ORDER_SEP))
                _, modes, granularities = _mode_choices(rt, c, backends)
                if mode not in modes:
                    continue
                quant = QuantConfig(
                    mode,
                    granularity=_default(granularities, Granularity.PER_CHANNEL) if mode.is_int8 else None,
                    calibration=_default(c.calibrations, Calibration.MINMAX) if mode is QuantMode.STATIC_INT8 else None,
                    interface=_default(c.interfaces, Interface.CORE) if mode.is_static else None,
                    group_size=_default(c.group_sizes, QuantConfig.group_size) if mode.is_grouped else None,
                )
                try:
                    config = DeploymentConfig(rt, backends, quant, PartitionLimits(), threads)
                except SpecError:
                    continue
                if config.digest() not in done:
                    done.add(config.digest())
                    configs.append(config)
                break
    return configs


def _default(options: tuple[Any, ...], default: Any) -> Any:
    return default if default in options else options[0]


class _PathTrial:
    """Stands in for an Optuna trial: answers each ``suggest_*`` call with the choice the
    current path names, and records how many choices each call had."""

    def __init__(self, path: list[int]) -> None:
        self.path = path
        self.widths: list[int] = []

    def _choose(self, count: int) -> int:
        i = len(self.widths)
        self.widths.append(count)
        return self.path[i] if i < len(self.path) else 0

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return choices[self._choose(len(choices))]

    def suggest_int(self, name: str, low: int, high: int) -> int:
        return low + self._choose(high - low + 1)


def space_size(space: DeviceSpace, limit: int = 20_000) -> int | None:
    """How many distinct configurations ``space`` holds (``None``: more than ``limit``).

    Walks every path through :func:`suggest` (its choices depend on earlier ones), so
    combinations that :func:`suggest` maps to one configuration are counted once. Layers
    kept float are counted by their number (:func:`placeholder_layers`): counting must not
    wait for a runtime's ranking (minutes on a large model, measured when a trial first
    needs it), and K of a ranking are K distinct layers whichever they are.
    """
    space = dataclasses.replace(space, layers_for=placeholder_layers)
    digests: set[str] = set()
    path: list[int] = []
    for _ in range(limit * 4):
        trial = _PathTrial(path)
        with contextlib.suppress(SpecError):  # an invalid combination is no configuration
            digests.add(suggest(trial, space).digest())  # type: ignore[arg-type]
        if len(digests) > limit:
            return None
        path = [trial.path[i] if i < len(trial.path) else 0 for i in range(len(trial.widths))]
        while path and path[-1] + 1 >= trial.widths[len(path) - 1]:  # odometer: carry
            path.pop()
        if not path:
            return len(digests)
        path[-1] += 1
    return None


class _RandomTrial(_PathTrial):
    """A :class:`_PathTrial` whose every choice is drawn at random."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__([])
        self.rng = rng

    def _choose(self, count: int) -> int:
        self.widths.append(count)
        return self.rng.randrange(count)


def untried(
    space: DeviceSpace, tried: Callable[[DeploymentConfig], bool], rng: random.Random, draws: int = 200
) -> DeploymentConfig | None:
    """A configuration of ``space`` for which ``tried`` is false, drawn at random (``None``:
    none was found, so the space is, as far as can be told, fully tried).

    Random paths first; a finite space is then searched whole, so its last untried
    configuration is found too.
    """
    for _ in range(draws):
        with contextlib.suppress(SpecError):
            config = suggest(_RandomTrial(rng), space)  # type: ignore[arg-type]
            if not tried(config):
                return config
    if space_size(space) is None:
        return None
    path: list[int] = []
    while True:  # the odometer walk of space_size, stopping at the first untried configuration
        trial = _PathTrial(path)
        with contextlib.suppress(SpecError):
            config = suggest(trial, space)  # type: ignore[arg-type]
            if not tried(config):
                return config
        path = [trial.path[i] if i < len(trial.path) else 0 for i in range(len(trial.widths))]
        while path and path[-1] + 1 >= trial.widths[len(path) - 1]:
            path.pop()
        if not path:
            return None
        path[-1] += 1
