"""Real ExecuTorch conversions of the digits models, run with ExecuTorch's runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nnsweep.artifacts import deploy
from nnsweep.bench import MeasureSettings, evaluate
from nnsweep.bench._harness import run_all
from nnsweep.core.config import DeploymentConfig, Granularity, Interface, PartitionLimits, QuantConfig
from nnsweep.models import ModelSnapshot
from nnsweep.runtimes.executorch.runner import ExecuTorchRunner


def _accuracy(bundle, cache, config: DeploymentConfig):  # type: ignore[no-untyped-def]
    """Convert, run the .pte in this process on the evaluation split, evaluate."""
    artifact, _ = deploy.convert(bundle, config, cache)
    runner = ExecuTorchRunner(artifact.path, artifact.io, config.threads, config.backends)
    runner.load()
    outputs = run_all(runner, bundle.dataset.evaluation.inputs)
    return artifact, evaluate(outputs, ModelSnapshot.of(bundle).reference, bundle.dataset.evaluation.labels)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts.cache import ArtifactCache

    return ArtifactCache(tmp_path_factory.mktemp("et-cache"))


@pytest.fixture(scope="module")
def fp32(digits, shared_cache):  # type: ignore[no-untyped-def]
    return _accuracy(digits, shared_cache, DeploymentConfig("executorch", ("xnnpack",)))


def test_fp32_xnnpack_takes_the_whole_digits_graph(digits, fp32) -> None:  # type: ignore[no-untyped-def]
    artifact, ev = fp32
    assert artifact.path.suffix == ".pte" and artifact.size_bytes > 10_000
    assert artifact.partitions.count == 1 and artifact.partitions.fallback_ops == {}
    assert ev.accuracy is not None and ev.accuracy >= 0.95
    assert ev.fidelity.top1_agreement == 1.0 and ev.fidelity.sqnr_db > 80


@pytest.mark.parametrize("granularity", [Granularity.PER_TENSOR, Granularity.PER_CHANNEL])
def test_static_int8_stays_within_one_point_of_fp32(digits, shared_cache, fp32, granularity) -> None:  # type: ignore[no-untyped-def]
    config = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", granularity))
    artifact, ev = _accuracy(digits, shared_cache, config)
    assert ev.accuracy >= fp32[1].accuracy - 0.01
    assert 20 < ev.fidelity.sqnr_db < 80  # really quantized, and still close
    assert artifact.size_bytes < fp32[0].size_bytes * 0.7  # int8 weights


def test_full_interface_takes_int8_and_matches_core(digits, shared_cache) -> None:  # type: ignore[no-untyped-def]
    core_artifact, core = _accuracy(
        digits, shared_cache, DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"))
    )
    full_cfg = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", interface=Interface.FULL))
    artifact, full = _accuracy(digits, shared_cache, full_cfg)
    assert artifact.io.input_dtype == "int8" and artifact.io.input_scale and artifact.io.output_scale
    assert core_artifact.io.input_scale is None
    assert abs(full.accuracy - core.accuracy) <= 0.005


@pytest.mark.parametrize("mode", ["fp16", "dynamic_int8", pytest.param("qat_int8", marks=pytest.mark.slow)])
def test_other_modes_convert_and_keep_accuracy(digits, shared_cache, fp32, mode: str) -> None:  # type: ignore[no-untyped-def]
    _, ev = _accuracy(digits, shared_cache, DeploymentConfig("executorch", ("xnnpack",), QuantConfig(mode)))
    assert ev.accuracy >= fp32[1].accuracy - 0.02


def test_portable_only_runs_int8_without_a_delegate(digits, shared_cache) -> None:  # type: ignore[no-untyped-def]
    artifact, ev = _accuracy(
        digits, shared_cache, DeploymentConfig("executorch", ("portable",), QuantConfig("static_int8"))
    )
    assert artifact.partitions.count == 0
    assert artifact.partitions.fallback_ops["quantized_decomposed.quantize_per_tensor"] > 0
    assert ev.accuracy >= 0.94


def test_partition_limits_change_placement_on_digits_gn(digits_gn, shared_cache) -> None:  # type: ignore[no-untyped-def]
    all_parts, _ = deploy.convert(digits_gn, DeploymentConfig("executorch", ("xnnpack",)), shared_cache)
    one, _ = deploy.convert(
        digits_gn, DeploymentConfig("executorch", ("xnnpack",), partitions=PartitionLimits(1, 1)), shared_cache
    )
    assert all_parts.partitions.count > 3  # group norm between the blocks splits the graph
    assert one.partitions.count == 1
    assert one.partitions.nodes_by_backend["portable"] > all_parts.partitions.nodes_by_backend["portable"]
    assert "aten.convolution" in one.partitions.fallback_ops


def test_measure_in_a_child_process_reports_every_figure(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.artifacts.cache import ArtifactCache

    cache = ArtifactCache(tmp_path)
    config = DeploymentConfig("executorch", ("xnnpack",), threads=2)
    artifact, hit = deploy.convert(digits, config, cache)
    result = deploy.measure(ModelSnapshot.of(digits), artifact, MeasureSettings(warmup=2, iters=30), cache_hit=hit)
    d = result.to_dict()
    assert d["iterations"] == 30 and len(d["samples_ms"]) == 30 and d["threads"] == 2
    lat = d["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert d["load_ms"] > 0 and d["first_inference_ms"] > 0 and d["peak_rss_mb"] > 50
    assert d["accuracy"] >= 0.95 and d["cache_hit"] is False
    assert np.isfinite(d["fidelity"]["max_abs_err"])


class _ExpandedBuffers(torch.nn.Module):
    """Constants made with ``expand`` (stride 0), as a persistent and a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 12)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 4).expand(3, 4))
        self.register_buffer("shift", torch.linspace(-0.1, 0.1, 4).expand(3, 4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.fc(x).view(-1, 3, 4) * self.scale + self.shift).flatten(1)


@pytest.mark.parametrize("backends", [("xnnpack",), ("portable",)])
def test_expanded_buffers_convert_and_run(tmp_path: Path, backends: tuple[str, ...]) -> None:
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.executorch.converter import ExecuTorchConverter

    torch.manual_seed(0)
    module = _ExpandedBuffers().eval()
    bundle = load_model(register_live("expanded_buffers", module, torch.randn(1, 8)))
    config = DeploymentConfig("executorch", backends)
    result = ExecuTorchConverter().convert(bundle, config, tmp_path)
    assert 0 in module.scale.stride()  # the bundle's own model is left as it was
    runner = ExecuTorchRunner(tmp_path / result.filename, result.io, 1, config.backends)
    runner.load()
    x = bundle.dataset.evaluation.inputs[:2]
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(run_all(runner, x), expected, rtol=1e-5, atol=1e-5)


class _Conv1dNet(torch.nn.Module):
    """Three Conv1d layers (one dilated) and a linear head: a small sequence model."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv1d(8, 16, 3, padding=1)
        self.b = torch.nn.Conv1d(16, 16, 3, padding=2, dilation=2)
        self.c = torch.nn.Conv1d(16, 16, 3, padding="same")
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.a(x))
        x = torch.relu(self.b(x))
        return self.head(torch.relu(self.c(x)).mean(dim=2))


@pytest.mark.parametrize("keep_float", [("a",), ("b",), ("a", "b"), ("c",)])
def test_float_conv1d_layers_beside_int8_ones_lower_and_run(tmp_path: Path, keep_float: tuple[str, ...]) -> None:
    """ExecuTorch 1.5.1's XNNPACK backend fails a float Conv1d beside int8 layers (its
    conv1d pass takes it for quantized: a lowering error, or a .pte that does not load);
    nnsweep writes such a layer as a Conv2d first, so every split of the model lowers and runs."""
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    module = _Conv1dNet().eval()
    bundle = load_model(register_live(f"conv1d_{'_'.join(keep_float)}", module, torch.randn(1, 8, 20)))
    config = DeploymentConfig(
        "executorch", ("xnnpack",), QuantConfig("static_int8", Granularity.PER_TENSOR, float_layers=keep_float)
    )
    got, expected = _deployed_and_eager(bundle, config, tmp_path)
    assert all(isinstance(module.get_submodule(n), torch.nn.Conv1d) for n in "abc")  # the bundle's model is unchanged
    assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()  # int8 where not float, and close


def _deployed_and_eager(bundle, config: DeploymentConfig, tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """Convert ``bundle`` with nnsweep's ExecuTorch converter, load the ``.pte`` and run it on
    eight evaluation inputs; also the eager model's outputs on them."""
    from nnsweep.runtimes.executorch.converter import ExecuTorchConverter

    result = ExecuTorchConverter().convert(bundle, config, tmp_path)
    runner = ExecuTorchRunner(tmp_path / result.filename, result.io, 1, config.backends)
    runner.load()
    x = bundle.dataset.evaluation.inputs[:8]
    with torch.no_grad():
        expected = bundle.module(torch.from_numpy(x)).numpy()
    return run_all(runner, x), expected


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "circular", "replicate"])
def test_a_float_conv1d_written_as_a_conv2d_computes_the_same(padding_mode: str) -> None:
    from nnsweep.runtimes.executorch.converter import float_conv1d_as_conv2d

    torch.manual_seed(0)
    module, swapped = _Conv1dNet().eval(), _Conv1dNet().eval()
    for net in (module, swapped):
        for conv in (net.a, net.b, net.c):
            conv.padding_mode = padding_mode
    swapped.load_state_dict(module.state_dict())
    assert float_conv1d_as_conv2d(swapped, ("a", "c")) == 2  # the paths kept float only
    assert isinstance(swapped.b, torch.nn.Conv1d) and not isinstance(swapped.a, torch.nn.Conv1d)
    x = torch.randn(4, 8, 20)
    with torch.no_grad():
        torch.testing.assert_close(swapped(x), module(x), rtol=1e-5, atol=1e-5)


