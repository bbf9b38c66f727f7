"""An anchor: Intel Neural Compressor's accuracy-driven tuning beside nnsweep's mixed precision.

Same model (``digits_outlier``), same tolerance (top-1 at most 1 % relative below fp32 on
the evaluation split, INC's ``tolerable_loss=0.01``), same calibration samples (the first
128 of the calibration split, min/max unless a config says otherwise), int8 weights per
channel on both sides. Prints one table (benchmarks/results/anchors.md has the last run's).

INC (``neural-compressor-pt`` 3.10, PyTorch backend, no IPEX here, so its static int8 is
the PT2E path: ``torch.export`` + torchao's ``X86InductorQuantizer``):

* INC 3.x ``autotune`` walks a list of configs (``TuningConfig.config_set``) and stops at
  the first whose accuracy is within ``tolerable_loss``; it has no automatic op-wise
  fallback (INC 2.x's ``basic`` strategy had one). The config lists given to it follow
  INC 2.x's basic strategy, one ``autotune`` call per stage:
  1. INC's own tuning set for static int8 (``StaticQuantConfig.get_config_set_for_tuning()``:
     activations symmetric/asymmetric x kl/minmax, 4 configs);
  2. fallback one layer at a time to fp32 (``set_local(layer, fp32 config)``, the layers
     in execution order) on the best config of stage 1;
  3. (only if 2 fails) accumulated fallback, layers ordered by their stage-2 accuracy.
* Its artifact is measured three ways: compiled as INC says to deploy it
  (``torch.compile``, inductor with freezing; torchao's inductor passes lower the QDQ
  patterns to oneDNN int8 kernels), timed by a plain loop in a fresh process (nnsweep
  has no inductor runtime) with the harness's thread count, warm-up and run count, the
  fp32 model compiled the same way beside it; exported to ONNX (QDQ) and timed by
  nnsweep's harness on ``onnxruntime``; traced to TorchScript for nnsweep's harness on
  ``torch``, which cannot load it (the table says why).

nnsweep (no sweep is run; its mixed-precision procedure is done here step by step):
rank layers with ``nnsweep.sensitivity.ranking`` (``quantize_one``, N + 2
quantize-and-evaluate runs on the calibration split, measured afresh in a temporary
cache), then keep the top K float for K = 0, 1, 2, ... until the evaluation split meets
the tolerance. torch: torch.ao FX, x86 engine, traced and frozen TorchScript
(``float_fallback.fx_prepare``, as nnsweep's converter); onnxruntime: QDQ with ``nodes_to_exclude``
(``float_fallback.ort_quantize_static``). These mixed artifacts are timed by nnsweep's
harness (``measure_in_subprocess``: a fresh process, 1 thread, 5 warm-up and 200 timed
runs), which also returns the outputs the top-1 is computed from. fp32 and whole-model
int8 are ``nnsweep bench`` (its own converters), and so is the chosen K once more as a
cross-check (``--float-layers K``, where the checkout's ``nnsweep bench`` has it).

Setup: INC is kept out of the project's environment (and out of pyproject.toml). All of
``neural-compressor-pt`` 3.10's dependencies are already in the project's venv at the
pinned versions (``pip install --dry-run`` would install only the one wheel), so it is
installed without dependencies into a directory of its own and put on PYTHONPATH:

    .venv/bin/pip install --no-deps --target build/inc-site neural-compressor-pt==3.10
    PYTHONPATH=.:build/inc-site .venv/bin/python benchmarks/anchor_inc.py --json benchmarks/data/anchor_inc.json

(about 3 minutes on the 2-core development machine). ``--skip-inc`` runs nnsweep's side
alone.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

TOLERANCE = 0.01  # relative top-1 loss, INC's tolerable_loss
CALIBRATION = 128  # nnsweep.sensitivity.rank.CALIBRATION_SAMPLES
WARMUP, ITERS = 5, 200  # nnsweep bench's defaults


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _top1(outputs: np.ndarray, labels: np.ndarray) -> float:
    return float((np.asarray(outputs).reshape(len(labels), -1).argmax(1) == labels).mean())


# ---------------------------------------------------------------- nnsweep's harness
def harness(runtime: str, artifact: Path, backends: tuple[str, ...], inputs: np.ndarray, labels: np.ndarray) -> dict:
    """Time ``artifact`` with nnsweep's harness (fresh process, 1 thread) and score its outputs."""
    from nnsweep.bench import MeasureSettings, measure_in_subprocess
    from nnsweep.core.artifact import IOSpec

    timing, outputs = measure_in_subprocess(
        runtime=runtime,
        artifact=artifact,
        io=IOSpec(),
        threads=1,
        backends=backends,
        inputs=inputs,
        settings=MeasureSettings(warmup=WARMUP, iters=ITERS),
    )
    return {
        "top1": _top1(outputs, labels),
        "p50_ms": timing.latency.p50,
        "timed_by": f"nnsweep harness ({runtime})",
        "load": _load(),
    }


