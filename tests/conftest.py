"""Shared fixtures: everything lives in tmp_path; the trained digits weights are
shared by the whole session so digits trains once per test run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

import pytest
from fakes.network import free_port_between


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def digits(models_dir: Path):  # type: ignore[no-untyped-def]
    from nnsweep.models import load_model

    return load_model("digits", cache_dir=models_dir)


@pytest.fixture(scope="session")
def digits_gn(models_dir: Path):  # type: ignore[no-untyped-def]
    from nnsweep.models import load_model

    return load_model("digits_gn", cache_dir=models_dir)


@pytest.fixture
def cache(tmp_path: Path):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts.cache import ArtifactCache

    return ArtifactCache(tmp_path / "cache")


@pytest.fixture(scope="session")
def tiny_onnx():  # type: ignore[no-untyped-def]
    """Makes a 4 -> 3 MatMul ONNX model with the given (4, 3) weights, as bytes: enough for
    ONNX Runtime to load and run, and cheap enough for tests of the measuring machinery."""

    def make(weights):  # type: ignore[no-untyped-def]
        from onnx import TensorProto, helper, numpy_helper

        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "tiny",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
            [numpy_helper.from_array(weights, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return bytes(model.SerializeToString())

    return make


@pytest.fixture
def free_port_in_rays_worker_range() -> Callable[[], int]:
    """A maker of free ports among the ones Ray gives its workers by default (10002-19999):
    a head or a node's agent there made `ray start` fail before nnsweep moved the workers."""
    return partial(free_port_between, 10002, 20000)


@pytest.fixture(scope="session")
def ray_token(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Ray token for every cluster of the test session (0600 once written): a Ray client
    reads its token once per process, and the test process is a client of each cluster."""
    return tmp_path_factory.mktemp("ray") / "auth_token"


# Under `make test` (which sets NNSWEEP_STRICT_SKIPS=1) and under CI=true, the real parts
# these tests stand on must be there: the emulated board (root, qemu), Chromium, g++ (the
# torch-free ExecuTorch runner), PostgreSQL, a tmpfs to fill. A skip of theirs would let CI
# pass without them, so there it fails, with the skip's reason. The one legitimate way out
# is NNSWEEP_ARM_SIM_TESTS=0 (the board left out on purpose, said in `make test`'s output).
MUST_RUN = {
    "test_arm_sim.py": "the emulated aarch64 board (root on x86_64, qemu-user, debootstrap)",
    "test_browser.py": "Debian's Chromium driven by playwright",
    "test_etlite.py": "g++ building the torch-free ExecuTorch runner",
    "test_team.py": "PostgreSQL's server programs (make system-deps)",
    "test_full_disk.py": "a small tmpfs mounted as root",
}


def strict_skips(environ: Mapping[str, str]) -> set[str]:
    """The test files whose skips fail the run in this environment."""
    if environ.get("CI") != "true" and environ.get("NNSWEEP_STRICT_SKIPS") != "1":
        return set()
    must = set(MUST_RUN)
    if environ.get("NNSWEEP_ARM_SIM_TESTS", "1") == "0":
        must.discard("test_arm_sim.py")
    return must


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    import os

    report = yield
    if report.skipped and item.path.name in strict_skips(os.environ) and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where its real parts must run ({MUST_RUN[item.path.name]}): {reason}"
    return report


@pytest.fixture
def gelu_between():  # type: ignore[no-untyped-def]
    """A fresh seeded model, conv ``a`` -> GELU -> conv ``b`` -> ReLU -> conv ``c`` on 1x8x8
    inputs: ONNX spells the GELU as five nodes of no module, between ``a`` and ``b``."""
    import torch

    class GeluBetween(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Conv2d(1, 8, 3, padding=1)
            self.act = torch.nn.GELU()
            self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.c = torch.nn.Conv2d(8, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(torch.relu(self.b(self.act(self.a(x)))))

    torch.manual_seed(0)
    return GeluBetween().eval()


@pytest.fixture
def batch_of_one():  # type: ignore[no-untyped-def]
    """A fresh seeded model bundle whose shapes specialise on batch 1: ``torch.flatten(x)``
    with no start dimension is right for one sample and wrong for more (1x3x6x6 inputs,
    three outputs)."""
    import torch

    from nnsweep.models import load_model, register_live

    class BatchOfOne(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.fc = torch.nn.Linear(4 * 4 * 4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.flatten(torch.relu(self.conv(x)))).unsqueeze(0)

    torch.manual_seed(0)
    return load_model(register_live("batch_of_one", BatchOfOne().eval(), torch.randn(1, 3, 6, 6)))


@pytest.fixture
def branch_on_the_sum():  # type: ignore[no-untyped-def]
    """A fresh seeded model bundle whose forward branches on the input's values
    (``a(x) if x.sum() > 0 else b(x)``, 1x8 inputs, four outputs): given a batch, the whole
    batch takes one branch; a TorchScript trace keeps the branch of its example input."""
    import torch

    from nnsweep.models import load_model, register_live

    class BranchOnTheSum(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(8, 4)
            self.b = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) if x.sum() > 0 else self.b(x)

    torch.manual_seed(0)
    return load_model(register_live("branch_on_the_sum", BranchOnTheSum().eval(), torch.randn(1, 8)))


_RECURRENT = """
import torch
from torch import nn


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(12, 24, batch_first=True)
        self.head = nn.Linear(24, 6)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def build():
    torch.manual_seed(0)
    return Recurrent().eval(), torch.randn(1, 10, 12)


class Bare(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(12, 24, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0][:, -1]


def bare():
    torch.manual_seed(0)
    return Bare().eval(), torch.randn(1, 10, 12)
"""


@pytest.fixture
def recurrent(tmp_path: Path) -> Path:
    """A model file (``recurrent.py:build``): ``nn.LSTM(12, 24)`` then a linear ``head`` on
    1x10x12 inputs. ONNX Runtime's static int8 quantizes the head and leaves the LSTM float.
    ``recurrent.py:bare`` is the LSTM alone, which that int8 leaves float whole."""
    path = tmp_path / "recurrent.py"
    path.write_text(_RECURRENT)
    return path


class XnnpackLowering:
    """ExecuTorch's XNNPACK lowering of a program two ways, for tests that nnsweep's lowering
    (with its skips) gives ExecuTorch's own bytes: XNNPACK's partitioner with no partition
    limits, ``to_edge_transform_and_lower`` with IR checks off, ``to_executorch``."""

    def partitioner(self):  # type: ignore[no-untyped-def]
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        from nnsweep.core.config import PartitionLimits
        from nnsweep.runtimes.common.partition import LimitedPartitioner

        return LimitedPartitioner(XnnpackPartitioner(), PartitionLimits())

    def nnsweep_s(self, program) -> bytes:  # type: ignore[no-untyped-def]
        from nnsweep.runtimes.executorch import lowering

        return bytes(lowering.lower(program, [self.partitioner()], None).to_executorch().buffer)

    def executorch_s(self, program) -> bytes:  # type: ignore[no-untyped-def]
        from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

        edge = to_edge_transform_and_lower(
            program, partitioner=[self.partitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False)
        )
        return bytes(edge.to_executorch().buffer)


@pytest.fixture(scope="session")
def xnnpack() -> XnnpackLowering:
    return XnnpackLowering()
