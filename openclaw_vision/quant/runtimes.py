"""The accuracy gate on every runtime that can run the model, not only the one that quantised it.

A Q/DQ model is a description; each runtime compiles it into its own integer kernels, fuses
and requantises differently, and so rounds it differently (ONNX Runtime's U8S8/U8U8 GEMMs,
OpenVINO's oneDNN INT8 primitives). The gate that `partition` runs with ONNX Runtime chooses the
model; this module then scores that one model with each installed runtime, through the very
encoder class the node would use, against the same FP32 reference embeddings. The result is a
row per runtime in the report and a `quant_gate_runtimes` entry in the model's metadata, which
the encoders read (`check_gate`): a runtime runs an INT8 model only where it passed the gate.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnx

from .evaluate import Evaluator, GateSpec, compare, worst

log = logging.getLogger(__name__)

#: Runtimes that can run our ONNX files on a CPU, in the order the report lists them.
RUNTIMES = ("onnxruntime", "openvino")


def installed_runtimes() -> list[str]:
    """The runtimes of `RUNTIMES` that can run here (ONNX Runtime always)."""
    from ..encoders.openvino import usable

    return ["onnxruntime"] + (["openvino"] if usable()[0] else [])


def _encoder(backend: str, model: Path, threads: int):
    if backend == "onnxruntime":
        from ..encoders.onnxruntime import OnnxRuntimeEncoder

        return OnnxRuntimeEncoder(model, threads=threads)
    if backend == "openvino":
        from ..encoders.openvino import OpenVinoEncoder

        return OpenVinoEncoder(model, threads=threads, gate="ignore")  # this is the gate being measured
    raise ValueError(f"unknown runtime {backend!r}; choose one of {', '.join(RUNTIMES)}")


def evaluate_with(backend: str, model: Path, frames: dict[str, np.ndarray], threads: int = 0, batch: int = 8):
    """Unit-normalised embeddings of each held-out set, computed by `backend`'s encoder as the node runs it."""
    enc = _encoder(backend, model, threads)
    return {
        res: np.concatenate([enc.encode(x[i : i + batch]).vectors for i in range(0, len(x), batch)])
        for res, x in frames.items()
    }


def gate_by_runtime(model: Path, evaluator: Evaluator, gate: GateSpec, runtimes: list[str] | None = None) -> dict:
    """{runtime: {passed, mean_cosine, min_cosine, nn_agreement, kl, collapse, per_resolution}} of `model`
    against the evaluator's FP32 reference embeddings."""
    out = {}
    for rt in runtimes or installed_runtimes():
        emb = evaluate_with(rt, model, evaluator.heldout, evaluator.threads)
        per_res = {res: compare(e, evaluator.reference[res], evaluator.text) for res, e in emb.items()}
        w = worst(per_res)
        out[rt] = {
            "passed": w.passes(gate),
            **w.as_dict(),
            "per_resolution": {res: m.as_dict() for res, m in per_res.items()},
        }
        log.info("gate on %s: %s, %s", rt, "passed" if out[rt]["passed"] else "FAILED", w.as_dict())
    return out


def stamp(model: onnx.ModelProto, rows: dict) -> onnx.ModelProto:
    """Put the per-runtime verdicts in `model`'s metadata (what `check_gate` reads); returns `model`."""
    verdicts = {rt: {k: v for k, v in r.items() if k != "per_resolution"} for rt, r in rows.items()}
    entry = next((p for p in model.metadata_props if p.key == "quant_gate_runtimes"), None)
    if entry is None:
        entry = model.metadata_props.add()
        entry.key = "quant_gate_runtimes"
    entry.value = json.dumps(verdicts)
    return model