class _CalledTwice(torch.nn.Module):
    """One convolution applied at two points of the forward (weights shared between calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mid = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.enc(x))
        x = torch.relu(self.mid(x))
        x = torch.relu(self.mid(x))
        return self.head(x.mean((2, 3)))


@pytest.mark.parametrize("mode", ["static_int8", "qat_int8"])
def test_a_layer_called_twice_converts_and_runs_in_int8(tmp_path: Path, mode: str) -> None:
    """One int32 bias cannot serve two calls whose inputs have different scales: ExecuTorch
    1.5.1's XNNPACK backend failed to load such a .pte (error 0x1). Each call gets its own copy."""
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    module = _CalledTwice().eval()
    bundle = load_model(register_live(f"called_twice_{mode}", module, torch.randn(1, 3, 12, 12)))
    epochs = 1 if mode == "qat_int8" else None
    config = DeploymentConfig("executorch", ("xnnpack",), QuantConfig(mode, Granularity.PER_CHANNEL, qat_epochs=epochs))
    got, expected = _deployed_and_eager(bundle, config, tmp_path)
    assert len(list(module.parameters())) == 6  # the bundle's model is unchanged
    assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max()


def test_untying_gives_each_call_its_own_parameters_and_computes_the_same() -> None:
    from nnsweep.runtimes.common.pt2e import export, untie_shared_parameters

    torch.manual_seed(0)
    module = _CalledTwice().eval()
    x = torch.randn(1, 3, 12, 12)
    graph = export(module, x, dynamic_batch=False).module(check_guards=False)
    untie_shared_parameters(graph)
    reads = [n for n in graph.graph.nodes if n.op == "get_attr"]
    assert all(len(n.users) == 1 for n in reads)
    assert len({n.target for n in reads}) == 8  # mid's weight and bias once more
    with torch.no_grad():
        torch.testing.assert_close(graph(x), module(x))


