"""Image encoder backends behind one protocol; `create_encoder` builds one from configuration.

The backends themselves are rows of one table (backends.py). This package imports nothing heavy
at import time (no numpy, no runtime): the launch file reads the table's names through it; the
protocol and error types of base.py are loaded on first use.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import backends
from .options import GATE_AUTO, PERFORMANCE_HINTS, EncoderOptions

if TYPE_CHECKING:
    from .base import BackendUnsuitable, Embedding, EncoderError, ImageEncoder, l2_normalise

__all__ = [
    "PERFORMANCE_HINTS",
    "BackendUnsuitable",
    "Embedding",
    "EncoderError",
    "EncoderOptions",
    "ImageEncoder",
    "create_encoder",
    "l2_normalise",
]

log = logging.getLogger(__name__)

_FROM_BASE = ("BackendUnsuitable", "Embedding", "EncoderError", "ImageEncoder", "l2_normalise")


def __getattr__(name: str) -> Any:
    """base.py's names, imported when first asked for (base imports numpy)."""
    if name in _FROM_BASE:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _auto(model_path: Path, options: EncoderOptions) -> tuple[ImageEncoder, str]:
    """The first row of the `auto` order that is usable here and runs this model, and why it was taken.
    A backend that can run but refuses this model (`BackendUnsuitable`, e.g. an INT8 model not gated
    on it) is skipped with its reason; a GPU backend that fails to start is skipped with a warning."""
    from .base import BackendUnsuitable, EncoderError

    skipped: list[str] = []
    order = backends.auto_order()
    for row in order:
        ok, reason = row.usable()
        if not ok:
            log.info("backend auto: %s not usable: %s", row.name, reason)
            skipped.append(f"{row.name}: {reason}")
            continue
        try:
            enc = row.open(model_path, options)
        except BackendUnsuitable as err:
            skipped.append(f"{row.name}: {err}")
            continue
        except Exception as err:
            if not row.gpu:
                raise
            log.warning("backend auto: %s failed to start (%r); trying the next backend", row.name, err)
            skipped.append(f"{row.name}: failed to start ({err!r})")
            continue
        declined = row.auto_declines(enc.info) if row.auto_declines else None
        if declined:
            _close(enc)
            skipped.append(f"{row.name}: {declined}")
            continue
        names = " > ".join(b.name for b in order)
        return enc, f"auto, first usable of {names}: {reason}" + (f"; skipped {'; '.join(skipped)}" if skipped else "")
    raise EncoderError(f"no backend can run {model_path}: " + "; ".join(skipped))


def _close(enc) -> None:
    close = getattr(enc, "close", None)
    if close is not None:
        close()


def gate_policy(backend: str, policy: str) -> str:
    """The INT8 gate policy a backend is opened with: `auto` means `require` under `backend: auto`
    (so auto moves on to a backend where the model passed here) and `warn` for a backend named."""
    if policy != GATE_AUTO:
        return policy
    return "require" if backend == backends.AUTO else "warn"


def create_encoder(
    backend: str,
    model_path: str | Path,
    threads: int | None = None,
    performance_hint: str | None = None,
    options: EncoderOptions | None = None,
) -> ImageEncoder:
    """Build the configured backend; `auto` takes the first usable row of the table's `auto` order and
    logs why. A backend named explicitly gets no fallback: its error is the node's error. `threads`
    and `performance_hint`, when given, override `options`' (the common case needs nothing else)."""
    from dataclasses import replace

    from .base import EncoderError

    if backend not in backends.choices():
        raise EncoderError(f"unknown backend {backend!r}; choose one of {', '.join(backends.choices())}")
    base_opts = options or EncoderOptions()
    given = {"threads": threads, "performance_hint": performance_hint}
    base_opts = replace(base_opts, **{k: v for k, v in given.items() if v is not None})
    path = Path(model_path)
    opts = replace(base_opts, gate=gate_policy(backend, base_opts.gate))
    if backend == backends.AUTO:
        enc, why = _auto(path, opts)
    else:
        enc, why = backends.get(backend).open(path, opts), "configured"
    log.info(
        "encoder backend %s (%s), model %s (%s)%s", enc.backend, why, enc.model_id, enc.precision,
        f", {enc.threads} threads" if hasattr(enc, "threads") else "",
    )  # fmt: skip
    return enc
