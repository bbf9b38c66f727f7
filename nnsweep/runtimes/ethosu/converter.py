"""Arm Ethos-U NPUs: ExecuTorch's Arm backend, with Vela compiling on the host.

The model is quantized with the Arm backend's own quantizer (the NPU runs integer
graphs only), lowered with ``EthosUPartitioner`` (what the NPU cannot take falls
through to the CPU's portable kernels), and Vela compiles each delegated partition
for the configured Ethos-U. Vela's summary gives **estimates** — cycles, inference
time, SRAM and flash use, NPU vs CPU operators — which the artifact records as
estimates, never as measurements. The integer TOSA graph Vela consumed travels
with the artifact, so its accuracy can be computed for real on the host with the
TOSA reference model.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import re
import tempfile
from pathlib import Path
from typing import Any

from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import DeploymentConfig, Granularity, Interface, QuantMode
from nnsweep.core.errors import ConversionError
from nnsweep.models import ModelBundle
from nnsweep.runtimes.common.converter import ConversionResult, Stages, native_output_to_debug_log
from nnsweep.runtimes.common.partition import LimitedPartitioner, report_from_program
from nnsweep.runtimes.common.pt2e import export, exported_program, quantize, quantize_io

__all__ = ["TOSA_IO", "TOSA_SIDECAR", "VELA_LAYERS", "convert_ethos_u", "read_vela_layers", "read_vela_summary"]

_log = logging.getLogger(__name__)

TOSA_SIDECAR = "tosa"
TOSA_IO = "tosa_io"
VELA_LAYERS = "vela_layers"


def read_vela_summary(directory: Path, stdout: str) -> dict[str, float]:
    """Vela's estimates from the summary CSVs it writes (one per compiled partition,
    summed) and the operator counts it prints. All figures are estimates."""
    rows = [
        row
        for path in sorted(directory.rglob("*_summary_*.csv"))
        for row in csv.DictReader(path.read_text().splitlines())
    ]
    if not rows:
        raise ConversionError("Vela wrote no summary: nothing was compiled for the NPU")

    def total(key: str) -> float:
        return sum(float(row.get(key) or 0.0) for row in rows)

    estimates = {
        "inference_time_ms": total("inference_time") * 1000,
        "cycles_total": total("cycles_total"),
        "cycles_npu": total("cycles_npu"),
        "sram_kib": max(float(row.get("sram_memory_used") or 0.0) for row in rows),
        "flash_kib": total("on_chip_flash_memory_used") + total("off_chip_flash_memory_used"),
        "macs": total("nn_macs"),
        "npu_clock_mhz": float(rows[0].get("core_clock") or 0.0) / 1e6,
        "vela_partitions": float(len(rows)),
    }
    for kind in ("CPU", "NPU"):
        counts = re.findall(rf"{kind} operators = (\d+)", stdout)
        if counts:
            estimates[f"{kind.lower()}_operators"] = float(sum(int(c) for c in counts))
    return estimates


def read_vela_layers(directory: Path) -> list[dict[str, object]]:
    """Vela's per-layer estimate (``--verbose-performance``'s ``*_per-layer.csv``, one per
    compiled partition): each NPU operator's name, its kind and its estimated cycles."""
    layers: list[dict[str, object]] = []
    for path in sorted(directory.rglob("*_per-layer.csv")):
        for row in csv.DictReader(path.read_text().splitlines()):
            kind = row.get("NNG Operator") or next((v for k, v in row.items() if k.endswith("_operator")), "") or "?"
            layers.append({"name": row.get("Name") or kind, "kind": kind, "cycles": float(row.get("Op Cycles") or 0.0)})
    return layers


