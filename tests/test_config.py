from __future__ import annotations

import pytest

from nnsweep.core.config import (
    Calibration,
    DeploymentConfig,
    Granularity,
    Interface,
    PartitionLimits,
    QuantConfig,
    QuantMode,
)
from nnsweep.core.errors import SpecError


def test_fallback_closes_every_order_and_cuts_what_follows_it() -> None:
    assert DeploymentConfig("executorch", ("xnnpack",)).backends == ("xnnpack", "portable")
    # portable runs every op, so a backend after it is never reached
    assert DeploymentConfig("executorch", ("portable", "xnnpack")).backends == ("portable",)
    assert DeploymentConfig("onnxruntime").backends == ("cpu",)


def test_irrelevant_fields_are_cleared_so_equal_deployments_share_a_digest() -> None:
    a = DeploymentConfig("executorch", quant=QuantConfig(QuantMode.FP32, Granularity.PER_TENSOR))
    b = DeploymentConfig("executorch", quant=QuantConfig(QuantMode.FP32, Granularity.PER_CHANNEL))
    assert a == b and a.digest() == b.digest()
    assert a.quant.granularity is None and a.quant.calibration is None
    # the torch quantized engine does not matter to float models
    assert DeploymentConfig("torch", ("qnnpack",)).backends == ()
    assert DeploymentConfig("torch", ("qnnpack",), QuantConfig("static_int8")).backends == ("qnnpack",)


def test_digest_changes_with_every_relevant_field() -> None:
    base = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"))
    variants = [
        DeploymentConfig("executorch", ("portable",), QuantConfig("static_int8")),
        DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", Granularity.PER_TENSOR)),
        DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", calibration=Calibration.HISTOGRAM)),
        DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", calibration_batches=2)),
        DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8", interface=Interface.FULL)),
        DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"), PartitionLimits(2, 1)),
        DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"), threads=2),
    ]
    digests = {base.digest(), *(v.digest() for v in variants)}
    assert len(digests) == len(variants) + 1
    assert all(len(d) == 64 for d in digests)


def test_round_trip_through_dict_and_canonical_json() -> None:
    cfg = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("qat_int8", qat_epochs=2), PartitionLimits(3, 2))
    again = DeploymentConfig.from_dict(cfg.to_dict())
    assert again == cfg
    assert again.canonical_json() == cfg.canonical_json()
    assert " " not in cfg.canonical_json()
    assert cfg.flat()["quant.mode"] == "qat_int8"
    assert cfg.flat()["backends"] == "xnnpack,portable"


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"runtime": "tflite"}, "runtime", "allowed: executorch, onnxruntime, torch"),
        ({"runtime": "executorch", "backends": ("gpu",)}, "backends", "allowed: xnnpack, ethos-u55-32"),
        ({"runtime": "executorch", "backends": ("xnnpack", "xnnpack")}, "backends", "twice"),
        ({"runtime": "onnxruntime", "quant": QuantConfig("qat_int8")}, "quant.mode", "no training loop"),
        (
            {"runtime": "onnxruntime", "quant": QuantConfig("static_int8", calibration=Calibration.HISTOGRAM)},
            "quant.calibration",
            "entropy",
        ),
        (
            {"runtime": "torch", "quant": QuantConfig("static_int8", calibration=Calibration.ENTROPY)},
            "quant.calibration",
            "histogram",
        ),
        ({"runtime": "torch", "partitions": PartitionLimits(1, 1)}, "partitions", "apply to: executorch"),
        ({"runtime": "executorch", "threads": 0}, "threads", ">= 1"),
    ],
)
def test_impossible_combinations_are_rejected_with_the_reason(kwargs: dict, field: str, text: str) -> None:
    with pytest.raises(SpecError) as info:
        DeploymentConfig(**kwargs)
    assert info.value.field == field
    assert text in str(info.value)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: QuantConfig("int4"), "quant.mode"),
        (lambda: QuantConfig("static_int8", "per_row"), "quant.granularity"),
        (lambda: QuantConfig("fp32", "per_row"), "quant.granularity"),  # wrong even where it does not apply
        (lambda: QuantConfig("static_int8", calibration_batches=0), "quant.calibration_batches"),
        (lambda: PartitionLimits(-1, 1), "partitions.max_delegated_partitions"),
        (lambda: PartitionLimits(0, 0), "partitions.min_nodes_per_partition"),
    ],
)
def test_bad_values_name_their_field(make, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError) as info:
        make()
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


