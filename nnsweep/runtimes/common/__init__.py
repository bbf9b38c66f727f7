"""Converters: one module per runtime, imported lazily through :mod:`nnsweep.core.runtimes`.

This package's own namespace stays light (no torch): the contract and the
partition report only.
"""

from nnsweep.convert._base import ConversionResult, Converter
from nnsweep.core.artifact import IOSpec, PartitionReport, Placement

__all__ = ["ConversionResult", "Converter", "IOSpec", "PartitionReport", "Placement"]
