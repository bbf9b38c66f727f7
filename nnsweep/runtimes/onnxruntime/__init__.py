"""ONNX Runtime: a torch.export ONNX graph, quantized by its own tools, run by its execution providers."""
