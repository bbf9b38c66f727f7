"""The built-in runtimes, one folder each: its registry entry (``info``), converter,
runner, probe and layer ranking (``sensitivity``), with what several share in
:mod:`nnsweep.runtimes.common`. The registry (:mod:`nnsweep.core.runtimes`) names
each piece as ``"module:attribute"`` and imports it only when used, so this
namespace imports nothing.
"""

__all__: list[str] = []
