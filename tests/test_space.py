from __future__ import annotations

import optuna
import pytest

from nnsweep.config import QuantMode
from nnsweep.errors import SpecError
from nnsweep.space import baseline_configs, device_space, params_for, suggest
from nnsweep.spec import parse_spec

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
    with pytest.raises(SpecError, match="offers none"):
        device_space(SPEC, "phone", {"tflite": ("nnapi",)}, cores=8)


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


def test_enqueued_params_reproduce_the_baselines_first() -> None:
    space = device_space(SPEC, "host", HOST, cores=2)
    baselines = baseline_configs(space)
    assert baselines[0].runtime == "torch" and baselines[0].quant.mode is QuantMode.FP32
    assert {b.runtime for b in baselines} == {"executorch", "onnxruntime", "torch"}
    study = optuna.create_study(directions=["maximize", "minimize"])
    for b in baselines:
        study.enqueue_trial(params_for(b, space))
    got = []
    for _ in baselines:
        trial = study.ask()
        got.append(suggest(trial, space))
        study.tell(trial, [0.5, 1.0])
    assert got == baselines
