"""The one scoring path per runtime: runtime name → embed function over the node's own encoder class.

A Q/DQ model is a description; each runtime compiles it into its own integer kernels, fuses
and requantises differently, and so rounds it differently (ONNX Runtime's U8S8/U8U8 GEMMs,
OpenVINO's oneDNN INT8 primitives). So the gate scores a model the way the node will run it:
through the very encoder class of that runtime (`RUNTIMES`, keyed by the backend table's names),
against the same FP32 reference embeddings. `Evaluator.score(model, runtime)` is the only loop
that uses it, for the partition, the calibration-method rows and the per-runtime gate alike; the
per-runtime verdicts go into the model's metadata (`quant_gate_runtimes`), which the encoders
read (encoders/gating.py): a runtime runs an INT8 model only where it passed the gate, on the ISA
class it was measured on (each verdict records it: `Backend.isa`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from ..core import gate
from ..encoders import backends
from ..encoders.options import EncoderOptions

log = logging.getLogger(__name__)

#: Unit-normalised embeddings of (N, 3, S, S) pixels.
Embed = Callable[[np.ndarray], np.ndarray]


def _encoder(name: str) -> Callable[[Path, int], object]:
    """(model path, threads) → the node's encoder of backend `name`, built by the backend table's row."""
    row = backends.get(name)
    # gate "ignore": this is the gate being measured
    return lambda model, threads: row.open(Path(model), EncoderOptions(threads=threads, gate="ignore"))


#: Runtimes that can run our ONNX files on a CPU (the backend table's `cpu_runtime` rows), in the order
#: the report lists them (ONNX Runtime, the quantiser's own, first): name → (model path, threads) → encoder.
RUNTIME_NAMES = tuple(sorted(backends.cpu_runtimes(), key=lambda name: name != "onnxruntime"))
RUNTIMES: dict[str, Callable[[Path, int], object]] = {name: _encoder(name) for name in RUNTIME_NAMES}


def isa_record(runtime: str) -> dict | None:
    """Where `runtime`'s verdict holds (the backend row's `isa`: the ISA class its kernels run at); None for
    a runtime with no such row (a GPU's, or one a test added to RUNTIMES)."""
    row = next((b for b in backends.TABLE if b.name == runtime), None)
    return row.isa() if row is not None and row.isa else None


def installed_runtimes() -> list[str]:
    """The runtimes of `RUNTIME_NAMES` usable here (the table's probes; ONNX Runtime always)."""
    return [name for name in RUNTIME_NAMES if backends.get(name).usable()[0]]


def embedder(runtime: str, model: Path, threads: int = 0, batch: int = 8) -> Embed:
    """`runtime`'s embed function for `model`, in batches of `batch` as the node's encoder computes them."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    enc = RUNTIMES[runtime](Path(model), threads)
    return lambda x: np.concatenate([enc.encode(x[i : i + batch]).vectors for i in range(0, len(x), batch)])


def stamp(model: onnx.ModelProto, rows: dict, report: str) -> onnx.ModelProto:
    """Put the per-runtime verdicts (`Evaluator.by_runtime` rows) and where the report folder is into
    `model`'s metadata, what encoders/gating.py reads; returns `model`."""
    verdicts = {rt: gate.Verdict.from_dict(rt, r) for rt, r in rows.items()}
    for key, value in ((gate.RUNTIMES_KEY, gate.encode_verdicts(verdicts)), (gate.REPORT_KEY, report)):
        entry = next((p for p in model.metadata_props if p.key == key), None)
        if entry is None:
            entry = model.metadata_props.add()
            entry.key = key
        entry.value = value
    return model
