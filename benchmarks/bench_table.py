"""The runtime x quantization table: `nnsweep bench --json` for every combination that applies.

Prints a markdown table per model: p50 latency, artifact size, accuracy (models with
labels) or fidelity (SQNR and top-1 agreement with fp32), and the partition count.
Every figure comes from a real conversion and a measurement in a fresh process on
this machine (1 thread unless --threads). x86 figures are not Arm figures.

Usage: .venv/bin/python benchmarks/bench_table.py [--model digits] [--model torchvision:mobilenet_v2] [--iters 200]
                                                 [--runtime litert] [--runtime armnn]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

# (runtime, backends, quant, extra options): the modes each runtime applies to.
COMBINATIONS: list[tuple[str, str, str, list[str]]] = [
    ("torch", "", "fp32", []),
    ("torch", "", "fp16", []),
    ("torch", "x86", "dynamic_int8", []),
    ("torch", "x86", "static_int8", ["--granularity", "per_tensor"]),
    ("torch", "x86", "static_int8", ["--granularity", "per_channel"]),
    ("torch", "qnnpack", "static_int8", ["--granularity", "per_channel"]),
    ("torch", "x86", "qat_int8", []),
    ("executorch", "xnnpack", "fp32", []),
    ("executorch", "portable", "fp32", []),
    ("executorch", "xnnpack", "fp16", []),
    ("executorch", "xnnpack", "dynamic_int8", []),
    ("executorch", "xnnpack", "static_int8", ["--granularity", "per_tensor"]),
    ("executorch", "xnnpack", "static_int8", ["--granularity", "per_channel"]),
    ("executorch", "xnnpack", "static_int8", ["--interface", "full"]),
    ("executorch", "xnnpack", "qat_int8", []),
    ("onnxruntime", "cpu", "fp32", []),
    ("onnxruntime", "cpu", "fp16", []),
    ("onnxruntime", "cpu", "dynamic_int8", []),
    ("onnxruntime", "cpu", "static_int8", ["--granularity", "per_tensor"]),
    ("onnxruntime", "cpu", "static_int8", ["--granularity", "per_channel"]),
    ("litert", "xnnpack", "fp32", []),
    ("litert", "cpu", "fp32", []),
    ("litert", "xnnpack", "static_int8", ["--granularity", "per_tensor"]),
    ("litert", "xnnpack", "static_int8", ["--granularity", "per_channel"]),
    ("litert", "xnnpack", "static_int8", ["--granularity", "per_channel", "--interface", "full"]),
    ("armnn", "CpuAcc,CpuRef", "fp32", []),
    ("armnn", "CpuAcc,CpuRef", "static_int8", ["--granularity", "per_tensor"]),
]


def _bench(model: str, runtime: str, backends: str, quant: str, extra: list[str], iters: int, threads: int) -> dict:  # type: ignore[type-arg]
    cmd = [sys.executable, "-m", "nnsweep.cli", "bench", "--model", model, "--runtime", runtime, "--quant", quant]
    cmd += ["--iters", str(iters), "--threads", str(threads), "--json", *extra]
    if backends:
        cmd += ["--backends", backends]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:100]}
    result: dict = json.loads(proc.stdout)  # type: ignore[type-arg]
    result["wall_s"] = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="repeatable (default: digits and torchvision:mobilenet_v2)")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runtime", action="append", help="repeatable: only these runtimes (default: all)")
    args = parser.parse_args()
    for model in args.model or ["digits", "torchvision:mobilenet_v2"]:
        print(f"\n### {model} ({args.threads} thread(s), {args.iters} timed runs)\n")
        print(
            "| runtime | backends | quantization | p50 ms | p90 ms | size KiB "
            "| accuracy | top-1 agree | SQNR dB | partitions |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for runtime, backends, quant, extra in COMBINATIONS:
            if args.runtime and runtime not in args.runtime:
                continue
            r = _bench(model, runtime, backends, quant, extra, args.iters, args.threads)
            label = quant + (" " + " ".join(extra[1::2]) if extra else "")
            if "error" in r:
                print(f"| {runtime} | {backends or '-'} | {label} | failed: {r['error']} |||||||")
                continue
            lat, fid = r["latency_ms"], r["fidelity"]
            acc = "-" if r["accuracy"] is None else f"{r['accuracy'] * 100:.2f}%"
            sqnr = "identical" if fid["sqnr_db"] is None else f"{fid['sqnr_db']:.1f}"
            order = ",".join(r["config"]["backends"]) or "-"
            print(
                f"| {runtime} | {order} | {label} | {lat['p50']:.4f} | {lat['p90']:.4f} "
                f"| {r['size_bytes'] / 1024:.0f} | {acc} | {fid['top1_agreement'] * 100:.1f}% | {sqnr} "
                f"| {r['partitions']['count']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