_PROBES = Path(__file__).parents[1] / "benchmarks" / "probe_models.py"


def test_a_batch_norm_gets_its_own_call_of_a_layer_others_read_too() -> None:
    from nnsweep.models import load_model
    from nnsweep.runtimes.common.pt2e import export, own_layer_for_each_batch_norm

    bundle = load_model(f"{_PROBES}:stemnorm")  # a stem read by a BatchNorm and by a cat
    module, x = bundle.module, bundle.example_input
    graph = export(module, x, dynamic_batch=False).module(check_guards=False)
    assert own_layer_for_each_batch_norm(graph) == 1
    convs = [n for n in graph.graph.nodes if n.target == torch.ops.aten.conv2d.default]
    assert len(convs) == 3 and all(len(n.users) == 1 for n in convs)
    assert own_layer_for_each_batch_norm(graph) == 0  # nothing left to separate
    with torch.no_grad():
        torch.testing.assert_close(graph(x), module(x))


def test_static_int8_folds_a_batch_norm_without_changing_what_others_read(tmp_path: Path) -> None:
    """PT2E's prepare folded the BatchNorm into the stem, and the concatenation read the
    normalised stem: -5.4 dB against fp32 (ONNX Runtime 39.0 dB; LiteRT's test is in
    test_convert_litert.py)."""
    from nnsweep.models import load_model

    bundle = load_model(f"{_PROBES}:stemnorm")
    config = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", Granularity.PER_CHANNEL))
    got, expected = _deployed_and_eager(bundle, config, tmp_path)
    sqnr = 10 * np.log10(np.mean(expected**2) / np.mean((got - expected) ** 2))
    assert sqnr > 30, sqnr


