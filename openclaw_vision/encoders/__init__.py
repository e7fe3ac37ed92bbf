"""Image encoder backends behind one protocol; `create_encoder` picks one from configuration."""

from __future__ import annotations

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

BACKENDS = ("auto", "onnxruntime", "openvino", "tensorrt")
PERFORMANCE_HINTS = ("latency", "throughput")


def _openvino_usable() -> tuple[bool, str]:
    from .openvino import usable

    return usable()


#: `backend: auto` tries these in order: (backend, check → (usable here, why)).
#: A backend that can run but refuses this model (`BackendUnsuitable`, e.g. an INT8 model not
#: gated on it) is skipped with its reason. GPU backends go first when they exist.
AUTO_ORDER: tuple[tuple[str, Callable[[], tuple[bool, str]]], ...] = (
    ("openvino", _openvino_usable),
    ("onnxruntime", lambda: (True, "the CPU default")),
)


def _build(backend: str, model_path: str | Path, threads: int, performance_hint: str, gate: str) -> ImageEncoder:
    if backend == "onnxruntime":
        from .onnxruntime import OnnxRuntimeEncoder

        return OnnxRuntimeEncoder(model_path, threads=threads)
    if backend == "openvino":
        from .openvino import OpenVinoEncoder

        return OpenVinoEncoder(model_path, threads=threads, performance_hint=performance_hint, gate=gate)
    raise EncoderError(f"the {backend} backend is not available in this build; use onnxruntime or openvino")


def create_encoder(
    backend: str, model_path: str | Path, threads: int = 0, performance_hint: str = "latency"
) -> ImageEncoder:
    """Build the configured backend; `auto` takes the first usable row of `AUTO_ORDER` and logs why."""
    if backend not in BACKENDS:
        raise EncoderError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        enc = _build(backend, model_path, threads, performance_hint, gate="warn")
        why = "configured"
    else:
        skipped: list[str] = []
        for name, check in AUTO_ORDER:
            ok, reason = check()
            if ok:
                try:
                    enc = _build(name, model_path, threads, performance_hint, gate="require")
                    break
                except BackendUnsuitable as err:
                    reason = str(err)
            skipped.append(f"{name}: {reason}")
        else:
            raise EncoderError(f"no backend can run {model_path}: " + "; ".join(skipped))
        order = " > ".join(n for n, _ in AUTO_ORDER)
        why = f"auto, first usable of {order}: {reason}" + (f"; skipped {'; '.join(skipped)}" if skipped else "")
    log.info(
        "encoder backend %s (%s), model %s (%s), %d threads", enc.backend, why, enc.model_id, enc.precision,
        getattr(enc, "threads", 0),
    )  # fmt: skip
    return enc
