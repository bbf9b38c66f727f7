"""Executors: the coordinator's seam to workers and device agents (local threads or Ray)."""

from nnsweep.execution._base import ConvertRequest, Executor, ModelSource
from nnsweep.execution._for_spec import executor_for
from nnsweep.execution.local import LocalExecutor

__all__ = ["ConvertRequest", "Executor", "LocalExecutor", "ModelSource", "executor_for"]
