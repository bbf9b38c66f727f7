"""Per-layer quantization sensitivity: which layers to keep in float inside an int8 model
(:mod:`~nnsweep.sensitivity.rank`). See benchmarks/results/mixed_precision.md."""

__all__: list[str] = []
