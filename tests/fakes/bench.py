"""``nnsweep bench --json`` as a user runs it: the real command in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def bench_json(cache: Path, model: str, *args: str) -> dict[str, Any]:
    """The JSON ``nnsweep bench --model MODEL ARGS`` prints (``--json`` among ``args``), asserting exit 0."""
    argv = [sys.executable, "-m", "nnsweep", "--cache-dir", str(cache), "bench", "--model", model, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]
