"""What measuring a deployment needs of a model, kept so a cache hit needs no torch.

A :class:`ModelSnapshot` holds the model's digest (the artifact cache key), its
evaluation data, the fp32 reference outputs and the output layout, none of the module:
``nnsweep bench`` on a cache hit reads it and the artifact and never imports torch.
A :class:`SnapshotStore` finds a snapshot without loading the model, as a build tool
decides a target is up to date: the *recipe* (the reference, weights file, input shape,
and the versions of nnsweep, torch, torchvision and numpy) and the *inputs* (the files the
load opened, recorded with a ``sys.addaudithook`` hook, installed packages excepted). A
snapshot is used only while every input keeps its recorded size and mtime and both its
files match their sha256s. ``live:`` models have no recipe and are never kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nnsweep.core.atomic import atomic_path
from nnsweep.core.digests import file_sha256, json_sha256
from nnsweep.models._bundle import Split, output_columns

if TYPE_CHECKING:
    from nnsweep.models._bundle import ModelBundle

__all__ = ["ModelSnapshot", "SnapshotStore", "reference_outputs"]

log = logging.getLogger(__name__)

_FORMAT = 3  # 2: class_axes; 3: class axes told by the input's shape too
# Samples per call of the eager model; one when it does not take batches (takes_batches).
_REFERENCE_BATCH = 64
_VERSIONED = ("nnsweep", "torch", "torchvision", "numpy")


def reference_outputs(bundle: ModelBundle, inputs: np.ndarray | None = None) -> np.ndarray:
    """The fp32 eager model's outputs on ``inputs`` (default: the evaluation inputs): what
    fidelity compares to.

    Every output (a tuple's or dict's leaves) is flattened per sample and put side by
    side: the layout a runner's ``to_float`` gives the deployed model's outputs.
    """
    import torch

    from nnsweep.models._bundle import outputs_side_by_side, takes_batches

    x = torch.from_numpy(bundle.dataset.evaluation.inputs if inputs is None else inputs)
    batch = _REFERENCE_BATCH if takes_batches(bundle) else 1
    rows = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            chunk = x[i : i + batch]
            row = outputs_side_by_side(bundle.module(chunk), len(chunk))
            if row is None:  # the loader checked batch 1, takes_batches bigger ones
                raise ValueError(f"{bundle.name}: an output has no batch dimension of {len(chunk)}")
            rows.append(row)
    return np.concatenate(rows)


@dataclass(frozen=True, eq=False)
class ModelSnapshot:
    """A model as evaluation sees it (see the module docstring).

    Args:
        name: the model reference.
        digest: the model's digest (:attr:`ModelBundle.digest`).
        evaluation: the evaluation inputs and labels.
        reference: the fp32 model's outputs on ``evaluation.inputs``.
        outputs: per-sample size of each output (:attr:`ModelBundle.outputs`).
        accuracy_output: the output compared with the labels.
        positions: the class positions of each output (:attr:`ModelBundle.positions`).
        class_axes: the class axis of each output (:attr:`ModelBundle.class_axes`).
    """

    name: str
    digest: str
    evaluation: Split
    reference: np.ndarray
    outputs: tuple[int, ...]
    accuracy_output: int = 0
    positions: tuple[int, ...] = ()
    class_axes: tuple[int, ...] = ()

    def constant_outputs(self) -> tuple[int, ...]:
        """The outputs whose fp32 values are the same for every evaluation input.

        Every deployment of such an output agrees with fp32 (top-1 agreement 1.0, no SQNR:
        the reference has no signal), so fidelity cannot tell deployments apart. An
        untrained model gives one: a zero-initialised head, as torchvision's ViTs have.
        """
        if len(self.reference) < 2:
            return ()
        same = np.all(self.reference == self.reference[:1], axis=0)
        return tuple(i for i, columns in enumerate(self._columns()) if bool(same[columns].all()))

    def _columns(self) -> list[slice]:
        """Each output's columns in :attr:`reference` (outputs side by side)."""
        return output_columns(self.outputs or (self.reference.shape[1],))

    def warn_if_constant(self) -> None:
        """Log a warning naming the outputs of :meth:`constant_outputs`, if any."""
        constant = self.constant_outputs()
        if not constant:
            return
        which = "the model's output" if len(self.outputs) <= 1 else "output(s) " + ", ".join(map(str, constant))
        columns = self._columns()
        zero = " (all zero)" if not any(np.any(self.reference[:, columns[i]]) for i in constant) else ""
        log.warning(
            "%s: %s is the same for each of the %d evaluation inputs%s: every deployment agrees with it, so "
            "fidelity cannot tell deployments apart. Are the weights trained? (an untrained model, or a "
            "zero-initialised head)",
            self.name,
            which,
            len(self.reference),
            zero,
        )

    @classmethod
    def of(cls, bundle: ModelBundle) -> ModelSnapshot:
        """The snapshot of a loaded model (runs it on the evaluation inputs)."""
        data = bundle.dataset
        return cls(
            bundle.name,
            bundle.digest,
            data.evaluation,
            reference_outputs(bundle),
            bundle.outputs,
            data.accuracy_output,
            bundle.positions,
            bundle.class_axes,
        )


_RECORDERS: list[set[str]] = []  # the innermost recording gets each opened path
_HOOK_LOCK = threading.Lock()
_hooked = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _RECORDERS and isinstance(args[0], (str, bytes, os.PathLike)):
        _RECORDERS[-1].add(os.fsdecode(args[0]))


