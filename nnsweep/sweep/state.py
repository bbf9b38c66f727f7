"""A sweep's state on disk: one process at a time, and results tied to what produced them.

* :class:`SweepLock` — ``<state dir>/run.lock``, an ``flock`` held for the whole run.
  The kernel drops it when its holder dies however it dies, so a lock left by a
  killed ``nnsweep run`` is simply taken over; ``run.owner`` beside it names the
  holder for the message a second run prints.
* :func:`fingerprint` — what a sweep's measurements depend on: the model (its
  digest over architecture, weights and data; the source file's bytes for a model
  given as ``file.py:function``; the module's class source), the measure settings,
  the objectives, the constraint and the search space. It is stored on every
  device study; :func:`check_fingerprint` refuses to resume a sweep whose spec or
  model changed since, instead of mixing old and new numbers.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.errors import SpecError, SweepStateNotWritten
from nnsweep.core.metrics import ACCURACY, SQNR

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle
    from nnsweep.spec import SweepSpec

__all__ = ["SweepBusy", "SweepChanged", "SweepLock", "check_fingerprint", "fingerprint"]


class SweepBusy(SpecError):
    """Another process is running this sweep."""


class SweepChanged(SpecError):
    """The spec or the model changed since the sweep's studies were created."""


class SweepLock:
    """An exclusive lock on a sweep's state directory for the life of one run.

    Example:
        >>> with SweepLock(Path(tmp) / ".nnsweep" / "demo"):  # doctest: +SKIP
        ...     pass  # only this process runs the sweep here
    """

    def __init__(self, state_dir: Path, sweep: str = "") -> None:
        from filelock import FileLock

        self.state_dir = state_dir
        self.sweep = sweep or state_dir.name
        self._lock = FileLock(str(state_dir / "run.lock"), timeout=0)
        self._owner = state_dir / "run.owner"

    def acquire(self) -> None:
        """Take the lock or fail at once.

        Raises:
            SweepBusy: another live process holds it (named in the message).
        """
        from filelock import Timeout

        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
        except Timeout:
            raise SweepBusy("spec", f"sweep {self.sweep!r} is already running ({self._holder()})") from None
        except OSError as exc:
            raise SweepStateNotWritten(exc.filename or self.state_dir, exc) from exc
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        tmp = self._owner.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(info))
            tmp.replace(self._owner)
        except OSError as exc:  # a full disk: nothing of this run is left, the lock included
            tmp.unlink(missing_ok=True)
            self._lock.release()
            raise SweepStateNotWritten(self._owner, exc) from exc

    def _holder(self) -> str:
        try:
            info = json.loads(self._owner.read_text())
            return f"pid {info['pid']} on {info['host']}, since {info['since']}; wait for it or stop it"
        except (OSError, ValueError, KeyError):
            return "by a process that is starting; try again in a moment"

    def release(self) -> None:
        if self._lock.is_locked:
            self._owner.unlink(missing_ok=True)
            self._lock.release()

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _model_source_digest(spec: SweepSpec, bundle: ModelBundle) -> str:
    """The code behind the model: the file of a ``file.py:function`` model, else the module's class source."""
    h = hashlib.sha256()
    head = spec.model.split(":", 1)[0]
    if head.endswith(".py") and Path(head).is_file():
        h.update(Path(head).read_bytes())
    try:
        h.update(inspect.getsource(type(bundle.module)).encode())
    except (OSError, TypeError):
        h.update(type(bundle.module).__qualname__.encode())  # built in C or defined interactively
    return h.hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def fingerprint(spec: SweepSpec, bundle: ModelBundle) -> dict[str, str]:
    """What the sweep's results depend on, part by part (stored on each study)."""
    m = spec.measure
    return {
        "model": spec.model,
        "model_digest": bundle.digest,
        "model_code": _model_source_digest(spec, bundle),
        "measure": f"warmup={m.warmup} iters={m.iters} min_duration_s={m.min_duration_s:g}"
        + (f" until_stable ci_rel={m.ci_rel:g} max_duration_s={m.max_duration_s:g}" if m.until_stable else ""),
        "objectives": ",".join(f"{o.metric}:{o.direction}" for o in spec.objectives),
        "constraints": f"max_accuracy_drop={spec.max_accuracy_drop}"
        + (f" min_sqnr_db={spec.min_sqnr_db:g}" if spec.min_sqnr_db is not None else ""),
        "space": hashlib.sha256(_canonical(_space(spec)).encode()).hexdigest(),
        **_scoring(bundle),
        **_task(spec),
    }


def _task(spec: SweepSpec) -> dict[str, str]:
    """The user's metrics and every bound beyond the two older keys (their data is in the
    model digest). A sweep with neither has no such part, so it resumes as before."""
    c = spec.constraints
    extra = {
        "max_drop": {k: v for k, v in c.max_drop.items() if (k, v) != (ACCURACY, spec.max_accuracy_drop)},
        "min": {k: v for k, v in c.min.items() if (k, v) != (SQNR, spec.min_sqnr_db)},
        "max": dict(c.max),
    }
    out = {}
    if spec.metrics:
        from nnsweep.bench.task import function_digest

        functions = [f"{m.name}:{m.goal}:{function_digest(m.function)}" for m in spec.metrics]
        out["metrics"] = ",".join(functions)
    if any(extra.values()):
        out["bounds"] = _canonical(extra)
    return out


def _scoring(bundle: ModelBundle) -> dict[str, str]:
    """How a sequence output's classes are read (:attr:`ModelBundle.class_axes`), for a model
    that has one: a sweep begun when one argmax over all of such an output was its class
    holds figures of another kind. Other models' fingerprints have no such part, so their
    sweeps resume as before."""
    if not bundle.class_axes:
        return {}
    return {"scoring": f"positions={list(bundle.positions)} class_axes={list(bundle.class_axes)}"}


def _space(spec: SweepSpec) -> dict[str, Any]:
    """The space as fingerprinted: without ``quant_options`` when it is empty, so a sweep
    begun before the field existed still resumes."""
    space = asdict(spec.space)
    if not space["quant_options"]:
        del space["quant_options"]
    return space


_WHAT = {
    "model": "model",
    "model_digest": "model weights, architecture or data",
    "model_code": "model code",
    "measure": "measure settings",
    "objectives": "objectives",
    "constraints": "constraints",
    "space": "search space",
    "scoring": "how the outputs' classes are read",
}


def check_fingerprint(sweep: str, stored: Mapping[str, str] | None, current: Mapping[str, str]) -> None:
    """Refuse to resume a sweep whose results came from something else.

    Raises:
        SweepChanged: naming what changed and how to start fresh.
    """
    fresh = "start fresh with `nnsweep run SPEC --fresh` (deletes its studies) or give the sweep a new name"
    if stored is None:
        raise SweepChanged("spec", f"sweep {sweep!r} was created by an older nnsweep; {fresh}")
    changed = []
    for key, what in _WHAT.items():
        if stored.get(key) != current.get(key):
            old, new = str(stored.get(key)), str(current.get(key))
            if len(old) == 64 and len(new) == 64:  # digests: the head says enough
                old, new = old[:12], new[:12]
            changed.append(f"{what} ({old} -> {new})")
    if changed:
        raise SweepChanged("spec", f"sweep {sweep!r} has results for another setup: {'; '.join(changed)}; {fresh}")
