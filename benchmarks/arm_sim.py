"""The digits model on the emulated aarch64 board next to this x86 host (docs/how-to/emulated-board.md).

Converts each configuration below on the host (through nnsweep's cache), measures the
same artifact twice — on the host, and on the board (``device_agents/arm_sim.sh run``:
the agent's own Python inside the arm64 root, each measurement in its own process) —
and evaluates both outputs on the host against the fp32 reference. Prints one markdown
table: p50 latency (board: EMULATED, qemu-user, no real board's figure), the measuring
process's peak memory on the board, accuracy and fidelity on both, and where the two
architectures' outputs disagree. Then Arm NN's placement of each .tflite on the board
for ``CpuAcc,CpuRef``: layers per backend and which layers fell back.

Needs root (it enters the board's root) and a built board (``arm_sim.sh build``).
Usage: sudo .venv/bin/python benchmarks/arm_sim.py [--iters 50] [--runtime armnn] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ARM_SIM = REPO / "device_agents" / "arm_sim.sh"
ROOT = Path(os.environ.get("NNSWEEP_ARM_SIM_DIR", "/var/cache/nnsweep-arm-sim")) / "root"
WORK_IN_ROOT = "/tmp/nnsweep-arm-sim-bench"
AGENT_PYTHON = "/root/nnsweep-agent/venv/bin/python"

# (runtime, backends, quant, granularity)
COMBINATIONS: list[tuple[str, tuple[str, ...], str, str | None]] = [
    ("executorch", ("xnnpack", "portable"), "fp32", None),
    ("executorch", ("xnnpack", "portable"), "static_int8", "per_channel"),
    ("onnxruntime", ("cpu",), "fp32", None),
    ("onnxruntime", ("cpu",), "static_int8", "per_channel"),
    ("torch", (), "fp32", None),
    ("torch", ("qnnpack",), "static_int8", "per_tensor"),
    ("litert", ("xnnpack", "cpu"), "fp32", None),
    ("litert", ("xnnpack", "cpu"), "static_int8", "per_channel"),
    ("armnn", ("CpuAcc", "CpuRef"), "fp32", None),
    ("armnn", ("CpuRef",), "fp32", None),
    ("armnn", ("CpuAcc", "CpuRef"), "static_int8", "per_tensor"),
]

# Runs inside the board with the agent's Python: measure every job, Arm NN placements too.
BOARD_SCRIPT = r"""
import json, subprocess, sys
from pathlib import Path
import numpy as np
from nnsweep.bench import MeasureSettings, measure_in_subprocess
from nnsweep.bench._foreign import python_command
from nnsweep.core.artifact import IOSpec

work = Path(sys.argv[1])
jobs = json.loads((work / "jobs.json").read_text())
inputs = np.load(work / "inputs.npy")
settings = MeasureSettings(**json.loads(sys.argv[2]))
for job in jobs:
    out = work / job["name"]
    try:
        timing, outputs = measure_in_subprocess(
            runtime=job["runtime"], artifact=work / job["artifact"], io=IOSpec.from_dict(job["io"]),
            threads=1, backends=tuple(job["backends"]), inputs=inputs, settings=settings)
        np.save(str(out) + ".outputs.npy", outputs)
        result = {"timing": timing.to_dict()}
    except Exception as exc:  # report and go on: one runtime failing says something too
        result = {"error": f"{type(exc).__name__}: {exc}"}
    if job["runtime"] == "armnn":
        with python_command("/usr/bin/python3", "nnsweep.runtimes.armnn.runner", "placement",
                            str(work / job["artifact"]), *job["backends"]) as (argv, env):
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        lines = proc.stdout.strip().splitlines()
        result["placement"] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-800:]}
    (Path(str(out) + ".json")).write_text(json.dumps(result))
    print(job["name"], "error" if "error" in result else "ok", flush=True)
