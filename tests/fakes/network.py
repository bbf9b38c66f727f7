"""Ports for the servers a test starts (a Ray head, MLflow, PostgreSQL, an agent)."""

from __future__ import annotations

import random
import socket

__all__ = ["free_port", "free_port_between"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: the OS's pick for a bind to port 0,
    closed again on return (so another process may take it before the caller does)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_between(low: int, high: int) -> int:
    """A free port in ``[low, high)`` on every interface, tried in random order."""
    for port in random.sample(range(low, high), min(200, high - low)):
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {low}-{high - 1}")
