"""Coverage as a benchmark: models x every runtime loadable here x every mode, each cell one
``nnsweep bench`` (the real CLI, a fresh process, a time limit), printed as a Markdown matrix.

A cell is

* ``ok``: converted, measured and evaluated (wall time; SQNR of the first output vs fp32),
* ``refused``: bench exited with its own one-line reason (a conversion or load the toolchain
  cannot do, naming what it lacks); ``n/a`` when the runtime does not offer the mode at all
  (refused at the configuration, exit 2, before any conversion),
* ``FAILED``: a time-out, a crash, or a raw Python traceback: a bug to fix.

The count is ``ran / supported``: cells that ran, over the cells whose runtime offers the mode
(its capability table, ``nnsweep.core.runtimes``). Conversions are cold (a fresh artifact cache
unless ``--cache-dir``), so each wall time is model loading + conversion + a short measurement
(``--iters``) + evaluation, at batch 1 and 1 thread. x86 figures are not Arm figures.

Usage: .venv/bin/python benchmarks/zoo.py [--models a,b] [--runtimes torch,litert] [--modes fp32,static_int8]
                                          [--timeout 600] [--json out.json] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
USER_MODELS = f"{HERE / 'zoo_models.py'}"
# Name in the matrix -> bench's --model.
MODELS = {
    "mobilenet_v3_small": "torchvision:mobilenet_v3_small",
    "resnet18": "torchvision:resnet18",
    "encoder": f"{USER_MODELS}:encoder",
    "buffer_mlp": f"{USER_MODELS}:buffer_mlp",
    "two_heads": f"{USER_MODELS}:two_heads",
    "text_classifier": f"{USER_MODELS}:text_classifier",
    "bert": f"{USER_MODELS}:bert",
    "convnext": f"{USER_MODELS}:convnext",
    "gru": f"{USER_MODELS}:gru",
    "unet": f"{USER_MODELS}:unet",
    "mlp_block": f"{USER_MODELS}:mlp_block",
}
# resnet18, convnext, gru, unet and mlp_block are opt-in: resnet18's row adds about 6 minutes on 2 cores
# (benchmarks/results/coverage.md).
DEFAULT_MODELS = ("mobilenet_v3_small", "encoder", "buffer_mlp", "two_heads", "text_classifier", "bert")
MODES = ("fp32", "fp16", "dynamic_int8", "static_int8", "int4_weight", "a16w8")  # int4_weight at its default group size
# Opt-in (--modes): int4_weight at a larger group size, as MODE_gN (bench --group-size N).
EXTRA_MODES = ("int4_weight_g64", "int4_weight_g128")


@dataclass(frozen=True)
class Cell:
    model: str
    runtime: str
    mode: str
    status: str  # ok, refused, n/a, FAILED
    line: str  # the reason's first line (empty when ok)
    wall_s: float
    offered: bool  # the runtime's capability table offers this mode
    sqnr_db: float | None = None
    p50_ms: float | None = None


def _available() -> dict[str, str]:
    """Runtime name -> its version, for the runtimes that load on this machine."""
    from nnsweep.core import runtimes

    found = {}
    for name in runtimes.names():
        info = runtimes.get(name)
        versions: dict[str, str] = {}
        if runtimes.probe(info, versions) is None:
            continue
        package = info.packages[0]  # its converter's toolchain; Arm NN's own version when probed
        found[name] = (
            f"{name} {versions[name]}" if name in versions else f"{name} ({package} {metadata.version(package)})"
        )
    return found


def _quant(mode: str) -> tuple[str, list[str]]:
    """bench's mode for a matrix mode, and its arguments: ``int4_weight_g64`` is
    ``--quant int4_weight --group-size 64``."""
    base, _, group = mode.rpartition("_g")
    if base and group.isdigit():
        return base, ["--quant", base, "--group-size", group]
    return mode, ["--quant", mode]


def _offered(runtime: str, mode: str) -> bool:
    from nnsweep.core import runtimes
    from nnsweep.core.quant import QuantMode

    return QuantMode(_quant(mode)[0]) in runtimes.get(runtime).modes


def _first_line(stderr: str) -> str:
    """bench's own message (its last line), without the program's prefix."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "(no output)"
    for prefix in ("nnsweep bench: failed: ", "nnsweep: error: "):
        last = last.removeprefix(prefix)
    return last


def run_cell(model: str, runtime: str, mode: str, args: argparse.Namespace, env: dict[str, str]) -> Cell:
    base, quant = _quant(mode)
    cmd = [sys.executable, "-m", "nnsweep", "bench", "--model", MODELS[model], "--runtime", runtime, *quant]
    cmd += ["--iters", str(args.iters), "--warmup", "2", "--timeout", str(args.timeout), "--json"]
    offered = _offered(runtime, mode)
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return Cell(model, runtime, mode, "FAILED", f"timed out after {args.timeout} s", args.timeout, offered)
    wall = time.monotonic() - started
    if proc.returncode == 0:
        data = json.loads(proc.stdout)
        fidelity = data.get("fidelity") or {}
        # No SQNR: the outputs equal fp32's exactly (an infinite ratio).
        sqnr = fidelity.get("sqnr_db") if fidelity.get("max_abs_err") != 0 else float("inf")
        return Cell(model, runtime, mode, "ok", "", wall, offered, sqnr, data["latency_ms"]["p50"])
    line = _first_line(proc.stderr)
    if not offered:  # row and column already say which runtime cannot do which mode
        line = line.removeprefix(f"--quant: {runtime} cannot do {base}: ")
    if "Traceback (most recent call last)" in proc.stderr or proc.returncode < 0:
        return Cell(model, runtime, mode, "FAILED", f"exit {proc.returncode}: {line}", wall, offered)
    return Cell(model, runtime, mode, "refused" if offered else "n/a", line, wall, offered)


