"""``nnsweep devices``: the devices of this machine or a cluster, and what each can run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nnsweep.cli._output import EXIT_OK, _usage_error, results
from nnsweep.cli._ray import _ray_client_env
from nnsweep.core.errors import SpecError
from nnsweep.core.quant import QuantConfig, QuantMode


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep devices``."""
    parser = subparsers.add_parser(
        "devices",
        help="list the devices a cluster offers, with what each can run",
        description="Start each device's agent, probe it, and print its capabilities.",
    )
    parser.add_argument("--address", help="a Ray cluster (HOST:PORT); default: this machine only")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    if args.address:
        try:
            _ray_client_env(args.address)
        except SpecError as exc:
            return _usage_error(exc, {})
        from nnsweep.execution.ray_cluster import RayExecutor

        executor = RayExecutor(address=args.address)
        try:
            found = executor.probe(executor.cluster_devices())
        finally:
            executor.shutdown()
        caps = list(found.values())
    else:
        from nnsweep.agents import LocalTransport

        caps = [LocalTransport().probe("host")]
    from nnsweep.sweep.accepted import accepted_values

    if args.json:
        out = [{**c.to_dict(), "space": accepted_values(c.runtimes, c.cores)} for c in caps]
        results().write(json.dumps(out) + "\n")
        return EXIT_OK
    for c in caps:
        results().write(f"{c.device}: {c.summary()}, {c.memory_mb} MB, machine {c.machine}, transport {c.transport}\n")
        results().write(_int8_line(c))
        results().write(_space_lines(accepted_values(c.runtimes, c.cores)))
        for runtime, need in c.left_out.items():
            results().write(f"    {runtime}: left out, its measuring process needs {need} MB with headroom\n")
        for runtime, why in c.refused.items():
            results().write(f"    {runtime}: refused, {why}\n")
    return EXIT_OK


def _int8_line(caps: Any) -> str:
    """The CPU flags that decide how int8 runs on the device, and what they mean for ONNX Runtime."""
    from nnsweep.core.options import SATURATION, saturating_int8

    if caps.int8_flags is None:
        return "    int8 flags: unknown (an emulated or remote CPU that does not say)\n"
    shown = ", ".join(caps.int8_flags) or "none (no AVX2, VNNI, dot product or i8mm)"
    if not saturating_int8(caps.arch, caps.int8_flags):
        return f"    int8 flags: {shown}\n"
    line = f"    int8 flags: {shown} (no VNNI)\n"
    if "onnxruntime" in caps.runtimes:
        line += f"    {SATURATION}; sweep space.quant_options.onnxruntime.reduce_range: [false, true]\n"
    return line


def _space_lines(values: dict[str, Any]) -> str:
    """What a device's ``space:`` accepts, as the lines ``nnsweep devices`` prints."""

    def modes(table: dict[str, list[str]]) -> str:
        # a grouped mode's choice is its group size (space.group_size), the same on every runtime
        sizes = "/".join(f"g{n}" for n in QuantConfig.GROUP_SIZES)
        return ", ".join(
            f"{m} ({'/'.join(g)})" if g else f"{m} ({sizes})" if QuantMode(m).is_grouped else m
            for m, g in table.items()
        )

    lines = []
    for runtime, v in values["runtime"].items():
        lines.append(f"    {runtime}: backends {', '.join(v['backends'])}")
        lines.append(f"        quant: {modes(v['quant'])}")
        for backend, table in v["whole_model"].items():
            lines.append(f"        quant with {backend} first: {modes(table)}")
        if v["calibration"]:
            lines.append(f"        calibration: {', '.join(v['calibration'])}")
        limits = "max_delegated_partitions, min_nodes_per_partition" if v["partition_limits"] else "do not apply"
        lines.append(f"        partition limits: {limits}")
        floats, refused = v.get("float_layers"), v.get("float_layers_refused") or {}
        if floats is not True:
            lines.append(f"        float_layers: no: {floats}")
        else:
            can = [m for m in v["quant"] if (QuantMode(m).is_int8 or QuantMode(m).is_grouped) and m not in refused]
            int4 = ", int4_weight" if QuantMode.INT4_WEIGHT.value in can else ""
            lines.append(f"        float_layers: yes ({', '.join(can) if refused else 'int8 modes' + int4})")
            lines.extend(f"        float_layers: not in {mode}: {why}" for mode, why in refused.items())
        for name, option in v.get("quant_options", {}).items():
            shown_values = [str(x).lower() if isinstance(x, bool) else str(x) for x in option["values"]]
            shown = " | ".join([f"{shown_values[0]} (default)", *shown_values[1:]])
            lines.append(f"        quant_options.{name}: {shown}; {', '.join(option['modes'])}")
        for reason in v.get("refused_options", []):
            lines.append(f"        refused: {reason}")
        if v.get("size") is not None:
            lines.append(
                f"        space: {v['size']} configurations (all of the above in its default backend order, "
                "one thread count, no layer float)"
            )
    low, high = values["threads"]
    lines.append(f"    threads: {low} to {high}")
    return "".join(line + "\n" for line in lines)
