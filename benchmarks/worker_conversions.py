"""A sweep's conversions one after another in one process, as a conversion worker makes them.

Converts the model for each runtime given in fp32, dynamic int8 and static int8 (per channel,
the runtime's default backend order) from an empty cache in a temporary folder, in one
process (``deploy.convert``, the call a sweep's conversion worker makes), the model loaded
before any timing; prints each conversion's seconds and the sha256 prefix of its artifact,
then the total. Compare two checkouts by running it from a git worktree of the other
(``PYTHONPATH=WORKTREE .venv/bin/python benchmarks/worker_conversions.py``), in turns: the
digests say whether the bytes are the same, the totals what the change saved (this
machine's runs vary by several percent).

Usage: worker_conversions.py [--model torchvision:mobilenet_v3_small] [--input-shape 1,3,224,224]
                             [--runtimes executorch,litert]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

_MODES = ("fp32", "dynamic_int8", "static_int8")


def main() -> int:
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.errors import NnsweepError
    from nnsweep.models import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="torchvision:mobilenet_v3_small")
    parser.add_argument("--input-shape", help="e.g. 1,3,64,64 (default: the model's own)")
    parser.add_argument("--runtimes", default="executorch,litert")
    args = parser.parse_args()
    shape = tuple(int(x) for x in args.input_shape.split(",")) if args.input_shape else None
    with tempfile.TemporaryDirectory(prefix="nnsweep-worker-") as folder:
        cache = ArtifactCache(Path(folder))
        bundle = load_model(args.model, cache_dir=cache.models_dir, input_shape=shape)
        total = 0.0
        for runtime in args.runtimes.split(","):
            for mode in _MODES:
                quant = {"mode": mode} if mode == "fp32" else {"mode": mode, "granularity": "per_channel"}
                config = DeploymentConfig.from_dict({"runtime": runtime, "quant": quant})
                start = time.perf_counter()
                try:
                    artifact, _ = deploy.convert(bundle, config, cache)
                    digest = hashlib.sha256(artifact.path.read_bytes()).hexdigest()[:16]
                except NnsweepError as exc:
                    digest = f"error: {exc}"[:100]
                seconds = time.perf_counter() - start
                total += seconds
                print(f"{seconds:7.1f} s  {digest}  {config.label()}", flush=True)
        print(f"total {total:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
