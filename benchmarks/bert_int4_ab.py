"""In-process, interleaved latency A/B of artifacts that ``nnsweep bench --json`` built.

    python benchmarks/bert_int4_ab.py RUNTIME LABEL=bench.json [LABEL=bench.json ...]

RUNTIME is executorch, onnxruntime or litert. Each LABEL's artifact is the ``artifact``
path of its bench JSON. All artifacts are loaded in this one process (1 thread, the same
seeded token ids, shape (1, 16)), warmed up, then timed in 40 rounds of 100 calls, the
order of the artifacts reversed every other round; each round's median is one sample.
A busy machine slows every artifact of a round alike, which separate processes do not
(benchmarks/results/bert_int4_sweep.md). Prints each label's median, minimum and first
quartile of its 40 round medians, in microseconds.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROUNDS, CALLS, WARMUP = 40, 100, 50


def _callables(runtime: str, paths: dict[str, str], ids: np.ndarray) -> dict:
    calls = {}
    if runtime == "executorch":
        import torch

        from nnsweep.runtimes.executorch.runner import bindings

        b = bindings()
        b._unsafe_reset_threadpool(1)
        x = torch.from_numpy(ids)
        for label, path in paths.items():
            program = b._load_program(path, program_verification=b.Verification.InternalConsistency)
            method = program.load_method("forward")
            calls[label] = lambda m=method, p=program: m([x])
    elif runtime == "onnxruntime":
        import onnxruntime as ort

        from nnsweep.runtimes.onnxruntime.runner import session_options

        for label, path in paths.items():
            session = ort.InferenceSession(path, session_options(1), providers=["CPUExecutionProvider"])
            name = session.get_inputs()[0].name
            calls[label] = lambda s=session, n=name: s.run(None, {n: ids})
    elif runtime == "litert":
        from ai_edge_litert.interpreter import Interpreter

        for label, path in paths.items():
            interpreter = Interpreter(model_path=path, num_threads=1)  # XNNPACK by default
            interpreter.allocate_tensors()
            detail = interpreter.get_input_details()[0]
            interpreter.set_tensor(detail["index"], ids.astype(detail["dtype"]))
            calls[label] = interpreter.invoke
    else:
        raise SystemExit(f"unknown runtime {runtime}")
    return calls


def main() -> None:
    runtime, pairs = sys.argv[1], sys.argv[2:]
    paths = {}
    for pair in pairs:
        label, _, bench_json = pair.partition("=")
        paths[label] = json.loads(Path(bench_json).read_text())["artifact"]
    ids = np.random.default_rng(0).integers(0, 1000, size=(1, 16)).astype(np.int64)
    calls = _callables(runtime, paths, ids)
    for call in calls.values():
        for _ in range(WARMUP):
            call()
    labels = list(calls)
    rounds: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(ROUNDS):
        for label in labels if r % 2 == 0 else labels[::-1]:
            call, samples = calls[label], []
            for _ in range(CALLS):
                t0 = time.perf_counter()
                call()
                samples.append(time.perf_counter() - t0)
            rounds[label].append(statistics.median(samples) * 1e6)
    for label in labels:
        r = sorted(rounds[label])
        median, low, p25 = statistics.median(r), r[0], r[len(r) // 4]
        print(f"{runtime:12s} {label:14s} median {median:6.1f} us  min {low:6.1f}  p25 {p25:6.1f}")


if __name__ == "__main__":
    main()
