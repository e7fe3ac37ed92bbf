"""Image encoder backends behind one protocol; `create_encoder` picks one from configuration."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path

from .base import Embedding, EncoderError, ImageEncoder, l2_normalise

__all__ = ["Embedding", "EncoderError", "ImageEncoder", "choose_backend", "create_encoder", "l2_normalise"]

log = logging.getLogger(__name__)

BACKENDS = ("auto", "onnxruntime", "tensorrt", "torch")


def _cuda_gpu() -> str | None:
    """None when CuPy (the GPU preprocessing kernel's launcher) sees a GPU, else why not."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install .[gpu])"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # no driver, no device: CuPy raises its own CUDA errors
        return f"no usable CUDA device ({err})"
    return None if count > 0 else "no CUDA device"


def _tensorrt_usable() -> str | None:
    if importlib.util.find_spec("tensorrt") is None and importlib.util.find_spec("tensorrt_bindings") is None:
        return "TensorRT is not installed"
    return _cuda_gpu()


def _torch_usable() -> str | None:
    gpu = _cuda_gpu()  # checked first: importing torch only to learn there is no GPU costs seconds
    if gpu:
        return gpu
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
        return "torch and onnx are needed"
    from .torch_cuda import cuda_usable

    return cuda_usable()


#: `auto` tries these in order and takes the first usable one; each probe returns None (usable)
#: or the reason it is not. A backend whose probe passes but whose construction fails is logged
#: and the next one is tried.
AUTO_ORDER: tuple[tuple[str, Callable[[], str | None]], ...] = (
    ("tensorrt", _tensorrt_usable),
    ("torch", _torch_usable),
    ("onnxruntime", lambda: None),
)


def choose_backend(requested: str) -> list[tuple[str, str]]:
    """[(backend, why)] to try in order for `requested`; for `auto`, the skipped ones are logged."""
    if requested != "auto":
        return [(requested, "configured")]
    order = []
    for name, probe in AUTO_ORDER:
        reason = probe()
        if reason is None:
            order.append((name, "first usable in auto order " + " > ".join(n for n, _ in AUTO_ORDER)))
        else:
            log.info("backend auto: %s not usable: %s", name, reason)
    return order


def _build(backend: str, model_path: str | Path, threads: int) -> ImageEncoder:
    if backend == "tensorrt":
        from .tensorrt import TensorRTEncoder

        return TensorRTEncoder(model_path)
    if backend == "torch":
        from .torch_cuda import TorchCudaEncoder

        return TorchCudaEncoder(model_path)
    from .onnxruntime import OnnxRuntimeEncoder

    return OnnxRuntimeEncoder(model_path, threads=threads)


def create_encoder(backend: str, model_path: str | Path, threads: int = 0) -> ImageEncoder:
    """Build the configured backend; `auto` takes the first usable of AUTO_ORDER and logs which and why."""
    if backend not in BACKENDS:
        raise EncoderError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    candidates = choose_backend(backend)
    for i, (name, why) in enumerate(candidates):
        try:
            enc = _build(name, model_path, threads)
        except Exception as err:  # under auto a GPU backend that fails to start (driver, memory) falls back
            if backend != "auto" or i == len(candidates) - 1:
                raise
            log.warning("backend auto: %s failed to start (%r); trying %s", name, err, candidates[i + 1][0])
            continue
        log.info(
            "encoder backend %s (%s), model %s, precision %s%s",
            enc.backend,
            why,
            enc.model_id,
            enc.precision,
            f", {enc.threads} threads" if hasattr(enc, "threads") else "",
        )
        return enc
    raise EncoderError("no encoder backend could be started")  # pragma: no cover - onnxruntime always probes usable
