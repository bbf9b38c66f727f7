"""nnsweep.models.decoder and its static-cache step: built offline, the same logits as the
eager causal LM, a user's decoder of the wrong form refused in one line."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from nnsweep.cli.main import main
from nnsweep.core.errors import SpecError
from nnsweep.models.decoder import Decoder, eager_perplexity, load_decoder, synthetic_text


@pytest.fixture(scope="session")
def tiny_llama(models_dir: Path) -> Decoder:
    return load_decoder("tiny_llama", models_dir)


def test_tiny_llama_builds_without_the_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_llama: Decoder
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("no network in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    again = load_decoder("tiny_llama", tmp_path)  # trains again here, offline
    assert again.digest == tiny_llama.digest  # seeded: the same weights on every build
    assert again.cache == (2, 1, 2, 128, 32)
    assert again.held_out.shape == (128,) and again.held_out.max() < again.vocab


def test_trained_model_has_learnt_the_text(tiny_llama: Decoder) -> None:
    # a random model's perplexity is about the vocabulary (256); the chain's is about 3.2
    assert eager_perplexity(tiny_llama) < 8


def test_synthetic_text_is_seeded() -> None:
    assert np.array_equal(synthetic_text(50, seed=3), synthetic_text(50, seed=3))
    assert not np.array_equal(synthetic_text(50, seed=3), synthetic_text(50, seed=4))


def _steps(decoder: Decoder) -> torch.Tensor:
    text = torch.from_numpy(decoder.held_out[None].copy())
    k = v = decoder.empty_cache()
    rows = []
    with torch.no_grad():
        logits, k, v = decoder.step(text[:, : decoder.prompt_len], torch.arange(decoder.prompt_len), k, v)
        rows.append(logits)
        for t in range(decoder.prompt_len, decoder.max_len):
            logits, k, v = decoder.step(text[:, t : t + 1], torch.tensor([t]), k, v)
            rows.append(logits)
    return torch.cat(rows, dim=1)


def test_static_cache_step_gives_the_causal_lms_logits(tiny_llama: Decoder) -> None:
    from transformers import DynamicCache

    lm = tiny_llama.step.lm  # type: ignore[union-attr]
    text = torch.from_numpy(tiny_llama.held_out[None].copy())
    stepped = _steps(tiny_llama)
    with torch.no_grad():
        whole = lm(input_ids=text).logits
        cache = DynamicCache(config=lm.config)
        p = tiny_llama.prompt_len
        cached = [lm(input_ids=text[:, :p], past_key_values=cache, use_cache=True).logits]
        for t in range(p, p + 8):
            cached.append(lm(input_ids=text[:, t : t + 1], past_key_values=cache, use_cache=True).logits)
    torch.testing.assert_close(stepped, whole, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stepped[:, : p + 8], torch.cat(cached, dim=1), rtol=1e-4, atol=1e-4)


def _user_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "lm.py"
    path.write_text("import torch\n" + body)
    return f"{path}:build"


def test_a_forward_of_another_form_is_refused_naming_what_to_return(tmp_path: Path) -> None:
    ref = _user_file(
        tmp_path,
        "class Net(torch.nn.Module):\n"
        "    def forward(self, input_ids):\n"
        "        return input_ids\n"
        "def build():\n"
        "    return Net()\n",
    )
    with pytest.raises(SpecError) as caught:
        load_decoder(ref)
    message = str(caught.value)
    assert "forward takes (input_ids)" in message and "k_cache" in message and "LlamaForCausalLM" in message


def test_bench_of_a_wrong_decoder_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = _user_file(tmp_path, "def build():\n    return torch.nn.Linear(4, 4)\n")
    code = main(["--cache-dir", str(tmp_path / "cache"), "bench", "--model", ref, "--kind", "decoder"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "--model" in err and "forward takes (input)" in err


def test_a_users_llama_is_wrapped(tmp_path: Path) -> None:
    ref = _user_file(
        tmp_path,
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,\n"
        "        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))\n",
    )
    decoder = load_decoder(ref)
    assert decoder.vocab == 64 and decoder.cache == (1, 1, 1, 128, 16)
    assert decoder.held_out.max() < 64


@pytest.mark.parametrize(
    ("args", "option", "named"),
    [
        (["--runtime", "torch"], "--runtime", "no decoder"),
        (["--model", "digits", "--kind", "decoder"], "--model", "not a decoder"),
        (["--runtime", "onnxruntime", "--quant", "fp16"], "--quant", "int4_weight"),
        (["--runtime", "litert", "--quant", "dynamic_int8"], "--quant", "fp32, int4_weight"),
        (["--runtime", "onnxruntime", "--float-layers", "1", "--quant", "dynamic_int8"], "--float-layers", "decoder"),
    ],
)
def test_bench_refuses_what_a_decoder_does_not_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], option: str, named: str
) -> None:
    code = main(["--cache-dir", str(tmp_path / "cache"), "bench", "--model", "tiny_llama", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and option in err and named in err


def test_a_module_already_of_the_form_is_taken_with_its_cache_shape(tmp_path: Path) -> None:
    ref = _user_file(
        tmp_path,
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "from nnsweep.models.decoder import StaticCacheStep\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    lm = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,\n"
        "        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))\n"
        "    return StaticCacheStep(lm, 48)\n",
    )
    decoder = load_decoder(ref)
    assert decoder.cache == (1, 1, 1, 48, 16) and decoder.max_len == 48 and len(decoder.held_out) == 48
