"""A runtime's artifact bytes with nnsweep's skips of toolchain work on and off, for one model.

The skips leave out work a toolchain step would do for nothing. ExecuTorch's lowering: the
edge program's last decomposition (:mod:`nnsweep.runtimes.executorch.redecompose`), XNNPACK's closing
re-traces (:mod:`nnsweep.runtimes.executorch.retrace`) and XNNPACK's pattern graphs for programs that
cannot match them (:mod:`nnsweep.runtimes.executorch.xnnpack_patterns`). Every conversion: the shortcuts
of :mod:`nnsweep.runtimes.common.shortcuts` (provenance records shared, generated code compiled
once, composite operators looked up once); LiteRT's and Arm NN's: litert-torch's JAX
lowerings made once (:mod:`nnsweep.runtimes.common.jax_lowering`). This converts the model for the runtime in fp32,
static int8 and dynamic int8 twice each, with the skips and with every one of them replaced
by a block that does nothing, each time from a fresh cache and with no edge program kept,
and prints one JSON line per mode: both sha256 prefixes (or both errors) and whether they
are the same.

Usage: lowering_skips.py MODEL [INPUT_SHAPE] [RUNTIME]   (RUNTIME: executorch by default)
    e.g. lowering_skips.py benchmarks/probe_models.py:swin
         lowering_skips.py torchvision:shufflenet_v2_x0_5 1,3,64,64 litert
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import tempfile
from pathlib import Path

_SKIPS = ("decompose_only_what_is_left", "retrace_only_when_changed", "only_where_they_can_match")


def main() -> int:
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache, default_cache_dir
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.errors import NnsweepError
    from nnsweep.models import load_model
    from nnsweep.runtimes.executorch import lowering

    if len(sys.argv) not in (2, 3, 4):
        print(__doc__.split("Usage: ")[1], file=sys.stderr)
        return 2
    shape = tuple(int(x) for x in sys.argv[2].split(",")) if len(sys.argv) >= 3 and sys.argv[2] else None
    runtime = sys.argv[3] if len(sys.argv) == 4 else "executorch"
    bundle = load_model(sys.argv[1], cache_dir=default_cache_dir() / "models", input_shape=shape)
    skips = [(lowering, name, getattr(lowering, name)) for name in _SKIPS]
    skips.append((deploy, "repeated_work_skipped", deploy.repeated_work_skipped))
    if runtime in ("litert", "armnn"):  # their converter's own block (it imports litert-torch)
        from nnsweep.runtimes.litert import converter as litert

        skips.append((litert, "jax_lowerings_made_once", litert.jax_lowerings_made_once))
    for mode in ("fp32", "static_int8", "dynamic_int8"):
        outcome = {}
        for label in ("on", "off"):
            for module, name, block in skips:  # off: a block that does nothing (it takes the graph too)
                setattr(module, name, block if label == "on" else contextlib.nullcontext)
            lowering.forget()
            config = DeploymentConfig.from_dict({"runtime": runtime, "quant": {"mode": mode}})
            with tempfile.TemporaryDirectory() as cache_dir:
                try:
                    artifact, _ = deploy.convert(bundle, config, ArtifactCache(Path(cache_dir)))
                    outcome[label] = hashlib.sha256(artifact.path.read_bytes()).hexdigest()[:16]
                except NnsweepError as exc:
                    outcome[label] = f"error: {exc}"[:160]
        same = outcome["on"] == outcome["off"]
        print(json.dumps({"model": sys.argv[1], "runtime": runtime, "mode": mode, "same": same, **outcome}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