def test_a_zero_pad_of_an_int8_sum_read_by_float_ops_shares_its_quantization() -> None:
    from torchao.quantization.pt2e.quantizer import SharedQuantizationSpec

    from nnsweep.models import load_model
    from nnsweep.runtimes.common.pt2e import export
    from nnsweep.runtimes.executorch.converter import quantize_pads_of_int8_inputs, xnnpack_quantizer

    bundle = load_model(f"{_PROBES}:patchmerge")  # an int8 sum, padded, read by slices
    graph = export(bundle.module, bundle.example_input, dynamic_batch=False).module(check_guards=False)
    xnnpack_quantizer(QuantConfig("static_int8")).annotate(graph)
    (pad,) = [n for n in graph.graph.nodes if n.target == torch.ops.aten.pad.default]
    annotation = pad.meta["quantization_annotation"]
    assert isinstance(annotation.output_qspec, SharedQuantizationSpec)
    assert annotation.output_qspec.edge_or_node is pad.args[0]
    assert quantize_pads_of_int8_inputs(graph) == 0  # annotated once


@pytest.mark.parametrize("float_layers", [(), ("mlp",)])
def test_static_int8_loads_a_zero_pad_between_int8_and_float_ops(tmp_path: Path, float_layers: tuple[str, ...]) -> None:
    """XNNPACK took the pad as a float op and then made its output int8: the ``.pte``
    converted but failed to load ("Failed to create StaticConstantPad node",
    ``torchvision:swin_t`` at 96x96 too)."""
    from nnsweep.models import load_model

    bundle = load_model(f"{_PROBES}:patchmerge")
    quant = QuantConfig("static_int8", Granularity.PER_CHANNEL, float_layers=float_layers)
    got, expected = _deployed_and_eager(bundle, DeploymentConfig("executorch", ("xnnpack",), quant), tmp_path)
    sqnr = 10 * np.log10(np.mean(expected**2) / np.mean((got - expected) ** 2))
    assert sqnr > 30, sqnr


