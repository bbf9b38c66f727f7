"""Arm NN: the LiteRT .tflite, parsed and run by PyArmNN under the system Python."""
