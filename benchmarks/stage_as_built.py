"""ExecuTorch's program stage lowered as built against the same stage read back: the same bytes?

The conversion that builds the ``executorch.program`` stage lowers the program it holds in
memory; a later conversion of the same model and quantization reads the ``.pt2`` back
(:func:`nnsweep.runtimes.common.pt2e.exported_program`). For each model given, each quantization
mode (fp32, dynamic int8, static int8 per channel with the ``core`` interface, static int8
per tensor with the ``full`` one) and two partition limits (none, and one delegated
partition), this converts the configuration into an empty cache (the stage built, the
program lowered from memory), copies only the stage into a second empty cache and converts
again there (the stage read back), and prints whether the two ``.pte`` files are the same
bytes. A conversion the toolchain refuses (e.g. a model whose ends are float under the
``full`` interface) prints its reason. Exit 1 if any pair differs.

Usage: stage_as_built.py MODEL [MODEL ...]   (as ``nnsweep bench --model`` takes them:
    digits_outlier, torchvision:mobilenet_v3_small, path/file.py:function, ...)
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path


def main() -> int:
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.errors import NnsweepError
    from nnsweep.core.quant import PartitionLimits, QuantConfig
    from nnsweep.models import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    quants = [
        QuantConfig("fp32"),
        QuantConfig("dynamic_int8"),
        QuantConfig("static_int8", calibration_batches=2),
        QuantConfig("static_int8", "per_tensor", calibration_batches=2, interface="full"),
    ]
    differ = 0
    for ref in args.models:
        bundle = load_model(ref)
        for quant in quants:
            for limits in (PartitionLimits(), PartitionLimits(1, 1)):
                config = DeploymentConfig("executorch", ("xnnpack", "portable"), quant, limits)
                with tempfile.TemporaryDirectory(prefix="nnsweep-as-built-") as folder:
                    work = Path(folder)
                    try:
                        built, _ = deploy.convert(bundle, config, ArtifactCache(work / "built"))
                    except NnsweepError as exc:
                        print(f"{ref}  {config.label()}  refused: {str(exc).splitlines()[0][:120]}", flush=True)
                        continue
                    shutil.copytree(work / "built" / "stages", work / "read" / "stages")
                    read, _ = deploy.convert(bundle, config, ArtifactCache(work / "read"))
                    same = read.path.read_bytes() == built.path.read_bytes()
                    differ += not same
                    print(f"{ref}  {config.label()}  {'same bytes' if same else 'DIFFERENT BYTES'}", flush=True)
    print(f"{differ} pair(s) differ")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
