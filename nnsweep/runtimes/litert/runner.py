"""Run a ``.tflite`` model with LiteRT's interpreter (``ai-edge-litert``), with or without XNNPACK.

The backend order has two members: ``xnnpack`` (LiteRT's default delegate: it
takes every op it supports, the builtin kernels run the rest) and ``cpu`` (the
builtin kernels alone). Which ops the delegate took is read from the
interpreter's op details (:func:`placement`).

This module runs on boards: it imports LiteRT and numpy, never torch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from nnsweep.bench import Runner
from nnsweep.core.artifact import PartitionReport, Placement
from nnsweep.core.errors import BenchmarkError
from nnsweep.runtimes.common.outputs import concat_float, flatten_order

__all__ = ["LiteRTRunner", "interpreter", "placement"]


def interpreter(path: Path, backends: tuple[str, ...], threads: int) -> Interpreter:
    """An interpreter for ``path`` with tensors allocated.

    Args:
        backends: ``("xnnpack", "cpu")`` applies the XNNPACK delegate; ``("cpu",)`` runs
            the builtin kernels only.
        threads: threads of the interpreter and of its delegate.
    """
    resolver = OpResolverType.AUTO if backends[:1] == ("xnnpack",) else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interp = Interpreter(model_path=str(path), num_threads=threads, experimental_op_resolver_type=resolver)
    interp.allocate_tensors()
    return interp


def placement(interp: Interpreter, backends: tuple[str, ...]) -> PartitionReport:
    """Which ops each delegate took, from ``interp``'s op details.

    The details list the model's ops and, after them, one ``DELEGATE`` node per
    delegated partition. A partition's ops are those found by walking back from the
    delegate node's outputs to its inputs through the ops that produce each tensor.
    """
    details = interp._get_ops_details()  # the only API that lists nodes, delegate nodes included
    ops = [d for d in details if d["op_name"] != "DELEGATE"]
    producer = {int(t): i for i, d in enumerate(ops) for t in d["outputs"]}
    taken: set[int] = set()
    partitions: list[Placement] = []
    for node in (d for d in details if d["op_name"] == "DELEGATE"):
        boundary = {int(t) for t in node["inputs"]}
        stack = [int(t) for t in node["outputs"]]
        members: set[int] = set()
        while stack:
            tensor = stack.pop()
            op = producer.get(tensor)
            if tensor in boundary or op is None or op in members:
                continue
            members.add(op)
            stack.extend(int(t) for t in ops[op]["inputs"] if t >= 0)
        partitions.append(Placement(backends[0], len(members)))
        taken |= members
    fallback = Counter(d["op_name"] for i, d in enumerate(ops) if i not in taken)
    nodes = {backends[0]: len(taken)} if taken else {}
    if fallback:
        nodes["cpu"] = sum(fallback.values())
    notes = []
    if backends[0] != "cpu" and not partitions:
        notes.append(f"{backends[0]} took no ops: every op runs on LiteRT's builtin CPU kernels")
    return PartitionReport(
        backends=backends,
        nodes_by_backend=nodes,
        partitions=tuple(sorted(partitions, key=lambda p: -p.nodes)),
        fallback_ops=dict(fallback) if backends[0] != "cpu" else {},
        notes=tuple(notes),
    )


_ARGUMENT = re.compile(r"args_(\d+)")


def _argument_order(names: list[str]) -> list[int]:
    """Positions of a converted module's input tensors in its forward's order: litert-torch
    names them ``serving_default_args_N``; names without a number keep the model's order."""
    numbers = [_ARGUMENT.search(name) for name in names]
    if not all(numbers):
        return list(range(len(names)))
    return sorted(range(len(names)), key=lambda i: int(numbers[i].group(1)))  # type: ignore[union-attr]


class LiteRTRunner(Runner):
    """One LiteRT interpreter; ``threads`` go to the interpreter and the XNNPACK delegate."""

    def load(self) -> None:
        try:
            self._interp = interpreter(self.path, self.backends or ("xnnpack", "cpu"), self.threads)
        except (ValueError, RuntimeError) as exc:
            raise BenchmarkError(f"LiteRT cannot load {self.path.name}: {exc}") from exc
        inputs = self._interp.get_input_details()
        self._input = inputs[0]
        self._inputs = [inputs[i] for i in _argument_order([d["name"] for d in inputs])]
        outputs = self._interp.get_output_details()
        self._outputs = [outputs[i]["index"] for i in flatten_order([d["name"] for d in outputs])]

    def prepare(self, x: np.ndarray) -> Any:
        prepared = self.io.prepare_input(x)
        if tuple(prepared.shape) != tuple(self._input["shape"]):
            raise BenchmarkError(f"input shape {prepared.shape} does not match the model's {self._input['shape']}")
        return prepared.astype(self._input["dtype"], copy=False)

    def run(self, prepared: Any) -> list[np.ndarray]:
        try:
            self._interp.set_tensor(self._input["index"], prepared)
            self._interp.invoke()
            # get_tensor copies: the next invoke does not overwrite what is returned.
            return [self._interp.get_tensor(index) for index in self._outputs]
        except (ValueError, RuntimeError) as exc:
            raise BenchmarkError(f"LiteRT failed to run {self.path.name}: {exc}") from exc

    def prepare_inputs(self, xs: Sequence[np.ndarray]) -> list[Any]:
        # the first inputs, in the forward's order; LiteRT's integer inputs are int32 (ids arrive int64)
        return [np.ascontiguousarray(x, dtype=d["dtype"]) for d, x in zip(self._inputs, xs, strict=False)]

    def run_inputs(self, prepared: list[Any]) -> list[Any]:
        if len(prepared) != len(self._inputs):
            raise BenchmarkError(f"{self.path.name} takes {len(self._inputs)} inputs, got {len(prepared)}")
        try:
            for detail, value in zip(self._inputs, prepared, strict=True):
                self._interp.set_tensor(detail["index"], value)
            self._interp.invoke()
            return [self._interp.get_tensor(index) for index in self._outputs]
        except (ValueError, RuntimeError) as exc:
            raise BenchmarkError(f"LiteRT failed to run {self.path.name}: {exc}") from exc

    def to_float(self, raw: Any) -> np.ndarray:
        return concat_float(self.io, raw)
