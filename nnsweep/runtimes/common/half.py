"""A float model in half precision behind a float32 interface, for the converters that
export an fp16 artifact from PyTorch (ExecuTorch, torch)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree

__all__ = ["HalfPrecision"]


class HalfPrecision(nn.Module):
    """Runs ``model`` in fp16 and takes and returns float32, like ONNX Runtime's
    ``keep_io_types``: a float input is cast to half, every float output back to float32.
    Token ids and uint8 pixels (an integer input) go in as they are. What the model makes in
    float32 as it runs is made in half, as its weights and buffers are, or meets the half
    activations in half (:class:`_HalfRules`): a cast of an integer tensor (``x.float() / 255``),
    a float constant of the default dtype (``torch.tensor([0.485, 0.456, 0.406])``, a
    normalisation's mean), and a float32 tensor the model builds on purpose (sinusoidal
    positions from ``torch.arange(n, dtype=torch.float32)``), whose float32 would otherwise
    promote the activations and meet half weights. The default dtype is float16 only while
    the model runs (the converters trace one model at a time)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.half()

    def forward(self, x: torch.Tensor) -> Any:
        default = torch.get_default_dtype()
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.set_default_dtype(torch.float16)  # constants the model makes as it runs
                with _HalfRules(caught):
                    outputs = self.model(x.half() if x.is_floating_point() else x)
        finally:
            torch.set_default_dtype(default)
            _show(caught)
        # Every float output back to float32, whatever the structure (a tuple or dict of
        # outputs); class ids (an argmax) stay integers, as the fp32 model gives them.
        return _pytree.tree_map_only(torch.Tensor, _to_float32, outputs)


class _HalfRules(TorchFunctionMode):
    """Inside the half model, what the model computes in float32 comes back to half:

    * ``t.float()`` / ``t.to(torch.float32)`` / ``t.type(torch.float32)`` of an *integer*
      tensor give float16 (a pixel model's ``x.float() / 255`` would meet half weights).
    * An op given both float16 and float32 tensors gets the float32 ones in half (float32
      positions or masks added to half activations), where PyTorch would promote to float32.

    Float upcasts the model makes on its own (a norm's variance) are left as written, and cast
    only where they meet the half network; in-place ops, ``out=`` and explicit casts are left
    alone. The mode acts while the converter traces, so the artifact holds the half casts.
    Warnings go into ``caught``, attributed to the model's line rather than this file's.
    """

    def __init__(self, caught: list[warnings.WarningMessage]) -> None:
        super().__init__()
        self._caught = caught

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _CASTS and args and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point():
            if func is torch.Tensor.float:
                return args[0].half()
            args = tuple(torch.float16 if a is torch.float32 else a for a in args)
            if kwargs.get("dtype") is torch.float32:
                kwargs = {**kwargs, "dtype": torch.float16}
        elif _meets_half(func, args, kwargs):
            args, kwargs = _pytree.tree_map_only(torch.Tensor, _to_half, (args, kwargs))
        seen = len(self._caught)
        result = func(*args, **kwargs)
        # A warning raised in C++ (the trace's) names the innermost Python frame: this one.
        for w in self._caught[seen:]:
            if w.filename == __file__:
                w.filename, w.lineno = _model_frame()
        return result


def _meets_half(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` is given both float16 and float32 tensors and may have the float32 ones
    in half: not an explicit cast, nor an op that writes into one of its operands."""
    name = getattr(func, "__name__", "")
    writes = name == "__setitem__" or (name.startswith("__i") and name.endswith("__"))
    writes = writes or (name.endswith("_") and not name.endswith("__")) or "out" in kwargs
    if writes or func in _CASTS or func is torch.Tensor.type_as:
        return False
    dtypes = {t.dtype for t in _pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
    return torch.float16 in dtypes and torch.float32 in dtypes


def _to_half(t: torch.Tensor) -> torch.Tensor:
    return t.half() if t.dtype is torch.float32 else t


def _to_float32(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.is_floating_point() else t


def _show(caught: list[warnings.WarningMessage]) -> None:
    """Shows the warnings of one run of the model as the filters say, with a registry per file
    for the run, as ``warnings.warn`` keeps one per module: a line the model runs in a loop (a
    layer called once per block) warns once, not once per call."""
    registries: dict[str, dict[Any, Any]] = {}
    for w in caught:
        registry = registries.setdefault(w.filename, {})
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, registry=registry, source=w.source)


def _model_frame() -> tuple[str, int]:
    """The file and line of the call that reached the mode from outside PyTorch and this file:
    the model's own line, which a warning should name."""
    torch_code = str(Path(torch.__file__).parent)
    frame = sys._getframe(1)
    while frame.f_back is not None and (
        frame.f_code.co_filename == __file__ or frame.f_code.co_filename.startswith(torch_code)
    ):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


_CASTS = frozenset({torch.Tensor.float, torch.Tensor.to, torch.Tensor.type})
