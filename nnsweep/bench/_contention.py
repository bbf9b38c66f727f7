"""How much CPU other processes took on the measuring process's cores while it timed.

The load average cannot tell whether work landed on *these* cores *during* the timed
runs; the kernel's per-CPU counters can. :class:`CoreClock` reads ``/proc/stat`` busy
time (steal included) for this process's CPUs before and after; beyond this process's
own CPU time, that is others' work. With ``threads`` on ``cores``, work that fits in the
``cores - threads`` spare cores leaves the measurement alone; more took time from the
runtime's threads, and :func:`contended` says so (the re-measure then measures again).
Without ``/proc/stat`` (not Linux), nothing is said.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["TOLERANCE_CORES", "CoreClock", "contended", "others_cores"]

# Beyond the spare cores, others may take this much of a core before a figure counts as
# contended: the clock ticks are 10 ms, and a quiet machine's kernel threads and idle
# daemons take a few percent of one.
TOLERANCE_CORES = 0.10

_TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 10.0


class CoreClock:
    """The busy time of the CPUs this process may run on, from ``/proc/stat``."""

    @property
    def uncertainty_ms(self) -> float:
        """How far a difference of two :meth:`busy_ms` readings may be off: two ticks a core."""
        return 2 * len(self.cpus) * _TICK_MS

    def __init__(self) -> None:
        try:
            self.cpus = frozenset(f"cpu{n}" for n in os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = frozenset()

    def busy_ms(self) -> float | None:
        """Their busy time so far, in ms (``None``: unknown here)."""
        if not self.cpus:
            return None
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                lines = stat.read().splitlines()
        except OSError:
            return None
        ticks = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if name in self.cpus:
                # user nice system idle iowait irq softirq steal (guest time is inside user)
                fields = [int(v) for v in rest.split()[:8]]
                ticks += sum(fields[:3]) + sum(fields[5:8])
        return ticks * _TICK_MS


def others_cores(phases_ms: Mapping[str, float]) -> float | None:
    """How many cores' worth of others' work ran on the measuring cores during the timed
    runs (``None``: not known for this measurement)."""
    others, timed = phases_ms.get("timed_others_cpu"), phases_ms.get("timed")
    if others is None or not timed:
        return None
    return max(others, 0.0) / timed


def contended(phases_ms: Mapping[str, float]) -> bool:
    """Whether others' work during the timed runs went beyond the cores the runtime's
    threads left spare (by more than :data:`TOLERANCE_CORES`), for certain: the counters
    tick in whole clock ticks, so each core's reading may be up to two ticks off, and
    only what exceeds that uncertainty counts (timed runs shorter than a few ticks are
    never judged contended)."""
    others, timed = phases_ms.get("timed_others_cpu"), phases_ms.get("timed")
    if others is None or not timed:
        return False
    certain = others - phases_ms.get("timed_others_cpu_uncertainty", 0.0)
    spare = max(phases_ms.get("timed_spare_cpu", 0.0), 0.0)
    return certain / timed > spare / timed + TOLERANCE_CORES
