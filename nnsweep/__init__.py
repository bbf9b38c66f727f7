"""nnsweep: find, for every target device, the best way to deploy a PyTorch model.

The top-level namespace holds the typed configuration and the error tree; it
imports no heavy library (torch, ExecuTorch, Ray, MLflow, Optuna load only in the
modules that use them). Subpackages: :mod:`nnsweep.models`, :mod:`nnsweep.convert`,
:mod:`nnsweep.bench`, :mod:`nnsweep.artifacts.deploy`, :mod:`nnsweep.artifacts.cache`.
"""

from importlib.metadata import PackageNotFoundError, version

from nnsweep.core.config import (
    Calibration,
    DeploymentConfig,
    Granularity,
    Interface,
    PartitionLimits,
    QuantConfig,
    QuantMode,
)
from nnsweep.core.errors import (
    AgentLost,
    BenchmarkError,
    CacheCorrupted,
    ConversionError,
    ConversionStorageError,
    InfrastructureError,
    NnsweepError,
    SpecError,
    SweepStateDamaged,
    SweepStateNotWritten,
    TrialError,
)

try:
    __version__ = version("nnsweep")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "AgentLost",
    "BenchmarkError",
    "CacheCorrupted",
    "Calibration",
    "ConversionError",
    "ConversionStorageError",
    "DeploymentConfig",
    "Granularity",
    "InfrastructureError",
    "Interface",
    "NnsweepError",
    "PartitionLimits",
    "QuantConfig",
    "QuantMode",
    "SpecError",
    "SweepStateDamaged",
    "SweepStateNotWritten",
    "TrialError",
    "__version__",
]