def _quantizer(target: str, config: DeploymentConfig, spec: Any) -> Any:
    from executorch.backends.arm.quantizer import (
        EthosUQuantizer,
        get_symmetric_a16w8_quantization_config,
        get_symmetric_quantization_config,
    )

    q = config.quant
    if q.mode is QuantMode.A16W8:  # int16 activations: the TOSA INT profile's int16 extension, which Vela takes
        return EthosUQuantizer(spec).set_global(get_symmetric_a16w8_quantization_config(is_per_channel=True))
    return EthosUQuantizer(spec).set_global(
        get_symmetric_quantization_config(
            is_per_channel=q.granularity is Granularity.PER_CHANNEL, is_qat=q.mode is QuantMode.QAT_INT8
        )
    )


def _delegate_io(program: Any) -> dict[str, float] | None:
    """The quantization parameters around the single NPU partition when it is the whole
    model (float -> quantize -> NPU -> dequantize -> float); ``None`` otherwise."""
    nodes = [n for n in program.graph_module.graph.nodes if n.op == "call_function"]
    delegates = [n for n in nodes if "executorch_call_delegate" in str(n.target)]
    if len(delegates) != 1:
        return None
    quantize = delegates[0].args[1] if len(delegates[0].args) > 1 else None
    dequantize = [n for n in nodes if "dequantize_per_tensor" in str(n.target)]
    if quantize is None or "quantize_per_tensor" not in str(getattr(quantize, "target", "")) or len(dequantize) != 1:
        return None
    others = [n for n in nodes if n not in (quantize, dequantize[0], delegates[0])]
    if any("getitem" not in str(n.target) and "alloc" not in str(n.target) for n in others):
        return None  # ops outside the NPU: the TOSA graph alone is not the model
    return {
        "input_scale": float(quantize.args[1]),
        "input_zero_point": int(quantize.args[2]),
        "input_qmin": int(quantize.args[3]),  # int8's -128..127, a16w8's int16 range
        "input_qmax": int(quantize.args[4]),
        "output_scale": float(dequantize[0].args[1]),
        "output_zero_point": int(dequantize[0].args[2]),
    }


