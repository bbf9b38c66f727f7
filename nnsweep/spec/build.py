"""Sweep specifications: YAML in, a frozen :class:`SweepSpec` out.

pydantic validates the user's file here and only here; past :func:`load_spec`
only frozen dataclasses travel. Every error names the field path as written in
the YAML (``space.quant[2]``) and what is allowed.

Example:
    >>> spec = parse_spec({"name": "demo", "model": "digits", "space": {"runtime": ["executorch"]}})
    >>> spec.devices, spec.space.runtimes, spec.budget.trials
    (('host',), ('executorch',), 24)
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnsweep.core import runtimes
from nnsweep.core.errors import SpecError, clip, excerpt
from nnsweep.core.measure import MeasureSettings
from nnsweep.core.metrics import DECODE_PER_TOKEN, PERPLEXITY
from nnsweep.core.quant import OptionValue, QuantMode
from nnsweep.spec.schema import schema, section_values, translate
from nnsweep.spec.settings import (
    _NAME,
    Bridge,
    Budget,
    Objective,
    SearchSettings,
    SearchSpace,
    SweepSpec,
    Tracking,
)
from nnsweep.spec.task import (
    build_constraints,
    build_data,
    build_metrics,
    check_decoder_sections,
    check_objectives,
)

__all__ = ["parse_spec"]


def parse_spec(data: Any, *, source: Path | None = None) -> SweepSpec:
    """Validate a spec given as a mapping (what ``yaml.safe_load`` returns).

    Raises:
        SpecError: naming the field path and what is allowed.
    """
    from pydantic import ValidationError

    if not isinstance(data, Mapping):
        raise SpecError("(top level)", f"a sweep spec is a mapping of keys, got {type(data).__name__}")
    spec_model = schema()
    try:
        raw = spec_model.model_validate(dict(data))
    except ValidationError as exc:
        raise translate(exc) from None
    return _to_dataclasses(raw, source)


def _check_unique(values: list[Any], path: str) -> None:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise SpecError(path, f"lists {excerpt(value)} twice")
        seen.add(value)


def _check_argument(value: str | None, path: str) -> None:
    """A value handed to another program (ssh, adb, a shell on the device) as an argument:
    it must not be read as an option there."""
    if value is None:
        return
    if value.startswith("-"):
        raise SpecError(path, f"{excerpt(value)} starts with '-': it would be read as an option, not a value")
    if not value.strip() or any(ch in value for ch in "\0\n\r"):
        raise SpecError(path, f"{excerpt(value)} is empty or holds a NUL or line break")


def _check_ssh_host(host: str | None, path: str) -> None:
    """``[user@]host`` as ssh and scp both take it: a ``:PORT`` suffix or an ``ssh://`` URI
    reached ssh as a host name ("Could not resolve hostname rpi4.local:2222") and would
    make scp's ``host:path`` a wrong path."""
    if host is None:
        return
    name = host.rpartition("@")[2]
    if name.startswith("["):
        raise SpecError(path, f"{excerpt(host)}: give an IPv6 address without brackets, as ssh takes it")
    if host.startswith("ssh://") or (name.count(":") == 1 and name.rpartition(":")[2].isdigit()):
        raise SpecError(
            path,
            f"{excerpt(host)} names a port or a URI: give [user@]host, and set another port in "
            "~/.ssh/config (Host rpi4 / HostName rpi4.local / Port 2222, then host: pi@rpi4)",
        )


def _to_dataclasses(raw: Any, source: Path | None) -> SweepSpec:
    base = source.parent if source is not None else Path.cwd()
    model, decoder = _model(raw, base)
    space = _space(raw.space)
    metrics = build_metrics(raw, base)
    if decoder:
        check_decoder_sections(raw, space.float_layers)
    objectives = dict(raw.objectives)
    if decoder and "objectives" not in raw.model_fields_set:
        objectives = {PERPLEXITY: "minimize", DECODE_PER_TOKEN: "minimize"}
    check_objectives(objectives, metrics, decoder)
    _check_devices(raw)
    constraints = build_constraints(raw, metrics, decoder)
    bridges = _bridges(raw, base)
    npus = _npus(raw, bridges)
    if decoder and (bridges or npus):  # their tools time one call of one graph
        section = "bridges" if bridges else "npus"
        raise SpecError(section, "a decoder language model is measured on hosts and boards that join Ray, not here")
    storage = raw.storage
    if storage != "journal" and "://" not in storage:
        raise SpecError("storage", "use 'journal' or a database URL such as sqlite:///optuna.db or postgresql://...")

    return SweepSpec(
        name=raw.name,
        model=model,
        devices=tuple(raw.devices),
        objectives=tuple(Objective(m, d) for m, d in objectives.items()),
        space=space,
        budget=Budget(**section_values(Budget, raw.budget, "budget")),
        measure=MeasureSettings(**section_values(MeasureSettings, raw.measure, "measure")),
        tracking=Tracking(**section_values(Tracking, raw.tracking, "tracking")),
        storage=storage,
        state_dir=base / ".nnsweep" / raw.name,
        weights=(base / raw.weights) if raw.weights else None,
        input_shape=tuple(raw.input_shape) if raw.input_shape else None,
        search=SearchSettings(**section_values(SearchSettings, raw.search, "search")),
        bridges=bridges,
        npus=npus,
        source=source,
        metrics=metrics,
        constraints=constraints,
        data=build_data(raw, base),
        decoder=decoder,
    )


