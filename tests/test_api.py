"""The Python API, through the example of docs/how-to/python-api.md exactly as a user copies it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "python-api.md"

pytestmark = pytest.mark.integration


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"<!-- api-example[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert found is not None, "docs/how-to/python-api.md lost its Python API example"
    return found.group(1)


def test_the_readme_example_measures_and_sweeps_a_live_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the sweep's state, mlflow.db and reports land here
    monkeypatch.setenv("HOME", str(tmp_path))  # and the artifact cache (~/.cache/nnsweep)
    exec(compile(_example(), "python-api.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"onnxruntime fp32 p50: \d+\.\d+ ms", out)
    assert re.search(r"host best: onnxruntime/cpu/\S+ front: \[\d", out)
    assert (tmp_path / "mlflow.db").is_file() and (tmp_path / ".nnsweep" / "notebook" / "optuna.journal").is_file()


def test_a_live_model_cannot_go_to_a_ray_cluster() -> None:
    import torch

    from nnsweep.api import sweep
    from nnsweep.core.errors import SpecError

    with pytest.raises(SpecError, match="executor='local'"):
        sweep({"name": "x"}, torch.nn.Linear(4, 2), torch.randn(1, 4), executor="ray")


def test_a_cache_folder_that_is_a_file_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It ended in an InfrastructureError after three failed conversions and their pauses
    (35 s), the sweep's study and MLflow database already made."""
    import torch

    from nnsweep.api import sweep
    from nnsweep.core.errors import SpecError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine\n")
    spec = {"name": "x", "devices": ["host"], "space": {"runtime": ["onnxruntime"]}, "budget": {"trials": 1}}
    with pytest.raises(SpecError, match=r"^cache_dir: 'afile/c' lies under 'afile', which is not a folder"):
        sweep(spec, torch.nn.Linear(4, 2), torch.randn(1, 4), cache_dir="afile/c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


_USERS_OWN_RAY = """
import ray, sys
import nnsweep.api as ns
from nnsweep.core.errors import SpecError
ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")  # its own, as a notebook's first
spec = {"name": "mine", "model": "digits", "devices": ["host"], "space": {"runtime": ["onnxruntime"]},
        "budget": {"trials": 1}}
try:
    ns.sweep(spec, executor="ray", address=sys.argv[1] if len(sys.argv) > 1 else None)
except SpecError as exc:
    print("refused:", exc)

@ray.remote
def still() -> int:
    return 42

print("the user's own Ray still answers:", ray.get(still.remote(), timeout=60))
"""


@pytest.mark.ray
@pytest.mark.parametrize("address", [None, "127.0.0.1:1"])
def test_a_process_that_called_ray_init_itself_is_refused_and_keeps_its_ray(
    tmp_path: Path, address: str | None
) -> None:
    """A notebook that had called ``ray.init()`` swept on its own cluster: an
    InfrastructureError saying no node offers 'host' and to start an agent (and with an
    ``address`` given, not the cluster the user named)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "notebook.py"
    script.write_text(_USERS_OWN_RAY)
    argv = [sys.executable, str(script), *([address] if address else [])]
    # Its own HOME: Ray's own ray.init() leaves ~/.ray/auth_token readable by others (0644),
    # which nnsweep then refuses in every later test that starts a cluster.
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: executor: this process is already connected to a Ray cluster (ray.init() was called" in done.stdout
    assert "call ray.shutdown() first, or sweep with executor='local'" in done.stdout
    assert "the user's own Ray still answers: 42" in done.stdout
    assert not (tmp_path / "mlflow.db").exists()


def test_measure_refuses_float_layers_of_no_module_before_converting(tmp_path: Path) -> None:
    """It raised the converter's ConversionError, a failed trial, for a typo in a layer's path."""
    import torch

    from nnsweep.api import measure
    from nnsweep.core.errors import SpecError

    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    quant = {"mode": "static_int8", "float_layers": ["0", "body.1"]}
    with pytest.raises(SpecError, match=r"^quant.float_layers: 'body.1': no module of .* has that path"):
        measure(net, torch.randn(1, 8), runtime="onnxruntime", quant=quant, cache_dir=tmp_path / "c")
    assert not any((tmp_path / "c").rglob("*.onnx"))
