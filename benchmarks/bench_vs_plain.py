"""`nnsweep bench` on a cache hit against a plain ONNX Runtime script, and where the time goes.

Prints, as medians of --repeats runs on this machine (with its load average):

1. wall time and peak memory of
   ``nnsweep bench --model digits --runtime onnxruntime --quant fp32 --iters 200``
   on a cache hit, and of a plain script that loads the same ``.onnx`` in ONNX
   Runtime and runs it 205 times; the ratio. Peak memory is what ``/usr/bin/time -v``
   reports: the largest resident set of the process or any of its children
   (``wait4``'s ``ru_maxrss``);
2. the same command's phases, timed in one process that does what the command does on
   a cache hit (imports, the model's recipe and snapshot instead of loading it, the
   artifact cache lookup, the measuring process forked from it, evaluation), so the
   ratio can be attributed (this checkout only);
3. the measuring process alone: a fresh process against a child forked from a warm
   worker (what a sweep's agent uses), each with its phase times.

``--source DIR`` also runs the command against another checkout's
``nnsweep`` package (e.g. ``git archive OLD nnsweep | tar -x -C DIR``), interleaved
with this checkout's runs so that the shared machine's load hits both alike: a
before/after comparison.

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
from nnsweep.artifacts import deploy
from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.bench import MeasureSettings
from nnsweep.bench._warm import ForkHere
from nnsweep.models import SnapshotStore
mark("import deploy, models")
cache = ArtifactCache(Path(sys.argv[1]))
store = SnapshotStore(cache.models_dir)
recipe = store.recipe("digits", None, None)
mark("model recipe (versions, model code)")
snapshot = store.lookup(recipe)
mark("model snapshot (no torch)")
from nnsweep.cli.bench import _bench_config
from nnsweep.cli.main import _build_parser
args = _build_parser().parse_args(["bench", "--runtime", "onnxruntime", "--quant", "fp32"])
config = _bench_config(args)
artifact = deploy.cached(snapshot.digest, config, cache)
mark("artifact cache lookup")
timing, outputs = deploy.run_artifact(artifact, snapshot.evaluation.inputs, MeasureSettings(iters=200),
                                      ForkHere.for_runtime("onnxruntime"))
mark("measuring process (forked from this one)")
deploy.assemble(snapshot, artifact, timing, outputs, cache_hit=True)
mark("evaluation")
print(json.dumps({"phases": {b[0]: (b[1] - a[1]) * 1e3 for a, b in zip(marks, marks[1:])}}))
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
    parser.add_argument(
        "--source",
        type=Path,
        action="append",
        help="another checkout whose nnsweep package to run too (repeatable); runs interleave with this one's",
    )
    args = parser.parse_args()

    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-vs-plain-") as tmp:
        envs = {"this checkout": dict(os.environ)}
        for i, source in enumerate(args.source or []):
            # The venv's editable install finds this checkout before PYTHONPATH: a
            # sitecustomize (run after .pth files, in every process of the tree, the
            # measuring processes too) drops that finder and puts the source first.
            boot = Path(tmp) / f"boot{i}"
            boot.mkdir()
            (boot / "sitecustomize.py").write_text(SITECUSTOMIZE.format(source=str(source.resolve())))
            envs[str(source)] = {**os.environ, "PYTHONPATH": str(boot)}
        cache = Path(tmp) / "cache"
        bench = [python, "-m", "nnsweep.cli", "--cache-dir", str(cache), "bench", "--model", "digits"]
        bench += ["--runtime", "onnxruntime", "--quant", "fp32", "--iters", "200", "--json"]
        for env in reversed(envs.values()):  # fill the cache (each checkout's converter code keys its own)
            _, _, out = _run(bench, env)
        artifact = json.loads(out)["artifact"]  # this checkout's: the plain script runs the same file
        print(f"load average before: {_loadavg()}  (shared machine)")

        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in [*envs, "plain script"]}
        phases: dict[str, dict[str, list[float]]] = {"this checkout": {}}
        for _ in range(args.repeats):  # interleaved, so a burst of load hits every variant alike
            for name, env in envs.items():
                wall, rss, out = _run(bench, env)
                if not json.loads(out)["cache_hit"]:
                    sys.exit("nnsweep bench missed the cache")
                runs[name].append((wall, rss))
            runs["plain script"].append(_run([python, "-c", PLAIN, artifact])[:2])
            for phase, ms in json.loads(_run([python, "-c", PHASES, str(cache)])[2])["phases"].items():
                phases["this checkout"].setdefault(phase, []).append(ms)
        plain_wall = _median([w for w, _ in runs["plain script"]])
        plain_rss = _median([r for _, r in runs["plain script"]])
        print(f"\n1. medians of {args.repeats} runs (cache hit); ratio to the plain script")
        for name, values in runs.items():
            wall, rss = _median([w for w, _ in values]), _median([r for _, r in values])
            label = "plain script" if name == "plain script" else f"nnsweep bench ({name})"
            print(
                f"   {label:<44} {wall:6.2f} s {rss:7.1f} MiB peak   {wall / plain_wall:5.1f}x {rss / plain_rss:5.1f}x"
            )

        for name, by_phase in phases.items():
            print(f"\n2. where nnsweep bench's time goes ({name}; medians of {args.repeats}, one process each)")
            for phase, values in by_phase.items():
                print(f"   {phase:<42} {_median(values):8.0f} ms")

        _measuring_process(Path(artifact), args.repeats)
    print(f"\nload average after: {_loadavg()}  (shared machine)")


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _measuring_process(artifact: Path, repeats: int) -> None:
    import numpy as np

    from nnsweep.bench import MachineLock, MeasureSettings, WarmWorker, measure_in_subprocess
    from nnsweep.core.artifact import IOSpec

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
    keys = ["call", "lock_wait", "start", "import", "load", "warmup", "timed", "outputs", "peak_rss_mb"]
    print("   " + f"{'':<6}" + "".join(f"{k:>12}" for k in keys))
    for name, values in rows.items():
        print("   " + f"{name:<6}" + "".join(f"{_median([v.get(k, 0.0) for v in values]):12.1f}" for k in keys))
    print(f"   warm worker's resident memory (shared with each child): {worker.ready.get('rss_mb', 0):.1f} MiB")


if __name__ == "__main__":
    main()
