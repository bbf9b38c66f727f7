"""Run a ``.tflite`` model with Arm NN through PyArmNN; the backend order is ``Optimize``'s preferred list.

PyArmNN is Debian's ``python3-pyarmnn``, built for the system Python: this module
runs there (``RuntimeInfo.python``), imports only numpy, the standard library and
nnsweep's light modules, and imports ``pyarmnn`` inside its functions so the
project's environment can still import it. Arm NN gives each layer to the first
backend in the preferred list that supports it; a backend this machine lacks (on
x86 only ``CpuRef``, the reference kernels, exists) is passed over and the report
says so.

As a program it answers the agent and the converter, which live in the project's
environment::

    python3 -m nnsweep.runtimes.armnn.runner backends          # {"release": ..., "version": ..., "backends": [...]}
    python3 -m nnsweep.runtimes.armnn.runner placement MODEL.tflite CpuAcc CpuRef
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench import Runner
from nnsweep.core.artifact import PartitionReport, Placement
from nnsweep.core.errors import BenchmarkError
from nnsweep.runtimes.common.outputs import concat_float, flatten_order

__all__ = ["FP16_SUFFIX", "ArmNNRunner", "available_backends", "optimize", "report_from_dot"]

_FALLBACK = "CpuRef"
# An fp16 deployment's file: fp32 weights that Arm NN's optimizer reduces to fp16 (ReduceFp32ToFp16).
FP16_SUFFIX = ".fp16.tflite"
# A layer in Arm NN's Graphviz dump of an optimized network: "...LayerType : Convolution2d\lBackendID : CpuRef\l"
_LAYER = re.compile(r"LayerType : (\w+)\\lBackendID : (\w+)")
_NOT_OPS = {"Input", "Output"}


def _armnn() -> Any:
    with warnings.catch_warnings():
        # PyArmNN warns at import about each parser Debian does not build (Caffe, ONNX, TF).
        warnings.simplefilter("ignore")
        import pyarmnn

    return pyarmnn


def available_backends() -> dict[str, Any]:
    """Arm NN's release and library version, and the backends that load on this machine.

    ``version`` is the library's own (``ARMNN_VERSION``, ``22.0.0`` in Arm NN 20.08: the
    soname's major, not the release); ``release`` is the Arm NN release the installed
    package was built from (``20.08``), ``None`` where no package manager knows it.
    """
    ann = _armnn()
    runtime = ann.IRuntime(ann.CreationOptions())
    found = {str(b) for b in runtime.GetDeviceSpec().GetSupportedBackends()}
    from nnsweep.runtimes.armnn.info import ARMNN_BACKENDS

    return {
        "release": debian_release(),
        "version": ann.ARMNN_VERSION,
        "backends": [b for b in ARMNN_BACKENDS if b in found],
    }


def debian_release(package: str = "python3-pyarmnn") -> str | None:
    """The upstream version of a Debian package here (``20.08`` for ``20.08-12``), or ``None``.

    PyArmNN reports only the library version (``pyarmnn.__version__`` is ``22.0.0`` in
    Arm NN 20.08), so the release comes from dpkg.
    """
    try:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return upstream_version(proc.stdout) if proc.returncode == 0 else None


def upstream_version(debian_version: str) -> str | None:
    """``20.08`` from ``20.08-12`` (or ``1:20.08-12``): no epoch, no Debian revision.

    Example:
        >>> upstream_version("20.08-12"), upstream_version("1:23.08-6"), upstream_version("")
        ('20.08', '23.08', None)
    """
    version = debian_version.strip().split(":", 1)[-1]
    return version.rsplit("-", 1)[0] or None


def optimize(path: Path | str, backends: Sequence[str]) -> tuple[Any, Any, Any, list[str]]:
    """Parse ``path`` with Arm NN's TFLite parser and optimize it for ``backends`` in order
    (a file named ``*``:data:`FP16_SUFFIX` with its float layers reduced to fp16).

    Returns:
        ``(runtime, parser, optimized network, skipped)``: ``skipped`` are the backends of
        the order that this machine's Arm NN does not have.

    Raises:
        BenchmarkError: the parser or the optimizer rejects the model.
    """
    path = Path(path)
    ann = _armnn()
    parser = ann.ITfLiteParser()
    try:
        network = parser.CreateNetworkFromBinaryFile(str(path))
    except RuntimeError as exc:
        raise BenchmarkError(f"Arm NN's TFLite parser rejects {path.name}: {exc}") from exc
    runtime = ann.IRuntime(ann.CreationOptions())
    have = {str(b) for b in runtime.GetDeviceSpec().GetSupportedBackends()}
    skipped = [b for b in backends if b not in have]
    preferred = [ann.BackendId(b) for b in backends]
    try:
        options = ann.OptimizerOptions()
        options.m_ReduceFp32ToFp16 = path.name.endswith(FP16_SUFFIX)
        optimized, messages = ann.Optimize(network, preferred, runtime.GetDeviceSpec(), options)
    except RuntimeError as exc:
        raise BenchmarkError(f"Arm NN cannot optimize {path.name} for {', '.join(backends)}: {exc}") from exc
    if optimized is None:
        raise BenchmarkError(f"Arm NN cannot optimize {path.name}: {'; '.join(messages)}")
    return runtime, parser, optimized, skipped


def report_from_dot(
    dot: str, backends: tuple[str, ...], skipped: Sequence[str], have: Sequence[str] = ()
) -> PartitionReport:
    """The partition report from Arm NN's dump of an optimized network.

    A partition is a run of consecutive layers (in Arm NN's order) on one backend other
    than ``CpuRef``; layers on ``CpuRef`` while the order asked for another backend first
    fell back.
    """
    layers = [(kind, backend) for kind, backend in _LAYER.findall(dot) if kind not in _NOT_OPS]
    if not layers:
        raise BenchmarkError("Arm NN's optimized network lists no layers")
    nodes = Counter(backend for _, backend in layers)
    runs: list[Placement] = []
    previous = None
    for _, backend in layers:
        if backend != _FALLBACK:
            if backend == previous:
                runs[-1] = Placement(backend, runs[-1].nodes + 1)
            else:
                runs.append(Placement(backend, 1))
        previous = backend
    fallback = Counter(kind for kind, backend in layers if backend == _FALLBACK) if backends[0] != _FALLBACK else {}
    notes = []
    for name in skipped:
        later = [b for b in backends[backends.index(name) + 1 :] if b not in skipped]
        here = f" (this machine's Arm NN has: {', '.join(have)})" if have else ""
        notes.append(
            f"{name} is not available here{here}: its layers fall through to {later[0] if later else _FALLBACK}"
        )
    return PartitionReport(
        backends=backends,
        nodes_by_backend=dict(nodes),
        partitions=tuple(sorted(runs, key=lambda p: -p.nodes)),
        fallback_ops=dict(fallback),
        notes=tuple(notes),
    )


def placement(path: Path, backends: tuple[str, ...]) -> PartitionReport:
    """Which backend Arm NN gives each layer of ``path`` on this machine."""
    runtime, _, optimized, skipped = optimize(path, backends)
    return _placement_of(runtime, optimized, backends, skipped)


def _placement_of(runtime: Any, optimized: Any, backends: tuple[str, ...], skipped: list[str]) -> PartitionReport:
    have = [str(b) for b in runtime.GetDeviceSpec().GetSupportedBackends()]
    with tempfile.TemporaryDirectory(prefix="nnsweep-armnn-") as tmp:
        dot = Path(tmp) / "optimized.dot"
        optimized.SerializeToDot(str(dot))
        return report_from_dot(dot.read_text(), backends, skipped, have)


class ArmNNRunner(Runner):
    """One Arm NN network loaded in an ``IRuntime``.

    ``threads`` is recorded but not applied: the reference backend runs on one thread,
    and PyArmNN 20.08 exposes no thread option for CpuAcc (Arm Compute Library's scheduler
    uses the cores it finds).
    """

    def load(self) -> None:
        ann = _armnn()
        self._ann = ann
        backends = self.backends or (_FALLBACK,)
        self._runtime, parser, optimized, skipped = optimize(self.path, backends)
        # Where this machine's Arm NN put each layer: CpuAcc exists on Arm boards only, so the
        # converting machine's report (CpuRef everywhere on x86) does not hold here.
        self._placement = _placement_of(self._runtime, optimized, backends, skipped)
        try:
            self._net, _ = self._runtime.LoadNetwork(optimized)
        except RuntimeError as exc:
            raise BenchmarkError(f"Arm NN cannot load {self.path.name}: {exc}") from exc
        in_name = parser.GetSubgraphInputTensorNames(0)[0]
        names = list(parser.GetSubgraphOutputTensorNames(0))
        self._in = parser.GetNetworkInputBindingInfo(0, in_name)
        bindings = [parser.GetNetworkOutputBindingInfo(0, names[i]) for i in flatten_order(names)]
        self._outputs = ann.make_output_tensors(bindings)

    def placement(self) -> dict[str, Any]:
        return self._placement.to_dict()

    def profiler(self) -> Any:
        """Arm NN's ``IProfiler`` of the loaded network (:mod:`nnsweep.runtimes.armnn.profile`)."""
        return self._runtime.GetProfiler(self._net)

    def prepare(self, x: np.ndarray) -> Any:
        data = np.ascontiguousarray(self.io.prepare_input(x))
        # The tensors point into ``data``: keep it alive with them.
        return self._ann.make_input_tensors([self._in], [data]), data

    def run(self, prepared: Any) -> list[np.ndarray]:
        try:
            self._runtime.EnqueueWorkload(self._net, prepared[0], self._outputs)
        except RuntimeError as exc:
            raise BenchmarkError(f"Arm NN failed to run {self.path.name}: {exc}") from exc
        # Copies: the arrays PyArmNN returns view the output buffers, which the next run overwrites.
        return [np.array(a, copy=True) for a in self._ann.workload_tensors_to_ndarray(self._outputs)]

    def to_float(self, raw: Any) -> np.ndarray:
        return concat_float(self.io, raw)


def main(argv: list[str]) -> int:
    if argv[1:2] == ["backends"]:
        result: Any = available_backends()
    elif argv[1:2] == ["placement"] and len(argv) >= 4:
        try:
            result = placement(Path(argv[2]), tuple(argv[3:])).to_dict()
        except BenchmarkError as exc:
            result = {"error": str(exc)}
    else:
        sys.stderr.write(__doc__ or "")
        return 2
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
