"""Hugging Face ``transformers`` models probed on 2026-11-29 (benchmarks/results/coverage.md), loadable as
``benchmarks/probe_hf.py:NAME`` by ``nnsweep bench --model``.

Each function builds a small model from its configuration class (random weights, nothing
downloaded: ``transformers`` comes with the ``litert`` extra, as litert-torch needs it) and
returns ``(module, example_input)``, as a user's model file would. The models return
Hugging Face's output classes (``ImageClassifierOutput`` and the like), which nnsweep
flattens as it flattens a dict. Decoders are built with ``use_cache=False``: with the cache
they return a ``DynamicCache``, which no runtime here takes and nnsweep refuses at load.

Hugging Face initialises weights with a standard deviation of 0.02, through which a deep
convolutional network's activations vanish (MobileViT's logits were about 1e-44 here, and
its ExecuTorch int8 artifact read 0 dB against them); the image models get He-initialised
convolutions and linear layers and unit norm scales instead, the scale trained weights have.
"""

from __future__ import annotations

import torch
import transformers as hf
from torch import nn


def _image(model: nn.Module, size: int = 64) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    for sub in model.modules():
        if isinstance(sub, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(sub.weight)
        elif isinstance(sub, (nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)) and sub.weight is not None:
            nn.init.ones_(sub.weight)
    return model.eval(), torch.randn(1, 3, size, size)


def _tokens(model: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    return model.eval(), torch.randint(0, 1000, (1, 32))


def mobilenetv1():
    torch.manual_seed(0)
    config = hf.MobileNetV1Config(image_size=64, depth_multiplier=0.25, num_labels=10)
    return _image(hf.MobileNetV1ForImageClassification(config))


def mobilenetv2():
    torch.manual_seed(0)
    config = hf.MobileNetV2Config(image_size=64, depth_multiplier=0.35, num_labels=10)
    return _image(hf.MobileNetV2ForImageClassification(config))


def efficientnet():
    torch.manual_seed(0)
    config = hf.EfficientNetConfig(
        image_size=64, width_coefficient=0.25, depth_coefficient=0.3, hidden_dim=320, num_labels=10
    )
    return _image(hf.EfficientNetForImageClassification(config))


def resnet():
    torch.manual_seed(0)
    config = hf.ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], num_labels=10)
    return _image(hf.ResNetForImageClassification(config))


def regnet():
    torch.manual_seed(0)
    config = hf.RegNetConfig(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], groups_width=8, num_labels=10
    )
    return _image(hf.RegNetForImageClassification(config))


def convnext():
    torch.manual_seed(0)
    config = hf.ConvNextConfig(hidden_sizes=[24, 48, 96, 192], depths=[1, 1, 2, 1], num_labels=10)
    return _image(hf.ConvNextForImageClassification(config))


def poolformer():
    torch.manual_seed(0)
    config = hf.PoolFormerConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10)
    return _image(hf.PoolFormerForImageClassification(config))


def mobilevit():
    torch.manual_seed(0)
    config = hf.MobileViTConfig(
        image_size=64, hidden_sizes=[48, 64, 80], neck_hidden_sizes=[16, 16, 24, 32, 48, 64, 96], num_labels=10
    )
    return _image(hf.MobileViTForImageClassification(config))


def _patch_transformer(config_type: type, model_type: type, layers: int) -> tuple[nn.Module, torch.Tensor]:
    """A ViT-shaped classifier at 32x32: patches of 8, width 64, 4 heads."""
    torch.manual_seed(0)
    config = config_type(
        image_size=32,
        patch_size=8,
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=128,
        num_labels=10,
    )
    return _image(model_type(config), 32)


def vit():
    return _patch_transformer(hf.ViTConfig, hf.ViTForImageClassification, layers=4)


def deit():
    return _patch_transformer(hf.DeiTConfig, hf.DeiTForImageClassification, layers=2)


def swin():
    torch.manual_seed(0)
    config = hf.SwinConfig(
        image_size=64, patch_size=4, embed_dim=24, depths=[1, 1, 1], num_heads=[2, 2, 4], window_size=4, num_labels=10
    )
    return _image(hf.SwinForImageClassification(config))


def levit():
    torch.manual_seed(0)
    config = hf.LevitConfig(
        image_size=64,
        hidden_sizes=[32, 48, 64],
        num_attention_heads=[2, 2, 2],
        depths=[1, 1, 1],
        key_dim=[8, 8, 8],
        num_labels=10,
    )
    return _image(hf.LevitForImageClassification(config))


def segformer():
    torch.manual_seed(0)
    config = hf.SegformerConfig(
        image_size=64, hidden_sizes=[16, 32, 64, 128], decoder_hidden_size=64, depths=[1, 1, 1, 1], num_labels=5
    )
    return _image(hf.SegformerForSemanticSegmentation(config))


def bert():
    torch.manual_seed(0)
    config = hf.BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        num_labels=3,
    )
    return _tokens(hf.BertForSequenceClassification(config))


def distilbert():
    torch.manual_seed(0)
    config = hf.DistilBertConfig(
        vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64, num_labels=3
    )
    return _tokens(hf.DistilBertForSequenceClassification(config))


def gpt2():
    torch.manual_seed(0)
    config = hf.GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False)
    return _tokens(hf.GPT2LMHeadModel(config))


def llama():
    torch.manual_seed(0)
    config = hf.LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
    )
    return _tokens(hf.LlamaForCausalLM(config))


def wav2vec2():
    torch.manual_seed(0)
    config = hf.Wav2Vec2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_feat_extract_layers=3,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        num_labels=5,
    )
    return hf.Wav2Vec2ForSequenceClassification(config).eval(), torch.randn(1, 4000)


def whisper_encoder():
    torch.manual_seed(0)
    config = hf.WhisperConfig(
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        num_mel_bins=16,
        max_source_positions=50,
        decoder_layers=1,
        decoder_attention_heads=4,
        decoder_ffn_dim=128,
        vocab_size=100,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    return hf.WhisperModel(config).get_encoder().eval(), torch.randn(1, 16, 100)
