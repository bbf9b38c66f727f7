"""A port a command is about to serve on, checked free before the server starts."""

from __future__ import annotations

import socket

from nnsweep.core.errors import SpecError

__all__ = ["check_port_free"]


def check_port_free(port: int, host: str = "127.0.0.1", option: str = "--port") -> None:
    """Refuse a port another process holds on ``host``: the servers nnsweep starts report
    a failed bind their own way (MLflow's logs it and exits 0, as if the UI had run; a
    Ray head waits 40 s for its GCS, then prints a traceback).

    Raises:
        SpecError: the port cannot be bound, naming ``option`` and another port to try.
    """
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            probe.bind((host, port))
        except OSError as exc:
            other = port + 1 if port < 65535 else port - 1
            why = exc.strerror or str(exc)
            raise SpecError(
                option, f"{port} on {host} cannot be used ({why}): give another, e.g. {option} {other}"
            ) from None
