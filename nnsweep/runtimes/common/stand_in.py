"""A toolchain's function stood in for while any block wants it, in any thread.

The shortcuts of :mod:`nnsweep.runtimes.common.shortcuts` each put nnsweep's function where a
toolchain looks one up (a module's function, a class's method) for as long as at least
one block is in force, and put the toolchain's back when the last block ends: blocks nest
and run in several threads at once. Outside every block the toolchain runs its own code.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["StandIn"]


class StandIn:
    """``replacement`` as ``owner().name`` while a :meth:`block` is in force.

    Args:
        owner: gives the module or class (imported when the first block starts).
        name: the attribute stood in for.
        replacement: what stands in.
        adds: the owner must define no ``name`` of its own (a class without its own
            ``__deepcopy__``): the attribute is added, then removed. Otherwise the owner
            must have it (a module's function): it is replaced, then put back. An owner
            that does not match is left alone, and its own code runs in the block.
    """

    def __init__(self, owner: Callable[[], Any], name: str, replacement: Any, *, adds: bool = False) -> None:
        self._owner = owner
        self._name = name
        self._replacement = replacement
        self._adds = adds
        self._lock = threading.Lock()
        self._users = 0  # blocks in force, in any thread
        self._installed = False  # whether the replacement is in place now
        self.original: Any = None  # the toolchain's own, once replaced (kept: a call may outlast a block)

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        """Within the block, the replacement stands in."""
        owner = self._owner()
        with self._lock:
            if self._users == 0:
                self._install(owner)
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._installed:
                    if self._adds:
                        delattr(owner, self._name)
                    else:
                        setattr(owner, self._name, self.original)
                    self._installed = False

    def _install(self, owner: Any) -> None:
        if self._adds and self._name in vars(owner):
            return
        if not self._adds:
            if not hasattr(owner, self._name):
                return
            self.original = getattr(owner, self._name)
        setattr(owner, self._name, self._replacement)
        self._installed = True
