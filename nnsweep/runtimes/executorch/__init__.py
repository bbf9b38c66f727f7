"""ExecuTorch: PT2E quantization, lowering to XNNPACK (or an Ethos-U NPU) and the portable kernels, a .pte."""
