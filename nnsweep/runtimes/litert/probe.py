"""Whether the LiteRT interpreter loads here."""

from __future__ import annotations

__all__ = ["backends"]


def backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    """XNNPACK and the builtin kernels (``None``: LiteRT does not load)."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: F401
    except ImportError:
        return None
    # XNNPACK is LiteRT's default delegate, built into every ai-edge-litert wheel.
    return ("xnnpack", "cpu")
