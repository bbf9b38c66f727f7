"""Sweep specifications: YAML in, a frozen :class:`SweepSpec` out.

pydantic validates the user's file here and only here; past :func:`load_spec` only
frozen dataclasses travel. Every error names the field path as written in the YAML
(``space.quant[2]``) and what is allowed.

* :mod:`~nnsweep.spec.settings`: the dataclasses (those in :data:`SECTIONS` define each of
  their keys once), the metrics, the bounds;
* :mod:`~nnsweep.spec.schema`: the pydantic schema (those sections derived from them) and its
  error translation;
* :mod:`~nnsweep.spec.build`: :func:`parse_spec`, checks and conversion to dataclasses;
* :mod:`~nnsweep.spec.files`: bounded YAML reading, :func:`load_spec`.
"""

from nnsweep.core.errors import excerpt
from nnsweep.spec.build import parse_spec
from nnsweep.spec.files import load_spec, load_yaml, read_text
from nnsweep.spec.settings import (
    MAX_ITERS,
    MAX_MEASURE_SECONDS,
    MAX_NODES,
    MAX_PARTITIONS,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_THREADS,
    MAX_TRIALS,
    MAX_WARMUP,
    METRICS,
    Bridge,
    Budget,
    Constraints,
    IntRange,
    Objective,
    SearchSettings,
    SearchSpace,
    Strategy,
    SweepSpec,
    Tracking,
)

__all__ = [
    "MAX_ITERS",
    "MAX_MEASURE_SECONDS",
    "MAX_NODES",
    "MAX_PARTITIONS",
    "MAX_REPEATS",
    "MAX_SECONDS",
    "MAX_THREADS",
    "MAX_TRIALS",
    "MAX_WARMUP",
    "METRICS",
    "Bridge",
    "Budget",
    "Constraints",
    "IntRange",
    "Objective",
    "SearchSettings",
    "SearchSpace",
    "Strategy",
    "SweepSpec",
    "Tracking",
    "excerpt",
    "load_spec",
    "load_yaml",
    "parse_spec",
    "read_text",
]
