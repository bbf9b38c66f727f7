"""Which of ONNX Runtime's execution providers this build offers."""

from __future__ import annotations

__all__ = ["backends"]


def backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    """The backends that load here, ``cpu`` last (``None``: ONNX Runtime does not load)."""
    try:
        import onnxruntime

        from nnsweep.runtimes.onnxruntime.runner import PROVIDERS
    except ImportError:
        return None

    available = set(onnxruntime.get_available_providers())
    found = [name for name, provider in PROVIDERS.items() if provider in available and name != "cpu"]
    return (*found, "cpu")
