"""``nnsweep bench``'s task options: the user's own metrics (``--metric NAME=REF``) and
evaluation data (``--data SOURCE``), scored on the measured deployment's outputs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.errors import SpecError
from nnsweep.core.metrics import BUILTIN, UserMetric

if TYPE_CHECKING:
    from nnsweep.bench.task import Task
    from nnsweep.core.task_data import TaskData
    from nnsweep.models import ModelBundle

__all__ = ["add_task_options", "bench_task", "task_data", "user_metrics"]


def add_task_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=REF",
        help="a metric of your own, REF a module:function or file.py:function taking (outputs, targets); repeatable",
    )
    parser.add_argument(
        "--data",
        metavar="SOURCE",
        help="evaluation data: a .npz/.npy file, an image folder, a saved Hugging Face dataset, or a function",
    )
    parser.add_argument("--max-samples", type=int, metavar="N", help="with --data: a seeded subset of N samples")


def user_metrics(args: argparse.Namespace) -> tuple[UserMetric, ...]:
    """``--metric`` as metrics (their goal does not matter to one measurement).

    Raises:
        SpecError: on ``--metric``: not NAME=REF, a built-in's name, or a name given twice.
    """
    from nnsweep.models import check_function_reference, import_function

    metrics: list[UserMetric] = []
    for text in args.metric:
        name, sep, ref = text.partition("=")
        if not sep or not name.isidentifier():
            raise SpecError("--metric", f"{text[:80]!r}: give NAME=module:function or NAME=file.py:function")
        if name in BUILTIN or any(m.name == name for m in metrics):
            raise SpecError("--metric", f"{name!r} is a built-in metric's name or given twice")
        function = check_function_reference(ref, field="--metric")
        import_function(function, field=f"--metric {name}")  # before anything is loaded or written
        metrics.append(UserMetric(name, function, "maximize"))
    return tuple(metrics)


def task_data(args: argparse.Namespace) -> TaskData | None:
    """``--data`` as the evaluation data (``None``: the model's own)."""
    if args.max_samples is not None and (args.data is None or args.max_samples < 1):
        raise SpecError("--max-samples", "takes a positive count, with --data")
    if args.data is None:
        return None
    from nnsweep.core.task_data import DataSource, TaskData

    return TaskData(evaluation=DataSource(args.data, max_samples=args.max_samples), base_dir=Path.cwd())


def bench_task(bundle: ModelBundle, metrics: tuple[UserMetric, ...], reference: Any) -> Task | None:
    """The metrics, imported and checked on the fp32 outputs (``None`` without any).

    Raises:
        SpecError: a metric does not import, or fails on the fp32 outputs.
    """
    if not metrics:
        return None
    from nnsweep.bench.task import load_task
    from nnsweep.models import per_sample_shapes

    evaluation = bundle.dataset.evaluation
    targets = evaluation.targets if evaluation.targets is not None else evaluation.labels
    task = load_task(metrics, targets, per_sample_shapes(bundle))
    task.check(reference)
    return task
