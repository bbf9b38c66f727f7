"""Mixed precision on ``digits_outlier``: sensitivity, then fp32 / int8 / mixed per runtime.

1. Trains (or loads from --cache) the ``digits_outlier`` built-in and reports the
   training time when it trained.
2. Per-layer sensitivity (:mod:`nnsweep.sensitivity.rank`, both methods, per-tensor int8)
   through ONNX Runtime's quantizer and torch.ao FX (x86 engine), scored on the
   calibration split; wall time of each.
3. For each runtime: fp32, whole-model static int8 (per tensor, per channel) and
   mixed precision keeping the K = 1, 2, 3 most sensitive layers float (the
   ``quantize_one`` ranking: ONNX Runtime's for ONNX Runtime, ExecuTorch and LiteRT,
   torch's for torch) in float, per tensor and per channel. Top-1 on the
   evaluation split, latency as the median of --runs single-sample runs on one
   thread (after 20 warm-up runs).

Runtimes: ``ort`` (ONNX Runtime CPU EP, QDQ), ``torch`` (FX, x86 engine, traced and
frozen TorchScript), ``executorch`` (PT2E XNNPACKQuantizer, XNNPACK delegate),
``litert`` (litert-torch PT2E, LiteRT interpreter with XNNPACK).

Usage: .venv/bin/python benchmarks/mixed_precision.py [--runtimes ort,torch,executorch,litert]
       [--runs 200] [--cache DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nnsweep.models import ModelBundle, Split
from nnsweep.models.digits_outlier import load_digits_outlier
from nnsweep.runtimes.common import float_fallback
from nnsweep.runtimes.onnxruntime import sensitivity as ort_ranking
from nnsweep.runtimes.torch import sensitivity as torch_evaluators
from nnsweep.sensitivity import rank as sensitivity

WARMUP = 20
_ET_THREADS_SET: list[int] = []
KS = (1, 2, 3)


def _latency(run: Callable[[], Any], runs: int) -> float:
    for _ in range(WARMUP):
        run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _top1(predict: Callable[[np.ndarray], np.ndarray], split: Split) -> float:
    preds = [int(np.argmax(predict(split.inputs[i : i + 1]))) for i in range(len(split))]
    return float((np.array(preds) == split.labels).mean())


def _measure(predict: Callable[[np.ndarray], np.ndarray], split: Split, runs: int) -> tuple[float, float]:
    x = split.inputs[:1]
    return _top1(predict, split), _latency(lambda: predict(x), runs)


def _calibration(bundle: ModelBundle) -> np.ndarray:
    return bundle.dataset.calibration.inputs[: sensitivity.CALIBRATION_SAMPLES]


# ---------------------------------------------------------------- ONNX Runtime
def _ort(bundle: ModelBundle, keep: Sequence[str] | None, per_channel: bool, tmp: Path) -> Callable:
    import onnxruntime as ort

    source = tmp / "fp32.onnx"
    if not source.exists():
        float_fallback.export_onnx_scoped(bundle.module, bundle.example_input, source)
    path = source
    if keep is not None:
        path = tmp / "int8.onnx"
        cal = _calibration(bundle)
        float_fallback.ort_quantize_static(source, path, (cal[i : i + 1] for i in range(len(cal))), keep, per_channel)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x})[0]


# ---------------------------------------------------------------- torch (FX, x86)
def _torch(bundle: ModelBundle, keep: Sequence[str] | None, per_channel: bool, tmp: Path) -> Callable:
    from torch.ao.quantization.quantize_fx import convert_fx

    from nnsweep.core.config import Calibration, Granularity, QuantConfig, QuantMode
    from nnsweep.runtimes.common.fx import qconfig_mapping as _qconfig_mapping

    torch.backends.quantized.engine = "x86"
    model: torch.nn.Module = copy.deepcopy(bundle.module).eval()
    if keep is not None:
        quant = QuantConfig(
            mode=QuantMode.STATIC_INT8,
            granularity=Granularity.PER_CHANNEL if per_channel else Granularity.PER_TENSOR,
            calibration=Calibration.MINMAX,
        )
        prepared = float_fallback.fx_prepare(model, _qconfig_mapping("x86", quant), keep, (bundle.example_input,))
        with torch.no_grad():
            prepared(torch.from_numpy(_calibration(bundle)))
        model = convert_fx(prepared)
    with torch.no_grad():
        frozen = torch.jit.freeze(torch.jit.trace(model, bundle.example_input, check_trace=False).eval())

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return frozen(torch.from_numpy(x)).numpy()

    return predict


# ---------------------------------------------------------------- PT2E (ExecuTorch, LiteRT)
def _pt2e(bundle: ModelBundle, quantizer: Any, keep: Sequence[str], fold_quantize: bool = True) -> torch.nn.Module:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    float_fallback.pt2e_keep_float(quantizer, keep)
    graph = torch.export.export(copy.deepcopy(bundle.module).eval(), (bundle.example_input,), strict=False)
    prepared = prepare_pt2e(graph.module(check_guards=False), quantizer)
    cal = torch.from_numpy(_calibration(bundle))
    with torch.no_grad():
        for i in range(len(cal)):  # the exported graph is specialised to batch 1
            prepared(cal[i : i + 1])
    return convert_pt2e(prepared, fold_quantize=fold_quantize)


def _executorch(bundle: ModelBundle, keep: Sequence[str] | None, per_channel: bool, tmp: Path) -> Callable:
    import executorch.kernels.quantized  # noqa: F401  (quantize/dequantize outside the delegate)
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    if not _ET_THREADS_SET:  # one thread, as the other runtimes; resizing after a load crashes
        _unsafe_reset_threadpool(1)
        _ET_THREADS_SET.append(1)
    model: torch.nn.Module = copy.deepcopy(bundle.module).eval()
    if keep is not None:
        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=per_channel))
        model = _pt2e(bundle, quantizer, keep)
    program = torch.export.export(model, (bundle.example_input,), strict=False)
    edge = to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    path = tmp / "model.pte"
    path.write_bytes(edge.to_executorch().buffer)
    program = Runtime.get().load_program(path)  # a Method does not keep its Program alive: run does

    def run(x: np.ndarray) -> np.ndarray:
        method = program.load_method("forward")  # the program's own, loaded once and kept by it
        return method.execute([torch.from_numpy(x)])[0].numpy()  # type: ignore[no-any-return,union-attr]

    return run


def _litert(bundle: ModelBundle, keep: Sequence[str] | None, per_channel: bool, tmp: Path) -> Callable:
    import litert_torch
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.quant_config import QuantConfig as LiteRTQuantConfig

    from nnsweep.runtimes.litert.runner import interpreter

    args = (bundle.example_input,)
    path = tmp / "model.tflite"
    with contextlib.redirect_stdout(io.StringIO()):  # litert-torch prints progress
        if keep is None:
            edge = litert_torch.convert(copy.deepcopy(bundle.module).eval(), args)
        else:
            config = pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=per_channel)
            quantizer = pt2e_quantizer.PT2EQuantizer().set_global(config)
            graph = _pt2e(bundle, quantizer, keep, fold_quantize=False)  # as nnsweep's LiteRT converter
            edge = litert_torch.convert(graph, args, quant_config=LiteRTQuantConfig(pt2e_quantizer=quantizer))
        edge.export(str(path))
    interp = interpreter(path, ("xnnpack", "cpu"), 1)
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    in_scale, in_zero = inp["quantization"]
    out_scale, out_zero = out["quantization"]

    # litert-torch's int8 models take and return int8 (nnsweep's "full" interface); quantize and
    # dequantize here rather than with nnsweep.runtimes.common.tflite.float_interface, which requires both
    # ends quantized (a model whose first layer is kept float has a float input).
    def predict(x: np.ndarray) -> np.ndarray:
        if inp["dtype"] != np.float32:
            x = np.clip(np.round(x / in_scale) + in_zero, -128, 127).astype(inp["dtype"])
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        y = interp.get_tensor(out["index"])
        return y if out["dtype"] == np.float32 else (y.astype(np.float32) - out_zero) * out_scale

    return predict


BUILDERS: dict[str, Callable[..., Callable]] = {
    "ort": _ort,
    "torch": _torch,
    "executorch": _executorch,
    "litert": _litert,
}


def _sensitivities(bundle: ModelBundle) -> dict[str, Any]:
    layers = sensitivity.quantizable_layers(bundle.module, bundle.example_input)
    split = bundle.dataset.calibration
    out: dict[str, Any] = {}
    for name, evaluator in (
        ("ort", ort_ranking.onnxruntime_evaluator(bundle, split)),
        ("torch", torch_evaluators.torch_fx_evaluator(bundle, split)),
    ):
        report = sensitivity.measure(layers, evaluator)
        out[name] = {
            "seconds": round(report.seconds, 1),
            "evaluations": report.evaluations,
            "whole_int8": report.whole_int8,
            "all_float": report.all_float,
            "layers": {e.layer: {"float_one": e.float_one, "quantize_one": e.quantize_one} for e in report.layers},
            "ranked_quantize_one": report.ranked("quantize_one"),
            "ranked_float_one": report.ranked("float_one"),
        }
        print(f"sensitivity {name}: {report.seconds:.1f} s, {report.evaluations} quantize+evaluate runs", flush=True)
        print(f"  whole int8 {report.whole_int8:.3f}, all candidates float {report.all_float:.3f}")
        for e in report.layers:
            print(f"  {e.layer:14s} float_one {e.float_one:.3f}  quantize_one {e.quantize_one:.3f}")
        print(f"  ranked (quantize_one): {report.ranked('quantize_one')[:3]}")
        print(f"  ranked (float_one):    {report.ranked('float_one')[:3]}", flush=True)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", default="ort,torch,executorch,litert")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=None, help="weight cache (default: train now)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results: dict[str, Any] = {"load_average_start": os.getloadavg()}

    start = time.perf_counter()
    bundle = load_digits_outlier(cache_dir=args.cache)
    results["load_seconds"] = round(time.perf_counter() - start, 1)
    print(f"digits_outlier loaded in {results['load_seconds']} s", flush=True)

    results["sensitivity"] = _sensitivities(bundle)
    ranking = {
        rt: results["sensitivity"]["torch" if rt == "torch" else "ort"]["ranked_quantize_one"] for rt in BUILDERS
    }
    rows = []
    ev = bundle.dataset.evaluation
    for runtime in args.runtimes.split(","):
        build = BUILDERS[runtime]
        variants: list[tuple[str, Sequence[str] | None, bool]] = [("fp32", None, False)]
        for per_channel in (False, True):
            gran = "per-channel" if per_channel else "per-tensor"
            variants.append((f"int8 {gran}", [], per_channel))
            variants += [(f"mixed K={k} {gran}", ranking[runtime][:k], per_channel) for k in KS]
        for label, keep, per_channel in variants:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                predict = build(bundle, keep, per_channel, Path(tmp))
                build_s = time.perf_counter() - t0
                top1, ms = _measure(predict, ev, args.runs)
            row = {"runtime": runtime, "variant": label, "float_layers": list(keep or []), "top1": top1, "ms": ms}
            rows.append(row)
            print(
                f"{runtime:10s} {label:24s} top-1 {100 * top1:5.1f} %  {ms:.3f} ms  (built in {build_s:.1f} s)"
                f"  float: {', '.join(keep or []) or '-'}",
                flush=True,
            )
    results["rows"] = rows
    results["load_average_end"] = os.getloadavg()
    print(f"load average start {results['load_average_start']}, end {results['load_average_end']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