def nnsweep_bench(runtime: str, quant: str, *extra: str) -> dict:
    """``nnsweep bench --json`` (nnsweep's own converters): fp32, whole-model int8, or ``--float-layers K``."""
    cmd = [sys.executable, "-m", "nnsweep", "bench", "--model", "digits_outlier", "--runtime", runtime]
    cmd += ["--quant", quant, *extra, "--threads", "1", "--iters", str(ITERS), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    data = json.loads(out[out.index("{") :])
    return {
        "top1": data["accuracy"],
        "p50_ms": data["latency_ms"]["p50"],
        "timed_by": f"nnsweep bench ({runtime})",
        "load": _load(),
        "command": " ".join(["nnsweep", *cmd[3:]]),
    }


# ---------------------------------------------------------------- nnsweep's mixed precision
def _fx_mixed(bundle: Any, keep: Sequence[str]) -> Any:
    import torch
    from torch.ao.quantization.quantize_fx import convert_fx

    from nnsweep.core.config import Calibration, Granularity, QuantConfig, QuantMode
    from nnsweep.runtimes.common import float_fallback
    from nnsweep.runtimes.common.fx import qconfig_mapping

    torch.backends.quantized.engine = "x86"
    quant = QuantConfig(mode=QuantMode.STATIC_INT8, granularity=Granularity.PER_CHANNEL, calibration=Calibration.MINMAX)
    model = copy.deepcopy(bundle.module).eval()
    prepared = float_fallback.fx_prepare(model, qconfig_mapping("x86", quant), keep, (bundle.example_input,))
    with torch.no_grad():
        prepared(torch.from_numpy(bundle.dataset.calibration.inputs[:CALIBRATION]))
        return convert_fx(prepared)


def _torchscript(model: Any, example: Any, path: Path, engine: str | None) -> Path:
    import torch

    from nnsweep.runtimes.torch.runner import META_FILE

    with torch.no_grad():
        frozen = torch.jit.freeze(torch.jit.trace(model, (example,), check_trace=False).eval())
    meta = json.dumps({"engine": engine, "mode": "static_int8"})
    torch.jit.save(frozen, str(path), _extra_files={META_FILE: meta})
    return path


def _ort_mixed(bundle: Any, keep: Sequence[str], tmp: Path, name: str) -> Path:
    from nnsweep.runtimes.common import float_fallback

    source = tmp / "scoped_fp32.onnx"
    if not source.exists():
        float_fallback.export_onnx_scoped(bundle.module, bundle.example_input, source)
    target = tmp / name
    cal = bundle.dataset.calibration.inputs[:CALIBRATION]
    float_fallback.ort_quantize_static(source, target, (cal[i : i + 1] for i in range(len(cal))), keep, True)
    return target


def nnsweep_mixed(bundle: Any, runtime: str, tmp: Path) -> dict:
    """Rank (quantize_one, calibration split), then grow K until the evaluation split meets the tolerance."""
    import onnxruntime as ort
    import torch

    from nnsweep.core.quant import Granularity
    from nnsweep.sensitivity.ranking import ranking

    ev = bundle.dataset.evaluation
    start = time.perf_counter()
    report, hit = ranking(bundle, runtime, Granularity.PER_CHANNEL, tmp / f"cache-{runtime}")
    assert not hit
    order = report.ranked("quantize_one")
    fp32 = _top1(bundle.module(torch.from_numpy(ev.inputs)).detach().numpy(), ev.labels)
    checks: list[dict[str, Any]] = []
    for k in range(len(order) + 1):
        keep = order[:k]
        if runtime == "torch":
            with torch.no_grad():
                top1 = _top1(_fx_mixed(bundle, keep)(torch.from_numpy(ev.inputs)).numpy(), ev.labels)
        else:
            path = _ort_mixed(bundle, keep, tmp, f"check{k}.onnx")
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            name = session.get_inputs()[0].name
            top1 = _top1(
                np.concatenate([session.run(None, {name: ev.inputs[i : i + 1]})[0] for i in range(len(ev))]), ev.labels
            )
        checks.append({"k": k, "float": keep, "top1": top1})
        print(f"  nnsweep {runtime}: K={k} {keep} top-1 {100 * top1:.1f} %", flush=True)
        if (fp32 - top1) / fp32 <= TOLERANCE:
            break
    wall = time.perf_counter() - start
    keep = list(checks[-1]["float"])
    if runtime == "torch":
        artifact = _torchscript(_fx_mixed(bundle, keep), bundle.example_input, tmp / "nnsweep_mixed.pt", "x86")
        measured = harness("torch", artifact, ("x86",), ev.inputs, ev.labels)
    else:
        artifact = _ort_mixed(bundle, keep, tmp, "nnsweep_mixed.onnx")
        measured = harness("onnxruntime", artifact, ("cpu",), ev.inputs, ev.labels)
    return {
        **measured,
        "found": keep,
        "trials": report.evaluations + len(checks),
        "trials_detail": f"{report.evaluations} ranking runs (calibration split) + {len(checks)} checks of K",
        "wall_s": wall,
        "ranking": order,
        "ranking_s": report.seconds,
        "checks": checks,
    }


# ---------------------------------------------------------------- Intel Neural Compressor
def inc_tune(bundle: Any) -> dict:
    """INC 3.10 autotune in the stages of INC 2.x's basic strategy; returns what it found and the quantized model."""
    import torch
    from neural_compressor.torch.export import export
    from neural_compressor.torch.quantization import StaticQuantConfig, TuningConfig, autotune
    from neural_compressor.torch.quantization.config import INT8StaticQuantConfig

    from nnsweep.sensitivity.rank import quantizable_layers

    ev = bundle.dataset.evaluation
    inputs = torch.from_numpy(ev.inputs)
    cal = torch.from_numpy(bundle.dataset.calibration.inputs[:CALIBRATION])
    example = (bundle.example_input,)
    evaluations: list[float] = []

    def eval_fn(model: Any) -> float:  # the exported graph is specialised to batch 1
        with torch.no_grad():
            preds = [int(model(inputs[i : i + 1]).argmax()) for i in range(len(inputs))]
        evaluations.append(float((np.array(preds) == ev.labels).mean()))
        return evaluations[-1]

    def run_fn(model: Any) -> None:
        with torch.no_grad():
            for i in range(len(cal)):
                model(cal[i : i + 1])

    def fp32() -> INT8StaticQuantConfig:
        return INT8StaticQuantConfig(w_dtype="fp32", act_dtype="fp32")

    def tune(configs: list, label: str) -> tuple[Any, list[float], float]:
        t0 = time.perf_counter()
        evaluations.clear()
        model = export(copy.deepcopy(bundle.module).eval(), example_inputs=example)
        q = autotune(
            model,
            TuningConfig(config_set=configs, tolerable_loss=TOLERANCE, max_trials=len(configs)),
            eval_fn=eval_fn,
            run_fn=run_fn,
            example_inputs=example,
        )
        seconds = time.perf_counter() - t0
        baseline, results = evaluations[0], list(evaluations[1:])
        print(
            f"  INC {label}: {len(results)} trials, {seconds:.1f} s, fp32 {baseline:.4f}, top-1 {results}", flush=True
        )
        return q, results, seconds

    start = time.perf_counter()
    stages: list[dict] = []
    # Stage 1: INC's own tuning set for static int8 (one config with list-valued fields, 4 combinations).
    # TuningConfig documents "a single config or a list", but 3.10's autotune iterates config_set: pass a list.
    grid = StaticQuantConfig.get_config_set_for_tuning()
    combos = list(itertools.product(grid.act_sym, grid.act_algo))
    configs = [INT8StaticQuantConfig(act_sym=s, act_algo=a) for s, a in combos]
    q, results, seconds = tune(configs, "stage 1 (INC's tuning set)")
    baseline = evaluations[0]
    stages.append(
        {
            "stage": "INC tuning set",
            "configs": [f"act_sym={s} act_algo={a}" for s, a in combos],
            "top1": results,
            "seconds": seconds,
        }
    )
    best = int(np.argmax(results))
    base = {"act_sym": combos[best][0], "act_algo": combos[best][1]}
    found: list[str] = []
    met = (baseline - max(results)) / baseline <= TOLERANCE
    layers = quantizable_layers(bundle.module, bundle.example_input)
    if not met:  # Stage 2: fall back one layer at a time
        configs = []
        for layer in layers:
            config = INT8StaticQuantConfig(**base)
            config.set_local(layer, fp32())
            configs.append(config)
        q, results, seconds = tune(configs, "stage 2 (one layer float)")
        stages.append(
            {"stage": "fallback one by one", "configs": layers[: len(results)], "top1": results, "seconds": seconds}
        )
        met = (baseline - max(results)) / baseline <= TOLERANCE
        if met:
            found = [layers[int(np.argmax(results))]]
        elif len(results) == len(layers):  # Stage 3: accumulated fallback, most helpful first
            order = [layers[i] for i in np.argsort(results, kind="stable")[::-1]]
            configs = []
            for k in range(2, len(order) + 1):
                config = INT8StaticQuantConfig(**base)
                for layer in order[:k]:
                    config.set_local(layer, fp32())
                configs.append(config)
            q, results, seconds = tune(configs, "stage 3 (accumulated fallback)")
            stages.append(
                {
                    "stage": "accumulated fallback",
                    "configs": [order[: k + 2] for k in range(len(results))],
                    "top1": results,
                    "seconds": seconds,
                }
            )
            met = (baseline - max(results)) / baseline <= TOLERANCE
            found = order[: int(np.argmax(results)) + 2]
    wall = time.perf_counter() - start
    trials = sum(len(s["top1"]) for s in stages)
    return {
        "model": q,
        "met": met,
        "found": found,
        "base_config": base,
        "tuning_top1": max(stages[-1]["top1"]),
        "fp32_top1": baseline,
        "trials": trials,
        "trials_detail": " + ".join(str(len(s["top1"])) for s in stages) + f" configs ({len(stages)} autotune calls, "
        f"each also evaluates fp32 once)",
        "wall_s": wall,
        "stages": stages,
    }


def inductor(module: Any, bundle: Any, tmp: Path, name: str) -> dict:
    """Compile ``module`` with inductor in a fresh process and time it with a plain loop (see the docstring)."""
    import torch

    ev = bundle.dataset.evaluation
    try:
        program_path = tmp / f"{name}.pt2"
        torch.export.save(torch.export.export(module, (bundle.example_input,), strict=False), str(program_path))
        np.save(tmp / "inputs.npy", ev.inputs)
        cmd = [sys.executable, __file__, "--inductor-child", str(program_path), str(tmp / "inputs.npy")]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        return {
            "top1": _top1(np.load(res["outputs"]), ev.labels),
            "p50_ms": res["p50_ms"],
            "compile_s": res["compile_s"],
            "timed_by": "plain loop, fresh process (compile, then 5 + 200 runs)",
            "load": _load(),
        }
    except Exception as exc:
        detail = getattr(exc, "stderr", "") or ""
        return {"error": f"{type(exc).__name__}: {exc} {detail[-500:]}"[:1000]}


def inc_artifacts(q: Any, bundle: Any, tmp: Path) -> dict[str, dict]:
    """The INC model measured three ways (see the module docstring)."""
    import torch

    ev = bundle.dataset.evaluation
    example = bundle.example_input
    out: dict[str, dict] = {}
    try:
        path = _torchscript(q, example, tmp / "inc.pt", None)
        out["torchscript"] = harness("torch", path, (), ev.inputs, ev.labels)
    except Exception as exc:
        out["torchscript"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    try:
        program = torch.onnx.export(q, (example,), dynamo=True, opset_version=18, external_data=False, verbose=False)
        assert program is not None
        path = tmp / "inc.onnx"
        program.save(str(path))
        out["onnx"] = harness("onnxruntime", path, ("cpu",), ev.inputs, ev.labels)
    except Exception as exc:
        out["onnx"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    out["inductor"] = inductor(q, bundle, tmp, "inc")
    return out


def inductor_child(program: str, inputs_path: str) -> None:
    """Fresh process: load the INC program, compile it as INC recommends, time it like the harness."""
    import torch
    import torch._inductor.config as inductor_config
    import torchao.quantization.pt2e.quantize_pt2e

    # Importing the quantizer module installs torchao's inductor passes that lower the QDQ patterns to
    # oneDNN int8 kernels (qconv2d_pointwise, qlinear_pointwise); without it inductor runs them in float.
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer  # noqa: F401

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    inductor_config.freezing = True
    module = torch.export.load(program).module()
    inputs = torch.from_numpy(np.load(inputs_path))
    x = inputs[:1]
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled = torch.compile(module)
        compiled(x)
        compile_s = time.perf_counter() - t0
        outputs = np.concatenate([compiled(inputs[i : i + 1]).numpy() for i in range(len(inputs))])
        for _ in range(WARMUP):
            compiled(x)
        times = []
        for _ in range(ITERS):
            t = time.perf_counter()
            compiled(x)
            times.append(time.perf_counter() - t)
    out = str(Path(inputs_path).with_name("inductor_outputs.npy"))
    np.save(out, outputs)
    print(json.dumps({"p50_ms": float(np.median(times)) * 1e3, "compile_s": compile_s, "outputs": out}))


# ---------------------------------------------------------------- table
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def table(rows: list[dict]) -> str:
    head = "| tool | runtime | found (float layers / config) | top-1 | p50 ms | timed by | trials | wall s "
    head += "| load (1/5/15 min) |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        p50 = "-" if r.get("p50_ms") is None else f"{r['p50_ms']:.3f}"
        wall = "-" if r.get("wall_s") is None else f"{r['wall_s']:.1f}"
        lines.append(
            f"| {r['tool']} | {r['runtime']} | {r['found']} | {_pct(r.get('top1'))} | {p50} | {r.get('timed_by', '-')} "
            f"| {r.get('trials', '-')} | {wall} | {r.get('load', '-')} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--skip-inc", action="store_true", help="nnsweep's side only")
    parser.add_argument("--inductor-child", nargs=2, metavar=("PROGRAM", "INPUTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inductor_child:
        inductor_child(*args.inductor_child)
        return 0

    import torch

    from nnsweep.models import load_model

    torch.set_num_threads(1)
    results: dict[str, Any] = {"load_start": _load(), "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    from importlib.metadata import PackageNotFoundError, version

    for package in ("torch", "torchao", "onnxruntime", "neural-compressor-pt"):
        try:
            results[f"version_{package}"] = version(package)
        except PackageNotFoundError:
            results[f"version_{package}"] = None
    bundle = load_model("digits_outlier")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="anchor-inc-") as tmpdir:
        tmp = Path(tmpdir)
        if not args.skip_inc:
            print(f"INC autotune (load {_load()})", flush=True)
            inc = inc_tune(bundle)
            measured = inc_artifacts(inc.pop("model"), bundle, tmp)
            inc["measured"] = measured
            results["inc"] = inc
            found = ", ".join(inc["found"]) or "none"
            cfg = f"float: {found} (act_sym={inc['base_config']['act_sym']}, {inc['base_config']['act_algo']})"
            if not inc["met"]:
                cfg += "; tolerance NOT met"
            runtime_name = {
                "torchscript": "torch (TorchScript, nnsweep torch runner)",
                "onnx": "onnxruntime 1.32 (ONNX export of the INC model)",
                "inductor": "torch 2.14 torch.compile inductor (INC's deployment)",
            }
            for i, kind in enumerate(("inductor", "onnx", "torchscript")):
                m = measured[kind]
                error = m.get("error", "").replace("BenchmarkError: BenchmarkError:", "BenchmarkError:")
                error = " ".join(error.split())
                if len(error) > 160:
                    error = error[:160].rsplit(" ", 1)[0] + " ..."
                row = {
                    "tool": "INC 3.10 autotune",
                    "runtime": runtime_name[kind],
                    "found": cfg if i == 0 else '"',
                    **({"timed_by": "failed: " + error} if error else m),
                }
                if i == 0:
                    row.update(trials=f"{inc['trials']} ({inc['trials_detail']})", wall_s=inc["wall_s"])
                rows.append(row)
            reference = inductor(copy.deepcopy(bundle.module).eval(), bundle, tmp, "fp32")
            results["inductor_fp32"] = reference
            rows.append({"tool": "reference: fp32", "runtime": runtime_name["inductor"], "found": "-", **reference})
        for runtime, label in (
            ("torch", "torch 2.14 FX x86, TorchScript"),
            ("onnxruntime", "onnxruntime 1.32 CPU, QDQ"),
        ):
            print(f"nnsweep {runtime} (load {_load()})", flush=True)
            fp32 = nnsweep_bench(runtime, "fp32")
            rows.append({"tool": "nnsweep fp32", "runtime": label, "found": "-", **fp32})
            whole = nnsweep_bench(runtime, "static_int8")
            rows.append({"tool": "nnsweep whole int8", "runtime": label, "found": "all int8", **whole})
            mixed = nnsweep_mixed(bundle, runtime, tmp)
            rows.append(
                {
                    "tool": "nnsweep mixed",
                    "runtime": label,
                    **mixed,
                    "found": f"K={len(mixed['found'])}: float " + ", ".join(mixed["found"]),
                    "trials": f"{mixed['trials']} ({mixed['trials_detail']})",
                }
            )
            k = str(len(mixed["found"]))
            try:  # the same K through nnsweep's converters (bench --float-layers, where this checkout has it)
                cli = nnsweep_bench(runtime, "static_int8", "--float-layers", k)
                rows.append(
                    {"tool": "nnsweep mixed (bench --float-layers)", "runtime": label, "found": f"K={k}", **cli}
                )
            except subprocess.CalledProcessError as exc:
                cli = {"error": " ".join((exc.stderr or "").split())[-300:]}
            results[f"nnsweep_{runtime}"] = {"fp32": fp32, "whole_int8": whole, "mixed": mixed, "mixed_cli": cli}
    results["rows"] = rows
    results["load_end"] = _load()
    text = table(rows)
    print(text)
    print(f"load average start {results['load_start']}, end {results['load_end']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
