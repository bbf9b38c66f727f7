"""The coordinator's connection to Ray: made by nnsweep, once per process.

:func:`connect` calls ``ray.init`` for a local cluster of nnsweep's own or for the head at
an address, in nnsweep's namespace, with the process's stop signals kept
(:func:`keeping_stop_signals`). A connection this process already holds is used only when
nnsweep made it (its namespace says so): one a notebook or a script made with its own
``ray.init()`` is refused (:func:`refuse_foreign`). Used, it swept nothing: its cluster
offers no nnsweep device, so the sweep failed saying to start an agent, and an
``address=`` given beside it was not the cluster the sweep ran on.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nnsweep.agents import check_head_answers, local_token
from nnsweep.core.errors import SpecError
from nnsweep.runtimes.common.converter import toolchain_records_to_debug_log

__all__ = ["NAMESPACE", "connect", "keeping_stop_signals", "refuse_foreign"]

log = logging.getLogger(__name__)

NAMESPACE = "nnsweep"
# Ray announces on stderr the token authentication nnsweep asked for: to the debug log, as
# nnsweep logs the token's path itself (Ray's warning that authentication is off stays).
_RAY_TOKEN_LOG = "ray._private.authentication.authentication_token_setup"
_TOKEN_ANNOUNCED = "Token authentication is enabled for this Ray cluster"


@contextlib.contextmanager
def keeping_stop_signals() -> Iterator[None]:
    """Put back this process's SIGTERM and SIGINT handlers after ``ray.init``, and make a SIGTERM
    during it an interrupt. ``ray.init`` first sets a SIGTERM handler that exits with status 15,
    then its core worker installs a crash handler on SIGTERM (it prints a stack trace and aborts
    the process, exit -6): either would take from ``nnsweep run`` its stop at the next safe point
    and its exit code 130. Found with benchmarks/fault_injection.py --executor ray: a SIGTERM
    while measuring aborted the run; one during ``ray.init`` exited 15."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        raise KeyboardInterrupt from None  # Ray's own handler, met before ours was back
    finally:
        for sig, handler in held.items():
            if handler is not None:
                signal.signal(sig, handler)


def refuse_foreign(ray: Any) -> None:
    """Refuse the connection this process holds unless nnsweep made it (in its namespace)."""
    namespace = ray.get_runtime_context().namespace
    if namespace != NAMESPACE:
        raise SpecError(
            "executor",
            f"this process is already connected to a Ray cluster (ray.init() was called before, namespace "
            f"{namespace!r}): nnsweep's Ray executor makes its own connection, to a local cluster of its own or "
            "to the head given as address; call ray.shutdown() first, or sweep with executor='local'",
        )


def connect(ray: Any, address: str | None, local_resources: dict[str, float]) -> None:
    """``ray.init``: a new local cluster of nnsweep's own offering ``local_resources``, or the
    head at ``address``."""
    with keeping_stop_signals(), toolchain_records_to_debug_log(log, _TOKEN_ANNOUNCED, _RAY_TOKEN_LOG):
        if address is not None:
            check_head_answers(address, option="address")  # ray.init waits for one without end
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
            return
        # Ray would write ~/.ray/auth_token itself, 0644 in a 0755 folder; the token it
        # reads is created 0600 in a 0700 folder first (no environment variable is set
        # here; ray.init itself sets RAY_AUTH_MODE=token in this process when unset).
        token = local_token(os.environ, Path.home())
        if token is not None:
            log.info("local Ray cluster: token authentication with the token in %s", token)
        # "local": always a new cluster of our own, never one found through RAY_ADDRESS
        # or a stale /tmp/ray/ray_current_cluster left by a `ray start` that died.
        ray.init(
            address="local",
            namespace=NAMESPACE,
            resources=local_resources,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
