"""The digest of loaded data: the same in every process for the same samples, and another
one when any input, target or kept index changes."""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from nnsweep.core.errors import SpecError, clip
from nnsweep.models._bundle import is_tensor

__all__ = ["data_digest"]

_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def data_digest(inputs: np.ndarray, targets: Any, indices: np.ndarray, *, field: str) -> str:
    """sha256 of the inputs (dtype, shape, bytes), the targets and the kept indices.

    Targets are walked rather than pickled, so a list of dicts of arrays digests the same
    whatever the dicts' key order, and a tensor the same as its values as numpy.

    Raises:
        SpecError: on ``field``: a target holds an object that neither walks nor pickles.
    """
    h = hashlib.sha256()
    try:
        for part in (inputs, targets, indices):
            _feed(h, part)
    except _Unpicklable as exc:
        raise SpecError(
            field,
            f"a target of type {exc.kind} cannot be digested ({exc.reason}); give arrays, lists, dicts, numbers "
            "or strings",
        ) from None
    return h.hexdigest()


class _Unpicklable(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        self.kind, self.reason = kind, reason


def _put(h: Any, tag: bytes, payload: bytes | np.ndarray) -> None:
    """One tagged, length-prefixed record: no two structures share a byte stream."""
    size = payload.nbytes if isinstance(payload, np.ndarray) else len(payload)
    h.update(tag + size.to_bytes(8, "little"))
    h.update(payload)


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, _SCALARS):
        _put(h, b"s", f"{type(value).__name__}:{value!r}".encode())
    elif isinstance(value, np.generic):
        _feed(h, np.asarray(value))
    elif isinstance(value, np.ndarray):
        _put(h, b"a", f"{value.dtype.str}{value.shape}".encode())
        if value.dtype.hasobject:
            for item in value.reshape(-1):
                _feed(h, item)
        else:
            data = np.ascontiguousarray(value)
            _put(h, b"d", data.tobytes() if not data.dtype.itemsize else data.reshape(-1).view(np.uint8))
    elif is_tensor(value):
        _put(h, b"t", str(value.dtype).encode())
        tensor = value.detach().cpu()
        _feed(h, (tensor.float() if str(tensor.dtype) == "torch.bfloat16" else tensor).numpy())
    elif isinstance(value, list | tuple):
        _put(h, b"l" if isinstance(value, list) else b"u", str(len(value)).encode())
        for item in value:
            _feed(h, item)
    elif isinstance(value, Mapping):
        _put(h, b"m", str(len(value)).encode())
        for key, item in sorted(value.items(), key=lambda kv: repr(kv[0])):
            _feed(h, key)
            _feed(h, item)
    elif hasattr(value, "__array_interface__") or hasattr(value, "__array__"):  # a PIL image
        _put(h, b"i", type(value).__name__.encode())
        _feed(h, np.asarray(value))
    else:
        _put(h, b"p", _pickled(value))


def _pickled(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=4)
    except Exception as exc:  # a target of the user's own type
        raise _Unpicklable(type(value).__name__, clip(str(exc), 120)) from None
