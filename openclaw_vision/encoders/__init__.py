"""Image encoder backends behind one protocol; `create_encoder` picks one from configuration."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path

from .base import BackendUnsuitable, Embedding, EncoderError, ImageEncoder, l2_normalise

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "BackendUnsuitable",
    "Embedding",
    "EncoderError",
    "ImageEncoder",
    "create_encoder",
    "l2_normalise",
]

log = logging.getLogger(__name__)

BACKENDS = ("auto", "onnxruntime", "openvino", "tensorrt", "torch")
PERFORMANCE_HINTS = ("latency", "throughput")
#: backends that need a GPU: under `auto`, one that probes usable but fails to start (driver,
#: GPU memory, an engine that cannot be built) falls back to the next row instead of stopping
GPU_BACKENDS = ("tensorrt", "torch")


def _cuda_gpu() -> tuple[bool, str]:
    """Whether CuPy (the GPU preprocessing kernel's launcher) sees a GPU, and why (not)."""
    if importlib.util.find_spec("cupy") is None:
        return False, "CuPy is not installed (pip install .[gpu])"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # no driver, no device: CuPy raises its own CUDA errors
        return False, f"no usable CUDA device ({err})"
    return (True, f"{count} CUDA device(s)") if count > 0 else (False, "no CUDA device")


def _tensorrt_usable() -> tuple[bool, str]:
    if importlib.util.find_spec("tensorrt") is None and importlib.util.find_spec("tensorrt_bindings") is None:
        return False, "TensorRT is not installed"
    ok, why = _cuda_gpu()
    return ok, (f"TensorRT importable, {why}" if ok else why)


def _torch_usable() -> tuple[bool, str]:
    ok, why = _cuda_gpu()  # checked first: importing torch only to learn there is no GPU costs seconds
    if not ok:
        return False, why
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
        return False, "torch and onnx are needed"
    from .torch_cuda import cuda_usable

    reason = cuda_usable()
    return (True, f"torch sees CUDA, {why}") if reason is None else (False, reason)


def _openvino_usable() -> tuple[bool, str]:
    from .openvino import usable

    return usable()


#: `backend: auto` tries these in order: (backend, check → (usable here, why)). A backend that
#: can run but refuses this model (`BackendUnsuitable`, e.g. an INT8 model not gated on it) is
#: skipped with its reason; a GPU backend that fails to start is skipped with a warning.
AUTO_ORDER: tuple[tuple[str, Callable[[], tuple[bool, str]]], ...] = (
    ("tensorrt", _tensorrt_usable),
    ("torch", _torch_usable),
    ("openvino", _openvino_usable),
    ("onnxruntime", lambda: (True, "the CPU default")),
)


def _build(backend: str, model_path: str | Path, threads: int, performance_hint: str, gate: str) -> ImageEncoder:
    if backend == "tensorrt":
        from .tensorrt import TensorRTEncoder

        return TensorRTEncoder(model_path)
    if backend == "torch":
        from .torch_cuda import TorchCudaEncoder

        return TorchCudaEncoder(model_path)
    if backend == "openvino":
        from .openvino import OpenVinoEncoder

        return OpenVinoEncoder(model_path, threads=threads, performance_hint=performance_hint, gate=gate)
    from .onnxruntime import OnnxRuntimeEncoder

    return OnnxRuntimeEncoder(model_path, threads=threads)


def _auto(model_path: str | Path, threads: int, performance_hint: str) -> tuple[ImageEncoder, str]:
    """The first row of AUTO_ORDER that is usable here and runs this model, and why it was taken."""
    skipped: list[str] = []
    for name, check in AUTO_ORDER:
        ok, reason = check()
        if not ok:
            log.info("backend auto: %s not usable: %s", name, reason)
            skipped.append(f"{name}: {reason}")
            continue
        try:
            enc = _build(name, model_path, threads, performance_hint, gate="require")
        except BackendUnsuitable as err:
            skipped.append(f"{name}: {err}")
            continue
        except Exception as err:
            if name not in GPU_BACKENDS:
                raise
            log.warning("backend auto: %s failed to start (%r); trying the next backend", name, err)
            skipped.append(f"{name}: failed to start ({err!r})")
            continue
        order = " > ".join(n for n, _ in AUTO_ORDER)
        return enc, f"auto, first usable of {order}: {reason}" + (f"; skipped {'; '.join(skipped)}" if skipped else "")
    raise EncoderError(f"no backend can run {model_path}: " + "; ".join(skipped))


def create_encoder(
    backend: str, model_path: str | Path, threads: int = 0, performance_hint: str = "latency"
) -> ImageEncoder:
    """Build the configured backend; `auto` takes the first usable row of `AUTO_ORDER` and logs why.
    A backend named explicitly gets no fallback: its error is the node's error."""
    if backend not in BACKENDS:
        raise EncoderError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        enc, why = _auto(model_path, threads, performance_hint)
    else:
        enc, why = _build(backend, model_path, threads, performance_hint, gate="warn"), "configured"
    log.info(
        "encoder backend %s (%s), model %s (%s)%s", enc.backend, why, enc.model_id, enc.precision,
        f", {enc.threads} threads" if hasattr(enc, "threads") else "",
    )  # fmt: skip
    return enc
