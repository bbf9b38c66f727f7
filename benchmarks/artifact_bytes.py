"""The sha256 of each artifact a checkout's converters write for the quickstart's model and a
fixed set of its configurations: a move or rewrite of the converters that changes no
behaviour writes the same bytes.

    .venv/bin/python benchmarks/artifact_bytes.py --root . --fixed model.pt --out new.json
    .venv/bin/python benchmarks/artifact_bytes.py --root /path/to/old/checkout --fixed model.pt --out old.json
    .venv/bin/python benchmarks/artifact_bytes.py --compare old.json new.json

``--fixed``: the model's weights and data, written by the first run and read by the next, so
both checkouts convert the same model (a change to how a built-in model is made, such as
its training data, is not the converters'). Each run converts into a fresh cache of its own.
Where bytes must differ, content is compared too: TorchScript (a zip) by its tensors, as it
writes the Python module path of the class it scripts into its code and pickles; an ONNX
model without its metadata, whose stack traces name source files by the checkout's path.
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
    import zipfile

    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    root = path if path.is_dir() else path.parent
    digests = {}
    for p in files:
        if p.name in {"manifest.json", "conversion.json"}:
            continue
        digests[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        if p.suffix == ".onnx":  # the exporter's per-node metadata names source files by their path
            digests[f"{p.name}:without-metadata"] = _onnx_without_metadata(p)
        if zipfile.is_zipfile(p):
            with zipfile.ZipFile(p) as z:
                for info in z.infolist():  # tensors by name; code and pickles name their module
                    if "/constants/" in info.filename or "/data/" in info.filename:
                        member = info.filename.split("/", 1)[-1]
                        digests[f"{p.name}:{member}"] = hashlib.sha256(z.read(info)).hexdigest()
    return digests


def _onnx_without_metadata(path: Path) -> str:
    """The sha256 of the model with every node's and the graph's metadata and doc strings
    removed (stack traces, with the checkout's file paths in them)."""
    import onnx

    model = onnx.load(str(path))
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        graph.doc_string = ""
        del graph.metadata_props[:]
        for node in graph.node:
            node.doc_string = ""
            del node.metadata_props[:]
            graphs += [a.g for a in node.attribute if a.HasField("g")]
    del model.metadata_props[:]
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def _fixed(bundle: object, path: Path) -> object:
    """``bundle`` with the weights and data kept at ``path`` (written there first if absent)."""
    import dataclasses

    import torch

    from nnsweep.models import Split

    if not path.exists():
        d = bundle.dataset  # type: ignore[attr-defined]
        torch.save(
            {
                "state": bundle.module.state_dict(),  # type: ignore[attr-defined]
                "example": bundle.example_input,  # type: ignore[attr-defined]
                "splits": {n: (getattr(d, n).inputs, getattr(d, n).labels) for n in ("calibration", "evaluation")},
            },
            path,
        )
    saved = torch.load(path, weights_only=False)
    bundle.module.load_state_dict(saved["state"])  # type: ignore[attr-defined]
    splits = {n: Split(*pair) for n, pair in saved["splits"].items()}
    dataset = dataclasses.replace(bundle.dataset, **splits)  # type: ignore[attr-defined]
    return dataclasses.replace(bundle, example_input=saved["example"], dataset=dataset, digest="fixed")  # type: ignore[type-var]


def measure(root: Path, fixed: Path | None, only: str | None = None) -> dict[str, object]:
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
        if fixed is not None:
            bundle = _fixed(bundle, fixed)
        for fields in [c for c in CONFIGS if only is None or c["runtime"] == only]:
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
    tensors = 0
    for x, y in zip(a["artifacts"], b["artifacts"], strict=True):
        equal = x["files"] == y["files"]
        inner_x = {k: v for k, v in x["files"].items() if ":" in k}
        inner_y = {k: v for k, v in y["files"].items() if ":" in k}
        same_tensors = bool(inner_x) and inner_x == inner_y
        same += equal
        tensors += same_tensors and not equal
        verdict = "same bytes" if equal else ("same content, other bytes" if same_tensors else "DIFFERENT")
        print(f"{verdict:<26} {json.dumps(x['config'])}")
    print(f"{same} of {len(a['artifacts'])} configurations: the same bytes; {tensors} more: the same content")
    return 0 if same + tensors == len(a["artifacts"]) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout whose nnsweep converts")
    parser.add_argument("--out", type=Path, help="write the digests here as JSON")
    parser.add_argument("--fixed", type=Path, help="weights and data shared by the runs (written if absent)")
    parser.add_argument("--only", metavar="RUNTIME", help="convert only this runtime's configurations")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    result = measure(args.root, args.fixed, args.only)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
