"""What a model function may return as its module: ``torch.compile``'s and ``DataParallel``'s
wrappers are taken off, pruning masks and hook-based weight norms become plain weights,
channels-last weights contiguous ones, lazy layers are initialised, outputs in a list or a
named tuple become a plain tuple, torch's FX int8 refuses forward hooks it would drop, and a
saved file, a quantized model or one on the meta device is refused with what to give instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnsweep.cli.main import main
from nnsweep.core.errors import SpecError
from nnsweep.models import check_reference, load_model, register_live

MODELS = """
from typing import NamedTuple

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.backbone(x).mean((2, 3)))


def _net():
    torch.manual_seed(0)
    return Net().eval()


def plain():
    return _net(), torch.ones(1, 3, 12, 12)


def compiled():
    return torch.compile(_net()), torch.ones(1, 3, 12, 12)


def pruned():
    import torch.nn.utils.prune as prune

    net = _net()
    prune.l1_unstructured(net.backbone[0], "weight", 0.5)
    prune.l1_unstructured(net.head, "weight", 0.5)
    return net, torch.ones(1, 3, 12, 12)


def weight_normed():
    net = _net()
    net.backbone[0] = torch.nn.utils.weight_norm(net.backbone[0])
    net.head = torch.nn.utils.weight_norm(net.head)
    return net, torch.ones(1, 3, 12, 12)


def hooked():
    net = _net()
    net.backbone[0].register_forward_hook(lambda module, inputs, output: output * 0.5)
    return net, torch.ones(1, 3, 12, 12)


def locked_pruned():
    import threading

    import torch.nn.utils.prune as prune

    net = _net()
    net.guard = threading.Lock()
    prune.l1_unstructured(net.head, "weight", 0.5)
    return net, torch.ones(1, 3, 12, 12)


def locked_channels_last():
    import threading

    net = _net().to(memory_format=torch.channels_last)
    net.guard = threading.Lock()
    return net, torch.ones(1, 3, 12, 12)


class Locked(Net):
    def __init__(self):
        import threading

        super().__init__()
        self.head.guard = threading.Lock()
        self.names = {"classes": ["a", "b", "c", "d"]}


def locked():
    torch.manual_seed(0)
    return Locked().eval(), torch.ones(1, 3, 12, 12)


class Random(Net):
    def forward(self, x):
        return self.head(torch.nn.functional.dropout(self.backbone(x), 0.2, training=True).mean((2, 3)))


def random_outputs():
    torch.manual_seed(0)
    return Random().eval(), torch.ones(1, 3, 12, 12)


def compiled_inside():
    net = _net()
    net.backbone = torch.compile(net.backbone)
    return torch.compile(net), torch.ones(1, 3, 12, 12)


def data_parallel():
    return nn.DataParallel(_net()), torch.ones(1, 3, 12, 12)


def channels_last():
    return _net().to(memory_format=torch.channels_last), torch.ones(1, 3, 12, 12)


def dynamic_quantized():
    return torch.ao.quantization.quantize_dynamic(_net(), {nn.Linear}, dtype=torch.qint8), torch.ones(1, 3, 12, 12)


def qat_prepared():
    import warnings

    net = _net().train()
    with warnings.catch_warnings():  # the x86 observers' reduce_range deprecation
        warnings.simplefilter("ignore")
        net.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
        torch.ao.quantization.prepare_qat(net, inplace=True)
    return net.eval(), torch.ones(1, 3, 12, 12)


def torchao_quantized():
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    net = _net()
    quantize_(net, Int8WeightOnlyConfig())
    return net, torch.ones(1, 3, 12, 12)


def on_meta():
    with torch.device("meta"):
        net = Net()
    return net, torch.ones(1, 3, 12, 12)


def not_a_module():
    return "a string"


def example_in_a_list():
    return _net(), [torch.ones(1, 3, 12, 12)]


class Lazy(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.LazyConv2d(8, 3), nn.ReLU())
        self.head = nn.LazyLinear(4)

    def forward(self, x):
        return self.head(self.backbone(x).mean((2, 3)))


def lazy():
    torch.manual_seed(0)
    return Lazy().eval(), torch.ones(1, 3, 12, 12)


class Outputs(NamedTuple):
    logits: torch.Tensor
    embedding: torch.Tensor


class NamedOutputs(Net):
    def forward(self, x):
        features = self.backbone(x).mean((2, 3))
        return Outputs(self.head(features), features)


class ListOutputs(Net):
    def forward(self, x):
        features = self.backbone(x).mean((2, 3))
        return [self.head(features), features]


class NestedOutputs(Net):
    def forward(self, x):
        features = self.backbone(x).mean((2, 3))
        return {"head": (self.head(features),), "embedding": [features]}


def named_outputs():
    torch.manual_seed(0)
    return NamedOutputs().eval(), torch.ones(1, 3, 12, 12)


