"""The user's own task: their metric functions applied to a deployment's outputs and their targets.

A metric runs where the outputs arrive (the coordinator), never on the device. It gets
``outputs``, a list with one ``(N, *shape)`` float32 array per model output (pytree order),
and ``targets`` exactly as the evaluation data gave them; it returns a finite number.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import numbers
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.core.errors import MetricError, SpecError, first_line
from nnsweep.core.metrics import UserMetric
from nnsweep.models import import_function, output_columns

__all__ = ["CHECK_SECONDS", "Task", "function_digest", "load_task"]

CHECK_SECONDS = 60.0  # what a metric may take on the fp32 outputs before the sweep starts


@dataclass(frozen=True, eq=False)
class Task:
    """Resolved user metrics, the evaluation targets and the shape of each model output."""

    metrics: tuple[UserMetric, ...]
    functions: tuple[Callable[..., Any], ...]
    targets: Any
    shapes: tuple[tuple[int, ...], ...]

    def outputs(self, rows: np.ndarray) -> list[np.ndarray]:
        """Outputs side by side, one row per sample, split back into each output's ``(N, *shape)``."""
        rows = np.asarray(rows)
        sizes = tuple(int(np.prod(s)) for s in self.shapes)
        if sum(sizes) != rows.shape[1]:
            raise ValueError(f"{rows.shape[1]} values per sample, the model's outputs have {sum(sizes)}")
        return [
            np.ascontiguousarray(rows[:, cols], dtype=np.float32).reshape(len(rows), *shape)
            for cols, shape in zip(output_columns(sizes), self.shapes, strict=True)
        ]

    def score(self, rows: np.ndarray) -> dict[str, float]:
        """Each metric on these outputs.

        Raises:
            MetricError: a metric raised or gave no finite number (names the metric).
        """
        outs = self.outputs(rows)
        values = {}
        for metric, function in zip(self.metrics, self.functions, strict=True):
            try:
                value = _apply(function, outs, self.targets)
            except Exception as exc:  # the user's code, on this deployment's outputs
                raise MetricError(f"metric {metric.name} raised {first_line(exc)}") from exc
            try:
                values[metric.name] = _number(value)
            except ValueError as exc:
                raise MetricError(f"metric {metric.name} {exc}") from None
        return values

    def check(self, reference: np.ndarray, timeout_s: float = CHECK_SECONDS) -> dict[str, float]:
        """Each metric on the fp32 model's outputs, before anything is converted.

        Raises:
            SpecError: on ``metrics.NAME``: it raised, gave no finite number, or took over ``timeout_s``.
        """
        outs = self.outputs(reference)
        values = {}
        for metric, function in zip(self.metrics, self.functions, strict=True):
            field = f"metrics.{metric.name}"
            value = _bounded(partial(_apply, function, outs, self.targets), timeout_s, field)
            try:
                values[metric.name] = _number(value)
            except ValueError as exc:
                raise SpecError(field, f"on the fp32 outputs {exc}") from None
        return values


def load_task(
    metrics: tuple[UserMetric, ...], targets: Any, shapes: tuple[tuple[int, ...], ...], base_dir: Path | None = None
) -> Task:
    """Import each metric's function (a callable is taken as it is).

    Raises:
        SpecError: on ``metrics.NAME.function``: it does not import or is no callable.
    """
    functions = []
    for metric in metrics:
        field = f"metrics.{metric.name}.function"
        if callable(metric.function):
            functions.append(metric.function)
        else:
            functions.append(import_function(metric.function, field=field, base_dir=base_dir))
    return Task(tuple(metrics), tuple(functions), targets, tuple(tuple(s) for s in shapes))


def function_digest(function: str | Callable[..., Any]) -> str:
    """A metric function's reference and the sha256 of the file that defines it: a changed
    metric gives other figures, so what keeps figures (a sweep's fingerprint, a ranking's
    cache key) tells them apart."""
    if callable(function):
        return getattr(function, "__qualname__", "callable")
    head = str(function).rpartition(":")[0]
    path = Path(head)
    if head.endswith(".py") and path.is_file():
        return f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    return str(function)


def _apply(function: Callable[..., Any], outputs: list[np.ndarray], targets: Any) -> Any:
    """``function`` on copies of the outputs (a metric that writes into them spoils no other)."""
    return function([o.copy() for o in outputs], targets)


def _number(value: Any) -> float:
    """``value`` as a finite float.

    Raises:
        ValueError: saying what it was instead (``returned str, not a number``).
    """
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, numbers.Number):
        with contextlib.suppress(Exception):  # not a scalar: reported below as what it is
            value = value.item()  # a 0-d torch tensor
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"returned {type(value).__name__}, not a number")
    if not math.isfinite(float(value)):
        raise ValueError(f"returned {float(value)}, not a finite number")
    return float(value)


def _bounded(call: Callable[[], Any], timeout_s: float, field: str) -> Any:
    """``call()`` in a thread, waited for at most ``timeout_s`` (a metric that hangs is the
    user's to fix: the sweep stops with its name instead of waiting)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="nnsweep-metric-check", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise SpecError(field, f"took more than {timeout_s:g} s on the fp32 outputs")
    if "error" in box:
        exc = box["error"]
        raise SpecError(field, f"raised on the fp32 outputs: {first_line(exc)}") from exc
    return box["value"]
