"""Which of torch's quantized engines this build supports."""

from __future__ import annotations

__all__ = ["backends"]


def backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    """The engines that load here (``None``: torch does not load)."""
    try:
        import torch
    except ImportError:
        return None
    engines = set(torch.backends.quantized.supported_engines)
    return tuple(e for e in ("x86", "fbgemm", "qnnpack", "onednn") if e in engines)
