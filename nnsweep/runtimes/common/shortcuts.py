"""The toolchains' repeated work that nnsweep skips while it converts, as one block.

Each shortcut skips work whose result is already there and changes no artifact's bytes
(each module's tests compare lowerings made with and without it; docs/conversion.md
compares mobilenet_v3_small's artifacts):

* :mod:`nnsweep.runtimes.common.provenance`: torch.fx's provenance records shared, not deep-copied
  by every pass;
* :mod:`nnsweep.runtimes.common.codegen`: each distinct source torch.fx generates compiled once;
* :mod:`nnsweep.runtimes.common.cia_ops`: torch's composite operators looked up again only when
  new ones were registered.

A fourth, :mod:`nnsweep.runtimes.common.jax_lowering` (litert-torch's JAX lowerings made once per
process), has its block in the LiteRT converter, around litert-torch's conversion: it
stands in for a function of litert-torch, which a block here would import into every
process, ExecuTorch's and ONNX Runtime's too.

Each puts its function where the toolchain looks one up while a block is in force
(:class:`~nnsweep.runtimes.common.stand_in.StandIn`). Every conversion
(:func:`nnsweep.artifacts.deploy.convert`) and every layer ranking
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
