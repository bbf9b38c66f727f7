"""torch: torch.ao FX quantization and TorchScript (or PyTorch Mobile's NNAPI), run by torch itself."""
