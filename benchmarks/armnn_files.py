"""Write the ``.tflite`` files nnsweep's Arm NN converter makes (litert-torch's file with
explicit FULLY_CONNECTED biases, before Arm NN's placement) for a set of models and modes,
and an ``index.json``, so another Arm NN version's parser can be tried on the same bytes
(``benchmarks/armnn_parse.py``, run by that version's system Python; benchmarks/results/coverage.md).
``fp16`` and ``a16w8`` are LiteRT's files (ai-edge-quantizer's, from the fp32 one), their
operator codes also written in the byte Arm NN 20.08 reads ("Arm NN 20.08 and fp16").

Usage: .venv/bin/python benchmarks/armnn_files.py OUT_DIR [MODE ...]   (default: every case)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

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
    ("digits", "fp16", None),
    (f"{ZOO}:buffer_mlp", "fp16", None),
    (f"{ZOO}:two_heads", "fp16", None),
    ("torchvision:mobilenet_v3_small", "fp16", None),
    ("digits", "a16w8", None),
    (f"{ZOO}:buffer_mlp", "a16w8", None),
    (f"{ZOO}:two_heads", "a16w8", None),
)


def main() -> int:
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model
    from nnsweep.runtimes.armnn import tflite as armnn_tflite
    from nnsweep.runtimes.common import tflite
    from nnsweep.runtimes.litert.converter import export_tflite
    from nnsweep.runtimes.litert.edge_quantizer import quantize_a16w8, quantize_fp16

    out = Path(sys.argv[1])
    modes = set(sys.argv[2:])
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for ref, mode, granularity in CASES:
        if modes and mode not in modes:
            continue
        bundle = load_model(ref)
        quant = {"mode": mode if mode in ("fp32", "static_int8") else "fp32"}
        quant |= {"granularity": granularity} if granularity else {}
        config = DeploymentConfig.from_dict({"runtime": "litert", "backends": ["cpu"], "quant": quant, "threads": 1})
        name = f"{ref.rsplit(':', 1)[-1]}-{mode}{'-' + granularity if granularity else ''}.tflite"
        # As the Arm NN converter does: symmetric activations for int8, explicit biases.
        export_tflite(bundle, config, out / name, symmetric_activations=mode != "fp32")
        if mode in ("fp16", "a16w8"):
            (out / name).rename(out / "fp32.tflite")
            if mode == "fp16":
                quantize_fp16(out / "fp32.tflite", out / name)
            else:  # seeded inputs of the model's shape
                rng = np.random.default_rng(0)
                samples = (rng.standard_normal(tuple(bundle.example_input.shape), np.float32) for _ in range(8))
                quantize_a16w8(out / "fp32.tflite", out / name, samples)
            (out / "fp32.tflite").unlink()
        model = tflite.load(out / name)
        for code in model.operatorCodes:  # ai-edge-quantizer writes builtin_code only; 20.08 reads the byte
            code.deprecatedBuiltinCode = min(max(code.builtinCode, code.deprecatedBuiltinCode), 127)
        armnn_tflite.add_fully_connected_bias(model)
        tflite.save(model, out / name)
        index.append(name)
        print(name, flush=True)
    (out / "index.json").write_text(json.dumps(index))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
