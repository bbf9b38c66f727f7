"""The measuring process: ``python -m nnsweep.bench._child REQUEST.json``, or
:func:`run_request` in a child forked by a warm worker (:mod:`nnsweep.bench._zygote`).

Each measurement runs in a process of its own so that its peak memory is its own,
its thread count is set before any runtime is loaded (ExecuTorch cannot change
it afterwards), and a runtime that crashes fails only this trial.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from nnsweep.bench._harness import MeasureSettings, run_all, time_runner
from nnsweep.core import runtimes
from nnsweep.core.artifact import IOSpec


def _measure(request: dict) -> dict:  # type: ignore[type-arg]
    # CLOCK_MONOTONIC is one clock for every process of the machine.
    start_ms = (time.monotonic() - float(request.get("sent_monotonic", time.monotonic()))) * 1e3
    t_import = time.perf_counter()
    info = runtimes.get(request["runtime"])
    runner_cls = runtimes.load_object(info.runner)
    threads = int(request["threads"])
    runner_cls.set_threads(threads)
    runner = runner_cls(Path(request["artifact"]), IOSpec.from_dict(request["io"]), threads, tuple(request["backends"]))
    inputs = np.load(request["inputs"])
    settings = MeasureSettings(**request["settings"])
    import_ms = (time.perf_counter() - t_import) * 1e3  # the runner's runtime, its threads, the inputs
    timing = time_runner(runner, inputs[:1], settings)
    t0 = time.perf_counter()
    outputs = run_all(runner, inputs)
    np.save(request["outputs"], outputs)
    result = timing.to_dict()
    result["placement"] = runner.placement()
    outputs_ms = (time.perf_counter() - t0) * 1e3
    result["phases_ms"] = {"start": start_ms, "import": import_ms, **timing.phases_ms, "outputs": outputs_ms}
    return {"timing": result}


def main(argv: list[str]) -> int:
    return run_request(Path(argv[1]))


def run_request(request_path: Path) -> int:
    """Measure what ``request_path`` asks and write the result file it names.

    Returns:
        The exit code: 0 measured, 1 failed (the result file holds the error).
    """
    request = json.loads(request_path.read_text())
    result_path = Path(request["result"])
    try:
        result = _measure(request)
        code = 0
    except Exception as exc:  # the process boundary: every failure goes back to the parent as data
        result = {"error": type(exc).__name__, "message": str(exc) or repr(exc), "traceback": traceback.format_exc()}
        code = 1
    result_path.write_text(json.dumps(result))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
