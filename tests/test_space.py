from __future__ import annotations

import optuna
import pytest

from nnsweep.core.config import DeploymentConfig, Granularity, PartitionLimits, QuantConfig, QuantMode
from nnsweep.core.errors import SpecError
from nnsweep.spec import parse_spec
from nnsweep.sweep.space import DeviceSpace, baseline_configs, device_space, mode_starts, params_for, suggest

HOST = {"executorch": ("xnnpack", "portable"), "onnxruntime": ("cpu",), "torch": ("x86", "fbgemm", "qnnpack", "onednn")}
SPEC = parse_spec(
    {
        "name": "s",
        "model": "digits",
        "space": {
            "runtime": ["executorch", "onnxruntime", "torch"],
            "quant": ["fp32", "static_int8", "qat_int8"],
            "granularity": ["per_tensor", "per_channel"],
            "calibration": ["minmax", "entropy"],
            "backends": {"executorch": ["xnnpack", "portable"], "torch": ["x86", "qnnpack"]},
            "max_delegated_partitions": [0, 1],
            "min_nodes_per_partition": {"low": 1, "high": 4},
            "threads": [1, 2, 8],
        },
    }
)


def test_device_space_keeps_only_what_the_device_has() -> None:
    space = device_space(SPEC, "board", {"executorch": ("portable",), "torch": ("qnnpack",)}, cores=4)
    assert space.runtimes == ("executorch", "torch")
    assert space.choices["executorch"].orders == ("portable",)
    assert space.choices["torch"].orders == ("qnnpack",)
    assert space.threads == (1, 2)  # 8 threads on a 4-core board is not offered


def test_runtime_limits_narrow_modes_and_calibrations() -> None:
    space = device_space(SPEC, "host", HOST, cores=2)
    assert QuantMode.QAT_INT8 not in space.choices["onnxruntime"].modes  # ORT cannot do QAT
    assert [c.value for c in space.choices["torch"].calibrations] == ["minmax"]
    assert [c.value for c in space.choices["onnxruntime"].calibrations] == ["minmax", "entropy"]
    # every permutation, cut after the fallback: portable>xnnpack is just portable
    assert space.choices["executorch"].orders == ("xnnpack>portable", "portable")
    assert space.choices["torch"].orders == ("x86>qnnpack", "qnnpack>x86")


def test_a_device_without_the_runtimes_is_an_error() -> None:
    with pytest.raises(SpecError, match="can run none of the sweep's runtimes: executorch does not load there"):
        device_space(SPEC, "phone", {"tflite": ("nnapi",)}, cores=8)


def test_a_runtime_whose_backends_the_order_misses_says_what_to_write() -> None:
    """The Ethos-U mistake: the executorch order must name the NPU target."""
    spec = parse_spec({"name": "t", "model": "digits", "space": {"runtime": ["executorch"]}})
    with pytest.raises(SpecError) as caught:
        device_space(spec, "u55", {"executorch": ("ethos-u55-128",)}, cores=1)
    assert "write space.backends: {executorch: [ethos-u55-128]}" in str(caught.value)


def test_every_sampled_trial_is_a_valid_config_and_all_dimensions_move() -> None:
    space = device_space(SPEC, "host", HOST, cores=2)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(150):
        trial = study.ask()
        config = suggest(trial, space)
        seen.add((config.runtime, config.quant.mode, config.backends, config.partitions.max_delegated_partitions))
        study.tell(trial, [0.5, 1.0])
    assert {s[0] for s in seen} == {"executorch", "onnxruntime", "torch"}
    assert {s[2] for s in seen if s[0] == "executorch"} == {("xnnpack", "portable"), ("portable",)}
    assert {s[3] for s in seen if s[0] == "executorch" and s[2][0] == "xnnpack"} == {0, 1}
    # partition limits appear only where something is delegated
    assert all(s[3] == 0 for s in seen if s[0] != "executorch" or s[2] == ("portable",))


