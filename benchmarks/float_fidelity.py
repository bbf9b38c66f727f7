"""Mixed precision on structures nobody tuned it on: does keeping layers float give float outputs?

For each model of ``benchmarks/fidelity_models.py`` and four torchvision classifiers
(random weights, nnsweep's synthetic data; the torchvision models loaded as nnsweep loads
them for a user, BatchNorm statistics taken from that data) and each runtime with
``float_layers``, runs ``nnsweep bench --quant static_int8``
with K = 0 (whole-model int8) and K = every quantizable layer, each in its own process
through the CLI, and prints the SQNR of the deployed outputs against the fp32 model. With
every layer float nothing should be quantized: fp32's own SQNR (130-145 dB here). A
figure near the K = 0 one means ops between the layers stayed int8; an error means the
configuration does not convert or load.

Usage: .venv/bin/python benchmarks/float_fidelity.py [--models attn,shuffle,...]
       [--runtimes executorch,onnxruntime,torch,litert] [--jobs 2] [--cache-dir DIR]

The default models are the small structures (about 10 min here, two at a time); the four
torchvision classifiers take about 20 min more: --models mnv3,effb0,shufflev2,resnet18.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = HERE / "fidelity_models.py"
NAMES = ("attn", "shuffle", "dw1d", "unetish", "gru", "shared", "tconv", "twoheads", "encoder")
# Short names of the torchvision classifiers, run as `--model torchvision:NAME` at 96x96
# (hardswish and squeeze-excitation; SiLU and stochastic depth; chunk and channel shuffle;
# residual adds and max pool).
TORCHVISION = {
    "mnv3": "mobilenet_v3_small",
    "effb0": "efficientnet_b0",
    "shufflev2": "shufflenet_v2_x0_5",
    "resnet18": "resnet18",
}
TORCHVISION_SHAPE = (1, 3, 96, 96)
RUNTIMES = ("executorch", "onnxruntime", "torch", "litert")


def model_args(name: str) -> list[str]:
    """The ``nnsweep bench`` arguments that name the model ``name``."""
    if name in TORCHVISION:
        return ["--model", f"torchvision:{TORCHVISION[name]}", "--input-shape", ",".join(map(str, TORCHVISION_SHAPE))]
    return ["--model", f"{MODELS}:{name}"]


def layer_count(name: str) -> int:
    from nnsweep.models import load_model
    from nnsweep.sensitivity.rank import quantizable_layers

    if name in TORCHVISION:
        bundle = load_model(f"torchvision:{TORCHVISION[name]}", input_shape=TORCHVISION_SHAPE)
        module, example = bundle.module, bundle.example_input
    else:
        sys.path.insert(0, str(HERE))
        import fidelity_models

        module, example = getattr(fidelity_models, name)()
    return len(quantizable_layers(module, example))


def bench(name: str, runtime: str, k: int, cache: Path) -> tuple[str, str]:
    """(SQNR in dB or "-", the error line or "")."""
    cmd = [sys.executable, "-m", "nnsweep", "bench", *model_args(name), "--runtime", runtime]
    cmd += ["--quant", "static_int8", "--float-layers", str(k), "--iters", "20", "--json", "--cache-dir", str(cache)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if "error" in line.lower() or "failed" in line.lower()]
        return "-", (lines[-1] if lines else f"exit {done.returncode}")[:110]
    fidelity = json.loads(done.stdout).get("fidelity") or {}
    if "sqnr_db" not in fidelity:
        return "-", "no fidelity reported"
    sqnr = fidelity["sqnr_db"]
    return ("inf (identical)" if sqnr is None else f"{sqnr:.1f}"), ""  # JSON null: bit-identical outputs


def _progress(task: tuple[str, str, int], result: tuple[str, str]) -> tuple[str, str]:
    print(f"{task[0]} {task[1]} K={task[2]}: {result[0]} {result[1]}", file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(NAMES), help=f"of {', '.join((*NAMES, *TORCHVISION))}")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    names, runtimes = args.models.split(","), args.runtimes.split(",")
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="nnsweep-fidelity-"))
    counts = {name: layer_count(name) for name in names}
    tasks = [(n, r, k) for n in names for r in runtimes for k in (0, counts[n])]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda t: _progress(t, bench(*t, cache)), tasks))
    print(f"cache: {cache}\n")
    print("| model | runtime | SQNR, whole-model int8 | SQNR, every layer float | error |")
    print("|---|---|---|---|---|")
    by_task = dict(zip(tasks, results, strict=True))
    for n in names:
        for r in runtimes:
            (whole, e0), (every, e1) = by_task[(n, r, 0)], by_task[(n, r, counts[n])]
            print(f"| {n} ({counts[n]} layers) | {r} | {whole} | {every} | {e0 or e1} |")


if __name__ == "__main__":
    main()
