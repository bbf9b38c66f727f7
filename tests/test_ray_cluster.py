"""nnsweep/execution/ray_cluster.py without a cluster: what it does around ``ray.init`` and
``ray.shutdown`` (tests/test_cluster.py runs it on real clusters)."""

from __future__ import annotations

import signal
import sys

import pytest

from nnsweep.execution.ray_cluster import RayExecutor, _keeping_stop_signals


def test_shutdown_before_any_cluster_does_not_import_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    # A SIGTERM can cut `import ray` short; a second import of the half-initialised module
    # then fails (seen: exit 1 instead of 130 after a SIGTERM while a sweep was opening).
    monkeypatch.setitem(sys.modules, "ray", None)  # any import of ray raises ImportError
    RayExecutor().shutdown()


def test_the_stop_signal_handlers_are_put_back_after_ray_init() -> None:
    def mine(signum: int, frame: object) -> None:
        return None

    old = signal.signal(signal.SIGTERM, mine)
    try:
        with _keeping_stop_signals():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as Ray's core worker does (its crash handler)
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_sigterm_during_ray_init_is_an_interrupt() -> None:
    # ray.init's first SIGTERM handler calls sys.exit(15); the run would exit 15, not 130.
    with pytest.raises(KeyboardInterrupt), _keeping_stop_signals():
        sys.exit(signal.SIGTERM)
    with pytest.raises(SystemExit), _keeping_stop_signals():
        sys.exit(3)