def _model(raw: Any, base: Path) -> tuple[str, bool]:
    """The name and the model reference checked, a relative file reference made absolute; and
    whether it is a decoder language model."""
    from nnsweep.models import check_reference

    if not _NAME.fullmatch(raw.name):
        raise SpecError("name", f"{excerpt(raw.name)}: use letters, digits, '_', '-', '.' (at most 64 characters)")
    try:
        kind = check_reference(raw.model if not raw.model.split(":")[0].endswith(".py") else str(base / raw.model))
    except SpecError as exc:
        raise SpecError("model", exc.message) from None
    if raw.kind == "decoder" and kind not in ("decoder", "file", "module"):
        raise SpecError("kind", f"decoder takes a decoder's function (file.py:function), not {raw.model}")
    model = raw.model
    if model.split(":")[0].endswith(".py") and not Path(model.split(":")[0]).is_absolute():
        model = str(base / model)
    return model, kind == "decoder" or raw.kind == "decoder"


def _space(s: Any) -> SearchSpace:
    """``space`` as a :class:`SearchSpace`: each key's type, bounds and repeats were checked by
    the schema; what is checked here is what depends on the runtimes and on other keys."""
    values = section_values(SearchSpace, s, "space")
    known = runtimes.names()
    for i, name in enumerate(values["runtimes"]):
        if name not in known:
            raise SpecError(f"space.runtime[{i}]", f"unknown runtime {excerpt(name)}; allowed: {', '.join(known)}")
    for rt, names in values["backends"].items():
        if rt not in known:
            raise SpecError(f"space.backends.{clip(rt)}", f"unknown runtime; allowed: {', '.join(known)}")
        allowed = runtimes.get(rt).backends
        if not names:
            raise SpecError(f"space.backends.{rt}", "is empty; list at least one backend")
        for i, b in enumerate(names):
            if b not in allowed:
                raise SpecError(
                    f"space.backends.{rt}[{i}]", f"unknown {rt} backend {excerpt(b)}; allowed: {', '.join(allowed)}"
                )
        _check_unique(list(names), f"space.backends.{rt}")
    _check_float_layers(values)
    values["quant_options"] = _quant_options(s)
    return SearchSpace(**values)


def _check_float_layers(space: dict[str, Any]) -> None:
    """Nonzero counts of float layers need a quantized mode and a runtime that keeps layers float."""
    path = "space.float_layers"
    if space["float_layers"] == (0,):
        return
    if not any(m.is_int8 or m.is_grouped for m in space["quant"]):
        raise SpecError(path, "keeps layers of int8 and int4_weight models in float, but space.quant has neither")
    able = [name for name in runtimes.names() if runtimes.get(name).mixed_precision is None]
    if not any(name in able for name in space["runtimes"]):
        raise SpecError(path, f"none of space.runtime keeps layers in float; these can: {', '.join(able) or 'none'}")


