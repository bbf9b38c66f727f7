"""`nnsweep bench` on a cache hit against a plain ONNX Runtime script, and where the time goes.

Prints, as medians of --repeats runs on this machine (with its load average):

1. wall time and peak memory of
   ``nnsweep bench --model digits --runtime onnxruntime --quant fp32 --iters 200``
   on a cache hit, and of a plain script that loads the same ``.onnx`` in ONNX
   Runtime and runs it 205 times; the ratio. Peak memory is what ``/usr/bin/time -v``
   reports: the largest resident set of the process or any of its children
   (``wait4``'s ``ru_maxrss``);
2. the same command's phases, timed in one process that does what the command does
   (imports, model load, conversion cache lookup, the measuring process, the fp32
   reference outputs, evaluation), so the ratio can be attributed;
3. the measuring process alone: a fresh process against a child forked from a warm
   worker (what a sweep's agent uses), each with its phase times.

``--source DIR`` runs the command and the phases against another checkout's
``nnsweep`` package (e.g. ``git archive OLD nnsweep | tar -x -C DIR``), for a
before/after comparison; the default is this checkout.

Usage: .venv/bin/python benchmarks/bench_vs_plain.py [--repeats 5] [--source DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = """
import sys
import numpy as np
import onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
inp = session.get_inputs()[0]
x = np.zeros([d if isinstance(d, int) else 1 for d in inp.shape], dtype=np.float32)
for _ in range(205):
    session.run(None, {inp.name: x})
"""

PHASES = """
import json, sys, time
from pathlib import Path
marks = [("start", time.perf_counter())]
def mark(name): marks.append((name, time.perf_counter()))
import nnsweep.cli
mark("import nnsweep.cli")
from nnsweep import deploy
from nnsweep.artifacts import ArtifactCache
from nnsweep.bench import MeasureSettings
from nnsweep.models import load_model
mark("import deploy, models")
cache = ArtifactCache(Path(sys.argv[1]))
bundle = load_model("digits", cache_dir=cache.models_dir)
mark("load_model (torch, scikit-learn, weights)")
args = nnsweep.cli._build_parser().parse_args(["bench", "--runtime", "onnxruntime", "--quant", "fp32"])
artifact, hit = deploy.convert(bundle, nnsweep.cli._bench_config(args), cache)
mark("conversion cache lookup")
timing, outputs = deploy.run_artifact(artifact, bundle.dataset.evaluation.inputs, MeasureSettings(iters=200))
mark("measuring process")
reference = deploy.reference_outputs(bundle)
mark("fp32 reference outputs (torch)")
deploy.assemble(bundle, artifact, timing, outputs, reference, cache_hit=hit)
mark("evaluation")
print(json.dumps({"hit": hit, "artifact": str(artifact.path),
                  "phases": {b[0]: (b[1] - a[1]) * 1e3 for a, b in zip(marks, marks[1:])}}))