def test_from_dict_rejects_unknown_fields() -> None:
    with pytest.raises(SpecError, match=r"quant\.bits"):
        DeploymentConfig.from_dict({"runtime": "executorch", "quant": {"bits": 4}})
    with pytest.raises(SpecError, match="colour"):
        DeploymentConfig.from_dict({"runtime": "executorch", "colour": "red"})


def test_quant_and_partitions_given_as_mappings_are_read_as_from_dict_reads_them() -> None:
    # The Python API's measure(..., quant={"mode": ...}) builds DeploymentConfig.from_dict(options).
    cfg = DeploymentConfig("executorch", quant={"mode": "static_int8"}, partitions={"max_delegated_partitions": 2})  # type: ignore[arg-type]
    assert cfg == DeploymentConfig.from_dict(
        {"runtime": "executorch", "quant": {"mode": "static_int8"}, "partitions": {"max_delegated_partitions": 2}}
    )
    with pytest.raises(SpecError, match=r"quant\.bits"):
        DeploymentConfig("executorch", quant={"bits": 4})  # type: ignore[arg-type]
    # a mode name is that mode's mapping (tests/test_api_input.py); a partition limit has no such name
    assert DeploymentConfig("executorch", quant="static_int8") == DeploymentConfig(
        "executorch", quant={"mode": "static_int8"}
    )  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="partitions: must be a mapping"):
        DeploymentConfig("executorch", partitions="2")  # type: ignore[arg-type]


def test_configs_are_frozen() -> None:
    cfg = DeploymentConfig("executorch")
    with pytest.raises(AttributeError):
        cfg.threads = 4  # type: ignore[misc]


def test_float_layers_are_a_sorted_set_of_module_paths_for_int8_only() -> None:
    q = QuantConfig(mode=QuantMode.STATIC_INT8, float_layers=("b.1", "a", "a"))
    assert q.float_layers == ("a", "b.1")
    assert QuantConfig(mode=QuantMode.FP32, float_layers=("a",)).float_layers == ()
    assert QuantConfig(mode=QuantMode.STATIC_INT8, float_layers=["trunk.block1-0.proj.0"]).float_layers == (
        "trunk.block1-0.proj.0",  # torchvision's RegNet names its blocks so
    )
    for bad in ("a", ["a b"], [""], [1], ["-x"], ["a.-x"], ["a..b"], ["a/b"]):
        with pytest.raises(SpecError, match=r"quant\.float_layers"):
            QuantConfig(mode=QuantMode.STATIC_INT8, float_layers=bad)


def test_a_whole_model_config_keeps_its_digest_and_dict_shape() -> None:
    plain = DeploymentConfig("executorch", quant=QuantConfig(mode=QuantMode.STATIC_INT8))
    assert "float_layers" not in plain.to_dict()["quant"]
    assert DeploymentConfig.from_dict(plain.to_dict()) == plain


def test_a_runtime_that_cannot_keep_layers_float_is_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from nnsweep.core import runtimes

    real = runtimes.get
    cannot = dataclasses.replace(real("onnxruntime"), mixed_precision="its converter does not keep layers float")
    monkeypatch.setattr(runtimes, "get", lambda name: cannot if name == "onnxruntime" else real(name))
    with pytest.raises(SpecError, match=r"quant\.float_layers.*cannot keep layers in float"):
        DeploymentConfig("onnxruntime", quant=QuantConfig(mode=QuantMode.STATIC_INT8, float_layers=("fc",)))
    # An NPU runs int8 only, whatever its runtime can do elsewhere.
    with pytest.raises(SpecError, match=r"quant\.float_layers.*int8 only"):
        DeploymentConfig(
            "executorch",
            (runtimes.ETHOS_U_TARGETS[0],),
            QuantConfig(mode=QuantMode.STATIC_INT8, granularity="per_channel", float_layers=("fc",)),
        )


