"""``nnsweep best``: the chosen configuration of a sweep, per device or across devices."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from nnsweep.cli._output import EXIT_FAILED, EXIT_OK, _usage_error, results
from nnsweep.cli._spec_args import _SPEC_OPTIONS
from nnsweep.core.errors import SpecError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep best SPEC``."""
    parser = subparsers.add_parser(
        "best",
        help="print the best configuration of a finished sweep (input for `nnsweep bench --config`)",
        description="Print the chosen configuration per device from the sweep's Optuna studies.",
    )
    parser.add_argument("spec", type=Path)
    parser.add_argument("--device", help="only this device (default: every device of the spec)")
    parser.add_argument("--format", choices=["yaml", "json"], default="yaml")
    parser.add_argument(
        "--across-devices",
        action="store_true",
        help="one configuration for every device: feasible on each, the smallest worst-case slowdown "
        "against each device's own best",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.spec import load_spec
    from nnsweep.sweep.front import best_across_devices, best_trial
    from nnsweep.sweep.loop import open_study, study_records

    try:
        spec = load_spec(args.spec)
        if args.device is not None and args.device not in spec.devices:
            raise SpecError("--device", f"{args.device!r} is not a device of {spec.name}: {', '.join(spec.devices)}")
        if args.device is not None and args.across_devices:
            raise SpecError("--across-devices", "chooses for every device of the spec: leave out --device")
    except SpecError as exc:
        return _usage_error(exc, _SPEC_OPTIONS)
    devices = [args.device] if args.device else list(spec.devices)
    records = {device: study_records(open_study(spec, device, create=False)) for device in devices}
    payload: Any
    if args.across_devices:
        shared = best_across_devices(records, spec.objectives)
        if shared is None:
            sys.stderr.write(f"nnsweep best: no configuration of {spec.name} is feasible on every device\n")
            return EXIT_FAILED
        payload = {
            "config": shared.config.to_dict(),
            "worst_slowdown": round(shared.worst_slowdown, 4),
            "devices": {
                c.device: {
                    "trial": c.record.number,
                    shared.metric: c.record.metrics[shared.metric],
                    f"own_best_{shared.metric}": c.own_best.metrics[shared.metric],
                    "own_best_config": c.own_best.config.label(),
                    "slowdown": round(c.slowdown, 4),
                    # latencies timed under emulation or estimated by a compiler: no real device's figure
                    "emulated": c.record.emulated or c.own_best.emulated,
                    "estimated": c.record.estimated or c.own_best.estimated,
                }
                for c in shared.costs
            },
        }
    else:
        chosen: dict[str, Any] = {}
        for device in devices:
            best = best_trial(records[device], spec.objectives)
            if best is None:
                sys.stderr.write(f"nnsweep best: {device} has no feasible measured trial yet\n")
                return EXIT_FAILED
            chosen[device] = {
                "trial": best.number,
                "metrics": dict(best.metrics),
                "config": best.config.to_dict(),
                # a compiler's estimate (Ethos-U) or a latency measured under emulation: no real device's figure
                "estimated": best.estimated,
                "emulated": best.emulated,
            }
        # One device: the config alone, so the output feeds `nnsweep bench --config` directly.
        payload = chosen[devices[0]] if len(devices) == 1 else chosen
    if args.format == "json":
        results().write(json.dumps(payload, indent=2) + "\n")
    else:
        import yaml

        results().write(yaml.safe_dump(payload, sort_keys=False))
    return EXIT_OK
