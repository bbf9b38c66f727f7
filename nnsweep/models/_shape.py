"""The input shapes nnsweep accepts: batch 1, at most ``MAX_INPUT_ELEMENTS`` floats."""

from __future__ import annotations

from nnsweep.core.errors import SpecError, excerpt

__all__ = ["MAX_INPUT_ELEMENTS", "check_input_shape"]

MAX_INPUT_ELEMENTS = 1 << 24  # one input (batch 1) of at most 16,777,216 floats (64 MB)


def check_input_shape(shape: tuple[int, ...], field: str) -> tuple[int, ...]:
    """An input shape of batch 1 the host can allocate (at most MAX_INPUT_ELEMENTS floats).

    Raises:
        SpecError: an empty shape, a dimension < 1, a batch other than 1, or too many elements.
    """
    if not shape or any(d < 1 for d in shape):
        raise SpecError(field, f"{excerpt(shape)}: every dimension must be >= 1")
    if len(shape) > 8:
        raise SpecError(field, f"{excerpt(shape)}: at most 8 dimensions")
    elements = 1
    for d in shape:
        elements *= d
        if elements > MAX_INPUT_ELEMENTS:
            raise SpecError(field, f"{excerpt(shape)} has more than {MAX_INPUT_ELEMENTS:,} elements")
    return shape
