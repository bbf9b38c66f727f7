"""This process as a Ray client of a cluster (``run --address``, ``devices --address``)."""

from __future__ import annotations

import os
from pathlib import Path


def _ray_client_env(address: str | None, allow_readable: bool = False) -> None:
    """Before this process joins a cluster as a Ray client: a head that answers at ``address``,
    token mode, a token that only we can read, minor-version matching (see nnsweep.agents._node)."""
    from nnsweep.agents import RAY_ENV, check_head_answers, check_token_file, default_token_path

    if not address:
        return
    if not os.environ.get("RAY_AUTH_TOKEN"):
        path = default_token_path(os.environ, Path.home())
        check_token_file(path, option="token", allow_readable=allow_readable)
    check_head_answers(address)  # last: the checks that need no network come first
    os.environ.update(RAY_ENV)
