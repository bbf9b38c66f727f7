"""ONNX Runtime's decoder artifacts: a prefill and a decode ``.onnx``, each one static-cache step.

Each graph is :class:`~nnsweep.models._kv_cache.StaticCacheStep` exported at a fixed token
count (the prompt length, then 1). ``dynamic_int8`` is ``quantize_dynamic`` on the float
graph (``MatMulInteger`` with uint8 activations quantized at run time, int8 weights per
channel); ``int4_weight`` is ``MatMulNBits`` (:mod:`nnsweep.runtimes.onnxruntime.int4`).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import torch

from nnsweep.core.errors import ConversionError
from nnsweep.core.quant import Granularity, QuantConfig, QuantMode
from nnsweep.models.decoder import Decoder
from nnsweep.runtimes.common import int4
from nnsweep.runtimes.common.converter import package_warnings_to_debug_log
from nnsweep.runtimes.common.float_fallback import ort_pre_process
from nnsweep.runtimes.onnxruntime.int4 import quantize_int4

__all__ = ["convert_decoder"]

_OPSET = 18
_NAMES = ["input_ids", "cache_position", "k_cache", "v_cache"]
_log = logging.getLogger(__name__)


def _export(decoder: Decoder, steps: int, path: Path) -> None:
    ids = torch.from_numpy(decoder.held_out[None, :steps].copy())
    example = (ids, torch.arange(steps), decoder.empty_cache(), decoder.empty_cache())
    with package_warnings_to_debug_log(_log, "onnxscript", "onnx_ir"), torch.no_grad():
        program = torch.onnx.export(
            decoder.step,
            example,
            dynamo=True,
            opset_version=_OPSET,
            input_names=_NAMES,
            output_names=["logits", "k_cache_out", "v_cache_out"],
            external_data=False,
            verbose=False,
        )
    if program is None:
        raise ConversionError("torch.onnx.export returned no ONNXProgram")
    program.save(str(path), external_data=False)


def _quantized(source: Path, target: Path, decoder: Decoder, quant: QuantConfig) -> tuple[str, ...]:
    if quant.mode is QuantMode.INT4_WEIGHT:
        layers = int4.plan(decoder.step, quant.group_size or 32, quant.float_layers)
        return (*layers.notes(), *quantize_int4(source, target, layers))
    from onnxruntime.quantization import QuantType, quantize_dynamic

    prepared = source.with_name("prepared.onnx")
    ort_pre_process(source, prepared)  # shape inference first, as ONNX Runtime's quantizer asks
    quantize_dynamic(
        str(prepared), str(target), per_channel=quant.granularity is not Granularity.PER_TENSOR,
        weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
    )  # fmt: skip
    return ()


def convert_decoder(decoder: Decoder, quant: QuantConfig, out_dir: Path) -> tuple[str, ...]:
    """Write ``prefill.onnx`` and ``decode.onnx`` for ``quant`` to ``out_dir``; return the
    notes the partition report shows.

    The modes it builds are the registry entry's ``decoder_modes``, checked before.

    Raises:
        ConversionError: the toolchain failed.
    """
    notes: tuple[str, ...] = ()
    try:
        for name, steps in (("prefill", decoder.prompt_len), ("decode", 1)):
            target = out_dir / f"{name}.onnx"
            if quant.mode is QuantMode.FP32:
                _export(decoder, steps, target)
                continue
            with tempfile.TemporaryDirectory() as tmp:
                source = Path(tmp) / "float.onnx"
                _export(decoder, steps, source)
                notes = _quantized(source, target, decoder, quant)
    except ConversionError:
        raise
    except Exception as exc:  # the toolchain's failure on this graph: this deployment fails
        raise ConversionError(f"onnxruntime decoder export failed: {type(exc).__name__}: {exc}") from exc
    return notes
