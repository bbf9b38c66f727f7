"""The toolchains' repeated work that nnsweep skips while it converts, as one block.

Each shortcut skips work whose result is already there and changes no artifact's bytes
(each module's tests compare lowerings with and without it):
:mod:`~nnsweep.runtimes.common.provenance`, :mod:`~nnsweep.runtimes.common.codegen` and
:mod:`~nnsweep.runtimes.common.cia_ops`. :mod:`nnsweep.runtimes.common.jax_lowering` has its
block in the LiteRT converter instead, so other runtimes' processes never import litert-torch.

Each puts its function where the toolchain looks one up while a block is in force
(:class:`~nnsweep.runtimes.common.stand_in.StandIn`). Every conversion
(:func:`nnsweep.artifacts.deploy.convert`) and layer ranking
(:mod:`nnsweep.sensitivity.ranking`) runs in one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from nnsweep.runtimes.common.cia_ops import cia_ops_looked_up_once
from nnsweep.runtimes.common.codegen import generated_code_compiled_once
from nnsweep.runtimes.common.provenance import shared_node_provenance

__all__ = ["repeated_work_skipped"]


@contextlib.contextmanager
def repeated_work_skipped() -> Iterator[None]:
    """Within the block, the toolchains skip the repeated work above (in any thread)."""
    with shared_node_provenance(), generated_code_compiled_once(), cia_ops_looked_up_once():
        yield
