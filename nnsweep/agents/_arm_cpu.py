"""Which Arm core this is, from its MIDR_EL1 register as Linux shows it in ``/sys``.

An aarch64 ``/proc/cpuinfo`` has no model name (a Raspberry Pi's says ``CPU part :
0xd08``), and under qemu-user it is the x86 host's file. Linux exports each core's
MIDR_EL1 in ``/sys/devices/system/cpu/cpuN/regs/identification/midr_el1``; the
emulated board (``device_agents/arm_sim.sh``) writes there the MIDR of the core qemu
emulates. The implementer (bits 31:24) and part number (15:4) name the core; variant
(23:20) and revision (3:0) give its ``rNpM``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["core_name", "cores_from_sysfs", "describe_cores"]

SYS_CPU = Path("/sys/devices/system/cpu")

# (implementer, part number) -> name, from Arm's and Fujitsu's technical reference manuals.
_PARTS: dict[tuple[int, int], str] = {
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD04): "Cortex-A35",
    (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD0D): "Cortex-A77",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD44): "Cortex-X1",
    (0x41, 0xD49): "Neoverse-N2",
    (0x46, 0x001): "A64FX",
}


def core_name(midr: int) -> str:
    """``Cortex-A72 r0p3`` for ``0x410fd083``; an unknown core keeps its MIDR in the name.

    Example:
        >>> core_name(0x410FD083), core_name(0x414FD0C1), core_name(0x000F0000)
        ('Cortex-A72 r0p3', 'Neoverse-N1 r4p1', 'Arm core (MIDR 0x000f0000)')
    """
    implementer, part = (midr >> 24) & 0xFF, (midr >> 4) & 0xFFF
    name = _PARTS.get((implementer, part))
    if name is None:
        return f"Arm core (MIDR {midr:#010x})"
    return f"{name} r{(midr >> 20) & 0xF}p{midr & 0xF}"


def describe_cores(midrs: Iterable[int]) -> str:
    """The distinct cores, in order (``Cortex-A55 r2p0 + Cortex-A76 r4p0`` on a big.LITTLE SoC)."""
    names = list(dict.fromkeys(core_name(m) for m in midrs))
    return " + ".join(names)


def cores_from_sysfs(sys_cpu: Path = SYS_CPU) -> list[int]:
    """Each core's MIDR_EL1 from ``sys_cpu`` (empty where Linux does not export it, as on x86)."""
    found: list[int] = []
    for path in sorted(sys_cpu.glob("cpu[0-9]*/regs/identification/midr_el1"), key=_cpu_index):
        try:
            found.append(int(path.read_text().strip(), 16))
        except (OSError, ValueError):
            continue
    return found


def _cpu_index(path: Path) -> int:
    return int(path.parts[-4].removeprefix("cpu"))
