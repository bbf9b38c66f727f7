"""The runtimes' own benchmark tools, run on a device that cannot run nnsweep itself (a
bridge agent, over adb or ssh): the contract each runtime's tool fills
(:class:`DeviceTool`, named by its registry entry), what one run reports, and the helpers
their parsers share. The tools themselves live with their runtimes
(``nnsweep/runtimes/<name>/device_tool.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["NUMBER", "DeviceTool", "ToolRun", "float_after", "output_tail", "tool_for", "tools"]

NUMBER = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


@dataclass(frozen=True)
class ToolRun:
    """One run of a benchmark tool, in microseconds and MB, as the tool reported it.

    Fields a tool does not print are ``None``.
    """

    mean_us: float
    count: int | None = None
    init_us: float | None = None
    first_us: float | None = None
    warmup_mean_us: float | None = None
    std_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    peak_memory_mb: float | None = None


def float_after(pattern: str, text: str) -> float | None:
    """The number ``pattern``'s first group matches in ``text``, or ``None``."""
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


def output_tail(text: str) -> str:
    """The last three lines a tool printed, for an error message."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or "(no output)"


@dataclass(frozen=True)
class DeviceTool:
    """A runtime's own benchmark tool, run on a device that cannot run nnsweep
    (:attr:`~nnsweep.core.runtimes.RuntimeInfo.device_tool`).

    Args:
        command: ``(tool, model, threads, warmup, iters)`` -> the argv that runs it.
        parse: what the tool printed -> one :class:`ToolRun`.
        backends: the backends the tool uses, by transport name (``adb``, ``ssh``);
            ``("cpu",)`` on any other.
        android_path: where an Android device holds it when the user names none
            (empty: nowhere by default).
    """

    command: Callable[[str, str, int, int, int], list[str]]
    parse: Callable[[str], ToolRun]
    backends: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    android_path: str = ""


def tools() -> dict[str, DeviceTool]:
    """Each registered runtime that has a device tool, with it."""
    from nnsweep.core import runtimes

    found = {}
    for name in runtimes.names():
        if reference := runtimes.get(name).device_tool:
            found[name] = runtimes.load_object(reference)
    return found


def tool_for(runtime: str) -> DeviceTool:
    """``runtime``'s device tool.

    Raises:
        KeyError: it has none.
    """
    return tools()[runtime]