# What these configurations hashed to before quant.options existed (computed on main, 2026-11-24):
# a configuration at the default quantizer options must keep its digest, artifact key and stage key.
_BEFORE_OPTIONS = {
    "dynamic_int8": (
        "82d07fe0f6badf3a0efa7d2879af1641b620b65895dde45e257f8984af2d3aef",
        "fc2c09bd6019c646d51881601c48cc57022793df474febdd3e665dcb6e912660",
        "dbb8b95d39a601b5e696fb74acfbb6ca7f29f063c70a165b2f6da1d45f00939a",
    ),
    "static_int8": (
        "6d2ed40f53fc5228e101271d279e523e683d40e4f7bb9bdca21dbd9cb35bc461",
        "d205a8cd45de78756cfeb672446580c61c5712d716e867a488574ab0dc38e9fe",
        "c880facb6fc5e643ae14bead92f23809e7ad65f0bd6809cbb8906fd21b67bce4",
    ),
}


@pytest.mark.parametrize("mode", sorted(_BEFORE_OPTIONS))
def test_default_quantizer_options_keep_the_keys_from_before_they_existed(mode: str) -> None:
    from nnsweep.artifacts.key import cache_key, stage_key
    from nnsweep.runtimes.common.converter import quant_settings

    toolchain = {"python": "3.11.7", "onnxruntime": "1.32.0"}
    every_default = {"weight_type": "int8", "reduce_range": False}
    if mode == "static_int8":
        every_default |= {"quant_format": "qdq", "activation_type": "uint8"}
    for quant in (QuantConfig(mode), QuantConfig(mode, options=every_default)):
        config = DeploymentConfig("onnxruntime", ("cpu",), quant)
        assert config.quant.options == ()
        assert "options" not in config.to_dict()["quant"] and "options" not in quant_settings(config.quant)
        digest, key, stage = _BEFORE_OPTIONS[mode]
        assert config.digest() == digest
        assert cache_key("m" * 64, config, toolchain) == key
        assert stage_key("m" * 64, "onnxruntime.model", {"quant": quant_settings(config.quant)}, toolchain) == stage


def test_quantizer_options_off_their_defaults_enter_digest_dict_label_and_params() -> None:
    a = DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8", options={"quant_format": "qoperator"}))
    b = DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8", options=[("reduce_range", True)]))
    plain = DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8"))
    assert len({a.digest(), b.digest(), plain.digest()}) == 3
    assert a.to_dict()["quant"]["options"] == {"quant_format": "qoperator"}
    assert DeploymentConfig.from_dict(a.to_dict()) == a
    assert a.flat()["quant.options.quant_format"] == "qoperator"
    assert "{reduce_range=true}" in b.label()
    # the same options in another order, or with a default spelt out, are the same configuration
    both = {"reduce_range": True, "weight_type": "int8", "quant_format": "qoperator"}
    again = DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8", options=both))
    assert again.quant.options == (("quant_format", "qoperator"), ("reduce_range", True))


@pytest.mark.parametrize(
    ("runtime", "mode", "options", "field", "text"),
    [
        (
            "onnxruntime",
            "static_int8",
            {"quant_format": "qop"},
            "quant.options.quant_format",
            "allowed: qdq, qoperator",
        ),
        ("onnxruntime", "static_int8", {"reduce_range": "yes"}, "quant.options.reduce_range", "true or false"),
        ("onnxruntime", "static_int8", {"weight_type": "int4"}, "quant.options.weight_type", "allowed: int8, uint8"),
        (
            "onnxruntime",
            "static_int8",
            {"activation_type": "int8", "weight_type": "uint8"},
            "quant.options.activation_type",
            "refuses int8 activations with uint8 weights",
        ),
        (
            "onnxruntime",
            "dynamic_int8",
            {"activation_type": "int8"},
            "quant.options.activation_type",
            "applies to static_int8",
        ),
        ("onnxruntime", "dynamic_int8", {"quant_format": "qdq"}, "quant.options.quant_format", "applies to static"),
        ("onnxruntime", "fp32", {"weight_type": "uint8"}, "quant.options.weight_type", "dynamic_int8, static_int8"),
        ("onnxruntime", "static_int8", {"colour": "red"}, "quant.options.colour", "it has quant_format"),
        ("executorch", "static_int8", {"quant_format": "qdq"}, "quant.options.quant_format", "onnxruntime has it"),
        ("onnxruntime", "static_int8", {"weight_type": 8}, "quant.options.weight_type", "a name or true/false"),
        ("onnxruntime", "static_int8", "qdq", "quant.options", "mapping"),
    ],
)
def test_bad_quantizer_options_name_their_field(runtime: str, mode: str, options, field: str, text: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError) as info:
        DeploymentConfig(runtime, quant=QuantConfig(mode, options=options))
    assert info.value.field == field
    assert text in info.value.message
