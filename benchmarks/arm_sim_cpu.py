"""Host vs emulated board, per emulated CPU: LiteRT and ExecuTorch XNNPACK static int8
(per-channel) digits.

XNNPACK picks its int8 kernels from the CPU's features; under qemu-user's default
``max`` CPU it picks kernels that compute wrong results (docs/how-to/emulated-board.md). For each CPU
the board can emulate (``NNSWEEP_ARM_SIM_CPU``), and for ``max`` (the board's /sys tree
says Cortex-A72, but the measuring process starts with ``QEMU_CPU=max``: how the board
ran before it named its CPU), this runs the same .tflite / .pte on the evaluation split on the
host and on the board (``device_agents/arm_sim.sh run``, the agent's Python, a measuring
process of its own) and prints top-1 agreement and SQNR of the board's outputs against
the host's. It also prints what the board's process sees: MIDR_EL1 read with ``mrs``,
the /sys tree's MIDR, and the feature bits of its HWCAP that matter to XNNPACK's int8.

Needs root and a built board that is not running (``arm_sim.sh build``; ``stop`` first).
ExecuTorch runs on the lite board through its torch-free runner (device_agents/etlite).

Usage: sudo .venv/bin/python benchmarks/arm_sim_cpu.py [--cpu cortex-a76 ...] [--runtime executorch ...]
       [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ARM_SIM = REPO / "device_agents" / "arm_sim.sh"
ROOT = Path(os.environ.get("NNSWEEP_ARM_SIM_DIR", "/var/cache/nnsweep-arm-sim")) / "root"
WORK_IN_ROOT = "/tmp/nnsweep-arm-sim-cpu"
AGENT_PYTHON = "/root/nnsweep-agent/venv/bin/python"
CPUS = ("cortex-a72", "cortex-a76", "neoverse-n1", "max")
RUNTIMES = ("litert", "executorch")

# Runs on the board with the agent's Python: what the process sees, then the measurement.
BOARD_SCRIPT = r"""
import ctypes, json, mmap, os, struct, sys
from pathlib import Path
import numpy as np
from nnsweep.bench import MeasureSettings, measure_in_subprocess
from nnsweep.core.artifact import IOSpec

