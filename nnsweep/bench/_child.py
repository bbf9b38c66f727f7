"""Entry point of the measuring process: ``python -m nnsweep.bench._child REQUEST.json``.

Each measurement runs in a fresh process so that its peak memory is its own,
its thread count is set before any runtime is loaded (ExecuTorch cannot change
it afterwards), and a runtime that crashes fails only this trial.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import numpy as np

from nnsweep import runtimes
from nnsweep.bench._harness import MeasureSettings, run_all, time_runner
from nnsweep.convert._base import IOSpec


def _measure(request: dict) -> dict:  # type: ignore[type-arg]
    info = runtimes.get(request["runtime"])
    runner_cls = runtimes.load_object(info.runner)
    threads = int(request["threads"])
    runner_cls.set_threads(threads)
    runner = runner_cls(Path(request["artifact"]), IOSpec.from_dict(request["io"]), threads, tuple(request["backends"]))
    inputs = np.load(request["inputs"])
    settings = MeasureSettings(**request["settings"])
    timing = time_runner(runner, inputs[:1], settings)
    outputs = run_all(runner, inputs)
    np.save(request["outputs"], outputs)
    return {"timing": timing.to_dict()}


def main(argv: list[str]) -> int:
    request_path = Path(argv[1])
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