"""


SITECUSTOMIZE = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")
                    and "editable" not in getattr(f, "__name__", "")]
sys.path.insert(0, {source!r})
"""


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MiB (largest of the process tree, as /usr/bin/time), stdout.

    It runs in the temporary directory: from a checkout's root, ``python -m`` would
    import that checkout's package first (the current directory leads sys.path).
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, cwd=tempfile.gettempdir()
    )
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if proc.stdout:
        proc.stdout.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} ... exited with {proc.returncode}")
    return wall, usage.ru_maxrss / 1024.0, out


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--source", type=Path, help="a checkout whose nnsweep package to run (default: this one)")
    args = parser.parse_args()

    env = dict(os.environ)
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-vs-plain-") as tmp:
        if args.source is not None:
            # The venv's editable install finds this checkout before PYTHONPATH: a
            # sitecustomize (run after .pth files, in every process of the tree, the
            # measuring processes too) drops that finder and puts --source first.
            boot = Path(tmp) / "boot"
            boot.mkdir()
            (boot / "sitecustomize.py").write_text(SITECUSTOMIZE.format(source=str(args.source.resolve())))
            env["PYTHONPATH"] = str(boot)
        cache = Path(tmp) / "cache"
        bench = [python, "-m", "nnsweep.cli", "--cache-dir", str(cache), "bench", "--model", "digits"]
        bench += ["--runtime", "onnxruntime", "--quant", "fp32", "--iters", "200", "--json"]
        _, _, out = _run(bench, env)  # fills the cache: model weights and the artifact
        artifact = json.loads(out)["artifact"]
        print(f"load average before: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}  (shared machine)")

        nn, plain = [], []
        for _ in range(args.repeats):
            wall, rss, out = _run(bench, env)
            if not json.loads(out)["cache_hit"]:
                sys.exit("nnsweep bench missed the cache")
            nn.append((wall, rss))
            plain.append(_run([python, "-c", PLAIN, artifact], env)[:2])
        nn_wall, nn_rss = _median([w for w, _ in nn]), _median([r for _, r in nn])
        pl_wall, pl_rss = _median([w for w, _ in plain]), _median([r for _, r in plain])
        print(f"\n1. medians of {args.repeats} runs (cache hit)")
        print(f"   nnsweep bench : {nn_wall:6.2f} s  {nn_rss:7.1f} MiB peak")
        print(f"   plain script  : {pl_wall:6.2f} s  {pl_rss:7.1f} MiB peak")
        print(f"   ratio         : {nn_wall / pl_wall:6.1f}x wall  {nn_rss / pl_rss:5.1f}x memory")

        phases: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            _, _, out = _run([python, "-c", PHASES, str(cache)], env)
            for name, ms in json.loads(out)["phases"].items():
                phases.setdefault(name, []).append(ms)
        print(f"\n2. where nnsweep bench's time goes (medians of {args.repeats}, one process each)")
        for name, values in phases.items():
            print(f"   {name:<42} {_median(values):8.0f} ms")
        print(f"   {'(interpreter start: see the plain script)':<42}")

        if args.source is None:
            _measuring_process(Path(artifact), args.repeats)
    print(f"\nload average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}  (shared machine)")


def _measuring_process(artifact: Path, repeats: int) -> None:
    import numpy as np

    from nnsweep.bench import MachineLock, MeasureSettings, WarmWorker, measure_in_subprocess
    from nnsweep.convert._base import IOSpec

    inputs = np.random.default_rng(0).random((360, 1, 8, 8), dtype=np.float32)
    worker = WarmWorker("onnxruntime")
    rows: dict[str, list[dict[str, float]]] = {"fresh": [], "fork": []}
    try:
        for i in range(repeats + 1):
            for name, w in (("fresh", None), ("fork", worker)):
                t0 = time.perf_counter()
                timing, _ = measure_in_subprocess(
                    runtime="onnxruntime",
                    artifact=artifact,
                    io=IOSpec(),
                    threads=1,
                    backends=("cpu",),
                    inputs=inputs,
                    settings=MeasureSettings(iters=200),
                    worker=w,
                    lock=MachineLock(),
                )
                if i == 0:
                    continue  # the warm worker's own start (and the page cache) on the first round
                row = dict(timing.phases_ms)
                row["call"] = (time.perf_counter() - t0) * 1e3
                row["peak_rss_mb"] = timing.peak_rss_mb
                rows[name].append(row)
    finally:
        worker.close()
    print(f"\n3. the measuring process alone (medians of {repeats}; 200 timed runs + 360 evaluation inputs)")
    keys = ["call", "lock_wait", "start", "load", "warmup", "timed", "outputs", "peak_rss_mb"]
    print("   " + f"{'':<6}" + "".join(f"{k:>12}" for k in keys))
    for name, values in rows.items():
        print("   " + f"{name:<6}" + "".join(f"{_median([v.get(k, 0.0) for v in values]):12.1f}" for k in keys))
    print(f"   warm worker's resident memory (shared with each child): {worker.ready.get('rss_mb', 0):.1f} MiB")


if __name__ == "__main__":
    main()
