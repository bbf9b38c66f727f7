"""The converter contract and what a conversion produces (no heavy imports here)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import ModelBundle

from nnsweep.core.artifact import IOSpec, PartitionReport, Placement

__all__ = ["ConversionResult", "Converter", "IOSpec", "PartitionReport", "Placement"]


@dataclass(frozen=True)
class ConversionResult:
    """What a converter wrote.

    Args:
        filename: the artifact file, relative to the output directory.
        partitions: where the ops run.
        io: the deployed model's input/output representation.
        sidecars: name -> file in the output directory that travels with the artifact
            (e.g. the integer TOSA graph an NPU compiler consumed, for host evaluation).
        estimates: figures a compiler estimated for its target (never measurements),
            e.g. Vela's ``inference_time_ms``, ``cycles_total``, ``sram_kib``.
    """

    filename: str
    partitions: PartitionReport
    io: IOSpec = field(default_factory=IOSpec)
    sidecars: Mapping[str, str] = field(default_factory=dict)
    estimates: Mapping[str, float] = field(default_factory=dict)


class Converter(ABC):
    """Turns a float model into a deployable artifact for one runtime.

    The caller (``nnsweep.artifacts.deploy``) validates the configuration, looks the artifact
    up in the cache, and calls :meth:`convert` only on a miss, with an empty
    temporary directory that it moves into the cache afterwards. A converter
    raises :class:`~nnsweep.core.errors.ConversionError` with the reason when the
    model cannot be converted for this configuration.
    """

    @abstractmethod
    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        """Write the artifact for ``config`` into ``out_dir`` and describe it."""
