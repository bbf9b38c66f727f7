"""nnsweep.bench.decoding: the per-token figures from two runners, and the artifacts' perplexity
against the eager model's on ExecuTorch and ONNX Runtime through ``nnsweep bench --json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nnsweep.bench import Runner
from nnsweep.bench.decoding import DecodeSettings, measure_decoder, perplexity_of_logits
from nnsweep.cli.main import main
from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import BenchmarkError
from nnsweep.core.metrics import BUILTIN, DECODE_PER_TOKEN, PERPLEXITY, PREFILL, TOKENS_PER_S
from nnsweep.models.decoder import Decoder, eager_perplexity, load_decoder

_FOUR = (PREFILL, DECODE_PER_TOKEN, TOKENS_PER_S, PERPLEXITY)


@pytest.fixture(scope="module")
def tiny_llama(models_dir: Path) -> Decoder:
    return load_decoder("tiny_llama", models_dir)


class _EagerStep(Runner):
    """A runner of the decoder's step module in eager PyTorch (the seam the runtimes' runners fill)."""

    def __init__(self, step: torch.nn.Module) -> None:
        super().__init__(Path("eager"), IOSpec(), 1, ())
        self.step = step
        self.calls = 0

    def load(self) -> None:
        pass

    def run(self, prepared: Any) -> Any:
        raise AssertionError("a decoder runs through run_inputs")

    def prepare(self, x: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(x))

    def run_inputs(self, prepared: list[Any]) -> list[Any]:
        self.calls += 1
        with torch.no_grad():
            return list(self.step(*prepared))


def test_uniform_logits_give_the_vocabulary_as_perplexity() -> None:
    assert perplexity_of_logits(np.zeros((10, 7)), np.arange(10) % 7) == pytest.approx(7.0)


def test_the_metrics_are_in_the_table() -> None:
    assert all(name in BUILTIN for name in _FOUR)
    assert BUILTIN[PERPLEXITY].goal == "minimize" and BUILTIN[PERPLEXITY].quality
    assert BUILTIN[TOKENS_PER_S].goal == "maximize"


def test_measure_decoder_times_both_graphs_and_scores_their_logits(tiny_llama: Decoder) -> None:
    prefill, decode = _EagerStep(tiny_llama.step), _EagerStep(tiny_llama.step)
    settings = DecodeSettings(prefills=3, generations=1, warmup=0)
    timing = measure_decoder(prefill, decode, tiny_llama.held_out, tiny_llama.prompt_len, tiny_llama.cache, settings)
    steps = tiny_llama.max_len - tiny_llama.prompt_len
    assert timing.prefill_samples == 3 and timing.decode_steps == steps
    assert prefill.calls == 1 + 3 + 1 + 1  # the first (untimed), timed, the generation's, the perplexity's
    assert decode.calls == 2 * steps  # the generation's and the perplexity's (teacher-forced)
    assert timing.perplexity == pytest.approx(eager_perplexity(tiny_llama), rel=1e-6)
    assert timing.tokens_per_s > 0 and timing.prefill_ms > 0
    assert set(timing.metrics()) == set(_FOUR)


def test_a_runner_of_one_input_says_so() -> None:
    class OneInput(Runner):
        def load(self) -> None:
            pass

        def run(self, prepared: Any) -> Any:
            return prepared

    with pytest.raises(BenchmarkError, match="one input"):
        OneInput(Path("x"), IOSpec(), 1, ()).run_inputs([])


def _bench(cache: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["--cache-dir", str(cache), "bench", "--model", "tiny_llama", "--iters", "5", "--json", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnxruntime", "executorch", "litert"])
def test_bench_json_has_the_four_metrics_and_fp32_keeps_the_eager_perplexity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], runtime: str
) -> None:
    result = _bench(tmp_path, capsys, "--runtime", runtime, "--quant", "fp32")
    assert all(isinstance(result[name], float) and math.isfinite(result[name]) for name in _FOUR)
    assert result[PREFILL] > 0 and result[DECODE_PER_TOKEN] > 0 and result[TOKENS_PER_S] > 0
    assert result[PERPLEXITY] == pytest.approx(result["reference_perplexity"], rel=1e-4)
    again = _bench(tmp_path, capsys, "--runtime", runtime, "--quant", "fp32")
    assert again["artifact"]["cache_hit"] and again[PERPLEXITY] == pytest.approx(result[PERPLEXITY], rel=1e-6)
    _same_logits_as_the_eager_step(tmp_path, result)


def _same_logits_as_the_eager_step(cache: Path, result: dict[str, Any]) -> None:
    """The exported prefill graph's logits and caches are the eager step's on the held-out prompt."""
    from nnsweep.core import runtimes

    decoder = load_decoder("tiny_llama", cache / "models")
    config = result["config"]
    runner_class = runtimes.load_object(runtimes.get(config["runtime"]).runner)
    folder = Path(result["artifact"]["directory"])
    runner = runner_class(folder / result["artifact"]["files"][0], IOSpec(), 1, tuple(config["backends"]))
    runner.load()
    p = decoder.prompt_len
    inputs = [decoder.held_out[None, :p], np.arange(p), *(decoder.empty_cache().numpy(),) * 2]
    deployed = [np.asarray(x) for x in runner.run_inputs(runner.prepare_inputs(inputs))]
    with torch.no_grad():
        eager = decoder.step(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
    for got, want in zip(deployed, eager, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnxruntime", "executorch"])
@pytest.mark.parametrize("mode", ["dynamic_int8", "int4_weight"])
def test_quantized_decoders_run_and_stay_near_fp32(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], runtime: str, mode: str
) -> None:
    result = _bench(tmp_path, capsys, "--runtime", runtime, "--quant", mode)
    assert all(math.isfinite(result[name]) for name in _FOUR)
    assert result[PERPLEXITY] < 1.5 * result["reference_perplexity"]
    if mode == "int4_weight":
        assert any("4-bit" in note for note in result["artifact"]["notes"])
