"""The package surface: explicit exports, and cheap imports."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

HEAVY = ("torch", "ray", "mlflow", "optuna", "executorch", "onnxruntime", "torchvision")
PACKAGES = [
    "nnsweep",
    "nnsweep.convert",
    "nnsweep.runtimes.common",
    "nnsweep.bench",
    "nnsweep.models",
    "nnsweep.core.errors",
    "nnsweep.core.config",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    for item in exported:
        assert hasattr(module, item), f"{name}.__all__ lists missing {item}"
    # Everything defined here or in a private submodule (name._x) is public API and must be listed.
    defined = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and (getattr(v, "__module__", "") == name or getattr(v, "__module__", "").startswith(name + "._"))
    }
    assert defined <= exported, f"{name} exposes unlisted {sorted(defined - exported)}"


def _imported_after(code: str) -> set[str]:
    probe = f"import sys; {code}; print(','.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().split(","))


def test_import_nnsweep_is_light() -> None:
    loaded = _imported_after("import nnsweep, nnsweep.core.runtimes, nnsweep.convert")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_reading_the_registry_imports_no_runtime() -> None:
    # every built-in runtime's info.py is read: capabilities are data
    loaded = _imported_after("from nnsweep.core import runtimes; [runtimes.get(n) for n in runtimes.names()]")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_every_package_folder_is_in_the_wheel() -> None:
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(root).parts) for p in (root / "nnsweep").rglob("__init__.py")}
    assert folders <= listed, f"add to pyproject.toml's packages: {sorted(folders - listed)}"


def test_cli_help_does_not_import_heavy_libraries() -> None:
    code = "from nnsweep.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    loaded = _imported_after(f"exec({code!r})")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