def _cell_text(cell: Cell, width: int) -> str:
    if cell.status == "ok":
        sqnr = f", {cell.sqnr_db:.0f} dB" if cell.sqnr_db is not None else ""
        return f"ok {cell.wall_s:.0f} s{sqnr}"
    line = cell.line if len(cell.line) <= width else cell.line[: width - 1] + "…"
    line = line.replace("|", "\\|")
    return f"{cell.status} {cell.wall_s:.0f} s: {line}"


def matrix(cells: list[Cell], versions: dict[str, str], width: int) -> str:
    """The Markdown matrix: a row per model and mode, a column per runtime, then the counts."""
    runtimes = list(dict.fromkeys(c.runtime for c in cells))
    rows = list(dict.fromkeys((c.model, c.mode) for c in cells))
    by_key = {(c.model, c.mode, c.runtime): c for c in cells}
    out = ["| model | mode | " + " | ".join(versions.get(r, r) for r in runtimes) + " |"]
    out.append("|---|---|" + "---|" * len(runtimes))
    for model, mode in rows:
        texts = [_cell_text(by_key[(model, mode, r)], width) if (model, mode, r) in by_key else "" for r in runtimes]
        out.append(f"| {model} | {mode} | " + " | ".join(texts) + " |")
    supported = [c for c in cells if c.offered]
    ran = sum(c.status == "ok" for c in supported)
    out.append("")
    share = f" ({100 * ran / len(supported):.0f} %)" if supported else ""
    out.append(f"**ran / supported: {ran} / {len(supported)}**{share}")
    for runtime in runtimes:
        mine = [c for c in supported if c.runtime == runtime]
        out.append(f"- {versions.get(runtime, runtime)}: {sum(c.status == 'ok' for c in mine)} / {len(mine)}")
    refused = sum(c.status == "refused" for c in supported)
    failed = sum(c.status == "FAILED" for c in cells)
    not_offered = sum(not c.offered for c in cells)
    out.append(f"- refused with a reason: {refused}; FAILED: {failed}; not offered by the runtime (n/a): {not_offered}")
    out.append(f"- wall time of all cells: {sum(c.wall_s for c in cells) / 60:.1f} min")
    return "\n".join(out)


def _pick(given: str | None, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    if not given:
        return allowed
    chosen = tuple(x.strip() for x in given.split(",") if x.strip())
    unknown = [x for x in chosen if x not in allowed]
    if unknown:
        raise SystemExit(f"--{what}: unknown {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help=f"comma list of {', '.join(MODELS)} (default: {', '.join(DEFAULT_MODELS)})")
    parser.add_argument("--runtimes", help="comma list (default: every runtime that loads here)")
    parser.add_argument("--modes", help=f"comma list of {', '.join(MODES + EXTRA_MODES)} (default: {', '.join(MODES)})")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    parser.add_argument("--iters", type=int, default=20, help="timed runs per cell (default 20: coverage, not speed)")
    parser.add_argument("--width", type=int, default=110, help="characters of a reason shown in the matrix")
    parser.add_argument("--cache-dir", type=Path, help="artifact cache (default: a fresh one, cold conversions)")
    parser.add_argument("--json", type=Path, help="also write every cell as JSON here")
    args = parser.parse_args()

    versions = _available()
    models = _pick(args.models, tuple(MODELS), "models") if args.models else DEFAULT_MODELS
    runtimes = _pick(args.runtimes, tuple(versions), "runtimes")
    modes = _pick(args.modes, MODES + EXTRA_MODES, "modes") if args.modes else MODES
    with tempfile.TemporaryDirectory(prefix="nnsweep-zoo-") as tmp:
        cache = args.cache_dir or Path(tmp) / "cache"
        # Its own cache and home: cold conversions, and nothing of the caller's is touched.
        env = dict(os.environ, NNSWEEP_CACHE=str(cache), HOME=str(Path(tmp) / "home"))
        # Each cell runs this checkout's nnsweep, whichever one the environment has installed.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))
        (Path(tmp) / "home").mkdir()
        cells = []
        for model in models:
            for mode in modes:
                for runtime in runtimes:
                    cell = run_cell(model, runtime, mode, args, env)
                    print(f"{model} {mode} {runtime}: {_cell_text(cell, 200)}", file=sys.stderr, flush=True)
                    cells.append(cell)
    load = os.getloadavg()[0]
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, load (1 min) {load:.1f}\n")
    print(matrix(cells, versions, args.width))
    if args.json:
        args.json.write_text(json.dumps({"versions": versions, "cells": [asdict(c) for c in cells]}, indent=1))


if __name__ == "__main__":
    main()