def _asked_back(configs: list[DeploymentConfig], space: DeviceSpace) -> list[DeploymentConfig]:
    """Enqueue ``configs`` by their parameters and ask a study for as many trials."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    for c in configs:
        study.enqueue_trial(params_for(c, space))
    got = []
    for _ in configs:
        trial = study.ask()
        got.append(suggest(trial, space))
        study.tell(trial, [0.5, 1.0])
    return got


def test_enqueued_params_reproduce_the_baselines_first() -> None:
    space = device_space(SPEC, "host", HOST, cores=2)
    baselines = baseline_configs(space)
    assert baselines[0].runtime == "torch" and baselines[0].quant.mode is QuantMode.FP32
    assert {b.runtime for b in baselines} == {"executorch", "onnxruntime", "torch"}
    assert _asked_back(baselines, space) == baselines


def test_mode_starts_give_each_runtime_each_other_mode_once_as_enqueueable_configs() -> None:
    space = device_space(SPEC, "host", HOST, cores=2)
    starts = mode_starts(space)
    # static then QAT int8, for each runtime whose space has the mode; fp32 is the baselines'
    assert [(c.quant.mode, c.runtime) for c in starts] == [
        (mode, rt)
        for mode in (QuantMode.STATIC_INT8, QuantMode.QAT_INT8)
        for rt in space.runtimes
        if mode in space.choices[rt].modes
    ]
    assert len(starts) >= 5
    assert not {c.digest() for c in starts} & {c.digest() for c in baseline_configs(space)}
    for c in starts:  # each a default deployment: no limits, the defaults' granularity, threads[0]
        assert c.partitions == PartitionLimits() and c.threads == space.threads[0]
        assert c.quant.granularity is Granularity.PER_CHANNEL
    assert _asked_back(starts, space) == starts


def test_untried_finds_the_last_untried_configuration_of_a_finite_space() -> None:
    import random

    from nnsweep.sweep.space import space_size, untried

    spec = parse_spec(
        {
            "name": "t",
            "model": "digits",
            "space": {
                "runtime": ["onnxruntime"],
                "quant": ["fp32", "dynamic_int8"],
                "granularity": ["per_tensor", "per_channel"],
            },
        }
    )
    space = device_space(spec, "host", {"onnxruntime": ("cpu",)}, 1)
    assert space_size(space) == 3
    seen: set[str] = set()
    rng = random.Random(1)
    for _ in range(3):
        config = untried(space, lambda c: c.digest() in seen, rng, draws=2)
        assert config is not None and config.digest() not in seen
        seen.add(config.digest())
    assert untried(space, lambda c: c.digest() in seen, rng) is None


def test_float_layers_are_drawn_for_int8_only_named_by_the_ranking_and_enqueued_back() -> None:
    from nnsweep.sweep.space import space_size

    spec = parse_spec(
        {
            "name": "mp",
            "model": "digits",
            "space": {
                "runtime": ["onnxruntime"],
                "quant": ["fp32", "static_int8"],
                "granularity": ["per_tensor"],
                "float_layers": {"low": 0, "high": 2},
            },
        }
    )
    ranked = ("blocks.2.pw1", "blocks.2.dw", "stem.0")
    asked: list[tuple[str, object, int]] = []

    def layers_for(
        runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None
    ) -> tuple[str, ...]:
        asked.append((runtime, granularity, k))
        return ranked[:k]

    space = device_space(spec, "host", HOST, 2, layers_for)
    assert space_size(space) == 4  # fp32, and static int8 with 0, 1 or 2 layers float
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        config = suggest(trial, space)
        seen.add(config.quant.float_layers)
        if config.quant.mode is QuantMode.FP32:
            assert "onnxruntime.float_layers" not in trial.params
        else:
            k = trial.params["onnxruntime.float_layers"]
            assert config.quant.float_layers == tuple(sorted(ranked[:k]))  # a set: sorted
        # what the coordinator enqueues for a configuration names the same count
        assert params_for(config, space).get("onnxruntime.float_layers", 0) == len(config.quant.float_layers)
        study.tell(trial, 0.0)
    assert seen == {(), ("blocks.2.pw1",), ("blocks.2.dw", "blocks.2.pw1")}
    assert all(k <= 2 for _, _, k in asked)


def test_float_layers_need_an_int8_mode_and_a_count_within_bounds() -> None:
    for space, message in (
        ({"quant": ["fp32"], "float_layers": [0, 2]}, "has neither"),
        ({"quant": ["static_int8"], "float_layers": [-1]}, "between 0 and"),
        ({"quant": ["static_int8"], "float_layers": {"low": 3, "high": 1}}, "above high"),
    ):
        with pytest.raises(SpecError, match=message) as caught:
            parse_spec({"name": "x", "model": "digits", "space": {"runtime": ["onnxruntime"], **space}})
        assert caught.value.field.startswith("space.float_layers")


ORT_OPTIONS = parse_spec(
    {
        "name": "ortq",
        "model": "digits",
        "space": {
            "runtime": ["onnxruntime", "torch"],
            "quant": ["fp32", "dynamic_int8", "static_int8"],
            "quant_options": {
                "onnxruntime": {
                    "quant_format": ["qdq", "qoperator"],
                    "activation_type": ["uint8", "int8"],
                    "weight_type": ["int8", "uint8"],
                    "reduce_range": [False, True],
                }
            },
        },
    }
)


def test_quant_options_are_drawn_for_their_modes_only_and_never_in_a_refused_pair() -> None:
    from nnsweep.sweep.space import space_size

    space = device_space(ORT_OPTIONS, "host", HOST, 2)
    # onnxruntime: fp32, dynamic 2 weight types x 2 reduce_range, static 2 formats x 3 type pairs x 2;
    # torch: fp32, dynamic, static (no options of its own)
    assert space_size(space) == (1 + 4 + 12) + 3
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(300):
        trial = study.ask()
        config = suggest(trial, space)
        names = {n.split(".", 1)[1] for n in trial.params if n.startswith("onnxruntime.") and n != "onnxruntime.quant"}
        mode = config.quant.mode
        if config.runtime == "torch" or mode is QuantMode.FP32:
            assert not names and config.quant.options == ()
        elif mode is QuantMode.DYNAMIC_INT8:
            assert names == {"weight_type", "reduce_range"}
        else:
            options = dict(config.quant.options)
            assert not (options.get("activation_type") == "int8" and options.get("weight_type") == "uint8")
            # int8 activations leave one weight type: no parameter for it
            expected = {"quant_format", "activation_type", "reduce_range"}
            assert names == (expected if options.get("activation_type") == "int8" else expected | {"weight_type"})
        assert params_for(config, space) == {k: v for k, v in trial.params.items()}
        seen.add(config.digest())
        study.tell(trial, 0.0)
    assert len(seen) == space_size(space)  # every configuration is reachable


def test_quant_options_enqueue_back_and_neighbours_change_one_of_them() -> None:
    from nnsweep.sweep.moves import neighbours

    space = device_space(ORT_OPTIONS, "host", HOST, 2)
    quant = QuantConfig("static_int8", options={"quant_format": "qoperator", "activation_type": "int8"})
    config = DeploymentConfig("onnxruntime", ("cpu",), quant)
    assert _asked_back([config], space) == [config]
    changed = [dict(n.quant.options) for n in neighbours(config, space) if n.quant.mode is QuantMode.STATIC_INT8]
    assert {"activation_type": "int8"} in changed  # back to qdq
    assert {"quant_format": "qoperator"} in changed  # uint8 activations (weight_type stays int8)
    assert {"quant_format": "qoperator", "activation_type": "int8", "reduce_range": True} in changed


def test_a_space_without_quant_options_draws_none_and_keeps_its_parameters() -> None:
    space = device_space(SPEC, "host", HOST, cores=2)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(60):
        trial = study.ask()
        config = suggest(trial, space)
        assert config.quant.options == ()
        assert not any(n.rsplit(".", 1)[-1] in ("quant_format", "weight_type") for n in trial.params)
        study.tell(trial, 0.0)


def test_each_runtime_space_size_counts_its_quantizer_options() -> None:
    from nnsweep.sweep.accepted import accepted_values, runtime_space_size

    # 16 before the options: fp32, fp16, dynamic x 2 granularities, static x 2 x 3 calibrations x 2 interfaces
    # int4_weight at the default space's two group sizes, with float or int8 activations, and a16w8
    assert runtime_space_size("onnxruntime", ("cpu",)) == 1 + 1 + 2 * 4 + 2 * 3 * 2 * 12 + 2 * 2 + 1
    assert runtime_space_size("torch", ("x86", "qnnpack")) == 16  # no options of its own
    values = accepted_values({"onnxruntime": ("cpu",)}, 2)["runtime"]["onnxruntime"]
    assert values["quant_options"]["quant_format"]["values"] == ["qdq", "qoperator"]
    assert values["quant_options"]["weight_type"]["modes"] == ["dynamic_int8", "static_int8"]
    assert values["size"] == 159 and "int8 activations with uint8 weights" in values["refused_options"][0]


X86_FLAGS = "fpu sse2 avx fma avx2 bmi2"


@pytest.mark.parametrize(
    ("cpuinfo", "flags"),
    [
        (f"processor\t: 0\nflags\t\t: {X86_FLAGS}\n", ("avx2",)),
        (f"flags\t\t: {X86_FLAGS} avx512f avx512_vnni\nflags\t\t: ignored\n", ("avx2", "avx512_vnni")),
        (f"flags\t\t: {X86_FLAGS} avx_vnni avx_vnni_int8\n", ("avx2", "avx_vnni", "avx_vnni_int8")),
        ("processor\t: 0\nFeatures\t: fp asimd asimddp i8mm sve\n", ("asimddp", "i8mm")),
        ("processor\t: 0\nFeatures\t: fp asimd evtstrm crc32 cpuid\n", ()),  # a Cortex-A72
        ("processor\t: 0\nHardware\t: BCM2835\n", None),  # no flags listed: unknown
        ("", None),
    ],
)
def test_int8_flags_read_what_decides_how_int8_runs(cpuinfo: str, flags: tuple[str, ...] | None) -> None:
    from nnsweep.core.options import int8_flags

    assert int8_flags(cpuinfo) == flags


def test_a_sweep_says_before_it_starts_when_onnxruntime_int8_can_saturate_on_a_device() -> None:
    from nnsweep.agents import Capabilities
    from nnsweep.sweep.accepted import saturation_notice
    from nnsweep.sweep.resume import Plan

    def caps(device: str, arch: str, flags: tuple[str, ...] | None) -> Capabilities:
        return Capabilities(device, device, arch, "cpu", 2, 4096, HOST, int8_flags=flags)

    def space(quant: list[str], options: dict[str, list[object]] | None = None) -> DeviceSpace:
        body: dict[str, object] = {"runtime": ["onnxruntime"], "quant": quant}
        if options is not None:
            body["quant_options"] = {"onnxruntime": options}
        return device_space(parse_spec({"name": "s", "model": "digits", "space": body}), "d", HOST, cores=2)

    int8 = space(["fp32", "static_int8"])
    line = saturation_notice(caps("x86", "x86_64", ("avx2",)), int8)
    assert line is not None and line.startswith("x86: an x86 CPU without VNNI: ONNX Runtime's int8 kernels add")
    assert line.endswith("reduce_range: [false, true] to measure 7-bit weights beside them")
    assert saturation_notice(caps("x86", "x86_64", ("avx2",)), space(["dynamic_int8"])) is not None
    quiet = [
        (caps("vnni", "x86_64", ("avx2", "avx512_vnni")), int8),  # VNNI adds into int32
        (caps("pi", "aarch64", ()), int8),  # Arm's kernels have no such pairs
        (caps("sim", "x86_64", None), int8),  # unknown: nothing is claimed
        (caps("x86", "x86_64", ("avx2",)), space(["fp32"])),  # nothing int8
        (caps("x86", "x86_64", ("avx2",)), space(["static_int8"], {"reduce_range": [False, True]})),  # measured beside
        (caps("x86", "x86_64", ("avx2",)), space(["static_int8"], {"weight_type": ["int8", "uint8"]})),
    ]
    assert [saturation_notice(c, s) for c, s in quiet] == [None] * len(quiet)
    plan = Plan({"x86": (caps("x86", "x86_64", ("avx2",)), int8), "pi": (caps("pi", "aarch64", ()), int8)}, None)
    assert plan.notices() == [line]


def test_capabilities_keep_the_int8_flags_and_read_old_records_as_unknown() -> None:
    import json

    from nnsweep.agents import Capabilities

    caps = Capabilities("b", "b", "aarch64", "A76", 4, 4096, {"onnxruntime": ("cpu",)}, int8_flags=("asimddp",))
    assert Capabilities.from_dict(json.loads(json.dumps(caps.to_dict()))) == caps
    old = {k: v for k, v in caps.to_dict().items() if k != "int8_flags"}  # probed before the field
    assert Capabilities.from_dict(old).int8_flags is None
    assert caps.tags()["int8_flags"] == "asimddp" and Capabilities.from_dict(old).tags()["int8_flags"] == "unknown"


def test_a_mode_whose_converter_keeps_no_layer_float_draws_no_count_and_is_never_repaired() -> None:
    """LiteRT keeps layers float in static int8, not in dynamic int8 (its float_layers_refused)."""
    from nnsweep.sweep.moves import repaired

    spec = parse_spec(
        {
            "name": "mp",
            "model": "digits",
            "space": {"runtime": ["litert"], "quant": ["dynamic_int8", "static_int8"], "float_layers": [0, 1, 2]},
        }
    )
    space = device_space(
        spec, "host", {"litert": ("xnnpack", "cpu")}, 2, lambda runtime, granularity, k, group_size=None: ("a", "b")[:k]
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    counts: dict[QuantMode, set[int]] = {}
    for _ in range(60):
        trial = study.ask()
        config = suggest(trial, space)
        counts.setdefault(config.quant.mode, set()).add(len(config.quant.float_layers))
        assert ("litert.float_layers" in trial.params) == (config.quant.mode is QuantMode.STATIC_INT8)
        assert params_for(config, space).get("litert.float_layers", 0) == len(config.quant.float_layers)
        if config.quant.mode is QuantMode.DYNAMIC_INT8:
            assert repaired(config, space) is None
        study.tell(trial, 0.0)
    assert counts[QuantMode.DYNAMIC_INT8] == {0} and counts[QuantMode.STATIC_INT8] == {0, 1, 2}