def mrs_midr():
    code = bytes.fromhex("000038d5c0035fd6")  # mrs x0, midr_el1; ret
    buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    fn = ctypes.CFUNCTYPE(ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
    return fn()

def hwcaps():
    raw = Path("/proc/self/auxv").read_bytes()
    pairs = dict(struct.iter_unpack("<QQ", raw))
    hw, hw2 = pairs.get(16, 0), pairs.get(26, 0)
    named = {"asimdhp": hw >> 10, "asimddp": hw >> 20, "sve": hw >> 22, "sve2": hw2 >> 1, "i8mm": hw2 >> 13,
             "bf16": hw2 >> 14}
    return [name for name, bits in named.items() if bits & 1]

work = Path(sys.argv[1])
job = json.loads((work / (sys.argv[3] + ".job.json")).read_text())
seen = {"qemu_cpu": os.environ.get("QEMU_CPU", "(unset)"), "mrs_midr": hex(mrs_midr()), "hwcaps": hwcaps(),
        "sysfs_midr": Path("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1").read_text().strip()}
timing, outputs = measure_in_subprocess(
    runtime=job["runtime"], artifact=work / job["artifact"], io=IOSpec.from_dict(job["io"]), threads=1,
    backends=tuple(job["backends"]), inputs=np.load(work / "inputs.npy"), settings=MeasureSettings(warmup=1, iters=3))
np.save(work / (sys.argv[2] + ".npy"), outputs)
(work / (sys.argv[2] + ".json")).write_text(json.dumps(seen | {"measured_by": sys.argv[3]}))
"""


def _artifact(cache_dir: Path, runtime: str):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model

    bundle = load_model("digits", cache_dir=cache_dir / "models")
    config = DeploymentConfig.from_dict(
        {
            "runtime": runtime,
            "backends": ["xnnpack"],
            "quant": {"mode": "static_int8", "granularity": "per_channel"},
            "threads": 1,
        }
    )
    artifact, _ = deploy.convert(bundle, config, ArtifactCache(cache_dir))
    return bundle, artifact


def _on_board(cpu: str, runtime: str, work: Path) -> tuple[np.ndarray, dict[str, object]]:
    """The board's outputs with ``cpu`` emulated (``max``: Cortex-A72's /sys, qemu's max CPU)."""
    board_cpu = "cortex-a72" if cpu == "max" else cpu
    env = dict(os.environ, NNSWEEP_ARM_SIM_CPU=board_cpu)
    name = f"{runtime}-{cpu}"
    argv = [AGENT_PYTHON, f"{WORK_IN_ROOT}/board.py", WORK_IN_ROOT, name, runtime]
    if cpu == "max":
        argv = ["/usr/bin/env", "QEMU_CPU=max", *argv]  # qemu reads it at this exec
    subprocess.run(["bash", str(ARM_SIM), "run", *argv], env=env, check=True)
    return np.load(work / f"{name}.npy"), json.loads((work / f"{name}.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="append", choices=CPUS, help="only these (default: all)")
    ap.add_argument("--runtime", action="append", choices=RUNTIMES, help="only these (default: both)")
    ap.add_argument("--cache-dir", type=Path, default=Path(".nnsweep"))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if not (ROOT / "root" / "nnsweep-agent").is_dir():
        sys.exit(f"no board at {ROOT}: run `sudo device_agents/arm_sim.sh build` first")

    from nnsweep.artifacts import deploy
    from nnsweep.bench import MeasureSettings, evaluate

    work = ROOT / WORK_IN_ROOT.lstrip("/")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "board.py").write_text(BOARD_SCRIPT)
    rows = []
    labels_of: dict[str, str] = {}
    for runtime in args.runtime or RUNTIMES:
        bundle, artifact = _artifact(args.cache_dir, runtime)
        labels_of[runtime] = artifact.config.label()
        inputs = np.ascontiguousarray(bundle.dataset.evaluation.inputs, dtype=np.float32)
        labels = bundle.dataset.evaluation.labels
        _, host = deploy.run_artifact(artifact, inputs, MeasureSettings(warmup=1, iters=3))
        np.save(work / "inputs.npy", inputs)
        shutil.copy(artifact.path, work / artifact.path.name)
        job = {"runtime": runtime, "artifact": artifact.path.name, "io": artifact.io.to_dict(), "backends": ["xnnpack"]}
        (work / f"{runtime}.job.json").write_text(json.dumps(job))
        host_acc = evaluate(host, host, labels).accuracy
        for cpu in args.cpu or CPUS:
            board, seen = _on_board(cpu, runtime, work)
            fid = evaluate(board, host, labels)
            rows.append(
                {
                    "runtime": runtime,
                    "cpu": cpu,
                    "samples": fid.samples,
                    "host_accuracy": host_acc,
                    "board_accuracy": fid.accuracy,
                    **fid.fidelity.to_dict(),
                    **seen,
                }
            )
    print(f"# {', '.join(labels_of.values())} on the digits evaluation split, board vs host\n")
    print(
        "| runtime | emulated CPU | QEMU_CPU seen | MIDR (mrs) | MIDR (/sys) | int8-relevant HWCAPs | top-1 agreement "
        "| SQNR dB | max abs diff | board acc | host acc |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sqnr = "inf (bit-exact)" if r["sqnr_db"] is None else f"{r['sqnr_db']:.1f}"
        print(
            f"| {r['runtime']} | {r['cpu']} | {r['qemu_cpu']} | {r['mrs_midr']} | {r['sysfs_midr']} "
            f"| {' '.join(r['hwcaps']) or '-'} "
            f"| {r['top1_agreement']:.4f} | {sqnr} | {r['max_abs_err']:.3g} | {r['board_accuracy']:.4f} "
            f"| {r['host_accuracy']:.4f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
