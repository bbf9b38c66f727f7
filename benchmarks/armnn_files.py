"""Write the ``.tflite`` files nnsweep's Arm NN converter makes (litert-torch's file with
explicit FULLY_CONNECTED biases, before Arm NN's placement) for a set of models and modes,
and an ``index.json``, so another Arm NN version's parser can be tried on the same bytes
(``benchmarks/armnn_parse.py``, run by that version's system Python; benchmarks/results/coverage.md).

Usage: .venv/bin/python benchmarks/armnn_files.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ZOO = f"{HERE / 'zoo_models.py'}"
CASES = (
    ("digits", "fp32", None),
    ("digits", "static_int8", "per_tensor"),
    ("digits", "static_int8", "per_channel"),
    ("torchvision:mobilenet_v3_small", "fp32", None),
    ("torchvision:mobilenet_v3_small", "static_int8", "per_tensor"),
    ("torchvision:resnet18", "fp32", None),
    ("torchvision:resnet18", "static_int8", "per_tensor"),
    (f"{ZOO}:encoder", "fp32", None),
    (f"{ZOO}:encoder", "static_int8", "per_tensor"),
    (f"{ZOO}:buffer_mlp", "fp32", None),
    (f"{ZOO}:two_heads", "fp32", None),
)


def main() -> int:
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model
    from nnsweep.runtimes.armnn import tflite as armnn_tflite
    from nnsweep.runtimes.common import tflite
    from nnsweep.runtimes.litert.converter import export_tflite

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for ref, mode, granularity in CASES:
        bundle = load_model(ref)
        quant = {"mode": mode} | ({"granularity": granularity} if granularity else {})
        config = DeploymentConfig.from_dict({"runtime": "litert", "backends": ["cpu"], "quant": quant, "threads": 1})
        name = f"{ref.rsplit(':', 1)[-1]}-{mode}{'-' + granularity if granularity else ''}.tflite"
        # As the Arm NN converter does: symmetric activations for int8, explicit biases.
        export_tflite(bundle, config, out / name, symmetric_activations=mode != "fp32")
        model = tflite.load(out / name)
        armnn_tflite.add_fully_connected_bias(model)
        tflite.save(model, out / name)
        index.append(name)
        print(name, flush=True)
    (out / "index.json").write_text(json.dumps(index))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
