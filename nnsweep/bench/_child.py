"""The measuring process: ``python -m nnsweep.bench._child REQUEST.json``, or
:func:`run_request` in a child forked by a warm worker (:mod:`nnsweep.bench._zygote`).

Each measurement runs in a process of its own so that its peak memory is its own,
its thread count is set before any runtime is loaded (ExecuTorch cannot change
it afterwards), and a runtime that crashes fails only this trial.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench._harness import MeasureSettings, Timing, _peak_rss_mb, _rss_mb, run_all, time_runner
from nnsweep.bench._stats import LatencyStats
from nnsweep.core import runtimes
from nnsweep.core.artifact import DecoderShape, IOSpec
from nnsweep.core.metrics import PREFILL, TOKENS_PER_S


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
    if request.get("decoder"):
        return _measure_decoder(request, runner, inputs, settings, {"start": start_ms, "import": import_ms})
    timing = time_runner(runner, inputs[:1], settings)
    t0 = time.perf_counter()
    outputs = run_all(runner, inputs)
    np.save(request["outputs"], outputs)
    result = timing.to_dict()
    result["placement"] = runner.placement()
    outputs_ms = (time.perf_counter() - t0) * 1e3
    result["phases_ms"] = {"start": start_ms, "import": import_ms, **timing.phases_ms, "outputs": outputs_ms}
    return {"timing": result}


def _measure_decoder(
    request: dict,  # type: ignore[type-arg]
    prefill: Any,
    text: np.ndarray,
    settings: MeasureSettings,
    phases: dict[str, float],
) -> dict:  # type: ignore[type-arg]
    """A decoder language model's two graphs: its latency is one decode step's (the timed
    samples), its prefill and throughput are ``figures``, its outputs the logits at every
    position of ``text`` (:mod:`nnsweep.bench.decoding`)."""
    from nnsweep.bench.decoding import DecodeSettings, teacher_forced_logits, time_decoder

    shape = DecoderShape.from_dict(request["decoder"])
    decode = type(prefill)(prefill.path.with_name(shape.decode_file), IOSpec(), prefill.threads, prefill.backends)
    rss_before = _rss_mb()
    t0 = time.perf_counter()
    prefill.load()
    decode.load()
    t1 = time.perf_counter()
    decode_settings = DecodeSettings(prefills=settings.iters, warmup=settings.warmup)
    samples = time_decoder(prefill, decode, text[: shape.prompt_len], shape.cache, decode_settings)
    t2 = time.perf_counter()
    np.save(request["outputs"], teacher_forced_logits(prefill, decode, text, shape.prompt_len, shape.cache))
    t3 = time.perf_counter()
    timing = Timing(
        load_ms=(t1 - t0) * 1e3,
        first_inference_ms=samples.first_ms,
        latency=LatencyStats.from_samples(list(samples.decode_ms)),
        samples_ms=samples.decode_ms,
        peak_rss_mb=_peak_rss_mb(),
        rss_before_load_mb=rss_before,
        threads=prefill.threads,
        loadavg_1m=os.getloadavg()[0],
        phases_ms={**phases, "load": (t1 - t0) * 1e3, "timed": (t2 - t1) * 1e3, "outputs": (t3 - t2) * 1e3},
        figures={
            PREFILL: float(np.median(samples.prefill_ms)),
            TOKENS_PER_S: len(samples.decode_ms) / (sum(samples.decode_ms) / 1000.0),
        },
    )
    return {"timing": timing.to_dict()}


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
