"""torch's zip writers on a full disk (``/dev/full``: every write fails with ENOSPC): on
their own they end the process; through :func:`save_through_memory` they raise OSError."""

from __future__ import annotations

import errno
import io
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
import torch

from nnsweep.core.through_memory import save_through_memory

FULL = Path("/dev/full")
pytestmark = pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full (Linux)")


def _writers() -> dict[str, Callable[[IO[bytes]], Any]]:
    linear = torch.nn.Linear(4, 4).eval()
    program = torch.export.export(linear, (torch.randn(1, 4),))
    scripted = torch.jit.script(linear)
    return {
        "torch.save": lambda f: torch.save(linear.state_dict(), f),
        "torch.export.save": lambda f: torch.export.save(program, f),
        "torch.jit.save": lambda f: torch.jit.save(scripted, f, _extra_files={"meta.json": "{}"}),
    }


@pytest.mark.parametrize("writer", ["torch.export.save", "torch.jit.save"])
def test_torch_s_own_writer_ends_the_process_on_a_full_disk(writer: str) -> None:
    """Why the helper exists (torch 2.14): were torch to raise here instead, it could go."""
    call = {
        "torch.export.save": "torch.export.save(torch.export.export(m, (torch.randn(1, 4),)), '/dev/full')",
        "torch.jit.save": "torch.jit.save(torch.jit.script(m), '/dev/full')",
    }[writer]
    code = f"import torch\nm = torch.nn.Linear(4, 4).eval()\ntry:\n    {call}\nexcept Exception:\n    exit(3)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)  # 3: it raised
    assert done.returncode == -signal.SIGABRT, done.stderr.decode(errors="replace")[-2000:]


@pytest.mark.parametrize("writer", ["torch.save", "torch.export.save", "torch.jit.save"])
def test_through_memory_a_full_disk_is_an_oserror_naming_enospc(writer: str) -> None:
    with pytest.raises(OSError) as raised:
        save_through_memory(FULL, _writers()[writer])
    assert raised.value.errno == errno.ENOSPC


@pytest.mark.parametrize("writer", ["torch.save", "torch.export.save", "torch.jit.save"])
def test_through_memory_writes_what_the_writer_writes_to_a_buffer(writer: str, tmp_path: Path) -> None:
    save = _writers()[writer]
    buffer = io.BytesIO()
    save(buffer)
    save_through_memory(tmp_path / "out", save)
    assert (tmp_path / "out").read_bytes() == buffer.getvalue()


def test_a_program_written_through_memory_loads_back_and_computes_the_same(tmp_path: Path) -> None:
    linear = torch.nn.Linear(4, 4).eval()
    x = torch.randn(1, 4)
    program = torch.export.export(linear, (x,))
    save_through_memory(tmp_path / "program.pt2", lambda f: torch.export.save(program, f))
    assert torch.equal(torch.export.load(tmp_path / "program.pt2").module()(x), linear(x))
