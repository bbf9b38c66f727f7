"""Per-layer quantization sensitivity: which layers to keep in float inside an int8 model
(:mod:`~nnsweep.sensitivity.rank`). See docs/mixed-precision.md."""

__all__: list[str] = []
