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

__all__ = ["HalfPrecision"]


class HalfPrecision(nn.Module):
    """Runs ``model`` in fp16 and takes and returns float32, like ONNX Runtime's
    ``keep_io_types``: a float input is cast to half, every output back to float32.
    Token ids and uint8 pixels (an integer input) go in as they are. What the model makes in
    float32 as it runs is made in half, as its weights and buffers are: a cast of an integer
    tensor (``x.float() / 255``, :class:`_IntegerCastsGiveHalf`) and a float constant of the
    default dtype (``torch.tensor([0.485, 0.456, 0.406])``, a normalisation's mean), whose
    float32 would otherwise promote the activations and meet half weights. The default dtype
    is float16 only while the model runs (the converters trace one model at a time)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.half()

    def forward(self, x: torch.Tensor) -> Any:
        from torch.utils import _pytree

        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float16)  # constants the model makes as it runs
        try:
            with _IntegerCastsGiveHalf():
                outputs = self.model(x.half() if x.is_floating_point() else x)
        finally:
            torch.set_default_dtype(default)
        # Every output back to float32, whatever the structure (a tuple or dict of outputs).
        return _pytree.tree_map(lambda t: t.float(), outputs)


class _IntegerCastsGiveHalf(TorchFunctionMode):
    """Inside the half model, ``t.float()``, ``t.to(torch.float32)`` and ``t.type(torch.float32)``
    of an *integer* tensor give float16.

    A pixel model scales its uint8 frame with ``x.float() / 255``: in a half model that float32
    tensor meets half weights, and the conversion fails ("Input type (float) and bias type
    (c10::Half) should be the same"). A cast of a float tensor to float32 (an upcast the model
    asks for, as some normalisations do) is left as written. The mode acts while the converter
    traces (``torch.export``, ``torch.jit.trace``), so the artifact holds the half cast."""

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
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = func(*args, **kwargs)
        for w in caught:  # a warning raised in C++ (the trace's) names the innermost Python frame: this one
            filename, lineno = _model_frame() if w.filename == __file__ else (w.filename, w.lineno)
            warnings.warn_explicit(w.message, w.category, filename, lineno)
        return result


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
