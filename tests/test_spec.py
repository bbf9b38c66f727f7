from __future__ import annotations

import copy
from pathlib import Path

import pytest

from nnsweep.core.config import Granularity, QuantMode
from nnsweep.core.errors import SpecError
from nnsweep.spec import load_spec, parse_spec

ISSUE_EXAMPLE = {
    "name": "quickstart",
    "model": "digits",
    "devices": ["host"],
    "objectives": {"accuracy": "maximize", "latency_p50_ms": "minimize"},
    "constraints": {"max_accuracy_drop": 0.01},
    "space": {
        "runtime": ["executorch", "onnxruntime", "torch"],
        "quant": ["fp32", "dynamic_int8", "static_int8"],
        "granularity": ["per_tensor", "per_channel"],
        "backends": {"executorch": ["xnnpack", "portable"], "torch": ["x86", "qnnpack"]},
        "max_delegated_partitions": [0, 1, 2, 4],
        "min_nodes_per_partition": {"low": 1, "high": 16},
        "threads": [1, 2],
    },
    "budget": {"trials": 24, "timeout_s": 900},
    "measure": {"warmup": 5, "iters": 200},
    "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "quickstart"},
    "storage": "journal",
}


def test_the_issue_example_parses_into_frozen_typed_data() -> None:
    spec = parse_spec(ISSUE_EXAMPLE)
    assert spec.space.quant == (QuantMode.FP32, QuantMode.DYNAMIC_INT8, QuantMode.STATIC_INT8)
    assert spec.space.granularity == (Granularity.PER_TENSOR, Granularity.PER_CHANNEL)
    assert spec.space.backends["torch"] == ("x86", "qnnpack")
    assert (spec.space.min_nodes_per_partition.low, spec.space.min_nodes_per_partition.high) == (1, 16)
    assert [(o.metric, o.direction) for o in spec.objectives] == [
        ("accuracy", "maximize"),
        ("latency_p50_ms", "minimize"),
    ]
    assert spec.max_accuracy_drop == 0.01 and spec.budget.trials == 24
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]


def test_defaults_fill_a_minimal_spec() -> None:
    spec = parse_spec({"name": "m", "model": "digits"})
    assert spec.devices == ("host",)
    assert spec.tracking.uri == "sqlite:///mlflow.db" and spec.experiment == "m"
    m = spec.measure
    assert spec.storage == "journal" and m.iters == 200 and m.warmup == 5 and m.remeasure == 3
    assert (m.until_stable, m.ci_rel, m.max_duration_s) == (False, 0.01, 10.0)


def test_measuring_until_stable_is_a_measure_setting_of_the_sweep() -> None:
    from nnsweep.sweep.state import fingerprint

    measure = {"warmup": 5, "iters": 200, "until_stable": True, "ci_rel": 0.02, "max_duration_s": 4}
    spec = parse_spec({**ISSUE_EXAMPLE, "measure": measure})
    assert (spec.measure.until_stable, spec.measure.ci_rel, spec.measure.max_duration_s) == (True, 0.02, 4.0)

    import torch

    class Bundle:
        digest = "d"
        module = torch.nn.Linear(1, 1)
        class_axes = ()

    plain = parse_spec(ISSUE_EXAMPLE)
    # A sweep measured to stability is another sweep; one that never asked keeps its old fingerprint.
    assert fingerprint(plain, Bundle())["measure"] == "warmup=5 iters=200 min_duration_s=0"  # type: ignore[arg-type]
    assert "until_stable ci_rel=0.02" in fingerprint(spec, Bundle())["measure"]  # type: ignore[arg-type]


def test_an_sqnr_constraint_is_its_own_part_of_the_fingerprint() -> None:
    import torch

    from nnsweep.sweep.state import fingerprint

    class Bundle:
        digest = "d"
        module = torch.nn.Linear(1, 1)
        class_axes = ()

    spec = parse_spec({**ISSUE_EXAMPLE, "constraints": {"max_accuracy_drop": 0.01, "min_sqnr_db": 30}})
    assert spec.min_sqnr_db == 30.0 and spec.max_accuracy_drop == 0.01
    # a sweep begun before the key existed (or without it) keeps its fingerprint and resumes
    assert fingerprint(parse_spec(ISSUE_EXAMPLE), Bundle())["constraints"] == "max_accuracy_drop=0.01"  # type: ignore[arg-type]
    assert fingerprint(spec, Bundle())["constraints"] == "max_accuracy_drop=0.01 min_sqnr_db=30"  # type: ignore[arg-type]


