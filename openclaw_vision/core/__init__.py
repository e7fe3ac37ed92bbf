"""The leaves every other folder may import: the error base, numerics, where the package's files live, what this
CPU is, child processes, the one ONNX Runtime session factory, the start-up check, the INT8 gate as data, a build
phase's time and peak memory, and what a CLI command is.

A module here imports nothing of the package outside core/ (.importlinter). This file stays free of imports: the
Makefile runs `python3 -m openclaw_vision.core.cpu` with the system Python before the venv (or numpy) exists.
"""