def list_outputs():
    torch.manual_seed(0)
    return ListOutputs().eval(), torch.ones(1, 3, 12, 12)


def nested_outputs():
    torch.manual_seed(0)
    return NestedOutputs().eval(), torch.ones(1, 3, 12, 12)
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


@pytest.mark.parametrize("builder", ["compiled", "compiled_inside"])
def test_a_compiled_model_is_loaded_as_the_module_it_wraps(models: Path, builder: str) -> None:
    plain = load_model(f"{models}:plain")
    bundle = load_model(f"{models}:{builder}")
    assert type(bundle.module).__name__ == "Net"
    assert type(bundle.module.backbone).__name__ == "Sequential"
    assert [name for name, _ in bundle.module.named_modules()] == [name for name, _ in plain.module.named_modules()]
    # the same weights under the same names: the artifacts of the plain model's, not "_orig_mod.head"'s
    assert sorted(bundle.module.state_dict()) == sorted(plain.module.state_dict())


def test_torch_converts_a_compiled_model(models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # before, torch's conversion traced the wrapper: "Detected that you are using FX to
    # torch.jit.trace a dynamo-optimized function", and its int8 modes found no forward
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:compiled", "--runtime", "torch"]
    assert main([*args, "--quant", "fp32", "--iters", "3", "--warmup", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fidelity"]["sqnr_db"] > 100


@pytest.mark.parametrize("builder", ["pruned", "weight_normed"])
def test_pruning_masks_and_hook_weight_norms_are_made_plain_weights(models: Path, builder: str) -> None:
    import torch

    module, example = _user_function(models, builder)()
    with torch.no_grad():
        expected = module(example)
    bundle = load_model(f"{models}:{builder}")
    assert not any(m._forward_pre_hooks for m in bundle.module.modules())
    assert sorted(bundle.module.state_dict()) == ["backbone.0.bias", "backbone.0.weight", "head.bias", "head.weight"]
    with torch.no_grad():
        torch.testing.assert_close(bundle.module(example), expected)


def test_a_live_model_with_a_compiled_submodule_keeps_it(models: Path) -> None:
    from nnsweep.models import register_live

    module, example = _user_function(models, "compiled_inside")()
    bundle = load_model(register_live("compiled_net", module, example))
    assert type(module._orig_mod.backbone).__name__ == "OptimizedModule"  # the user's module, as it was
    assert type(bundle.module.backbone).__name__ == "Sequential"


def test_a_live_pruned_model_keeps_its_masks(models: Path) -> None:
    from nnsweep.models import register_live

    module, example = _user_function(models, "pruned")()
    bundle = load_model(register_live("pruned_net", module, example))
    assert "head.weight_mask" in module.state_dict()  # the user's module, as it was
    assert "head.weight_mask" not in bundle.module.state_dict()


@pytest.mark.parametrize("quant", ["static_int8", "qat_int8"])
def test_torch_int8_converts_a_pruned_model(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], quant: str
) -> None:
    # before: "cannot assign 'torch.FloatTensor' as parameter 'weight'" (ExecuTorch and LiteRT:
    # "Expected get_attr node, got call_function")
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:pruned", "--runtime", "torch"]
    assert main([*args, "--quant", quant, "--iters", "3", "--warmup", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fidelity"]["sqnr_db"] > 20


def test_torch_int8_refuses_a_model_with_forward_hooks(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch.fx does not run hooks: the int8 model had 11.8 dB and no top-1 agreement (a
    # hook halving a convolution's output), where the runtimes that export it had 46-48 dB
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:hooked", "--runtime", "torch"]
    assert main([*args, "--quant", "static_int8", "--iters", "3", "--warmup", "1"]) == 1
    err = capsys.readouterr().err
    assert "torch's FX int8 quantizer drops forward hooks, which backbone.0 has" in err
    assert main([*args, "--quant", "dynamic_int8", "--iters", "3", "--warmup", "1"]) == 0


@pytest.mark.parametrize(("builder", "warned"), [("random_outputs", True), ("plain", False), ("pruned", False)])
def test_a_model_whose_outputs_change_between_calls_is_warned_of(
    models: Path, caplog: pytest.LogCaptureFixture, builder: str, warned: bool
) -> None:
    with caplog.at_level("WARNING", logger="nnsweep.models"):
        load_model(f"{models}:{builder}")
    said = [r.getMessage() for r in caplog.records if "two calls on the same example input" in r.getMessage()]
    assert bool(said) == warned, said
    assert not said or "dropout called with training=True, or random noise" in said[0]


def _user_function(path: Path, name: str):  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"models_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_a_module_with_an_attribute_that_cannot_be_copied_is_one_line(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: each conversion failed with "TypeError: cannot pickle '_thread.lock' object"
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:locked", "--runtime", "onnxruntime"]
    assert main([*args, "--iters", "3", "--warmup", "1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "the model's attribute head.guard (lock) cannot be copied (TypeError: cannot pickle" in lines[0]


@pytest.mark.parametrize("name", ["model.pt", "weights.pth", "program.pt2", "MODEL.ONNX", "net.tflite"])
def test_a_saved_file_is_not_a_model_reference(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"\0")
    with pytest.raises(SpecError, match=r"is a saved file, not a model reference: nnsweep needs the Python nn\.Module"):
        check_reference(str(tmp_path / name))


def test_a_data_parallel_model_is_the_module_it_wraps(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = load_model(f"{models}:plain")
    bundle = load_model(f"{models}:data_parallel")
    assert sorted(bundle.module.state_dict()) == sorted(plain.module.state_dict())  # not "module.head.weight"
    # before: torch static int8 failed with "TraceError: Proxy object cannot be iterated", exit 1
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:data_parallel"]
    assert main([*args, "--runtime", "torch", "--quant", "static_int8", "--iters", "3", "--warmup", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fidelity"]["sqnr_db"] > 20


def test_channels_last_weights_are_deployed_contiguous(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    module, example = _user_function(models, "channels_last")()
    bundle = load_model(register_live("channels_last_net", module, example))
    assert all(tensor.is_contiguous() for tensor in bundle.module.parameters())
    assert not module.backbone[0].weight.is_contiguous()  # the user's model keeps its layout
    with torch.no_grad():
        torch.testing.assert_close(bundle.module(example), module(example))
    # before: ExecuTorch static int8 failed in XNNPACK's ChannelsLastTaggedReshapePass, exit 1
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:channels_last"]
    assert main([*args, "--runtime", "executorch", "--quant", "static_int8", "--iters", "3", "--warmup", "1"]) == 0


@pytest.mark.parametrize(
    ("builder", "said"),
    [
        ("dynamic_quantized", "already quantized or prepared for it (head is torch.ao.nn.quantized.dynamic"),
        ("qat_prepared", "the model is already quantized or prepared for it (backbone.0 is torch.ao.nn.qat"),
        ("torchao_quantized", "the model is already quantized or prepared for it (head.weight is a Int8Tensor)"),
        ("on_meta", "the parameter backbone.0.weight is on meta (a meta tensor holds no values: load the weights)"),
        ("example_in_a_list", "gave its example input in a list of one: give the tensor itself"),
        ("not_a_module", "not_a_module() returned str, not a torch.nn.Module"),  # before asking for an input shape
        # before: the pruning and layout copies came first: "TypeError: cannot pickle '_thread.lock' object", exit 1
        ("locked_pruned", "the model's attribute guard (lock) cannot be copied"),
        ("locked_channels_last", "the model's attribute guard (lock) cannot be copied"),
    ],
)
def test_a_model_nnsweep_cannot_deploy_as_given_is_one_line(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], builder: str, said: str
) -> None:
    # before: a quantized model failed with "AttributeError: 'tuple' object has no attribute
    # 'dtype'" (exit 1), and a list of one example "gave 1 example inputs: nnsweep deploys
    # models with one input tensor"
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:{builder}", "--runtime", "torch"]
    assert main([*args, "--iters", "3", "--warmup", "1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert said in lines[0]


def test_lazy_layers_are_initialised_on_the_example_input(models: Path) -> None:
    # the forward check initialised them before; the checks of weights' layout and
    # quantization now run before it, and would meet torch's UninitializedParameter
    bundle = load_model(f"{models}:lazy")
    assert [tuple(p.shape) for p in bundle.module.parameters()] == [(8, 3, 3, 3), (8,), (4, 8), (4,)]


@pytest.mark.parametrize("builder", ["named_outputs", "list_outputs", "nested_outputs"])
def test_outputs_in_a_list_or_a_named_tuple_are_given_as_a_plain_tuple(models: Path, builder: str) -> None:
    import torch

    module, example = _user_function(models, builder)()
    bundle = load_model(f"{models}:{builder}")
    with torch.no_grad():
        logits, _ = bundle.module(example)
        torch.testing.assert_close(logits, module.head(module.backbone(example).mean((2, 3))))
    assert type(bundle.module(example)) is tuple
    assert bundle.outputs == (4, 8)
    assert sorted(bundle.module.state_dict()) == ["backbone.0.bias", "backbone.0.weight", "head.bias", "head.weight"]


@pytest.mark.parametrize(("builder", "runtime"), [("named_outputs", "executorch"), ("list_outputs", "torch")])
def test_a_runtime_converts_outputs_it_could_not_return(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], builder: str, runtime: str
) -> None:
    # before: ExecuTorch "Can't serialize TreeSpec of namedtuple class", litert-torch
    # "'type' object is not iterable", TorchScript "cannot return list outputs"
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:{builder}", "--runtime", runtime]
    assert main([*args, "--quant", "fp32", "--iters", "3", "--warmup", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fidelity"]["sqnr_db"] > 100
