"""Arm NN: the ``.tflite`` of the litert converter, made acceptable to Arm NN 20.08's TFLite parser.

The model is converted as for ``litert`` (:func:`nnsweep.runtimes.litert.converter.export_tflite`);
int8 activations are quantized symmetrically (zero point 0), because Arm NN 20.08 pads
quantized tensors with the integer 0 rather than their zero point; then every
``FULLY_CONNECTED`` without a bias gets an explicit zero bias, because Arm NN
22.0's parser rejects the absent optional input (index -1). The partition report comes
from Arm NN itself: the converter runs the model's placement in the system Python, where
PyArmNN lives (``python3 -m nnsweep.runtimes.armnn.runner placement``), which also proves
that the parser and the optimizer accept the model before any trial measures it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import signal
import subprocess
from pathlib import Path

from nnsweep.bench import python_command
from nnsweep.core import runtimes
from nnsweep.core.artifact import PartitionReport
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import ConversionError
from nnsweep.core.quant import QuantConfig, QuantMode
from nnsweep.models import ModelBundle
from nnsweep.runtimes.armnn import tflite as armnn_tflite
from nnsweep.runtimes.armnn.runner import FP16_SUFFIX
from nnsweep.runtimes.common import tflite
from nnsweep.runtimes.common.converter import ConversionResult, Converter
from nnsweep.runtimes.litert.converter import export_tflite

__all__ = ["ArmNNConverter", "armnn_placement", "armnn_refusal"]

_FILENAME = "model.tflite"
_TIMEOUT_S = 300
_log = logging.getLogger(__name__)


def armnn_placement(path: Path, backends: tuple[str, ...]) -> PartitionReport:
    """Ask this machine's Arm NN (in its own interpreter) where each layer of ``path`` runs.

    Raises:
        ConversionError: PyArmNN is missing here, or Arm NN rejects the model.
    """
    python = runtimes.get("armnn").python
    try:
        with python_command(python, "nnsweep.runtimes.armnn.runner", "placement", str(path), *backends) as (argv, env):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False, env=env)
    except FileNotFoundError as exc:
        raise ConversionError(f"Arm NN needs {python} with python3-pyarmnn, which is not installed here") from exc
    except subprocess.TimeoutExpired:
        raise ConversionError(f"Arm NN's placement did not finish within {_TIMEOUT_S} s") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 and (missing := _MISSING_MODULE.search(proc.stderr)):
        raise ConversionError(
            f"Arm NN needs {python} with python3-pyarmnn and python3-numpy (Debian packages; "
            f"`make system-deps` installs them), and {python} has no module {missing.group(1)}"
        )
    if proc.returncode != 0 or not lines:
        # PyArmNN's notes about the parsers Debian does not build are not the reason.
        said = [line for line in proc.stderr.strip().splitlines() if line.strip() and "Skipped I" not in line]
        how = f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit {proc.returncode}"
        raise ConversionError(f"{_release()} could not place the model ({how}): {' / '.join(said[-3:])}")
    data = json.loads(lines[-1])
    if "error" in data:
        raise ConversionError(armnn_refusal(data["error"], path))
    return PartitionReport.from_dict(data)


def _release() -> str:
    from nnsweep.runtimes.armnn.runner import debian_release

    return f"Arm NN {debian_release() or '(release unknown)'}"


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_PARSER_OPERATOR = re.compile(r"Failed to parse operator #(\d+)")
_NO_BACKEND = re.compile(r"Layer of type (\w+) is not supported on any preferred backend")
_REASON = re.compile(r"\(reason: ([^\n]*)")
_EMPTY_BUFFER = re.compile(r"Buffer #\d+ has 0 bytes")


def armnn_refusal(message: str, path: Path) -> str:
    """Arm NN's refusal of ``path`` in one line naming its release and what it lacks: the
    operator its TFLite parser has no parser for (by name, from the model: the parser prints
    the opcode as a character, "Operator code ~ is out of range 0-w"), or the layer no
    backend of the order supports, with the backend's reason."""
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    if match := _PARSER_OPERATOR.search(message):
        index = int(match.group(1))
        names = tflite.operators(tflite.load(path))
        name = names[index] if index < len(names) else f"operator #{index}"
        if name == "FULLY_CONNECTED" and _EMPTY_BUFFER.search(message):
            return (
                f"{_release()} takes a FULLY_CONNECTED only with constant weights; operator #{index} of the model "
                "multiplies two computed tensors (attention's q @ k^T is one): deploy this model with another runtime"
            )
        return f"{_release()}'s TFLite parser cannot take {name} (operator #{index} of the model): {first}"
    if match := _NO_BACKEND.search(message):
        reason = _REASON.search(message)
        why = f": {reason.group(1).strip()}" if reason else ""
        return f"{_release()} has no backend of the order for the {match.group(1)} layer{why}"
    return f"{_release()}: {first}"


class ArmNNConverter(Converter):
    """``.tflite`` by litert-torch, FULLY_CONNECTED biases made explicit, placement from Arm NN."""

    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        """Write ``model.tflite`` for ``config`` into ``out_dir`` and describe it.

        Raises:
            ConversionError: the model cannot be deployed this way; the message says why.
        """
        fp16 = config.quant.mode is QuantMode.FP16
        path = out_dir / (f"model{FP16_SUFFIX}" if fp16 else _FILENAME)
        if fp16:  # the fp32 .tflite, reduced to fp16 by Arm NN's optimizer when it loads (FP16_SUFFIX)
            config = dataclasses.replace(config, quant=QuantConfig(QuantMode.FP32))
        # Arm NN 20.08 pads a quantized PAD with the integer 0, not the zero point, which shifts
        # every padded border (int8 digits: 10.6 % top-1); its parser has no PADV2 to state
        # the value. With symmetric activations the zero point is 0 and padding is exact.
        spec, mended = export_tflite(bundle, config, path, symmetric_activations=True, stages=self.stages)
        model = tflite.load(path)
        added = armnn_tflite.add_fully_connected_bias(model)
        flattened = armnn_tflite.flatten_fully_connected(model)
        split = armnn_tflite.split_transpose_conv_bias(model)
        grouped = armnn_tflite.split_grouped_convolutions(model)
        if fp16:  # its own bytes: a measurement of the fp32 file is not this deployment's
            model.description = b"nnsweep: Arm NN fp16 (its optimizer's ReduceFp32ToFp16 at load)"
        if added or flattened or split or grouped or fp16:
            _log.debug(
                "for Arm NN's parser: %d FULLY_CONNECTED given a zero bias, %d made 2-D and reshaped; "
                "%d TRANSPOSE_CONV biases moved into an ADD; %d grouped CONV_2D split by group",
                added,
                flattened,
                split,
                grouped,
            )
            tflite.save(model, path)
        report = armnn_placement(path, config.backends)
        notes: tuple[str, ...] = mended
        if fp16:
            notes += (
                f"fp16 by {_release()}'s optimizer (ReduceFp32ToFp16): its TFLite parser has no FLOAT16 "
                "tensors, so the file holds fp32 weights and each float layer runs in fp16",
            )
        if resizes := armnn_tflite.half_pixel_resizes(model):
            # Measured: an Upsample(scale_factor=2, mode="bilinear") after a convolution, fp32,
            # 4.3 dB against PyTorch on Arm NN, 139 dB on LiteRT; align_corners=True: 137 dB.
            notes += (
                f"{resizes} bilinear resize(s) sample at half-pixel centers (align_corners=False), which "
                f"{_release()} ignores: their outputs are shifted (see the fidelity)",
            )
        return ConversionResult(filename=path.name, partitions=report, io=spec, model_notes=notes)