def test_a_sweep_of_a_sequence_output_begun_before_its_class_axis_was_read_is_refused() -> None:
    # Its trials scored one argmax over all of (T, classes): figures of another kind.
    import torch

    from nnsweep.sweep.state import SweepChanged, check_fingerprint, fingerprint

    class Bundle:
        digest = "d"
        module = torch.nn.Linear(1, 1)
        positions = (16,)
        class_axes = (1,)

    class Classifier(Bundle):
        positions = (1,)
        class_axes = ()

    spec = parse_spec(ISSUE_EXAMPLE)
    now = fingerprint(spec, Bundle())  # type: ignore[arg-type]
    assert now["scoring"] == "positions=[16] class_axes=[1]"
    before = {k: v for k, v in now.items() if k != "scoring"}
    with pytest.raises(SweepChanged, match=r"how the outputs' classes are read \(None -> positions=\[16\]"):
        check_fingerprint("m", before, now)
    # a classifier's fingerprint has no such part: its sweeps resume as before
    classifier = fingerprint(spec, Classifier())  # type: ignore[arg-type]
    assert "scoring" not in classifier
    check_fingerprint("m", before, classifier)


def _mutated(path: list, value: object) -> dict:  # type: ignore[type-arg]
    data = copy.deepcopy(ISSUE_EXAMPLE)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "field", "text"),
    [
        (["model"], KeyError, "model", "is required"),
        (["model"], "nosuch", "model", "torchvision:NAME"),
        (["space", "runtime"], ["executorch", "tflite"], "space.runtime[1]", "allowed: executorch"),
        (["space", "quant"], [], "space.quant", "at least 1"),
        (["space", "quant"], ["int4"], "space.quant[0]", "static_int8"),
        (["budget", "trials"], -3, "budget.trials", "greater than or equal to 1"),
        (["colour"], "red", "colour", "unknown key"),
        (["space", "shape"], [1], "space.shape", "unknown key"),
        (["space", "backends", "executorch"], ["gpu"], "space.backends.executorch[0]", "allowed: xnnpack"),
        (["space", "min_nodes_per_partition"], {"low": 5, "high": 2}, "space.min_nodes_per_partition", "above"),
        (["space", "max_delegated_partitions"], [0, -1], "space.max_delegated_partitions", "between 0 and"),
        # a field that takes a list or a range: the error of the shape written, no class names
        (["space", "float_layers"], True, "space.float_layers", "a list of integers or a range"),
        (["space", "float_layers"], "2", "space.float_layers", "a list of integers or a range"),
        (["space", "float_layers"], [1.5], "space.float_layers[0]", "valid integer"),
        (["space", "float_layers"], {"low": 0}, "space.float_layers.high", "is required"),
        (["space", "float_layers"], {"low": 0, "high": 2, "step": 1}, "space.float_layers.step", "unknown key"),
        (["space", "min_nodes_per_partition"], 3, "space.min_nodes_per_partition", "a list of integers or a range"),
        (["space", "min_nodes_per_partition"], [True], "space.min_nodes_per_partition[0]", "valid integer"),
        (["objectives"], {"speed": "maximize"}, "objectives.speed", "allowed: accuracy"),
        (["objectives"], {"accuracy": "up"}, "objectives.accuracy", "maximize"),
        (["measure", "iters"], 0, "measure.iters", "greater than or equal to 1"),
        (["constraints", "min_sqnr_db"], -3, "constraints.min_sqnr_db", "greater than or equal to 0"),
        (["constraints", "min_sqnr_db"], "30 dB", "constraints.min_sqnr_db", "valid number"),
        (["constraints", "min_sqnr_db"], float("inf"), "constraints.min_sqnr_db", "finite"),
        (["storage"], "somewhere", "storage", "journal"),
        (["devices"], ["host", "host"], "devices", "twice"),
        # the input boundary: whole-name matches, strict and bounded numbers
        (["name"], "quickstart\n", "name", "letters, digits"),
        (["devices"], ["host\n"], "devices[0]", "not a device name"),
        (["budget", "trials"], 10**26, "budget.trials", "less than or equal to 100000"),
        (["budget", "trials"], 1e26, "budget.trials", "valid integer"),
        (["budget", "trials"], "24", "budget.trials", "valid integer"),
        (["space", "threads"], [True, 2], "space.threads[0]", "valid integer"),
        (["space", "threads"], [4096], "space.threads", "between 1 and 1024"),
        (["measure", "timeout_s"], float("inf"), "measure.timeout_s", "finite"),
        (["measure", "ci_rel"], 1.5, "measure.ci_rel", "less than 1"),
        (["measure", "until_stable"], "yes", "measure.until_stable", "valid boolean"),
        (["measure", "timeout_s"], float("nan"), "measure.timeout_s", "finite"),
        (["budget", "timeout_s"], 1e300, "budget.timeout_s", "less than or equal to"),
        (["input_shape"], [1, 100000, 100000, 100000], "input_shape", "more than 16,777,216 elements"),
        (["bridges"], {"host": {"transport": "ssh", "host": "-oProxyCommand=touch pwned"}}, "bridges.host.host", "'-'"),
        (["bridges"], {"host": {"transport": "adb", "serial": "-H evil"}}, "bridges.host.serial", "option"),
        (
            ["bridges"],
            {"host": {"transport": "ssh", "host": "b", "tools": {"torch": "-x"}}},
            "bridges.host.tools.torch",
            "option",
        ),
        # a runtime's own quantizer options (the example's quant has dynamic and static int8)
        (["space", "quant_options"], {"onnxrt": {}}, "space.quant_options.onnxrt", "unknown runtime"),
        (["space", "quant_options"], {"torch": {"weight_type": ["uint8"]}}, "space.quant_options.torch", "onnxruntime"),
        (["space", "quant_options"], {"onnxruntime": {}}, "space.quant_options.onnxruntime", "quant_format"),
        (
            ["space", "quant_options"],
            {"onnxruntime": {"colour": ["red"]}},
            "space.quant_options.onnxruntime.colour",
            "allowed: quant_format, activation_type, weight_type, reduce_range",
        ),
        (
            ["space", "quant_options"],
            {"onnxruntime": {"quant_format": ["qdq", "qop"]}},
            "space.quant_options.onnxruntime.quant_format[1]",
            "allowed: qdq, qoperator",
        ),
        (
            ["space", "quant_options"],
            {"onnxruntime": {"reduce_range": ["true"]}},
            "space.quant_options.onnxruntime.reduce_range[0]",
            "true or false",
        ),
        (
            ["space", "quant_options"],
            {"onnxruntime": {"weight_type": ["int8", "int8"]}},
            "space.quant_options.onnxruntime.weight_type",
            "twice",
        ),
        (
            ["space", "quant_options"],
            {"onnxruntime": {"weight_type": []}},
            "space.quant_options.onnxruntime.weight_type",
            "empty",
        ),
        (
            ["space", "quant_options"],
            {"onnxruntime": {"activation_type": ["int8"], "weight_type": ["uint8"]}},
            "space.quant_options.onnxruntime",
            "refuses int8 activations with uint8 weights",
        ),
    ],
)
def test_bad_specs_name_the_field(path: list, value: object, field: str, text: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(SpecError) as info:
        parse_spec(_mutated(path, value))
    assert info.value.field == field
    assert text in info.value.message
    assert "RangeIn" not in info.value.message  # pydantic's names for the schema's parts


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: digits\nspace: {runtime: [executorch\n")
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    assert info.value.field == "spec" and "line" in info.value.message


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "none.yaml")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="mapping"):
        load_spec(listed)


def test_user_model_file_is_resolved_beside_the_spec(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text("def build():\n    raise RuntimeError\n")
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text("name: u\nmodel: net.py:build\n")
    assert load_spec(spec_file).model == f"{tmp_path}/net.py:build"


def test_messages_quote_only_an_excerpt() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_mutated(["name"], "x" * 100_000))
    assert len(str(info.value)) < 200
    with pytest.raises(SpecError) as info:
        parse_spec(_mutated(["devices"], [[["a" * 1000] * 1000] * 1000]))
    assert len(str(info.value)) < 300


def test_non_utf8_and_duplicate_keys_and_alias_bombs(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\nmodel: digits\n")
    with pytest.raises(SpecError, match="not UTF-8 text"):
        load_spec(latin)
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: a\nmodel: digits\nname: b\n")
    with pytest.raises(SpecError, match=r"line 3.*duplicate key 'name'"):
        load_spec(twice)
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    levels += [
        f"{c}: &{c} [{', '.join('*' + p for _ in range(9))}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n")
    with pytest.raises(SpecError, match="expands to more than") as info:
        load_spec(bomb)
    assert len(str(info.value)) < 300
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    with pytest.raises(SpecError, match="directory"):
        load_spec(folder)


def test_state_dir_lives_beside_the_spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_file = tmp_path / "sweeps" / "s.yaml"
    spec_file.parent.mkdir()
    spec_file.write_text("name: s\nmodel: digits\n")
    monkeypatch.chdir(tmp_path)
    assert load_spec(spec_file).state_dir == spec_file.parent / ".nnsweep" / "s"
    assert parse_spec({"name": "m", "model": "digits"}).state_dir == tmp_path / ".nnsweep" / "m"


def test_quant_options_for_a_mode_the_space_lacks_are_refused() -> None:
    spec = _mutated(["space", "quant"], ["fp32", "dynamic_int8"])
    spec["space"]["quant_options"] = {"onnxruntime": {"quant_format": ["qdq", "qoperator"]}}
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    assert info.value.field == "space.quant_options.onnxruntime.quant_format"
    assert "applies to static_int8" in info.value.message


def test_quant_options_parse_and_leave_the_space_fingerprint_alone_when_absent() -> None:
    from nnsweep.sweep.state import _space

    spec = _mutated(["space", "quant_options"], {"onnxruntime": {"reduce_range": [False, True]}})
    assert parse_spec(spec).space.quant_options == {"onnxruntime": {"reduce_range": (False, True)}}
    assert "quant_options" in _space(parse_spec(spec))
    assert "quant_options" not in _space(parse_spec(ISSUE_EXAMPLE))  # a sweep begun before still resumes


def test_a_spec_file_can_be_named_by_a_string_as_well_as_a_path(tmp_path: Path) -> None:
    """``nnsweep.spec.load_spec("sweep.yaml")`` from Python reads the file, as a Path does."""
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text("name: s\nmodel: digits\n")
    assert load_spec(str(spec_file)) == load_spec(spec_file)
    with pytest.raises(SpecError, match="spec"):
        load_spec(str(tmp_path / "missing.yaml"))
