"""ExecuTorch's decoder artifacts: a prefill and a decode ``.pte``, each one static-cache step.

Both graphs are :class:`~nnsweep.models._kv_cache.StaticCacheStep` exported at a fixed
token count (the prompt length, then 1), lowered to XNNPACK; what XNNPACK does not take
(the cache writes' ``where``, the masks) runs on the portable kernels. ``dynamic_int8``
quantizes the linear layers with XNNPACK's PT2E quantizer (int8 weights per channel,
activations per tensor at run time); ``int4_weight`` with torchao's 8da4w, as ExecuTorch's
own LLM export does.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from nnsweep.core.errors import ConversionError
from nnsweep.core.quant import QuantConfig, QuantMode
from nnsweep.models.decoder import Decoder
from nnsweep.runtimes.common import int4

__all__ = ["convert_decoder"]


def _inputs(decoder: Decoder, steps: int) -> tuple[torch.Tensor, ...]:
    ids = torch.from_numpy(decoder.held_out[None, :steps].copy())
    return ids, torch.arange(steps), decoder.empty_cache(), decoder.empty_cache()


def _dynamic_int8(step: nn.Module, example: tuple[torch.Tensor, ...]) -> nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    graph = torch.export.export(step, example, strict=False).module(check_guards=False)
    prepared = prepare_pt2e(graph, XNNPACKQuantizer().set_global(config))  # type: ignore[arg-type]
    with torch.no_grad():
        prepared(*example)  # dynamic ranges: one call settles the observers' shapes only
    return convert_pt2e(prepared)  # type: ignore[no-any-return]


def _lowered(step: nn.Module, example: tuple[torch.Tensor, ...], quant: QuantConfig) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    model = _dynamic_int8(step, example) if quant.mode is QuantMode.DYNAMIC_INT8 else step
    with torch.no_grad():
        program = torch.export.export(model, example, strict=False)
    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    if quant.mode is QuantMode.DYNAMIC_INT8:
        import executorch.kernels.quantized  # noqa: F401  (quantize/dequantize outside the delegate)
    return edge.to_executorch().buffer  # type: ignore[no-any-return]


def convert_decoder(decoder: Decoder, quant: QuantConfig, out_dir: Path) -> tuple[str, ...]:
    """Write ``prefill.pte`` and ``decode.pte`` for ``quant`` to ``out_dir``; return the notes
    the partition report shows (which linear layers went 4-bit).

    The modes it builds are the registry entry's ``decoder_modes``, checked before; its
    dynamic int8 weights are per channel whatever the granularity.

    Raises:
        ConversionError: the toolchain failed.
    """
    step = copy.deepcopy(decoder.step).eval()
    notes: tuple[str, ...] = ()
    if quant.mode is QuantMode.INT4_WEIGHT:
        layers = int4.plan(step, quant.group_size or 32, quant.float_layers)
        int4.quantize_8da4w(step, layers)
        notes = layers.notes()
    try:
        for name, steps in (("prefill", decoder.prompt_len), ("decode", 1)):
            (out_dir / f"{name}.pte").write_bytes(_lowered(step, _inputs(decoder, steps), quant))
    except ConversionError:
        raise
    except Exception as exc:  # the toolchain's failure on this graph: this deployment fails
        raise ConversionError(f"executorch decoder export failed: {type(exc).__name__}: {exc}") from exc
    return notes
