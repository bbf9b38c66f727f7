"""One step of XNNPACK's lowering of one program, with and without the skip that step has.

``--step to_backend``: :mod:`nnsweep.runtimes.executorch.retrace` lets XNNPACK's ``preprocess`` passes
skip their closing re-trace of a graph no pass has touched since the last one; the edge
program is made once and lowered to XNNPACK (``to_backend``) in turns. ``--step edge``:
:mod:`nnsweep.runtimes.executorch.redecompose` skips the edge program's last ``run_decompositions`` when
nothing is left for it; the edge program is made in turns (then lowered, for the digest).
The program is the model's exported (and, for int8, quantized and calibrated) one, built as
the ExecuTorch converter does. Turns with the skip and without it alternate in one process,
so the machine's drift between whole processes does not enter the ratio. It prints each
turn's seconds, the medians, their ratio, and the ``.pte`` digest of each side (they must
be equal).

Usage: .venv/bin/python benchmarks/xnnpack_retrace.py [--model torchvision:mobilenet_v3_small]
       [--quant static_int8] [--step to_backend|edge] [--rounds 4]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

from nnsweep.core.config import Granularity, PartitionLimits, QuantConfig, QuantMode
from nnsweep.models import load_model
from nnsweep.runtimes.common.partition import LimitedPartitioner
from nnsweep.runtimes.common.provenance import shared_node_provenance
from nnsweep.runtimes.executorch import lowering
from nnsweep.runtimes.executorch.converter import _program  # the converter's own program, before its stage


def _partitioners() -> list[LimitedPartitioner]:
    return [LimitedPartitioner(XnnpackPartitioner(), PartitionLimits())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="torchvision:mobilenet_v3_small")
    parser.add_argument("--quant", default="static_int8", choices=[m.value for m in QuantMode])
    parser.add_argument("--step", default="to_backend", choices=["to_backend", "edge"])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    block = "retrace_only_when_changed" if args.step == "to_backend" else "decompose_only_what_is_left"

    quant = QuantConfig(mode=QuantMode(args.quant), granularity=Granularity.PER_CHANNEL)
    with tempfile.TemporaryDirectory(prefix="nnsweep-retrace-") as tmp, shared_node_provenance():
        bundle = load_model(args.model, cache_dir=Path(tmp))
        program = _program(bundle, quant)
        if args.step == "to_backend":  # made once, lowered in turns
            edge = lowering._edge_program(program, [p.inner for p in _partitioners()], None)
        skip = getattr(lowering, block)
        seconds: dict[str, list[float]] = {"skip": [], "trace every time": []}
        digests: dict[str, set[str]] = {name: set() for name in seconds}
        try:
            for n in range(args.rounds):
                for name in seconds:
                    setattr(lowering, block, skip if name == "skip" else contextlib.nullcontext)
                    start = time.perf_counter()
                    if args.step == "edge":
                        edge = lowering._edge_manager(program, [p.inner for p in _partitioners()])
                        seconds[name].append(time.perf_counter() - start)
                    lowered = lowering._to_backend(edge, _partitioners())
                    if args.step == "to_backend":
                        seconds[name].append(time.perf_counter() - start)
                    digests[name].add(hashlib.sha256(lowered.to_executorch().buffer).hexdigest()[:16])
                    print(f"round {n + 1}, {name}: {seconds[name][-1]:.2f} s", flush=True)
        finally:
            setattr(lowering, block, skip)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, values in seconds.items():
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"{name}: median {medians[name]:.2f} s ({spread}), .pte {sorted(digests[name])}")
    print(f"ratio: {medians['skip'] / medians['trace every time']:.2f}")
    if digests["skip"] != digests["trace every time"] or len(digests["skip"]) != 1:
        raise SystemExit("the lowerings differ in bytes")


if __name__ == "__main__":
    main()
