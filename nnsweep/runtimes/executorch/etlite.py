"""ExecuTorch without PyTorch: ctypes over ``libnnsweep_etlite.so`` (device_agents/etlite).

The executorch wheel's shared libraries (the C++ runtime, the XNNPACK backend, the
optimized and quantized kernels) need no PyTorch; only its Python bindings import torch.
``device_agents/etlite/build.sh`` links a small C interface against them, for a board
whose agent has no PyTorch (``install.sh --lite``). The library is looked for in
``$NNSWEEP_ETLITE_DIR``, else in ``sys.prefix/lib/nnsweep-etlite`` (where build.sh puts it).
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnsweep.core.errors import BenchmarkError

__all__ = ["EtLiteLibrary", "EtLiteProgram", "EtLiteUnavailable", "find"]

ENV_DIR = "NNSWEEP_ETLITE_DIR"
_LIBRARY = "libnnsweep_etlite.so"
_MAX_DIMS = 16
_ERR_LEN = 512

# ExecuTorch's ScalarType codes (runtime/core/portable_type/scalar_type.h) <-> numpy.
_DTYPES: dict[int, np.dtype] = {
    0: np.dtype(np.uint8),
    1: np.dtype(np.int8),
    2: np.dtype(np.int16),
    3: np.dtype(np.int32),
    4: np.dtype(np.int64),
    5: np.dtype(np.float16),
    6: np.dtype(np.float32),
    7: np.dtype(np.float64),
    11: np.dtype(np.bool_),
}
_CODES = {dtype: code for code, dtype in _DTYPES.items()}


class EtLiteUnavailable(Exception):
    """The torch-free runner is not built here (or does not load)."""


@dataclass(frozen=True)
class EtLiteLibrary:
    """The built runner: where it is and the ExecuTorch version it links."""

    path: Path
    version: str

    def load(self) -> ctypes.CDLL:
        try:
            lib = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise EtLiteUnavailable(f"{self.path} does not load: {exc}") from exc
        _declare(lib)
        return lib


def find() -> EtLiteLibrary:
    """The runner built for this environment.

    Raises:
        EtLiteUnavailable: none is built (``device_agents/etlite/build.sh`` builds it).
    """
    folder = Path(os.environ.get(ENV_DIR) or Path(sys.prefix) / "lib" / "nnsweep-etlite")
    path = folder / _LIBRARY
    if not path.is_file():
        raise EtLiteUnavailable(f"no {_LIBRARY} in {folder} (device_agents/etlite/build.sh builds it)")
    version_file = folder / "executorch-version"
    version = version_file.read_text().strip() if version_file.is_file() else "unknown"
    return EtLiteLibrary(path=path, version=version)


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    i64p = ctypes.POINTER(ctypes.c_int64)
    lib.etl_set_threads.argtypes, lib.etl_set_threads.restype = [c_int], c_int
    lib.etl_backends.argtypes, lib.etl_backends.restype = [c_char_p, c_int], c_int
    lib.etl_open.argtypes, lib.etl_open.restype = [c_char_p, c_char_p, c_int], c_void_p
    lib.etl_num_inputs.argtypes, lib.etl_num_inputs.restype = [c_void_p], c_int
    lib.etl_set_input.argtypes = [c_void_p, c_int, c_void_p, c_int, i64p, c_int]
    lib.etl_set_input.restype = c_int
    lib.etl_run.argtypes, lib.etl_run.restype = [c_void_p, c_char_p, c_int], c_int
    lib.etl_num_outputs.argtypes, lib.etl_num_outputs.restype = [c_void_p], c_int
    lib.etl_output.argtypes = [
        c_void_p,
        c_int,
        ctypes.POINTER(c_int),
        i64p,
        c_int,
        ctypes.POINTER(c_int),
        ctypes.POINTER(c_void_p),
    ]
    lib.etl_output.restype = c_int
    lib.etl_close.argtypes, lib.etl_close.restype = [c_void_p], None


def set_threads(lib: ctypes.CDLL, threads: int) -> None:
    """Size ExecuTorch's threadpool (before any program is loaded)."""
    if lib.etl_set_threads(threads) != 0:
        raise BenchmarkError(f"ExecuTorch (torch-free) could not size its threadpool to {threads}")


def backends(lib: ctypes.CDLL) -> tuple[str, ...]:
    """The backend ids registered in the runtime (``XnnpackBackend``, ...)."""
    buf = ctypes.create_string_buffer(_ERR_LEN)
    lib.etl_backends(buf, _ERR_LEN)
    return tuple(name for name in buf.value.decode().split(",") if name)


class EtLiteProgram:
    """A loaded ``.pte`` and its ``forward`` method."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self._lib = lib
        err = ctypes.create_string_buffer(_ERR_LEN)
        handle = lib.etl_open(str(path).encode(), err, _ERR_LEN)
        if not handle:
            raise BenchmarkError(f"cannot load {path.name}: {err.value.decode() or 'unknown error'}")
        self._handle = ctypes.c_void_p(handle)
        self._inputs: list[np.ndarray] = []

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run ``forward`` on ``inputs``; every output, copied out."""
        lib, handle = self._lib, self._handle
        if len(inputs) != lib.etl_num_inputs(handle):
            raise BenchmarkError(f"forward takes {lib.etl_num_inputs(handle)} inputs, got {len(inputs)}")
        self._inputs = [np.ascontiguousarray(a) for a in inputs]  # alive until the run returns
        for i, a in enumerate(self._inputs):
            if a.dtype not in _CODES:
                raise BenchmarkError(f"input {i}: dtype {a.dtype} is not supported by the torch-free runner")
            dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
            if lib.etl_set_input(handle, i, a.ctypes.data, _CODES[a.dtype], dims, a.ndim) != 0:
                raise BenchmarkError(f"input {i} was refused")
        err = ctypes.create_string_buffer(_ERR_LEN)
        if lib.etl_run(handle, err, _ERR_LEN) != 0:
            raise BenchmarkError(err.value.decode() or "execute(forward) failed")
        return [self._output(i) for i in range(lib.etl_num_outputs(handle))]

    def _output(self, i: int) -> np.ndarray:
        code, ndim, data = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
        dims = (ctypes.c_int64 * _MAX_DIMS)()
        status = self._lib.etl_output(
            self._handle, i, ctypes.byref(code), dims, _MAX_DIMS, ctypes.byref(ndim), ctypes.byref(data)
        )
        if status != 0:
            raise BenchmarkError(f"output {i} is not a tensor the torch-free runner reads (status {status})")
        if code.value not in _DTYPES:
            raise BenchmarkError(f"output {i}: ExecuTorch dtype code {code.value} is not supported")
        dtype = _DTYPES[code.value]
        shape = tuple(dims[d] for d in range(ndim.value))
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0 or not data.value:
            return np.zeros(shape, dtype)
        raw = ctypes.string_at(data.value, count * dtype.itemsize)  # a copy: the runtime reuses its buffer
        return np.frombuffer(raw, dtype=dtype).reshape(shape)

    def close(self) -> None:
        if self._handle:
            self._lib.etl_close(self._handle)
            self._handle = ctypes.c_void_p()
