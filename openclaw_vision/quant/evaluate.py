"""Embeddings of a candidate model vs the float model, row by row: the INT8 gate's measurements.

A row is a held-out set at one camera resolution, run by one runtime; its metrics (cosine, NN
agreement with the FP32-margin tie rule, retrieval KL, collapse, and with a text reference the
zero-shot terms of `crossmodal.py`) are `numerics.agreement`, one computation for the quantiser
and for a runtime re-gating a model at start (encoders/gating.py). The gate itself — its checks,
bounds and verdicts — is data in the leaf module `gate`; every runtime scores every row through
`runtimes.RUNTIMES` (a new runtime is one entry there); a new term is one metric in `Metrics`, one
`Check` and its line in `numerics.agreement`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..core import gate
from ..core.gate import GateSpec, Metrics
from ..core.numerics import agreement, l2_normalise
from . import crossmodal

log = logging.getLogger(__name__)


def embed(sess, pixels: np.ndarray, batch: int = 8) -> np.ndarray:
    """Unit-normalised embeddings of (N, 3, S, S) pixels (the session's first output only)."""
    name, out_name = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    out = np.concatenate([sess.run([out_name], {name: pixels[i : i + batch]})[0] for i in range(0, len(pixels), batch)])
    return l2_normalise(out)


def compare(candidate: np.ndarray, reference: np.ndarray, text: crossmodal.TextReference | None = None) -> Metrics:
    """Metrics of unit-normalised candidate rows against the reference rows of the same frames."""
    if text is None:
        return Metrics(**agreement(candidate, reference))
    return Metrics(**agreement(candidate, reference, text.embeddings, text.logit_scale))


def worst(per_row: dict[str, Metrics]) -> Metrics:
    """The gate's view: the worst value of each metric over the rows."""
    return gate.worst(per_row.values())


@dataclass(frozen=True)
class Row:
    """One row of the gate: the held-out frames at `resolution` (every runtime scores every row)."""

    name: str
    resolution: str


def default_rows(resolutions: list[str]) -> list[Row]:
    return [Row(res, res) for res in resolutions]


class Evaluator:
    """The FP32 reference embeddings of the held-out sets; scores candidate models against them, row by row.

    The references come from whichever float session the caller has open (the quantiser computes
    them in its calibration pass), so no second FP32 session is ever needed. `runtimes`: those
    the partition's gate scores on (`gate_rows`); the per-runtime gate scores the final model on
    every installed one (`by_runtime`).
    """

    def __init__(
        self,
        heldout: dict[str, np.ndarray],
        reference: dict[str, np.ndarray],
        threads: int = 0,
        rows: list[Row] | None = None,
        text: crossmodal.TextReference | None = None,
        runtimes: tuple[str, ...] = ("onnxruntime",),
    ) -> None:
        self.heldout = heldout
        self.reference = reference
        self.threads = threads
        self.text = text
        self.rows = rows or default_rows(list(heldout))
        self.runtimes = runtimes

    @classmethod
    def from_model(
        cls, fp32_model, heldout: dict[str, np.ndarray], threads: int = 0, text: crossmodal.TextReference | None = None
    ) -> Evaluator:
        from .runtimes import embedder

        ref = embedder("onnxruntime", fp32_model, threads)
        return cls(heldout, {res: ref(x) for res, x in heldout.items()}, threads, text=text)

    def score(self, model, runtime: str = "onnxruntime", rows: list[str] | None = None) -> dict[str, Metrics]:
        """Metrics of `model` run by `runtime` (through the node's encoder) per row (all, or those named).

        The only scoring loop: one runtime session open at a time."""
        from .runtimes import embedder

        run = embedder(runtime, model, self.threads)
        todo = [r for r in self.rows if rows is None or r.name in rows]
        # the shift row (quant/shift.py) is held to the image-embedding bounds only: the gate's label set is the
        # calibration camera's world, and out-of-domain frames on it are near-ties a single INT8 rounding decides
        return {r.name: compare(run(self.heldout[r.resolution]), self.reference[r.resolution],
                                None if r.resolution == gate.SHIFT_ROW else self.text) for r in todo}  # fmt: skip

    def gate_rows(self, model, rows: list[str] | None = None) -> dict[str, Metrics]:
        """What the partition judges: every row on each of `self.runtimes` (rows of the first runtime keep
        their plain names, the others' are prefixed: 'openvino 1920x1080')."""
        out: dict[str, Metrics] = {}
        for i, rt in enumerate(self.runtimes):
            out.update({(k if i == 0 else f"{rt} {k}"): m for k, m in self.score(model, rt, rows).items()})
        return out

    def by_runtime(self, model, spec: GateSpec, runtimes: list[str]) -> dict:
        """{runtime: verdict dict (gate.Verdict.as_dict: passed, worst metrics, the ISA class it was measured
        on, the bounds) + per_resolution} of `model` on each runtime: the per-runtime gate."""
        from .runtimes import isa_record

        out = {}
        for rt in runtimes:
            per_res = self.score(model, rt)
            w = worst(per_res)
            verdict = gate.Verdict(rt, w.passes(spec), w.as_dict(), isa_record(rt), bounds=spec.as_dict())
            out[rt] = {**verdict.as_dict(), "per_resolution": {k: m.as_dict() for k, m in per_res.items()}}
            log.info("gate on %s: %s, %s", verdict.where(), "passed" if verdict.passed else "FAILED", w.as_dict())
        return out
