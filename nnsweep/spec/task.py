"""The spec's task sections: the user's ``metrics``, the ``objectives`` and ``constraints``
naming them or built-in metrics, and the ``data`` they are computed on."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.errors import SpecError, clip, excerpt
from nnsweep.core.metrics import ACCURACY, BUILTIN, DECODER_ALSO, SQNR, UserMetric, drop, high, low, remeasured
from nnsweep.spec.settings import _NAME, METRICS, Constraints

if TYPE_CHECKING:
    from nnsweep.core.task_data import TaskData

__all__ = ["build_constraints", "build_data", "build_metrics", "check_decoder_sections", "check_objectives"]


def build_metrics(raw: Any, base: Path) -> tuple[UserMetric, ...]:
    """The ``metrics`` section: names checked against the built-ins, file references made absolute.

    Raises:
        SpecError: on ``metrics.NAME``: a bad name, one a built-in metric has, or a bad reference.
    """
    from nnsweep.models import check_function_reference

    taken = set(BUILTIN)
    derived = {f(b) for b in BUILTIN for f in (drop, remeasured, low, high)}
    metrics = []
    for name, m in raw.metrics.items():
        path = f"metrics.{clip(name)}"
        if not _NAME.fullmatch(name) or not name.isidentifier():
            raise SpecError(path, f"{excerpt(name)} is not a metric name (a letter, then letters, digits, '_')")
        if name in taken or name in derived or name.startswith(("time_", "measure_", "estimate_")):
            raise SpecError(path, f"{name!r} is a built-in metric's name; call yours something else")
        function = check_function_reference(m.function, field=f"{path}.function", base_dir=base)
        metrics.append(UserMetric(name, function, m.goal))
    return tuple(metrics)


def check_objectives(objectives: Mapping[str, str], metrics: tuple[UserMetric, ...], decoder: bool = False) -> None:
    """Every objective names a built-in metric or one of the user's, of the model's kind.

    Raises:
        SpecError: on ``objectives.NAME``.
    """
    known = [*METRICS, *(m.name for m in metrics)]
    for metric in objectives:
        if metric not in known:
            raise SpecError(f"objectives.{clip(metric)}", f"unknown metric; allowed: {', '.join(known)}")
        _of_the_kind(f"objectives.{metric}", metric, metrics, decoder)


def _of_the_kind(field: str, name: str, metrics: tuple[UserMetric, ...], decoder: bool) -> None:
    """Refuse a metric no trial of this model's kind has: a decoder language model's metric
    on another model, or a metric of one-input models (accuracy, SQNR, ...) on a decoder."""
    if any(m.name == name for m in metrics) or name not in BUILTIN:
        return
    if not decoder and BUILTIN[name].decoder:
        raise SpecError(
            field,
            "is a decoder language model's metric: this sweep's model is not one "
            "(a decoder is a built-in one such as tiny_llama; docs/how-to/language-models.md)",
        )
    if decoder and not BUILTIN[name].decoder and name not in DECODER_ALSO:
        allowed = [n for n in METRICS if BUILTIN[n].decoder or n in DECODER_ALSO]
        raise SpecError(field, f"is not measured on a decoder language model; allowed: {', '.join(allowed)}")


def check_decoder_sections(raw: Any, float_layers: tuple[int, ...]) -> None:
    """A decoder language model's sweep: its quality is its perplexity on its own held-out
    text, and its layers are all at the mode's format.

    Raises:
        SpecError: on ``metrics``, ``data`` or ``space.float_layers`` when given.
    """
    if raw.metrics:
        raise SpecError("metrics", "a decoder language model's quality is its perplexity; user metrics are for others")
    if any(getattr(raw.data, key, None) for key in ("evaluation", "calibration")):
        raise SpecError("data", "a decoder language model is measured on its own seeded held-out text")
    if float_layers != (0,):
        raise SpecError("space.float_layers", "a decoder language model's layers are not ranked; leave it at 0")


def build_constraints(raw: Any, metrics: tuple[UserMetric, ...], decoder: bool = False) -> Constraints:
    """Every bound, ``max_accuracy_drop`` and ``min_sqnr_db`` folded into ``max_drop`` and ``min``.

    Raises:
        SpecError: a bound names an unknown metric, or names one twice.
    """
    c = raw.constraints
    known = [*METRICS, *(m.name for m in metrics)]
    for kind in ("max_drop", "min", "max"):
        for name in getattr(c, kind):
            if name not in known:
                raise SpecError(f"constraints.{kind}.{clip(name)}", f"unknown metric; allowed: {', '.join(known)}")
            _of_the_kind(f"constraints.{kind}.{name}", name, metrics, decoder)
    for name, bound in c.max_drop.items():
        if bound < 0:
            raise SpecError(f"constraints.max_drop.{name}", f"must be at least 0 (got {bound})")
    for older in ("max_accuracy_drop", "min_sqnr_db"):
        if decoder and getattr(c, older) is not None:
            raise SpecError(f"constraints.{older}", "is not measured on a decoder language model: bound perplexity")
    max_drop = dict(c.max_drop)
    minimum = dict(c.min)
    if c.max_accuracy_drop is not None:
        if ACCURACY in max_drop:
            raise SpecError(
                "constraints.max_accuracy_drop", "and constraints.max_drop.accuracy both bound it: keep one"
            )
        max_drop[ACCURACY] = c.max_accuracy_drop
    if c.min_sqnr_db is not None:
        if SQNR in minimum:
            raise SpecError("constraints.min_sqnr_db", "and constraints.min.sqnr_db both bound it: keep one")
        minimum[SQNR] = c.min_sqnr_db
    for name in set(minimum) & set(c.max):
        if minimum[name] > c.max[name]:
            raise SpecError(f"constraints.min.{name}", f"{minimum[name]} is above constraints.max.{name} {c.max[name]}")
    return Constraints(max_drop, minimum, dict(c.max), c.max_accuracy_drop, c.min_sqnr_db)


def build_data(raw: Any, base: Path) -> TaskData | None:
    """The ``data`` section (``None`` when it names nothing: the model's own data)."""
    from nnsweep.core.task_data import TaskData
    from nnsweep.spec.schema import section_values

    data = TaskData(**section_values(TaskData, raw.data, "data"), base_dir=base)
    return None if data.evaluation is None and data.calibration is None else data
