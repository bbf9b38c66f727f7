"""The runner contract: load one artifact on this machine and run it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import BenchmarkError

__all__ = ["Runner"]


class Runner(ABC):
    """Runs one deployed artifact in this process.

    Call order: the constructor (no work), :meth:`load` once, :meth:`prepare` once
    per distinct input (outside any timed region), :meth:`run` many times, and
    :meth:`to_float` on what :meth:`run` returned. The thread count is applied by
    the constructor's caller before anything is loaded (some runtimes cannot
    change it afterwards). Raise :class:`~nnsweep.core.errors.BenchmarkError` with the
    reason when the artifact cannot be loaded or run here.

    Args:
        path: the artifact file.
        io: its input/output representation.
        threads: CPU threads the runtime may use.
        backends: the preference order the artifact was built for (runtimes that
            choose backends at load time, such as ONNX Runtime's providers, use it).
    """

    def __init__(self, path: Path, io: IOSpec, threads: int, backends: tuple[str, ...]) -> None:
        self.path = path
        self.io = io
        self.threads = threads
        self.backends = backends

    @classmethod  # noqa: B027  (an optional hook: most runtimes take threads per session)
    def set_threads(cls, threads: int) -> None:
        """Apply the process-wide thread count; called once, before :meth:`load`."""

    @abstractmethod
    def load(self) -> None:
        """Load the artifact and make it ready to run."""

    def prepare(self, x: np.ndarray) -> Any:
        """Turn one float input (batch of 1) into what :meth:`run` takes."""
        return self.io.prepare_input(x)

    @abstractmethod
    def run(self, prepared: Any) -> Any:
        """One inference."""

    def prepare_inputs(self, xs: Sequence[np.ndarray]) -> list[Any]:
        """Each input of a program of several (a decoder step's ids, position and caches) as
        :meth:`run_inputs` takes it; outside any timed region."""
        return [self.prepare(x) for x in xs]

    def run_inputs(self, prepared: list[Any]) -> list[Any]:
        """One inference of a program of several inputs; its outputs in the runtime's own
        form, which :meth:`run_inputs` takes back as inputs (a decoder's caches fed back).
        The default: this runtime's runner runs programs of one input only."""
        raise BenchmarkError(f"{type(self).__name__} runs programs of one input only")

    def placement(self) -> dict[str, Any] | None:
        """Where the loaded artifact's ops run on this machine (a
        :class:`~nnsweep.convert.PartitionReport` as a dict), for runtimes that decide it at
        load time from what the machine offers; ``None`` (the default): the converter's
        report holds wherever the artifact runs."""
        return None

    def to_float(self, raw: Any) -> np.ndarray:
        """The first output of :meth:`run` as float32 logits."""
        return self.io.float_output(np.asarray(raw))
