"""The decoder language model per runtime and mode: ``nnsweep bench --model tiny_llama``.

Each cell is one ``nnsweep bench --json`` in a process of its own (its conversion through
a cache of its own, then 5 warm-up rounds, ``--iters`` timed prefills and 3 greedy
generations of 96 decode steps each, 1 thread), run ``--repeats`` times; the table gives
the median of each figure over the repeats and the spread (min-max) of the decode step.
Perplexity is of the seeded held-out text (128 tokens), from the deployed graphs' logits;
the eager fp32 model's is beside it. Writes ``benchmarks/results/decoder.md``.

    python benchmarks/decoder.py [--repeats 3] [--iters 50]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CELLS = [
    (runtime, mode)
    for runtime in ("executorch", "onnxruntime", "litert")
    for mode in ("fp32", "dynamic_int8", "int4_weight")
]


def bench(cache: Path, runtime: str, mode: str, iters: int) -> dict[str, object]:
    command = [sys.executable, "-m", "nnsweep", "--cache-dir", str(cache), "bench", "--model", "tiny_llama"]
    command += ["--runtime", runtime, "--quant", mode, "--iters", str(iters), "--json"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def row(runtime: str, mode: str, runs: list[dict[str, object]]) -> str:
    if "error" in runs[0]:
        return f"| {runtime} | {mode} | refused or failed: {runs[0]['error']} | | | | | |"

    def median(key: str) -> float:
        return statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]

    decode = [float(r["decode_ms_per_token"]) for r in runs]  # type: ignore[arg-type]
    size = int(runs[0]["artifact"]["size_bytes"]) / 1024  # type: ignore[index]
    return (
        f"| {runtime} | {mode} | {median('prefill_ms'):.3f} | {median('decode_ms_per_token'):.3f} "
        f"({min(decode):.3f}-{max(decode):.3f}) | {median('tokens_per_s'):.0f} | {median('perplexity'):.4f} "
        f"| {float(runs[0]['reference_perplexity']):.4f} | {size:,.0f} |"  # type: ignore[arg-type]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "decoder.md")
    args = parser.parse_args()
    started = time.time()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for runtime, mode in CELLS:
            runs = [bench(Path(tmp), runtime, mode, args.iters) for _ in range(args.repeats)]
            runs = [runs[0]] if "error" in runs[0] else runs
            lines.append(row(runtime, mode, runs))
            print(lines[-1], flush=True)
    load = os.getloadavg()[0]
    text = (
        f"""# A decoder language model per runtime and mode (`tiny_llama`)

x86 figures on a busy machine: {platform.machine()}, {os.cpu_count()} cores shared with other
work (1-minute load average {load:.1f} at the end), Python {platform.python_version()}, 1 thread.
Made by `python benchmarks/decoder.py --repeats {args.repeats} --iters {args.iters}` in
{(time.time() - started) / 60:.0f} minutes; each cell is the median of {args.repeats} `nnsweep bench --json`
runs, each in a fresh process. Latencies on a loaded 2-core host move by tens of percent
between runs: compare cells measured together, not with another machine's.

`tiny_llama`: a transformers `LlamaConfig` (2 layers, width 128, 4 heads, 2 KV heads, vocabulary
256) trained for seconds on seeded synthetic text; prompt 32 tokens, static KV cache of 128.
`prefill_ms`: p50 of the prefill graph (32 tokens, empty cache). `decode_ms_per_token`: p50 of
one decode step over 3 greedy generations of 96 steps (min-max over the repeats in brackets).
`tokens_per_s`: decode steps over their summed time. `perplexity`: the held-out text's, from
the deployed graphs' logits (prefill, then one decode step per token); `eager`: the fp32
PyTorch model's, through the same steps. Size: both graphs' files (each holds the weights).

| runtime | mode | prefill_ms | decode_ms_per_token (spread) | tokens_per_s | perplexity | eager | size (KiB) |
|---|---|---|---|---|---|---|---|
"""
        + "\n".join(lines)
        + "\n"
    )
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
