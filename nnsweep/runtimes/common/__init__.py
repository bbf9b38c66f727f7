"""What the runtimes share: the converter contract, PT2E and FX quantization, the
partition wrapper, float fallback, TFLite file handling and the toolchain shortcuts.

This package's own namespace stays light (no torch): the contract and the
partition report only.
"""

from nnsweep.core.artifact import IOSpec, PartitionReport, Placement
from nnsweep.runtimes.common.converter import ConversionResult, Converter

__all__ = ["ConversionResult", "Converter", "IOSpec", "PartitionReport", "Placement"]
