"""Which of ExecuTorch's backends load here: those its bindings registered, or, on a board
without torch, those the torch-free runner's libraries registered (then recorded in the
versions as ``executorch-runner``)."""

from __future__ import annotations

__all__ = ["backends"]


def backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    """The backends that load here, fallback included (``None``: ExecuTorch does not load)."""
    from nnsweep.runtimes.executorch.runner import torch_free

    names = {"XnnpackBackend": "xnnpack"}
    if torch_free():
        from nnsweep.runtimes.executorch import etlite

        try:
            library = etlite.find()
            registered = set(etlite.backends(library.load()))
        except etlite.EtLiteUnavailable:
            return None
        # The executorch wheel's own libraries, without its Python package.
        versions["executorch"] = library.version
        versions["executorch-runner"] = f"nnsweep etlite (torch-free; ExecuTorch {library.version} libraries)"
        return (*(name for rid, name in names.items() if rid in registered), "portable")
    from nnsweep.runtimes.executorch.runner import bindings

    try:
        registered = set(bindings()._get_registered_backend_names())
    except ImportError:
        return None
    return (*(name for rid, name in names.items() if rid in registered), "portable")
