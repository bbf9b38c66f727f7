"""Which of the files ``benchmarks/armnn_files.py`` wrote this Arm NN parses, optimizes for
CpuRef and runs (one inference of zeros). Run it with the Python that has PyArmNN (Debian's
``python3-pyarmnn``): the host's system ``python3`` for its Arm NN, or another suite's in
a chroot (benchmarks/results/coverage.md, "Arm NN versions"). Each file is tried in a process of its
own: Arm NN 20.08 aborts the process on some models.

Usage: python3 benchmarks/armnn_parse.py DIR
"""

import json
import subprocess
import sys

ONE = r"""
import sys, numpy as np, pyarmnn as ann
path = sys.argv[1]
runtime = ann.IRuntime(ann.CreationOptions())
parser = ann.ITfLiteParser()
try:
    network = parser.CreateNetworkFromBinaryFile(path)
    optimized, _ = ann.Optimize(network, [ann.BackendId("CpuRef")], runtime.GetDeviceSpec(), ann.OptimizerOptions())
    net_id, _ = runtime.LoadNetwork(optimized)
    info = parser.GetNetworkInputBindingInfo(0, parser.GetSubgraphInputTensorNames(0)[0])
    shape = tuple(info[1].GetShape()[i] for i in range(info[1].GetNumDimensions()))
    dtype = {ann.DataType_QAsymmS8: np.int8, ann.DataType_QAsymmU8: np.uint8}.get(info[1].GetDataType(), np.float32)
    outputs = [parser.GetNetworkOutputBindingInfo(0, n) for n in parser.GetSubgraphOutputTensorNames(0)]
    runtime.EnqueueWorkload(net_id, ann.make_input_tensors([info], [np.zeros(shape, dtype)]),
                            ann.make_output_tensors(outputs))
    print("ok: parsed, optimized for CpuRef, ran")
except Exception as exc:
    print(f"refused: {str(exc).splitlines()[0][:220]}")
"""


def main() -> int:
    folder = sys.argv[1]
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "python3-pyarmnn"], capture_output=True, text=True
    ).stdout
    print(f"python3-pyarmnn {version or '(not from a Debian package)'}")
    with open(f"{folder}/index.json") as index:
        names = json.load(index)
    for name in names:
        done = subprocess.run([sys.executable, "-c", ONE, f"{folder}/{name}"], capture_output=True, text=True)
        said = [line for line in done.stdout.splitlines() if line.startswith(("ok", "refused"))]
        if said:
            print(f"{name}: {said[-1]}")
        else:
            last = (done.stderr.strip().splitlines() or ["(nothing)"])[-1]
            print(f"{name}: aborted (exit {done.returncode}): {last[:220]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
