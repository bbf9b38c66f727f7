"""litert-torch's JAX lowerings made once per process while nnsweep converts.

litert-torch lowers each op by jitting a JAX function to StableHLO text, serialising it to
VHLO and parsing it into the conversion's MLIR module; its cache lasts one conversion, so
the next conversion in the process lowers the same calls again.

Within :func:`jax_lowerings_made_once`, the StableHLO text of a call whose fingerprint was
lowered before in this process, and VHLO bytes of a text serialised before, are reused;
the parse and all after it run as usual. The key is litert-torch's fingerprint with each
value's type beside it (``1``, ``1.0`` and ``True`` are equal in Python). A call that cannot
be fingerprinted is lowered normally. Outside a block, or when litert-torch lacks these
functions, its own code runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from nnsweep.runtimes.common.stand_in import StandIn

__all__ = ["jax_lowerings_made_once", "typed"]

# What is kept, in characters of text and bytes of VHLO: mobilenet_v3_small's fp32 conversion
# kept 321 lowerings, each under 800 characters of text and 620 bytes of VHLO, 451 K in all.
# Past the budget the kept lowerings are dropped and kept again from nothing.
_KEPT_SIZE = 64 * 2**20
_lock = threading.Lock()
_texts: dict[Hashable, str] = {}
_vhlo: dict[str, bytes] = {}
_kept_size = 0


def _bridge() -> Any:
    from litert_torch.backend.jax_bridge import _wrap

    return _wrap


def _lower_to_ir_text(
    jaxfn: Callable[..., Any], args: Any, kwargs: Any, ir_input_names: list[str] | None = None
) -> tuple[Callable[[], str], list[Any]]:
    """litert-torch's ``_lower_to_ir_text``, whose text getter returns a text made before
    for the same fingerprint."""
    getter, ir_inputs = _LOWER.original(jaxfn, args, kwargs, ir_input_names=ir_input_names)
    fingerprint = _bridge().get_cache_fingerprint((jaxfn, args, kwargs, ir_input_names))
    if fingerprint is None:
        return getter, ir_inputs
    key = typed(fingerprint)

    def text() -> str:
        with _lock:
            made = _texts.get(key)
        if made is None:
            made = getter()
            _keep(_texts, key, made, len(made))
        return made

    return text, ir_inputs


def _stablehlo_to_vhlo(ir_text: str) -> bytes:
    """litert-torch's ``_stablehlo_to_vhlo``, made once per text."""
    with _lock:
        made = _vhlo.get(ir_text)
    if made is None:
        made = _VHLO.original(ir_text)
        _keep(_vhlo, ir_text, made, len(ir_text) + len(made))
    return made


def _keep(kept: dict[Any, Any], key: Any, value: Any, size: int) -> None:
    global _kept_size
    with _lock:
        if _kept_size + size > _KEPT_SIZE:
            _texts.clear()
            _vhlo.clear()
            _kept_size = 0
        if key not in kept:
            kept[key] = value
            _kept_size += size


def typed(value: Any) -> Any:
    """``value`` (a fingerprint: nested tuples) with the type of each leaf beside it."""
    if isinstance(value, tuple):
        return tuple(typed(item) for item in value)
    return (type(value), value)


_LOWER = StandIn(_bridge, "_lower_to_ir_text", _lower_to_ir_text)
_VHLO = StandIn(_bridge, "_stablehlo_to_vhlo", _stablehlo_to_vhlo)


@contextlib.contextmanager
def jax_lowerings_made_once() -> Iterator[None]:
    """Within the block, litert-torch lowers each distinct JAX call once per process."""
    with _LOWER.block(), _VHLO.block():
        yield
