"""One model traced at a time in this process.

``torch.export`` and FX tracing keep process-global state (the module hierarchy being
exported, the proxy dispatch-mode slot): two threads tracing at once break each other
("_EXPORT_MODULE_HIERARCHY must not be None", "Trying to pop empty mode stack"). A sweep
on the local executor converts on a worker thread while its loop ranks layers, so every
conversion and every ranking holds :data:`TRACING` while it runs.
"""

from __future__ import annotations

import threading

__all__ = ["TRACING"]

TRACING = threading.RLock()
"""Held by a conversion or a sensitivity ranking for as long as it runs (re-entrant: a
ranking may convert)."""
