"""The sha256 of each artifact a checkout's converters write for the quickstart's model and a
fixed set of its configurations: a move or rewrite of the converters that changes no
behaviour writes the same bytes.

    .venv/bin/python benchmarks/artifact_bytes.py --root /path/to/old/checkout --out old.json
    .venv/bin/python benchmarks/artifact_bytes.py --root . --out new.json
    .venv/bin/python benchmarks/artifact_bytes.py --compare old.json new.json

Each run converts into a fresh cache of its own (no stage is reused across checkouts).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

MODEL = "digits_gn"  # sweeps/quickstart.yaml's
XNN = ["xnnpack", "portable"]
CONFIGS: list[dict[str, object]] = [
    {"runtime": "executorch", "backends": XNN},
    {
        "runtime": "executorch",
        "backends": XNN,
        "partitions": {"max_delegated_partitions": 2, "min_nodes_per_partition": 4},
    },
    {"runtime": "executorch", "backends": XNN, "quant": {"mode": "static_int8", "granularity": "per_channel"}},
    {"runtime": "executorch", "backends": XNN, "quant": {"mode": "dynamic_int8", "granularity": "per_tensor"}},
    {"runtime": "onnxruntime"},
    {"runtime": "onnxruntime", "quant": {"mode": "dynamic_int8", "granularity": "per_channel"}},
    {"runtime": "onnxruntime", "quant": {"mode": "static_int8", "granularity": "per_tensor", "calibration": "entropy"}},
    {"runtime": "torch", "backends": ["x86"]},
    {"runtime": "torch", "backends": ["x86"], "quant": {"mode": "static_int8", "granularity": "per_channel"}},
    {"runtime": "torch", "backends": ["qnnpack"], "quant": {"mode": "dynamic_int8", "granularity": "per_tensor"}},
]


def _file_digests(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    root = path if path.is_dir() else path.parent
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files
        if p.name not in {"manifest.json", "conversion.json"}
    }


def measure(root: Path) -> dict[str, object]:
    sys.path.insert(0, str(root.resolve()))
    import nnsweep
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model

    assert Path(nnsweep.__file__).resolve().is_relative_to(root.resolve()), nnsweep.__file__
    out: dict[str, object] = {"root": str(root), "model": MODEL, "artifacts": []}
    with tempfile.TemporaryDirectory() as tmp:
        cache = ArtifactCache(Path(tmp))
        bundle = load_model(MODEL, cache_dir=cache.models_dir)
        for fields in CONFIGS:
            config = DeploymentConfig.from_dict(fields)
            start = time.perf_counter()
            artifact, _ = deploy.convert(bundle, config, cache)
            row = {
                "config": fields,
                "sha256": artifact.sha256,
                "files": _file_digests(Path(artifact.path)),
                "seconds": round(time.perf_counter() - start, 1),
            }
            print(json.dumps(row), flush=True)
            out["artifacts"].append(row)  # type: ignore[union-attr]
    return out


def compare(old: Path, new: Path) -> int:
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    same = 0
    for x, y in zip(a["artifacts"], b["artifacts"], strict=True):
        equal = x["files"] == y["files"]
        same += equal
        print(f"{'same' if equal else 'DIFFERENT'}  {json.dumps(x['config'])}")
    print(f"{same} of {len(a['artifacts'])} configurations write the same bytes")
    return 0 if same == len(a["artifacts"]) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout whose nnsweep converts")
    parser.add_argument("--out", type=Path, help="write the digests here as JSON")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    result = measure(args.root)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