class _Positions(torch.nn.Module):
    """Token and position embeddings, the positions numbered ``arange(n) + offset`` as
    Hugging Face's GPT-2 numbers them after the tokens already seen."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(50, 16), torch.nn.Embedding(13, 16)
        self.mix, self.head = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        where = torch.arange(ids.shape[1]) + 1  # an int64 sum of a tensor and a number
        return self.head(torch.relu(self.mix(self.tokens(ids) + self.positions(where))).mean(1))


def test_integer_sums_with_a_number_keep_their_dtype_through_the_quantizer() -> None:
    from nnsweep.runtimes.common.pt2e import export
    from nnsweep.runtimes.executorch.converter import scalar_overloads_for_integer_ops, xnnpack_quantizer

    torch.manual_seed(0)
    net, ids = _Positions().eval(), torch.randint(0, 50, (1, 12))
    graph = export(net, ids, dynamic_batch=False).module(check_guards=False)
    assert scalar_overloads_for_integer_ops(graph) == 1
    assert scalar_overloads_for_integer_ops(graph) == 0
    transformed = xnnpack_quantizer(QuantConfig("static_int8")).transform_for_annotation(graph)
    (where,) = [n for n in transformed.graph.nodes if n.target == torch.ops.aten.add.Scalar]
    assert where.args[1] == 1  # not a float32 tensor the quantizer made of it
    with torch.no_grad():
        torch.testing.assert_close(transformed(ids), net(ids))


@pytest.mark.parametrize("mode", ["static_int8", "dynamic_int8"])
def test_int8_converts_positions_numbered_from_an_offset(tmp_path: Path, mode: str) -> None:
    """The quantizer made the ``1`` a float32 tensor and the positions float: the position
    embedding refused them in calibration ("Expected tensor for argument #1 'indices' to
    have one of the following scalar types: Long, Int"); Hugging Face's GPT-2 and Llama
    failed every ExecuTorch int8 conversion so."""
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    bundle = load_model(register_live(f"positions_{mode}", _Positions().eval(), torch.randint(0, 50, (1, 12))))
    quant = QuantConfig(mode, Granularity.PER_CHANNEL)  # type: ignore[arg-type]
    got, expected = _deployed_and_eager(bundle, DeploymentConfig("executorch", ("xnnpack",), quant), tmp_path)
    sqnr = 10 * np.log10(np.mean(expected**2) / np.mean((got - expected) ** 2))
    assert sqnr > 25, sqnr


class _TableBias(torch.nn.Module):
    """Swin V2's position bias: an MLP on a constant table, computed on every call, added
    to a linear layer's output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(12, 16)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
        self.register_buffer("table", torch.randn(5, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.mlp(self.table).mean(0)


def test_computations_on_weights_alone_are_folded_and_compute_the_same() -> None:
    from nnsweep.runtimes.common.pt2e import export, fold_weight_computations

    torch.manual_seed(0)
    net, x = _TableBias().eval(), torch.randn(3, 12)
    graph = export(net, x, dynamic_batch=False).module(check_guards=False)
    assert fold_weight_computations(graph) == 4  # two linear layers, the ReLU, the mean
    assert [n.target for n in graph.graph.nodes if n.op == "call_function"] == [
        torch.ops.aten.linear.default,
        torch.ops.aten.add.Tensor,
    ]
    assert fold_weight_computations(graph) == 0
    assert not any(value.requires_grad for value in graph.buffers())  # values: they can be copied
    with torch.no_grad():
        torch.testing.assert_close(graph(x), net(x))


class _Anchored(torch.nn.Module):
    """An SSD-style decoding: two slices of one anchors buffer, each read by an op."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)
        self.register_buffer("anchors", torch.rand(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.fc(x)
        return torch.cat([self.anchors[:, :2] + d[..., :2] * self.anchors[:, 2:], d[..., 2:] * self.anchors[:, 2:]], -1)


def test_folded_slices_of_one_buffer_do_not_share_its_storage() -> None:
    # constant_fold kept anchors[:, :2] and anchors[:, 2:] as views of the anchors: litert-torch
    # took one for the other in some conversions (the detector probe: 8.6 dB in 9 of 22).
    from nnsweep.runtimes.common.pt2e import export, fold_weight_computations

    torch.manual_seed(0)
    net, x = _Anchored().eval(), torch.randn(1, 3, 6)
    graph = export(net, x, dynamic_batch=False).module(check_guards=False)
    kept = {n.target for n in graph.graph.nodes if n.op == "get_attr"}
    assert fold_weight_computations(graph) > 0
    folded = [getattr(graph, n.target) for n in graph.graph.nodes if n.op == "get_attr" and n.target not in kept]
    assert len(folded) >= 2
    assert all(value.is_contiguous() and value.storage_offset() == 0 for value in folded)
    assert len({value.untyped_storage().data_ptr() for value in folded}) == len(folded)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), net(x))


def test_static_int8_runs_no_layer_on_the_portable_kernels_for_a_constant_input(tmp_path: Path) -> None:
    """Swin V2's position-bias MLP had its weights quantized and its constant input not:
    XNNPACK refused the linear layer and the portable ``addmm`` ran it on every call
    (``torchvision:swin_v2_t``: 1179 ms of a 1259 ms run)."""
    from nnsweep.models import load_model
    from nnsweep.runtimes.executorch.converter import ExecuTorchConverter

    bundle = load_model(f"{_PROBES}:swinv2")
    config = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", Granularity.PER_CHANNEL))
    result = ExecuTorchConverter().convert(bundle, config, tmp_path)
    assert not any("addmm" in op or "dequantize" in op for op in result.partitions.fallback_ops), result.partitions
    (tmp_path / "run").mkdir()
    got, expected = _deployed_and_eager(bundle, config, tmp_path / "run")
    sqnr = 10 * np.log10(np.mean(expected**2) / np.mean((got - expected) ** 2))
    assert sqnr > 30, sqnr  # 40.7 dB


class _Volume(torch.nn.Module):
    """A 3-D convolution: it converts, but ExecuTorch's portable convolution takes 3-D or
    4-D inputs only."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv3d(1, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3, 4))


def test_a_runtime_failure_says_what_executorch_logged(tmp_path: Path) -> None:
    # The bindings raise with an error code only ("failed with error 0x12"); the cause is in
    # the runtime's own log on the measuring process's stderr.
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.errors import BenchmarkError
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    bundle = load_model(register_live("volume", _Volume().eval(), torch.randn(1, 1, 6, 6, 6)))
    config = DeploymentConfig("executorch", ("xnnpack", "portable"))
    artifact, hit = deploy.convert(bundle, config, ArtifactCache(tmp_path))
    with pytest.raises(BenchmarkError) as caught:
        deploy.measure(ModelSnapshot.of(bundle), artifact, MeasureSettings(warmup=1, iters=2), cache_hit=hit)
    said = str(caught.value).partition("(ExecuTorch's log: ")[2]
    assert said.startswith("Check failed") and "Expect input tensor to be 3-D or 4-D, but got, 5." in said
    assert "| KernelCall failed at instruction" in said and "in operator aten::convolution.out" in said
    assert "cpuinfo" not in str(caught.value)


# SQNR of the same model written batch-agnostic (torch.flatten(h, 1)): static 22.4 dB, QAT
# 22.0 dB. QAT one sample a call reaches 6-7 dB: its moving-average observers follow
# single samples' ranges, narrower than a batch's, so the outputs clip (docs/explanation/conversion.md).
@pytest.mark.parametrize(("mode", "floor_db"), [("static_int8", 15.0), ("qat_int8", 3.0)])
def test_a_model_of_batch_one_calibrates_and_fine_tunes_one_sample_a_call(  # type: ignore[no-untyped-def]
    batch_of_one, tmp_path: Path, mode: str, floor_db: float
) -> None:
    bundle = batch_of_one
    config = DeploymentConfig("executorch", ("xnnpack", "portable"), quant=QuantConfig(mode, qat_epochs=1))
    from nnsweep.models._snapshot import reference_outputs
    from nnsweep.runtimes.executorch.converter import ExecuTorchConverter

    result = ExecuTorchConverter().convert(bundle, config, tmp_path)
    runner = ExecuTorchRunner(tmp_path / result.filename, result.io, 1, config.backends)
    runner.load()
    x = bundle.dataset.evaluation.inputs[:8]
    assert evaluate(run_all(runner, x), reference_outputs(bundle, x), None).fidelity.sqnr_db > floor_db


class _ConvNormThenLinearNorm(torch.nn.Module):
    """A convolution and its BatchNorm (folded by prepare), and optionally a BatchNorm after a
    linear layer (LeViT's, which prepare leaves)."""

    def __init__(self, norm_after_linear: bool) -> None:
        super().__init__()
        self.conv, self.conv_norm = torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.BatchNorm1d(8) if norm_after_linear else torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = torch.relu(self.conv_norm(self.conv(x))).flatten(2).transpose(1, 2)
        return self.norm(self.fc(tokens).flatten(0, 1))  # prepare folds a BatchNorm right after a linear layer


@pytest.mark.parametrize("norm_after_linear", [False, True], ids=["all_folded", "one_left"])
def test_xnnpack_static_annotation_without_batch_norm_patterns_prepares_the_same_graph(
    norm_after_linear: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XNNPACK's quantizer exports QAT's conv-BatchNorm patterns on each static prepare (1.5 s
    of each; an ExecuTorch ranking of mobilenet_v3_small ran 129.5 s with them, 39.5 s
    without); once prepare has folded the BatchNorms they match nothing."""
    import copy

    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from nnsweep.runtimes.common.pt2e import export, ready_for_calibration
    from nnsweep.runtimes.executorch import converter as ex

    torch.manual_seed(0)
    model = _ConvNormThenLinearNorm(norm_after_linear).eval()
    x = torch.randn(1, 3, 8, 8)
    program = export(model, x, dynamic_batch=False)
    quant = QuantConfig("static_int8", granularity=Granularity.PER_CHANNEL)
    left_out: list[bool] = []
    skip = ex.without_batch_norm_patterns_if_none_can_match

    def recorded(quantizer: object, graph: torch.fx.GraphModule) -> bool:
        left_out.append(skip(quantizer, graph))
        return left_out[-1]

    prepared = []
    for patch in (lambda quantizer, graph: False, recorded):  # every pattern, as before; then the skip
        monkeypatch.setattr(ex, "without_batch_norm_patterns_if_none_can_match", patch)
        module = copy.deepcopy(program).module(check_guards=False)
        ready_for_calibration(module)
        prepared.append(prepare_pt2e(module, ex.xnnpack_quantizer(quant)))
    assert left_out == [not norm_after_linear]
    assert prepared[1].code == prepared[0].code
    observers = [[n.target for n in p.graph.nodes if n.op == "call_module"] for p in prepared]
    assert observers[1] == observers[0] and observers[0]
    with torch.no_grad():
        torch.testing.assert_close(prepared[1](x), prepared[0](x), rtol=0, atol=0)


def test_a_float_output_refused_by_the_full_interface_names_the_output(tmp_path: Path) -> None:
    """A model ending in an op the quantizer leaves float (a sigmoid) cannot take the ``full``
    interface: the failed conversion says which output, not ExecuTorch 1.5.1's raw
    ``Output {output_index}`` (its message lacks its f-string)."""
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Sigmoid()).eval()
    bundle = load_model(register_live("ends_in_sigmoid", module, torch.randn(1, 3, 8, 8)))
    quant = QuantConfig("static_int8", Granularity.PER_TENSOR, calibration_batches=1, interface=Interface.FULL)
    with pytest.raises(ConversionError) as caught:
        deploy.convert(bundle, DeploymentConfig("executorch", ("xnnpack", "portable"), quant), ArtifactCache(tmp_path))
    assert "Output 0 is not a dequantize op" in str(caught.value) and "{" not in str(caught.value)
