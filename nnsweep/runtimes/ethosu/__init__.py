"""Arm Ethos-U NPUs through ExecuTorch's Arm backend and Vela: a backend of the executorch runtime."""
