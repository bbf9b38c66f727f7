"""The converter contract under the name plug-in runtimes import it by
(``from nnsweep.convert import Converter``); the code lives in :mod:`nnsweep.runtimes`."""

from nnsweep.runtimes.common import ConversionResult, Converter, IOSpec, PartitionReport, Placement

__all__ = ["ConversionResult", "Converter", "IOSpec", "PartitionReport", "Placement"]
