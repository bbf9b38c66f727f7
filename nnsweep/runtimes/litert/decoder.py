"""LiteRT's decoder artifacts: a prefill and a decode ``.tflite``, each one static-cache step.

Each graph is :class:`~nnsweep.models._kv_cache.StaticCacheStep` converted by
``litert_torch.convert`` at a fixed token count (the prompt length, then 1); its token ids and
cache position are int32 inputs (LiteRT's integers), which the runner casts to.
``int4_weight`` is ai-edge-quantizer's blockwise 4-bit ``FULLY_CONNECTED`` weights
(:func:`~nnsweep.runtimes.litert.edge_quantizer.quantize_int4`).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import torch

from nnsweep.core.errors import ConversionError
from nnsweep.core.quant import QuantConfig, QuantMode
from nnsweep.models.decoder import Decoder
from nnsweep.runtimes.common import int4
from nnsweep.runtimes.common.converter import (
    native_stderr_to_debug_log,
    printed_to_debug_log,
    toolchain_records_to_debug_log,
)

__all__ = ["convert_decoder"]

_log = logging.getLogger(__name__)


def _convert(decoder: Decoder, steps: int, path: Path) -> None:
    from nnsweep.runtimes.litert.converter import X64_NOTE
    from nnsweep.runtimes.litert.litert_import import litert_torch  # its native library's lines to the log

    ids = torch.from_numpy(decoder.held_out[None, :steps].copy())
    example = (ids, torch.arange(steps), decoder.empty_cache(), decoder.empty_cache())
    with (
        printed_to_debug_log(_log, "litert-torch"),  # its progress lines
        toolchain_records_to_debug_log(_log, X64_NOTE),  # the int32 ids the runner casts to
        torch.no_grad(),
    ):
        litert_torch.convert(decoder.step.eval(), example).export(str(path))


def convert_decoder(decoder: Decoder, quant: QuantConfig, out_dir: Path) -> tuple[str, ...]:
    """Write ``prefill.tflite`` and ``decode.tflite`` for ``quant`` to ``out_dir``; return the
    notes the partition report shows. The modes are the registry entry's ``decoder_modes``.

    Raises:
        ConversionError: the toolchain failed.
    """
    from nnsweep.runtimes.litert.edge_quantizer import quantize_int4

    notes: tuple[str, ...] = ()
    try:
        for name, steps in (("prefill", decoder.prompt_len), ("decode", 1)):
            target = out_dir / f"{name}.tflite"
            if quant.mode is not QuantMode.INT4_WEIGHT:
                _convert(decoder, steps, target)
                continue
            with tempfile.TemporaryDirectory() as tmp:
                source = Path(tmp) / "float.tflite"
                _convert(decoder, steps, source)
                layers = int4.plan(decoder.step, quant.group_size or 32, quant.float_layers)
                with native_stderr_to_debug_log(_log, "ai-edge-quantizer"):  # its progress bars
                    notes = (*layers.notes(), *quantize_int4(source, target, layers))
    except ConversionError:
        raise
    except Exception as exc:  # the toolchain's failure on this graph: this deployment fails
        raise ConversionError(f"litert decoder conversion failed: {type(exc).__name__}: {exc}") from exc
    return notes
