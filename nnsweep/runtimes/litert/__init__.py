"""LiteRT: a .tflite made by litert-torch, run by the LiteRT interpreter with its XNNPACK delegate."""
