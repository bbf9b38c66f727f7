"""The converter contract and what a conversion produces (no heavy imports here)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.quant import QuantConfig
    from nnsweep.models import ModelBundle

from nnsweep.core.artifact import IOSpec, PartitionReport, Placement

__all__ = [
    "ConversionResult",
    "Converter",
    "IOSpec",
    "PartitionReport",
    "Placement",
    "Stages",
    "native_output_to_debug_log",
    "native_stderr_to_debug_log",
    "package_warnings_to_debug_log",
    "printed_to_debug_log",
    "quant_settings",
    "rnn_export_warning_silenced",
    "toolchain_records_to_debug_log",
]


@contextlib.contextmanager
def printed_to_debug_log(log: logging.Logger, source: str) -> Iterator[None]:
    """What a toolchain prints to stdout in the block goes to ``log`` at debug level (its
    last 2000 characters): stdout belongs to the caller (the CLI's ``--json`` result).
    litert-torch prints progress and a line per ReLU it cannot fuse, ONNX Runtime's
    calibrators print progress."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            yield
    finally:
        if printed.getvalue():
            log.debug("%s: %s", source, printed.getvalue()[-2000:])


@contextlib.contextmanager
def native_stderr_to_debug_log(log: logging.Logger, source: str) -> Iterator[None]:
    """What is written to file descriptor 2 in the block goes to ``log`` at debug level (its
    last 2000 characters).

    Native toolchain code logs there on its own: litert-torch's converter library writes
    "All log messages before absl::InitializeLog() ..." and "oneDNN custom operations are
    on ..." when it loads, and LiteRT's interpreter "Created TensorFlow Lite XNNPACK
    delegate for CPU" when the first one is built; no setting turns these off. Python's
    ``sys.stderr`` in the block goes there too, so keep the block short (an import, one
    call). Without a file descriptor 2 the block runs as it is.
    """
    with _descriptor_to_debug_log(2, log, source):
        yield


@contextlib.contextmanager
def native_output_to_debug_log(log: logging.Logger, source: str) -> Iterator[None]:
    """:func:`native_stderr_to_debug_log` for file descriptors 1 and 2 both: native code that
    writes to stdout would otherwise reach the caller's (the CLI sends descriptor 1 to 2
    while it works, so that stdout holds only its result). The TOSA reference model writes
    a version warning on every run. Python's ``sys.stdout`` in the block goes to the log too."""
    with _descriptor_to_debug_log(1, log, source), _descriptor_to_debug_log(2, log, source):
        yield


@contextlib.contextmanager
def _descriptor_to_debug_log(fd: int, log: logging.Logger, source: str) -> Iterator[None]:
    stream = sys.stdout if fd == 1 else sys.stderr
    stream.flush()
    try:
        saved = os.dup(fd)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            stream.flush()
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            written = sink.read().decode(errors="replace")
            if written.strip():
                log.debug("%s wrote to %s: %s", source, "stdout" if fd == 1 else "stderr", written[-2000:])


@contextlib.contextmanager
def toolchain_records_to_debug_log(log: logging.Logger, marker: str, source: str = "") -> Iterator[None]:
    """Records a toolchain logs on the logger ``source`` (default: the root logger) in the
    block whose message contains ``marker`` go to ``log`` at debug level instead.

    ONNX Runtime's quantizer calls ``logging.warning`` once per weight whose per-channel
    axis does not exist (a LayerNorm's 1-D scale) and quantizes it per tensor: what every
    per-channel quantizer does with such a weight, and a line per LayerNorm per
    quantization (a two-layer transformer's ranking printed 55 of them). ``torch.export``'s
    fake tensors log an error with a traceback before raising when a shape check fails:
    expected when nnsweep tries a model with a dynamic batch and falls back to batch 1.
    """

    def demote(record: logging.LogRecord) -> bool:
        if marker in record.getMessage():
            log.debug("%s", record.getMessage())
            return False
        return True

    logger = logging.getLogger(source)
    logger.addFilter(demote)
    try:
        yield
    finally:
        logger.removeFilter(demote)


@contextlib.contextmanager
def package_warnings_to_debug_log(log: logging.Logger, *packages: str) -> Iterator[None]:
    """Records below ERROR that loggers of ``packages`` (and their children, e.g.
    ``onnxscript.optimizer._constant_folding``) emit in the block go to ``log`` at debug
    level instead of the handlers of the root logger (the CLI's stderr).

    A filter on one logger does not see its children's records, so this one sits on the
    root logger's handlers for the block. ``torch.onnx``'s optimizer passes warn that they
    skip a fold or a deduplication they cannot do (an ``nn.EmbeddingBag`` printed three
    such lines per export); the export is complete either way.
    """

    def demote(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or record.name.split(".")[0] not in packages:
            return True
        if not getattr(record, "nnsweep_demoted", False):  # each root handler sees the record
            record.nnsweep_demoted = True
            log.debug("%s: %s", record.name, record.getMessage())
        return False

    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(demote)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(demote)


@contextlib.contextmanager
def rnn_export_warning_silenced() -> Iterator[None]:
    """Without ``torch.export``'s warning that an RNN's ``_flat_weights`` "were assigned
    during export" in the block.

    ``nn.RNN``, ``nn.GRU`` and ``nn.LSTM`` refresh that list in ``forward``; export restores
    the module afterwards and, since PyTorch 2.10 (pytorch/pytorch#163809), warns instead of
    refusing, as its own tests expect. Every conversion and ranking of a model with a GRU
    printed it through each exporter (torch.export, ONNX's, litert-torch's), and the user
    can do nothing about it. Other attribute assignments still warn.
    """
    import warnings

    with warnings.catch_warnings():
        flat_weights = r"The tensor attributes? (\S+\._flat_weights\[\d+\](, )?)+ (were|was) assigned during export"
        warnings.filterwarnings("ignore", message=flat_weights)
        yield


@dataclass(frozen=True)
class ConversionResult:
    """What a converter wrote.

    Args:
        filename: the artifact file, relative to the output directory.
        partitions: where the ops run.
        io: the deployed model's input/output representation.
        sidecars: name -> file in the output directory that travels with the artifact
            (e.g. the integer TOSA graph an NPU compiler consumed, for host evaluation).
        estimates: figures a compiler estimated for its target (never measurements),
            e.g. Vela's ``inference_time_ms``, ``cycles_total``, ``sram_kib``.
        model_notes: what the conversion found about the model that holds wherever it runs
            (shown with the partition report's notes, and kept when the measuring machine
            reports its own placement).
    """

    filename: str
    partitions: PartitionReport
    io: IOSpec = field(default_factory=IOSpec)
    sidecars: Mapping[str, str] = field(default_factory=dict)
    estimates: Mapping[str, float] = field(default_factory=dict)
    model_notes: tuple[str, ...] = ()


class Stages:
    """Where a converter gets the intermediate results that several conversions of one model
    share (an exported program, a quantized model), each named by the stage and the settings
    that change its bytes.

    This base class keeps nothing: each stage is built into a temporary directory, used and
    removed, as if there were no cache. :mod:`nnsweep.artifacts.stages` keeps them in the
    artifact cache, for one model and one runtime's toolchain, and hands that store to each
    converter it calls (:attr:`Converter.stages`).
    """

    @contextlib.contextmanager
    def stage(self, name: str, settings: Mapping[str, object], build: Callable[[Path], None]) -> Iterator[Path]:
        """The directory holding stage ``name`` for ``settings``, built by ``build(directory)``
        when there is none. Read it only (copy what you change), within the ``with`` block.

        Args:
            name: the stage, e.g. ``"executorch.program"``.
            settings: JSON-ready; everything that changes the stage's bytes besides the model
                and the toolchain (the same settings must always build the same bytes).
            build: writes the stage's files into the empty directory it is given.
        """
        with tempfile.TemporaryDirectory(prefix="nnsweep-stage-") as tmp:
            build(Path(tmp))
            yield Path(tmp)


def quant_settings(quant: QuantConfig, *, without: tuple[str, ...] = ("interface",)) -> dict[str, object]:
    """``quant`` as a stage's settings, less the fields the converter applies after the stage
    (by default the interface); ``float_layers`` only when some layer stays in float,
    ``group_size`` only in a grouped mode and ``options`` (a mapping) only when some
    quantizer option is not at its default, as in :meth:`DeploymentConfig.to_dict`, so the stages of
    other configurations keep their keys."""
    fields = {f.name: getattr(quant, f.name) for f in dataclasses.fields(quant) if f.name not in without}
    if not quant.float_layers:
        fields.pop("float_layers", None)
    if quant.group_size is None:
        fields.pop("group_size", None)
    options = fields.pop("options", ())
    out = {k: v.value if hasattr(v, "value") else list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
    if options:
        out["options"] = dict(options)
    return out


class Converter(ABC):
    """Turns a float model into a deployable artifact for one runtime.

    The caller (``nnsweep.artifacts.deploy``) validates the configuration, looks the artifact
    up in the cache, and calls :meth:`convert` only on a miss, with an empty
    temporary directory that it moves into the cache afterwards. A converter
    raises :class:`~nnsweep.core.errors.ConversionError` with the reason when the
    model cannot be converted for this configuration.

    :attr:`stages` is where it keeps what other configurations of the same model can reuse;
    the caller sets it on the instance before :meth:`convert` (the class default keeps
    nothing, so a converter that never uses it is unaffected).
    """

    stages: Stages = Stages()

    @abstractmethod
    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        """Write the artifact for ``config`` into ``out_dir`` and describe it."""