"""


def _config(runtime: str, backends: tuple[str, ...], quant: str, gran: str | None):  # type: ignore[no-untyped-def]
    from nnsweep.core.config import DeploymentConfig

    q: dict[str, object] = {"mode": quant}
    if gran:
        q["granularity"] = gran
    return DeploymentConfig.from_dict({"runtime": runtime, "backends": list(backends), "quant": q, "threads": 1})


def _ev(ev) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {"accuracy": ev.accuracy, **ev.fidelity.to_dict()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--runtime", action="append", help="only these runtimes")
    ap.add_argument("--cache-dir", type=Path, default=Path(".nnsweep"))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--reuse", action="store_true", help="report the last run's measurements again (no new runs)")
    args = ap.parse_args()
    if not (ROOT / "root" / "nnsweep-agent").is_dir():
        sys.exit(f"no board at {ROOT}: run `sudo device_agents/arm_sim.sh build` first")

    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings, evaluate
    from nnsweep.models import ModelSnapshot, load_model

    bundle = load_model("digits", cache_dir=args.cache_dir / "models")
    cache = ArtifactCache(args.cache_dir)
    settings = MeasureSettings(warmup=args.warmup, iters=args.iters)
    inputs = bundle.dataset.evaluation.inputs
    labels = bundle.dataset.evaluation.labels
    reference = ModelSnapshot.of(bundle).reference
    work = ROOT / WORK_IN_ROOT.lstrip("/")
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "inputs.npy", np.ascontiguousarray(inputs, dtype=np.float32))

    rows: list[dict[str, object]] = []
    jobs = []
    for runtime, backends, quant, gran in COMBINATIONS:
        if args.runtime and runtime not in args.runtime:
            continue
        config = _config(runtime, backends, quant, gran)
        name = f"{runtime}-{'+'.join(backends) or 'default'}-{quant}" + (f"-{gran}" if gran else "")
        artifact, _ = deploy.convert(bundle, config, cache)
        shutil.copy(artifact.path, work / f"{name}{artifact.path.suffix}")
        row: dict[str, object] = {"name": name, "label": config.label(), "runtime": runtime}
        saved = work / f"{name}.host.json"
        if args.reuse and saved.exists():
            row = json.loads(saved.read_text())
            rows.append(row)
            jobs.append(row.pop("job"))  # type: ignore[arg-type]
            continue
        try:
            timing, outputs = deploy.run_artifact(artifact, inputs, settings)
            ev = evaluate(outputs, reference, labels)
            row["host"] = {"p50_ms": timing.latency.p50, "peak_rss_mb": timing.peak_rss_mb, **_ev(ev)}
            np.save(work / f"{name}.host.npy", outputs)
        except Exception as exc:  # the host may lack a backend the board has (CpuAcc)
            row["host"] = {"error": str(exc)[:200]}
        row["host_partitions"] = artifact.partitions.to_dict()
        jobs.append(
            {
                "name": name,
                "runtime": runtime,
                "artifact": f"{name}{artifact.path.suffix}",
                "io": artifact.io.to_dict(),
                "backends": list(config.backends),
            }
        )
        saved.write_text(json.dumps({**row, "job": jobs[-1]}))
        rows.append(row)
    (work / "jobs.json").write_text(json.dumps(jobs))
    (work / "board.py").write_text(BOARD_SCRIPT)
    s = {"warmup": args.warmup, "iters": args.iters}
    started = time.monotonic()
    done = all((work / f"{job['name']}.json").exists() for job in jobs)
    if not (args.reuse and done):
        subprocess.run(
            ["bash", str(ARM_SIM), "run", AGENT_PYTHON, f"{WORK_IN_ROOT}/board.py", WORK_IN_ROOT, json.dumps(s)],
            check=True,
        )
    board_s = time.monotonic() - started
    for row in rows:
        res = json.loads((work / f"{row['name']}.json").read_text())
        if "error" in res:
            row["board"] = {"error": res["error"][:300]}
        else:
            t = res["timing"]
            outputs = np.load(work / f"{row['name']}.outputs.npy")
            ev = evaluate(outputs, reference, labels)
            row["board"] = {
                "p50_ms": t["latency_ms"]["p50"],
                "peak_rss_mb": t["peak_rss_mb"],
                "load_ms": t["load_ms"],
                **_ev(ev),
            }
            host_out = work / f"{row['name']}.host.npy"
            if host_out.exists():
                h = np.load(host_out).reshape(len(outputs), -1)
                b = outputs.reshape(len(outputs), -1)
                row["x86_vs_aarch64"] = {
                    "top1_agreement": float((h.argmax(1) == b.argmax(1)).mean()),
                    "max_abs_diff": float(np.abs(h - b).max()),
                }
        if "placement" in res:
            row["board_partitions"] = res["placement"]
    load = os.getloadavg()[0]
    print(f"# digits: x86 host vs the emulated aarch64 board (loadavg {load:.2f}; board phase {board_s:.0f} s)")
    print("Board latencies are EMULATED (qemu-user on this x86 CPU): real aarch64 kernels, no real board's timing.\n")
    print(
        "| config | host p50 ms | board p50 ms (emulated) | board peak MB | host acc | board acc "
        "| board SQNR dB | x86 vs aarch64 top-1 agree | max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|")

    def g(d: object, k: str, fmt: str) -> str:
        if not isinstance(d, dict) or d.get(k) is None:
            return "err" if isinstance(d, dict) and "error" in d else "–"
        return format(d[k], fmt)

    for row in rows:
        h, b, x = row.get("host"), row.get("board"), row.get("x86_vs_aarch64")
        print(
            f"| {row['label']} | {g(h, 'p50_ms', '.3f')} | {g(b, 'p50_ms', '.3f')} | {g(b, 'peak_rss_mb', '.0f')} "
            f"| {g(h, 'accuracy', '.4f')} | {g(b, 'accuracy', '.4f')} | {g(b, 'sqnr_db', '.1f')} "
            f"| {g(x, 'top1_agreement', '.4f')} | {g(x, 'max_abs_diff', '.3g')} |"
        )
    for row in rows:
        for side in ("host", "board"):
            if isinstance(row.get(side), dict) and "error" in row[side]:  # type: ignore[operator]
                print(f"- {row['label']} on {side}: {row[side]['error']}")  # type: ignore[index]
    print("\n## Arm NN placement on the board (CpuAcc = Neon kernels; host has CpuRef only)\n")
    for row in rows:
        p = row.get("board_partitions")
        if isinstance(p, dict):
            print(f"- {row['label']}: nodes by backend {p.get('nodes_by_backend')}, fell back {p.get('fallback_ops')}")
            for note in p.get("notes", []):
                print(f"  - {note}")
            hp = row.get("host_partitions")
            if isinstance(hp, dict):
                print(f"  - on the x86 host: {hp.get('nodes_by_backend')}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
