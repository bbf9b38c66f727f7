"""Import the function a ``package.module:function`` or ``path/to/file.py:function``
reference names: a user's model, data or transform, each resolved the same way."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnsweep.core.errors import SpecError, first_line

__all__ = ["check_function_reference", "import_function", "is_function_reference", "register_live_function"]

_LIVE: dict[str, Callable[..., Any]] = {}  # "live:NAME" -> a function that lives in this process


def register_live_function(name: str, function: Callable[..., Any]) -> str:
    """Make a function of this process (a notebook's metric) a reference, ``live:NAME``.

    Only this process resolves it: a metric runs on the coordinator, so any executor can
    sweep with it. Registering a name again replaces the function.
    """
    if not callable(function) or not name.isidentifier():
        raise SpecError(f"metrics.{name}", "give a name (letters, digits, '_') and a callable")
    _LIVE[name] = function
    return f"live:{name}"


def is_function_reference(ref: str) -> bool:
    """Whether ``ref`` has the form ``head:function`` (a module or a ``.py`` file, then a name)."""
    head, sep, name = ref.rpartition(":")
    return bool(sep and head and name.isidentifier())


def check_function_reference(ref: str, *, field: str, base_dir: Path | None = None) -> str:
    """``ref`` with a file's path made absolute (relative to ``base_dir``), its form checked,
    nothing imported: what a spec keeps, so a worker in another folder finds the same file.

    Raises:
        SpecError: on ``field``: not ``module:function`` / ``file.py:function``, or the file is missing.
    """
    if not is_function_reference(ref):
        raise SpecError(field, f"{ref!r} is not a function reference; give package.module:function or file.py:function")
    head, _, name = ref.rpartition(":")
    if head == "live":
        if name not in _LIVE:
            raise SpecError(field, f"no live function {name!r} in this process (nnsweep.api registers them)")
        return ref
    if not head.endswith(".py"):
        return ref
    path = Path(head).expanduser()
    path = path if path.is_absolute() or base_dir is None else base_dir / path
    if not path.is_file():
        raise SpecError(field, f"file {str(path)!r} does not exist")
    return f"{path.resolve()}:{name}"


def import_function(ref: str, *, field: str, base_dir: Path | None = None) -> Callable[..., Any]:
    """The callable ``ref`` names, its module imported (a file's, from ``base_dir`` when relative).

    Raises:
        SpecError: on ``field``: the module does not import (its exception's type and
            first line) or has no callable of that name.
    """
    head, _, func_name = ref.rpartition(":")
    if head == "live" and func_name in _LIVE:
        return _LIVE[func_name]
    try:
        if head.endswith(".py"):
            path = Path(head).expanduser()
            path = (path if path.is_absolute() or base_dir is None else base_dir / path).resolve()
            if not path.is_file():
                raise SpecError(field, f"file {head!r} does not exist (looked for {path})")
            if str(path.parent) not in sys.path:
                # as for a script, the modules beside the file import; appended, so they
                # never shadow an installed package
                sys.path.append(str(path.parent))
            spec = importlib.util.spec_from_file_location(f"nnsweep_user_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(head)
    except SpecError:
        raise
    except Exception as exc:  # the user's code: any failure to import is their input error
        raise SpecError(field, f"{head} does not import: {first_line(exc)}") from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise SpecError(field, f"{head} has no function {func_name!r}")
    return func