def convert_ethos_u(
    bundle: ModelBundle, config: DeploymentConfig, out_dir: Path, stages: Stages | None = None
) -> ConversionResult:
    """Lower for the Ethos-U named first in ``config.backends``; see the module docstring.

    The quantized program is a stage per target (:func:`~nnsweep.runtimes.common.pt2e.exported_program`):
    other partition limits of the same model, quantization and target reuse it.
    """
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner

    if config.quant.float_layers:
        raise ConversionError("the Ethos-U NPU runs int8 only: no layer can stay float on it (quant.float_layers)")
    target = config.backends[0]
    if not bundle.example_input.is_floating_point():
        # The Arm passes cast the ids to int32 and leave the lookup (aten.index_select) to the
        # CPU, as they leave a pixel model's cast to float (dim_order_ops._to_dim_order_copy);
        # Vela does not estimate the CPU: refused before the conversion, not after it.
        dtype = str(bundle.example_input.dtype).removeprefix("torch.")
        kind, cpu_op = (
            ("uint8 pixels", "cast to float") if dtype == "uint8" else (f"token ids ({dtype})", "embedding lookup")
        )
        raise ConversionError(
            f"the model takes {kind}; their {cpu_op} runs on the CPU beside {target}, "
            "and Vela estimates NPU partitions only"
        )
    with tempfile.TemporaryDirectory(prefix="nnsweep-vela-") as tmp:
        intermediates = Path(tmp)
        # --verbose-performance: Vela also writes its per-layer estimate (bench --profile's table)
        spec = EthosUCompileSpec(target, extra_flags=["--verbose-performance"]).dump_intermediate_artifacts_to(
            str(intermediates)
        )

        def make() -> Any:
            model = quantize(bundle, config.quant, _quantizer(target, config, spec))
            return export(model, bundle.example_input, dynamic_batch=False)

        program = exported_program(stages or Stages(), config.quant, f"arm-{target}", make)
        io_spec = quantize_io(program) if config.quant.interface is Interface.FULL else IOSpec()
        partitioner = LimitedPartitioner(EthosUPartitioner(spec), config.partitions)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # Vela prints its summary; keep our stdout clean
            edge = to_edge_transform_and_lower(
                program, partitioner=[partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False)
            )
        names = {"EthosUBackend": target}
        report = report_from_program(edge.exported_program(), config.backends, names)
        if report.count == 0:
            raise ConversionError(f"{target} took no part of this model: every op would run on the CPU")
        on_cpu = {op: n for op, n in report.fallback_ops.items() if not op.startswith("quantized_decomposed.")}
        if on_cpu:
            # Vela estimates the NPU's partitions only (and writes one summary over the
            # other); a latency without the CPU's share would flatter this deployment.
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(on_cpu.items()))
            raise ConversionError(
                f"{sum(on_cpu.values())} ops would run on the CPU beside {target} ({ops}); Vela estimates "
                "NPU partitions only, so this deployment's latency cannot be estimated"
            )
        estimates = read_vela_summary(intermediates, printed.getvalue())
        around = _delegate_io(edge.exported_program())
        tosa_files = sorted(intermediates.glob("output_tag*.tosa"))
        if around is None or len(tosa_files) != 1:
            # ExecuTorch's Ethos-U delegate is not in the host's runtime ("Backend EthosUBackend
            # is not registered", 0x20 at load): only the TOSA graph can give the outputs.
            shape = f"{len(tosa_files)} NPU graphs" if len(tosa_files) != 1 else "an NPU graph of several outputs"
            raise ConversionError(
                f"{target} takes this model as {shape}; nnsweep computes an Ethos-U deployment's outputs with "
                "the TOSA reference model of one NPU graph with one input and one output, the whole model"
            )
        (out_dir / "model.tosa").write_bytes(tosa_files[0].read_bytes())
        (out_dir / "tosa_io.json").write_text(json.dumps(around))
        (out_dir / "vela_layers.json").write_text(json.dumps(read_vela_layers(intermediates)))
        sidecars = {TOSA_SIDECAR: "model.tosa", TOSA_IO: "tosa_io.json", VELA_LAYERS: "vela_layers.json"}
        import executorch.kernels.quantized  # noqa: F401  (out-variants of the CPU's quantize/dequantize)

        path = out_dir / "model.pte"
        path.write_bytes(edge.to_executorch().buffer)
    return ConversionResult(path.name, report, io_spec, sidecars=sidecars, estimates=estimates)


def run_tosa(graph: bytes, io_params: dict[str, float], inputs: Any) -> Any:
    """Outputs of the integer TOSA graph on float ``inputs`` (N, ...), with the TOSA
    reference model: quantize each input as the deployed model does (int8, or int16 for
    a16w8), run, dequantize."""
    import numpy as np
    import tosa_reference_model as reference

    outs = []
    # It writes "Different TOSA spec in flatbuffer and serializer versions detected" to file
    # descriptor 1 on every run: one line per evaluation input (540 for digits) in bench's output.
    with native_output_to_debug_log(_log, "the TOSA reference model"):
        for x in inputs:
            q = np.round(x[None] / io_params["input_scale"]) + io_params["input_zero_point"]
            low, high = io_params.get("input_qmin", -128), io_params.get("input_qmax", 127)
            q = np.clip(q, low, high).astype(np.int8 if high <= 127 else np.int16)
            with contextlib.redirect_stdout(io.StringIO()):
                result, status = reference.run(graph, [q], verbosity="NONE", initialize_variable_tensor_from_numpy=True)
            if status != reference.GraphStatus.TOSA_VALID:
                raise ValueError(f"the TOSA reference model rejected the graph: {status}")
            y = (result[0].astype(np.float32) - io_params["output_zero_point"]) * io_params["output_scale"]
            outs.append(y.reshape(1, -1))
    return np.concatenate(outs)