@contextlib.contextmanager
def _recording_reads() -> Iterator[set[str]]:
    """The paths opened (``open``, ``io.open_code`` for imports) inside the block."""
    global _hooked
    paths: set[str] = set()
    with _HOOK_LOCK:
        if not _hooked:
            sys.addaudithook(_audit)  # cannot be removed: it does nothing while nothing records
            _hooked = True
        _RECORDERS.append(paths)
    try:
        yield paths
    finally:
        with _HOOK_LOCK:
            _RECORDERS.remove(paths)


def _installed_roots() -> tuple[str, ...]:
    # nnsweep's own code: its model code is in the recipe; the rest does not make the model
    package = str(Path(__file__).parents[1])
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, package, "/proc", "/sys", "/dev", "/usr/lib", "/usr/share"}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def _inputs(opened: set[str], extra: list[Path]) -> dict[str, list[int]]:
    """Path -> [size, mtime_ns] of the regular files among ``opened`` that are not installed code."""
    roots = _installed_roots()
    found: dict[str, list[int]] = {}
    for name in [*opened, *map(str, extra)]:
        path = os.path.realpath(name)
        if path.endswith(".pyc") and "__pycache__" in path:
            try:
                path = importlib.util.source_from_cache(path)  # the source decides, not its bytecode
            except ValueError:
                continue
        if path.startswith(roots):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # a temporary file, gone by now
        if os.path.isfile(path):
            found[path] = [st.st_size, st.st_mtime_ns]
    return found


def model_file(ref: str) -> Path | None:
    """The file of a ``path/to/file.py:function`` reference, resolved."""
    head = ref.rpartition(":")[0]
    return Path(head).resolve() if head.endswith(".py") else None


def _versions() -> dict[str, str]:
    out = {}
    for package in _VERSIONED:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = ""
    folder = Path(__file__).parent  # a checkout's edited model code counts, not only its version
    code = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.glob("*.py"))))
    out["nnsweep.models"] = code.hexdigest()[:16]
    return out


class SnapshotStore:
    """Snapshots under ``root`` (the artifact cache's models folder), found by recipe."""

    def __init__(self, root: Path) -> None:
        self.root = root / "snapshots"

    @staticmethod
    def recipe(ref: str, weights: Path | None, input_shape: tuple[int, ...] | None) -> str | None:
        """The recipe key of a model reference; ``None`` for a model that cannot be kept."""
        if ref.startswith("live:"):
            return None
        parts: dict[str, Any] = {"format": _FORMAT, "ref": ref, "input_shape": input_shape, **_versions()}
        file = model_file(ref)
        if file is not None:
            parts["file"] = str(file)  # "model.py:build" in another folder is another model
        elif ":" in ref and not ref.startswith("torchvision:"):
            parts["cwd"] = os.getcwd()  # "pkg.module:build" may be found through the current folder
        if weights is not None:
            st = weights.stat()
            parts["weights"] = [str(weights.resolve()), st.st_size, st.st_mtime_ns]
        return json_sha256(parts)

    def lookup(self, recipe: str) -> ModelSnapshot | None:
        """The snapshot kept for ``recipe`` if every file its load read is unchanged."""
        try:
            meta = json.loads((self.root / f"{recipe}.json").read_text())
            if meta.pop("sha256") != json_sha256(meta):
                return None  # altered since: its digest would name another model's artifacts
            for path, (size, mtime_ns) in meta["inputs"].items():
                st = os.stat(path)
                if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
                    return None
            arrays = self.root / f"{recipe}.npz"
            if file_sha256(arrays) != meta["arrays_sha256"]:
                return None  # altered since (labels changed would score every trial against them)
            with np.load(arrays) as data:
                evaluation = Split(data["inputs"], data.get("labels"))
                reference = data["reference"]
            return ModelSnapshot(
                meta["name"],
                meta["digest"],
                evaluation,
                reference,
                tuple(meta["outputs"]),
                int(meta["accuracy_output"]),
                tuple(int(p) for p in meta["positions"]),
                tuple(int(a) for a in meta["class_axes"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # none kept, a file changed, a torn write, or kept without sha256s: load the model

    def load(
        self, ref: str, recipe: str | None, loader: Callable[[], ModelBundle]
    ) -> tuple[ModelBundle, ModelSnapshot]:
        """Run ``loader`` (which loads ``ref``) and keep its snapshot under ``recipe`` (if any)."""
        if recipe is None:
            bundle = loader()
            return bundle, ModelSnapshot.of(bundle)
        with _recording_reads() as opened:
            bundle = loader()
        snap = ModelSnapshot.of(bundle)
        file = model_file(ref)  # imported already in this process, it may not have been opened
        self.save(recipe, snap, _inputs(opened, [] if file is None else [file]))
        return bundle, snap

    def save(self, recipe: str, snap: ModelSnapshot, inputs: dict[str, list[int]]) -> None:
        """Keep ``snap``; a failure to write only costs the next run a model load."""
        arrays = {"inputs": snap.evaluation.inputs, "reference": snap.reference}
        if snap.evaluation.labels is not None:
            arrays["labels"] = snap.evaluation.labels
        meta = {
            "name": snap.name,
            "digest": snap.digest,
            "outputs": list(snap.outputs),
            "accuracy_output": snap.accuracy_output,
            "positions": list(snap.positions),
            "class_axes": list(snap.class_axes),
            "inputs": inputs,
        }
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        meta["arrays_sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
        meta["sha256"] = json_sha256(meta)
        try:
            with atomic_path(self.root / f"{recipe}.npz") as tmp:
                tmp.write_bytes(buffer.getvalue())
            with atomic_path(self.root / f"{recipe}.json") as tmp:  # last: it makes the snapshot visible
                tmp.write_text(json.dumps(meta))
        except OSError:
            pass
