"""ExecuTorch's intermediates for ``nnsweep bench --explain``: ETDump's debug outputs, read with an ETRecord.

ETDump logs the output of each instruction a program runs on ExecuTorch's own kernels, not
those inside a delegate call: XNNPACK runs a whole int8 model as one call and shows only its
output. So the converter's quantized program (the same PT2E quantization and calibration,
hence the same scales) is rebuilt and lowered without a delegate, with an ETRecord, and run
through the Python bindings with a debug buffer, one input at a time (ExecuTorch's Inspector
takes the runs of one ETDump as repeats of one input). :class:`executorch.devtools.Inspector`
groups the events by debug handle (an op with the quantize/dequantize pair after it) and
names the ops' module stacks (``nn_module_stack``): a group's last float output, what the
next op receives, is its module's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench.divergence import Observed
from nnsweep.core.errors import BenchmarkError

__all__ = ["explain", "grouped_outputs"]

_DEBUG_BUFFER = 64 * 1024 * 1024  # bytes of intermediate outputs one run may log
_EXPORT_WRAPPER = "_aot_export_non_strict"  # the module torch.export wraps q/dq ops it adds in


def _module_path(hierarchy: dict[str, Any] | None) -> str | None:
    """The innermost module path of a group's first op that has one (``None``: the root's or none)."""
    for stack in (hierarchy or {}).values():
        if not stack:
            continue
        path, kind = list(stack.values())[-1]
        if path and _EXPORT_WRAPPER not in str(kind):
            return str(path)
    return None


def grouped_outputs(events: Iterable[Any]) -> list[tuple[str, np.ndarray]]:
    """``(module path, last float output)`` per debug-handle group of Inspector ``events``, in
    the order the groups first ran; groups of no module (the root's reshapes) are left out."""
    order: list[tuple[int, ...]] = []
    paths: dict[tuple[int, ...], str | None] = {}
    values: dict[tuple[int, ...], np.ndarray] = {}
    for event in events:
        handles = event.debug_handles
        if handles is None or not event.debug_data:
            continue
        key = tuple(handles) if isinstance(handles, list | tuple) else (int(handles),)
        if key not in paths:
            order.append(key)
            paths[key] = _module_path(getattr(event, "module_hierarchy", None))
        output = event.debug_data[-1]
        if hasattr(output, "is_floating_point") and output.is_floating_point():
            values[key] = output.detach().float().numpy().copy()
    return [(paths[k], values[k]) for k in order if paths[k] is not None and k in values]  # type: ignore[misc]


def explain(bundle: Any, config: Any, artifact: Path, io: Any, inputs: np.ndarray) -> tuple[list[Observed], str]:
    """Each layer's output on ``inputs`` (see the module docstring); ``artifact`` is not run."""
    import torch
    from executorch.devtools import Inspector
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from nnsweep.runtimes.executorch.converter import rebuilt_program
    from nnsweep.runtimes.executorch.runner import bindings, torch_free

    if torch_free():
        raise BenchmarkError("ExecuTorch's ETDump needs its Python bindings, which need torch: not installed here")
    program = rebuilt_program(bundle, config.quant)
    config_ir = EdgeCompileConfig(_check_ir_validity=False)
    edge = to_edge_transform_and_lower(program, partitioner=[], compile_config=config_ir, generate_etrecord=True)
    if config.quant.mode.is_int8:
        import executorch.kernels.quantized  # noqa: F401  # the out-variants of quantize/dequantize
    executorch_program = edge.to_executorch()
    runs: list[list[tuple[str, np.ndarray]]] = []
    with tempfile.TemporaryDirectory(prefix="nnsweep-explain-") as tmp:
        pte, etrecord = Path(tmp) / "explain.pte", str(Path(tmp) / "etrecord.bin")
        pte.write_bytes(executorch_program.buffer)
        # read back from its file: the ETRecord object itself does not give Inspector its debug handles
        executorch_program.get_etrecord().save(etrecord)
        for i in range(len(inputs)):
            try:
                module = bindings()._load_for_executorch(str(pte), enable_etdump=True, debug_buffer_size=_DEBUG_BUFFER)
                module.forward([torch.from_numpy(np.ascontiguousarray(inputs[i : i + 1]))])
                dump, buffer = Path(tmp) / f"run{i}.etdp", Path(tmp) / f"run{i}.bin"
                module.write_etdump_result_to_file(str(dump), str(buffer))
            except RuntimeError as exc:
                raise BenchmarkError(f"ExecuTorch cannot run its program with ETDump: {exc}") from exc
            inspector = Inspector(etdump_path=str(dump), etrecord=etrecord, debug_buffer_path=str(buffer))
            runs.append(grouped_outputs(e for block in inspector.event_blocks for e in block.events))
    first = runs[0]
    if any(len(run) != len(first) for run in runs):
        raise BenchmarkError("ExecuTorch logged a different number of intermediates for each input")
    observed: list[Observed] = [
        (name, np.concatenate([run[k][1] for run in runs])) for k, (name, _) in enumerate(first)
    ]
    delegated = [b for b in config.backends if b != "portable"]
    where = f"{', '.join(delegated)} runs its part as one delegate call, unlogged: " if delegated else ""
    note = (
        f"ETDump debug outputs named by ETRecord; {where}the converter's quantized program rebuilt "
        "and run on ExecuTorch's portable kernels"
    )
    return observed, note
