"""What the Ethos-U NPUs add to ExecuTorch's registry entry: each target as a backend that
takes the whole model, in the integer modes only (an NPU runs integer graphs; fp32, fp16 and
dynamic int8 are not in its space): int8, and a16w8 (16-bit activations, int8 weights per
channel, the Arm quantizer's ``get_symmetric_a16w8_quantization_config``). The targets themselves are the registry's
(:data:`~nnsweep.core.runtimes.ETHOS_U_TARGETS`): a spec is checked against them
without importing any runtime."""

from __future__ import annotations

from collections.abc import Mapping

from nnsweep.core.quant import Granularity, QuantMode
from nnsweep.core.runtimes import ETHOS_U_TARGETS, INT8_GRANULARITIES, NO_GRANULARITY

__all__ = ["ETHOS_U_MODES", "ETHOS_U_WHOLE_MODEL"]

ETHOS_U_MODES: Mapping[QuantMode, frozenset[Granularity]] = {
    QuantMode.STATIC_INT8: INT8_GRANULARITIES,
    QuantMode.QAT_INT8: INT8_GRANULARITIES,
    QuantMode.A16W8: NO_GRANULARITY,
}
ETHOS_U_WHOLE_MODEL = {target: ETHOS_U_MODES for target in ETHOS_U_TARGETS}