def _quant_options(s: Any) -> dict[str, dict[str, tuple[OptionValue, ...]]]:
    """``space.quant_options``: each runtime's own quantizer options to search, checked against
    what the runtime declares, its modes in ``space.quant`` and the combinations it refuses."""
    known = runtimes.names()
    out: dict[str, dict[str, tuple[OptionValue, ...]]] = {}
    for rt, listed in s.quant_options.items():
        path = f"space.quant_options.{clip(rt)}"
        if rt not in known:
            raise SpecError(path, f"unknown runtime; allowed: {', '.join(known)}")
        info = runtimes.get(rt)
        declared = {o.name: o for o in info.quant_options}
        if not declared:
            have = [n for n in known if runtimes.get(n).quant_options]
            raise SpecError(path, f"{rt} has no quantizer options of its own; these have: {', '.join(have) or 'none'}")
        if not listed:
            raise SpecError(path, f"is empty; list values of {', '.join(declared)}")
        modes = [QuantMode(m) for m in s.quant]
        for name, values in listed.items():
            option = declared.get(name)
            if option is None:
                raise SpecError(
                    f"{path}.{clip(name)}", f"unknown {rt} quantizer option; allowed: {', '.join(declared)}"
                )
            if not values:
                raise SpecError(f"{path}.{name}", f"is empty; list at least one of {_values(option.values)}")
            for i, value in enumerate(values):
                if isinstance(option.default, bool) and not isinstance(value, bool):
                    raise SpecError(f"{path}.{name}[{i}]", f"must be true or false (unquoted), got {excerpt(value)}")
                if value not in option.values or type(value) is not type(option.default):
                    raise SpecError(
                        f"{path}.{name}[{i}]", f"unknown value {excerpt(value)}; allowed: {_values(option.values)}"
                    )
            _check_unique(list(values), f"{path}.{name}")
            if not any(m in option.modes for m in modes):
                applies = ", ".join(m.value for m in QuantMode if m in option.modes)
                raise SpecError(f"{path}.{name}", f"applies to {applies}, which space.quant does not list")
        out[rt] = {name: tuple(values) for name, values in listed.items()}
        for mode in modes:  # some combination of what is listed must be one the toolchain takes
            options = info.options_for(mode)
            combos = itertools.product(*(out[rt].get(o.name, (o.default,)) for o in options))
            chosen = [dict(zip((o.name for o in options), combo, strict=True)) for combo in combos]
            refusals = [info.refusal(c) for c in chosen]
            if options and all(refusals):
                raise SpecError(path, f"every {mode.value} combination listed is refused: {refusals[0]}")
    return out


def _values(values: tuple[OptionValue, ...]) -> str:
    return ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)


def _check_devices(raw: Any) -> None:
    for i, device in enumerate(raw.devices):
        if not _NAME.fullmatch(device):
            raise SpecError(f"devices[{i}]", f"{excerpt(device)} is not a device name (letters, digits, '_', '-', '.')")
    _check_unique(list(raw.devices), "devices")
    if raw.input_shape is not None:
        from nnsweep.models import check_input_shape

        check_input_shape(tuple(raw.input_shape), "input_shape")


def _bridges(raw: Any, base: Path) -> dict[str, Bridge]:
    bridges = {}
    for name, b in raw.bridges.items():
        path = f"bridges.{clip(name)}"
        if name not in raw.devices:
            raise SpecError(path, f"{excerpt(name)} is not in devices {excerpt(raw.devices)}")
        if b.transport == "ssh" and not b.host:
            raise SpecError(f"{path}.host", "is required for transport ssh (user@host)")
        if b.transport == "adb" and b.host:
            raise SpecError(f"{path}.host", "is for ssh; adb devices are chosen by serial")
        _check_argument(b.host, f"{path}.host")
        _check_ssh_host(b.host, f"{path}.host")
        _check_argument(b.serial, f"{path}.serial")
        _check_argument(b.workdir, f"{path}.workdir")
        for runtime, tool in b.tools.items():
            _check_argument(tool, f"{path}.tools.{clip(runtime)}")
        for runtime in (*b.tools, *b.push_tools):
            if runtime not in ("torch", "litert"):
                raise SpecError(
                    f"{path}.tools.{clip(runtime)}", "no benchmark tool is known for it; known: torch, litert"
                )
        missing = [rt for rt in b.push_tools if rt not in b.tools and b.transport == "ssh"]
        if missing:
            raise SpecError(f"{path}.tools.{missing[0]}", "give the path on the device to push the tool to")
        for runtime, local in b.push_tools.items():
            if not (base / local).is_file():
                raise SpecError(f"{path}.push_tools.{runtime}", f"file {excerpt(local)} does not exist")
        values = section_values(Bridge, b, path)
        values["push_tools"] = {rt: str(base / p) for rt, p in b.push_tools.items()}
        bridges[name] = Bridge(**values)
    return bridges


def _npus(raw: Any, bridges: dict[str, Bridge]) -> dict[str, str]:
    npus: dict[str, str] = {}
    for name, npu in raw.npus.items():
        if name not in raw.devices:
            raise SpecError(
                f"npus.{clip(name)}", f"{excerpt(name)} is not in devices ({excerpt(', '.join(raw.devices))})"
            )
        if name in bridges:
            raise SpecError(f"npus.{name}", "is already a bridge device")
        if npu.target not in runtimes.ETHOS_U_TARGETS:
            targets = ", ".join(runtimes.ETHOS_U_TARGETS)
            raise SpecError(
                f"npus.{name}.target", f"unknown Ethos-U configuration {excerpt(npu.target)}; allowed: {targets}"
            )
        npus[name] = npu.target
    return npus
