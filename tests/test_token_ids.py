"""Models that take integer token ids (an ``nn.Embedding``): loaded with ids they accept,
converted and measured with the ids kept integers on every runtime that has the ops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import SpecError
from nnsweep.models import Dataset, Split, load_model, register_live

VOCAB = 50


class BagOfWords(torch.nn.Module):
    """Mean of the tokens' embeddings, then two linear layers (1x6 ids, three classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.embed(ids).mean(dim=1))))


def _bag(dtype: torch.dtype = torch.int64) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return BagOfWords().eval(), torch.zeros(1, 6, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_a_token_id_model_without_data_gets_seeded_ids_below_its_vocabulary(dtype: torch.dtype) -> None:
    bundle = load_model(register_live("bag", *_bag(dtype)))
    for split in (bundle.dataset.calibration, bundle.dataset.evaluation):
        assert split.inputs.dtype == np.dtype(str(dtype).removeprefix("torch."))
        assert split.inputs.min() >= 0 and split.inputs.max() < VOCAB
        assert len(np.unique(split.inputs)) > VOCAB // 2  # spread over the vocabulary, not one id
    assert bundle.example_input.dtype == dtype


def test_integer_inputs_without_an_embedding_ask_for_data() -> None:
    class OneHot(torch.nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.one_hot(ids, 10).float().sum(dim=1)

    with pytest.raises(SpecError, match=r"no nn.Embedding.*Dataset"):
        load_model(register_live("one_hot", OneHot(), torch.zeros(1, 4, dtype=torch.int64)))


def test_a_dataset_of_another_dtype_than_the_example_is_an_input_error() -> None:
    net, example = _bag()
    ids = np.zeros((8, 6), dtype=np.int64)
    data = Dataset(calibration=Split(ids.astype(np.float32)), evaluation=Split(ids))
    with pytest.raises(SpecError, match="calibration inputs are float32 but the example input is int64"):
        load_model(register_live("bag_float_data", net, example, data))


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 100, -3])
def test_ids_outside_the_vocabulary_are_an_input_error_not_an_index_error_later(bad: int) -> None:
    net, example = _bag()
    ids = np.zeros((8, 6), dtype=np.int64)
    ids[3, 2] = bad
    data = Dataset(calibration=Split(np.zeros((4, 6), dtype=np.int64)), evaluation=Split(ids))
    with pytest.raises(
        SpecError, match=f"evaluation inputs hold the id {bad}; the model's embeddings take ids 0 to 49"
    ):
        load_model(register_live("bag_bad_ids", net, example, data))


