"""Reading a command's SPEC argument (``run``, ``best``, ``report``, ``ui``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_SPEC_OPTIONS: dict[str, str] = {}  # sweep errors name the YAML field path as written


def _load_checked_spec(path: Path, *, tracking: bool) -> Any:
    """The spec at ``path``, with its storage and (if used) tracking URI checked (a few seconds at most).

    Raises:
        SpecError: the spec is invalid or a URI is unusable.
    """
    from nnsweep.spec import load_spec
    from nnsweep.sweep.preflight import check_spec

    spec = load_spec(path)
    check_spec(spec, tracking=tracking)
    return spec
