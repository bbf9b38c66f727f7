"""Import a user's function from a reference: ``package.module:function`` or ``path/to/file.py:function``.

Model functions, metric functions and data functions are all named this way in a spec.
A file is imported as a script would import it: the modules beside it import too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnsweep.core.errors import SpecError

__all__ = ["check_function_reference", "import_function"]


def check_function_reference(ref: str, *, field: str, base_dir: Path | None = None) -> str:
    """``ref`` with a file's path made absolute (relative to ``base_dir``), its form checked.

    Raises:
        SpecError: on ``field``: not ``module:function`` / ``file.py:function``, or the file is missing.
    """
    head, sep, func = ref.rpartition(":")
    if not sep or not head.strip() or not func.isidentifier():
        raise SpecError(field, f"{ref!r} is not a function reference; give package.module:function or file.py:function")
    if head.endswith(".py"):
        path = Path(head) if base_dir is None or Path(head).is_absolute() else base_dir / head
        if not path.is_file():
            raise SpecError(field, f"file {str(path)!r} does not exist")
        return f"{path.resolve()}:{func}"
    return ref


def import_function(ref: str, *, field: str, base_dir: Path | None = None) -> Callable[..., Any]:
    """The callable ``ref`` names.

    Raises:
        SpecError: on ``field``: the module does not import or has no such callable.
    """
    head, _, name = check_function_reference(ref, field=field, base_dir=base_dir).rpartition(":")
    try:
        module = _import_file(Path(head)) if head.endswith(".py") else importlib.import_module(head)
    except SpecError:
        raise
    except Exception as exc:  # the user's code: any failure to import is their input error
        raise SpecError(field, f"{head} does not import: {type(exc).__name__}: {exc}") from exc
    func = getattr(module, name, None)
    if not callable(func):
        raise SpecError(field, f"{head} has no function {name!r}")
    return func


def _import_file(path: Path) -> Any:
    name = f"nnsweep_user_{path.stem}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # appended: never shadows an installed package
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
