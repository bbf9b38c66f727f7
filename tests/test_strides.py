"""What a model function hands over gets standard strides at load: numpy's ``x[:, None]``
gives the new axis a stride of 0 and still flags the array C-contiguous, so neither
``np.ascontiguousarray`` nor ``.contiguous()`` copies it, and ExecuTorch refused such an
example input in every mode ("0 in strides is not supported for ExecuTorch")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nnsweep.models import load_model, register_live
from nnsweep.models._strides import has_standard_strides, standard_array, standard_tensor

# The numpy pattern: a channel axis added by indexing, the example the first sample of it.
NUMPY_MODEL = """
import numpy as np
import torch
from torch import nn

from nnsweep.models import Dataset, Split


class Scaled(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
        )
        self.register_buffer("scale", torch.from_numpy(scale))  # (1, 1, 8, 8) with a 0 stride

    def forward(self, x):
        return self.net(x * self.scale)


def make():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    images = rng.uniform(0, 16, (48, 8, 8))
    labels = rng.randint(0, 10, 48)
    x = np.ascontiguousarray(images.astype(np.float32)[:, None])
    scale = np.ascontiguousarray(np.linspace(0.5, 1.5, 64, dtype=np.float32).reshape(8, 8)[None, None])
    # the labels reversed: a stride of -8
    data = Dataset(calibration=Split(x[:32]), evaluation=Split(x[32:], labels[32:][::-1]))
    return Scaled(scale).eval(), torch.from_numpy(x[:1]), data
"""


def _numpy_pattern() -> np.ndarray:
    return np.ascontiguousarray(np.arange(3 * 64, dtype=np.float32).reshape(3, 8, 8)[:, None])


def test_numpy_pattern_keeps_its_zero_stride_through_the_usual_calls() -> None:
    x = _numpy_pattern()
    assert x.strides == (256, 0, 32, 4) and x.flags["C_CONTIGUOUS"]  # why a check of the flags is not enough
    assert 0 in torch.from_numpy(x[:1]).contiguous().stride()
    assert not has_standard_strides(x) and not has_standard_strides(torch.from_numpy(x))


def test_standard_array_and_tensor_copy_only_what_needs_it() -> None:
    x = _numpy_pattern()
    dense = standard_array(x)
    assert dense.strides == (256, 256, 32, 4) and np.array_equal(dense, x)
    assert standard_array(dense) is dense
    flipped = np.arange(6, dtype=np.int64)[::-1]
    assert standard_array(flipped).strides == (8,) and np.array_equal(standard_array(flipped), flipped)
    assert has_standard_strides(np.zeros((2, 0, 3), np.float32))  # nothing to read

    t = torch.from_numpy(x[:1])
    fixed = standard_tensor(t)
    assert fixed.stride() == torch.empty(1, 1, 8, 8).stride() == (64, 64, 8, 1) and torch.equal(fixed, t)
    assert standard_tensor(fixed) is fixed
    last = torch.ones(1, 3, 4, 4).to(memory_format=torch.channels_last)
    assert standard_tensor(last).stride() == (48, 16, 4, 1)
    expanded = torch.linspace(0, 1, 4).expand(3, 4)
    assert standard_tensor(expanded).stride() == (4, 1) and torch.equal(standard_tensor(expanded), expanded)


def test_a_split_of_tensors_or_arrays_gets_standard_strides() -> None:
    from nnsweep.models import Split

    x = _numpy_pattern()
    for inputs in (x, torch.from_numpy(x)):
        split = Split(inputs, np.zeros((3, 1), np.int64)[:, 0])
        assert has_standard_strides(split.inputs) and has_standard_strides(split.labels)
        assert np.array_equal(split.inputs, x)
    dense = np.zeros((3, 4), np.float32)
    assert Split(dense).inputs is dense  # already standard: not copied


def test_the_numpy_pattern_loads_with_standard_strides_everywhere(tmp_path: Path) -> None:
    (tmp_path / "np_model.py").write_text(NUMPY_MODEL)
    bundle = load_model(f"{tmp_path}/np_model.py:make")
    assert bundle.example_input.stride() == (64, 64, 8, 1)
    for split in bundle.dataset.named_splits().values():
        assert has_standard_strides(split.inputs)
        assert split.labels is None or has_standard_strides(split.labels)
    assert bundle.module.scale.stride() == (64, 64, 8, 1)


class _ExpandedBuffers(torch.nn.Module):
    """Constants made with ``expand`` (stride 0), as a persistent and a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 12)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 4).expand(3, 4))
        self.register_buffer("shift", torch.linspace(-0.1, 0.1, 4).expand(3, 4), persistent=False)
        self.table = torch.full((1,), 2.0).expand(12)  # a plain tensor attribute is exported as a constant too

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.fc(x).view(-1, 3, 4) * self.scale + self.shift).flatten(1) * self.table


def test_weights_buffers_and_tensor_attributes_get_standard_strides_on_a_copy() -> None:
    module = _ExpandedBuffers().eval()
    x = torch.randn(1, 8)
    with torch.no_grad():
        before = module(x)
    bundle = load_model(register_live("expanded", module, x))
    loaded = bundle.module
    assert all(has_standard_strides(t) for t in (loaded.scale, loaded.shift, loaded.table, loaded.fc.weight))
    assert "shift" in loaded._non_persistent_buffers_set
    assert 0 in module.scale.stride() and 0 in module.table.stride()  # the user's model is left as it was
    with torch.no_grad():
        assert torch.equal(loaded(x), before)


# Every runtime with every mode it offers but QAT (which trains: not what this is about).
_RUNTIMES = ("executorch", "onnxruntime", "torch", "litert", "armnn")


@pytest.fixture(scope="module")
def numpy_bundle(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("np_model")
    (folder / "np_model.py").write_text(NUMPY_MODEL)
    return load_model(f"{folder}/np_model.py:make")


@pytest.mark.slow
@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_the_numpy_pattern_converts_and_runs_on_every_runtime_and_mode(
    runtime: str, numpy_bundle, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings
    from nnsweep.core import runtimes
    from nnsweep.core.config import DeploymentConfig, Granularity, QuantConfig, QuantMode
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import ModelSnapshot

    info = runtimes.get(runtime)
    if runtimes.probe(info, {}) is None:
        pytest.skip(f"{runtime} does not load on this machine")
    cache = ArtifactCache(tmp_path / "cache")
    snapshot = ModelSnapshot.of(numpy_bundle)
    modes = [mode for mode in info.modes if mode is not QuantMode.QAT_INT8]
    assert QuantMode.FP32 in modes and QuantMode.STATIC_INT8 in modes
    for mode in modes:
        # per channel where the runtime offers it, else what it offers
        granularity = min(info.modes[mode], key=lambda g: g is not Granularity.PER_CHANNEL, default=None)
        config = DeploymentConfig(runtime, quant=QuantConfig(mode.value, granularity=granularity))
        if mode is QuantMode.INT4_WEIGHT:  # its one linear layer (16 features) is narrower than any 4-bit group
            with pytest.raises(ConversionError, match="no linear layer's in_features is a multiple of it"):
                deploy.convert(numpy_bundle, config, cache)
            continue
        artifact, _ = deploy.convert(numpy_bundle, config, cache)
        result = deploy.measure(snapshot, artifact, MeasureSettings(warmup=1, iters=3))
        fidelity = result.evaluation.fidelity
        floor = {QuantMode.FP32: 60.0, QuantMode.FP16: 30.0}.get(mode, 15.0)  # float close, int8 near
        assert fidelity.sqnr_db > floor, (runtime, mode.value, fidelity)