class WithPositions(torch.nn.Module):
    """BERT's three lookups: the tokens, their positions (8) and their type (2, all zero),
    the ids seen as (batch, 6) by the first."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(VOCAB, 16)
        self.positions = torch.nn.Embedding(8, 16)
        self.types = torch.nn.Embedding(2, 16)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.view(-1, 6)
        where = torch.arange(6).unsqueeze(0)
        h = self.tokens(flat) + self.positions(where) + self.types(torch.zeros_like(flat))
        return self.fc(h.mean(dim=1))


def test_the_vocabulary_is_that_of_the_embeddings_the_ids_are_looked_up_in() -> None:
    # Taken as the smallest of all embeddings, it was the token types' 2: ids 0 and 1 only.
    torch.manual_seed(0)
    example = torch.randint(0, VOCAB, (1, 6))
    bundle = load_model(register_live("with_positions", WithPositions().eval(), example))
    ids = bundle.dataset.calibration.inputs
    assert ids.max() < VOCAB and len(np.unique(ids)) > VOCAB // 2
    real = np.random.RandomState(1).randint(0, VOCAB, (8, 6))  # a tokenised dataset: ids up to 49
    data = Dataset(calibration=Split(real), evaluation=Split(real))
    load_model(register_live("with_positions_data", WithPositions().eval(), example, data))
    real[3, 2] = VOCAB
    with pytest.raises(SpecError, match=f"hold the id {VOCAB}; the model's embeddings take ids 0 to 49"):
        load_model(register_live("with_positions_bad", WithPositions().eval(), example, data))


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.int16])
def test_other_integer_inputs_are_refused_with_what_is_deployed(dtype: torch.dtype) -> None:
    class Cast(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.float() * 2

    with pytest.raises(SpecError, match=r"float32 .*, uint8 pixels or int32/int64 token ids"):
        load_model(register_live("cast", Cast(), torch.zeros(1, 4, dtype=dtype)))


def test_ids_reach_the_deployed_model_as_integers() -> None:
    ids = np.arange(6, dtype=np.int64).reshape(1, 6)
    for spec in (IOSpec(), IOSpec(input_dtype="int8", input_scale=0.5, input_zero_point=3)):
        assert spec.prepare_input(ids).dtype == np.int64
        assert np.array_equal(spec.prepare_input(ids), ids)


# What failed before ids were kept integers, and what the toolchains needed besides:
# ONNX Runtime, ExecuTorch and torch were fed float ids; the fp16 wrappers cast ids to
# half; torch QAT gave the embedding an int8 fake-quantizer; LiteRT's dynamic-range
# converter quantized the table asymmetrically, which EMBEDDING_LOOKUP refuses.
# The floors tell a working integer path from garbage (a few dB), not one toolchain's
# precision: ONNX Runtime's static int8 reads 18.3 dB on an x86 host without VNNI (its u8s8
# kernels saturate their int16 sums; 20.2 dB with reduce_range); it passed 20 dB on an
# earlier CI machine.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("runtime", "quant", "floor_db"),
    [
        ("onnxruntime", "fp32", 100.0),
        ("onnxruntime", "static_int8", 15.0),
        ("executorch", "fp16", 40.0),
        ("executorch", "static_int8", 20.0),
        ("torch", "fp16", 40.0),
        ("torch", "qat_int8", 15.0),
        ("litert", "dynamic_int8", 25.0),
        ("litert", "static_int8", 20.0),
    ],
)
def test_a_token_id_model_deploys_with_integer_ids(runtime: str, quant: str, floor_db: float, tmp_path: Path) -> None:
    from nnsweep.api import measure
    from nnsweep.bench import MeasureSettings

    net, example = _bag()
    result = measure(
        net,
        example,
        runtime=runtime,
        quant={"mode": quant, "qat_epochs": 1},
        settings=MeasureSettings(warmup=1, iters=5),
        cache_dir=tmp_path,
    )
    assert result.evaluation.fidelity.sqnr_db > floor_db
    assert result.evaluation.fidelity.top1_agreement >= 0.9


@pytest.mark.integration
def test_a_sweep_of_a_token_id_model_keeps_its_most_sensitive_layer_float_on_every_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sweep's path beyond bench: the layer ranking of each runtime on integer inputs,
    # the fp32 baseline, the snapshot's inputs in the measuring processes.
    from nnsweep.api import sweep
    from nnsweep.core.results import TrialStatus

    monkeypatch.chdir(tmp_path)  # the sweep's state (.nnsweep/) lives in the working directory
    net, example = _bag()
    runtimes = ["onnxruntime", "executorch", "torch", "litert"]
    spec = {
        "name": "tokens",
        "space": {"runtime": runtimes, "quant": ["static_int8"], "float_layers": [1]},
        "budget": {"trials": 8},
        "measure": {"warmup": 1, "iters": 10, "remeasure": 0},
    }
    # a str cache_dir, as a notebook gives it, stopped the sweep with a TypeError
    (host,) = sweep(spec, net, example, tracking=False, cache_dir=str(tmp_path / "cache"))
    failed = [(r.config.label(), r.reason) for r in host.records if r.status is not TrialStatus.OK]
    assert not failed
    mixed = [r for r in host.records if r.config.quant.mode.is_int8]
    assert {r.config.runtime for r in mixed} == set(runtimes)
    assert all(len(r.config.quant.float_layers) == 1 for r in mixed)
    # random weights, 16 evaluation inputs: int8 moves a sample's class now and then
    assert all(r.metrics["accuracy"] >= 0.8 and r.metrics["sqnr_db"] > 15 for r in mixed)
