"""Why torch's FX int8 cannot take a model, in one line that names the construct.

torch.ao's FX quantization traces ``forward`` symbolically: every tensor, and every size
read from one, is a ``Proxy`` that has no value. Python code that needs the value fails
there in the interpreter's words ("slice indices must be integers or None ...", "int()
argument must be ... not 'Proxy'") or torch.fx's ("symbolically traced variables cannot be
used as inputs to control flow"), which say nothing of the model. Hugging Face's models are
made of such code (BERT slices its position ids up to the input's length; others branch on
shapes). ``torch.export`` records sizes as symbols and takes it: the runtimes that export
the model quantize it, and the refusal says which, and what in the model FX could not trace.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.fx._symbolic_trace

from nnsweep.core import runtimes
from nnsweep.core.config import QuantMode
from nnsweep.core.errors import ConversionError

__all__ = ["traced_or_refused", "untraceable"]

_SYMBOLIC_TRACE = torch.fx._symbolic_trace.__file__
_TORCH = Path(torch.__file__).parent
# The runtimes that quantize a model exported with torch.export (not by FX tracing).
_EXPORTING = ("executorch", "onnxruntime", "litert")
# What the failure's message says -> the construct it comes from; the first that matches.
_CONSTRUCTS = (
    ("cannot be used as inputs to control flow", "control flow on a traced value (an if, while or assert on a tensor)"),
    ("slice indices must be integers", "a slice bounded by a traced value (a size read from the input)"),
    ("not 'Proxy'", "a Python number made of a traced value (int() or float() of a tensor or its size)"),
    ("'Proxy' object cannot be interpreted as an integer", "an integer made of a traced value (range() of a size)"),
    ("Proxy object cannot be iterated", "iteration over a traced value (a loop over a tensor, or *args of one)"),
)
_SOURCE = 60  # characters of the source line shown


def untraceable(exc: BaseException, mode: QuantMode) -> str | None:
    """The one-line refusal for ``exc`` if torch.fx's symbolic trace raised it (``None``
    otherwise): the construct, the file and line of the model's code where the trace
    stopped, and the runtimes that take the model in ``mode``."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not any(frame.filename == _SYMBOLIC_TRACE for frame in frames):
        return None
    message = str(exc)
    lines = message.strip().splitlines()
    construct = next(
        (what for text, what in _CONSTRUCTS if text in message),
        f"{type(exc).__name__}: {lines[0] if lines else 'no message'}",
    )
    own = [frame for frame in frames if not Path(frame.filename).is_relative_to(_TORCH)]
    where = ""
    if own:  # the innermost frame outside torch: the model's line that needed a value
        frame = own[-1]
        source = (frame.line or "").strip()
        source = source if len(source) <= _SOURCE else source[: _SOURCE - 1] + "…"
        where = f" at {Path(frame.filename).name}:{frame.lineno}" + (f" (`{source}`)" if source else "")
    takers = [name for name in _EXPORTING if mode in runtimes.get(name).modes]
    named = " or ".join(filter(None, (", ".join(takers[:-1]), takers[-1]))) if takers else ""
    instead = f"deploy {mode.value} with {named} (quantized after torch.export), or " if takers else ""
    return (
        f"torch's FX int8 quantizer cannot trace this model: {construct}{where}; "
        f"{instead}torch in fp32, fp16 or dynamic_int8"
    )


@contextlib.contextmanager
def traced_or_refused(mode: QuantMode) -> Iterator[None]:
    """Around an FX prepare: a failure of its symbolic trace becomes a
    :class:`~nnsweep.core.errors.ConversionError` saying :func:`untraceable`'s line (the
    traceback stays on ``__cause__`` for ``-v``); any other failure passes as it is."""
    try:
        yield
    except ConversionError:
        raise
    except Exception as exc:  # the model's own code, run under the tracer
        refusal = untraceable(exc, mode)
        if refusal is None:
            raise
        raise ConversionError(refusal) from exc
