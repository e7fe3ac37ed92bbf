"""The INT8 gate around every backend's build: one wrapper, every backend, and a re-gate per ISA class.

`Backend.open` (backends.py) calls `open_checked`: the row builds its encoder, then the policy is
applied to the model it loaded, whatever the backend (ONNX Runtime, OpenVINO, TensorRT, torch on
CUDA, Triton). A backend's own code never sees the policy, so none can forget it.

Which verdict holds: the one for this runtime measured on this ISA class (`Backend.isa`: the class
its integer kernels run at; ONNX Runtime dispatches by the CPU, OpenVINO honours oneDNN's
ONEDNN_MAX_CPU_ISA). The quantiser's verdicts are in the model's metadata; when none matches this
CPU, the runtime re-gates the model once, here, from the held-out pixels and FP32 reference
embeddings the quantiser kept in the report folder (gate.REGATE_SET, no bag needed), judged by the
same bounds, and the result is kept in that folder (gate.REGATE_FILE) so the next start reads it.
GPU runtimes and a Triton server have no ISA row: their verdict is the runtime's (for Triton, the
served model's, from its config parameters).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from ..core import gate
from ..core.gate import GateRefused, GateSpec, Metrics, Verdict
from ..core.numerics import agreement
from .base import BackendUnsuitable, ModelInfo
from .options import EncoderOptions

log = logging.getLogger(__name__)


def open_checked(row, model: Path, options: EncoderOptions):
    """`row.build(model, options)`, then the gate policy `options.gate` applied to what it loaded.

    A refused model raises BackendUnsuitable (so `auto` moves on) after the encoder is closed."""
    policy = options.gate
    if policy == "auto":
        raise ValueError("gate policy 'auto' is resolved by create_encoder; a backend is opened with one of "
                         + ", ".join(gate.POLICIES))  # fmt: skip
    gate.check_policy(policy)
    enc = row.build(model, options)
    try:
        enc.gate_verdict = enforce(enc, row, policy)
    except BaseException:
        close = getattr(enc, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # the refusal is the error to report, not a failing close
                close()
        raise
    return enc


def enforce(enc, row, policy: str) -> Verdict | None:
    """Apply `policy` to encoder `enc` of backend table row `row` (see the module doc); the verdict it
    runs by (None: not INT8, not judged, or run unmeasured under `warn`)."""
    info: ModelInfo = enc.info
    if info.precision != "int8" or policy == "ignore":
        return None
    isa = row.isa() if row.isa else None
    klass = isa["class"] if isa else None
    verdict, elsewhere = find(info, row.name, klass)
    if verdict is None and isa is not None:
        verdict = regate(enc, info, row.name, isa, elsewhere)
    try:
        warning = gate.judge(info.model_id, verdict, policy, row.name, klass, elsewhere)
    except GateRefused as err:
        raise BackendUnsuitable(str(err)) from err
    if warning:
        log.warning("%s", warning)
    return verdict


def report_dir(info: ModelInfo) -> tuple[Path | None, str]:
    """(the model's report folder, the quantisation run that wrote it) from metadata `quant_report`
    ({"dir": relative to the model's folder or absolute, "run": id}); (None, "") when it names none."""
    try:
        where = json.loads(info.metadata.get(gate.REPORT_KEY) or "{}")
    except ValueError:
        return None, ""
    if not where.get("dir"):
        return None, ""
    p = Path(where["dir"])
    if not p.is_absolute() and info.path is not None:
        p = Path(info.path).parent / p
    return p, str(where.get("run", ""))


def report_entry(report: Path, model: Path, run: str) -> str:
    """The metadata value of `quant_report` for a model at `model` whose report folder is `report`:
    relative when the folder is beside the model (they move together), absolute otherwise."""
    report, model = Path(report).resolve(), Path(model).resolve()
    rel = report.relative_to(model.parent) if report.is_relative_to(model.parent) else report
    return json.dumps({"dir": str(rel), "run": run})


def _regates(folder: Path | None, run: str) -> dict[str, dict[str, Verdict]]:
    """The re-gates kept in `folder` for quantisation run `run` (another run's are not this model's)."""
    if folder is None or not (folder / gate.REGATE_FILE).is_file():
        return {}
    try:
        raw = json.loads((folder / gate.REGATE_FILE).read_text())
    except (OSError, ValueError) as err:
        log.warning("INT8 gate: %s is unreadable (%s): re-gating", folder / gate.REGATE_FILE, err)
        return {}
    if raw.get("run") != run:
        return {}
    return gate.regates(json.dumps(raw.get("verdicts", {})))


def find(info: ModelInfo, runtime: str, klass: str | None) -> tuple[Verdict | None, Verdict | None]:
    """(the verdict that holds for `runtime` on ISA class `klass`, the quantiser's verdict of that runtime
    if it was measured elsewhere). `klass` None: any verdict of the runtime holds."""
    own = gate.verdicts(info.metadata).get(runtime)
    if klass is None or (own is not None and own.isa_class == klass):
        return own, None
    later = _regates(*report_dir(info)).get(runtime, {}).get(klass)
    return later, own


def _stored_bounds(info: ModelInfo, elsewhere: Verdict | None) -> GateSpec:
    """The bounds the model was quantised against (its verdicts carry them), else the defaults."""
    bounds = (elsewhere.bounds if elsewhere else None) or next(
        (v.bounds for v in gate.verdicts(info.metadata).values() if v.bounds), None
    )
    return GateSpec(**bounds) if bounds else GateSpec()


def save_regate_set(folder: Path, run: str, rows: dict[str, tuple[np.ndarray, np.ndarray]],
                    labels: np.ndarray | None = None, logit_scale: float = 0.0) -> Path:  # fmt: skip
    """Write the re-gate set of quantisation run `run`: per row, held-out pixels (stored as float16: the
    quantiser rounds its held-out set so, before taking the FP32 references, so these are the very
    pixels the references belong to) and their FP32 embeddings; the gate's label embeddings, if any.
    Removes an older run's re-gates from the folder (they judged another model)."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {"rows": np.array(json.dumps(list(rows))), "run": np.array(run)}
    for i, (pixels, reference) in enumerate(rows.values()):
        arrays[f"pixels_{i}"] = np.asarray(pixels).astype(np.float16)
        arrays[f"reference_{i}"] = np.asarray(reference, np.float32)
    if labels is not None:
        arrays["labels"], arrays["logit_scale"] = np.asarray(labels, np.float32), np.array(float(logit_scale))
    path = folder / gate.REGATE_SET
    np.savez_compressed(path, **arrays)
    (folder / gate.REGATE_FILE).unlink(missing_ok=True)
    return path


def load_regate_set(folder: Path, run: str) -> dict | None:
    """The re-gate set of run `run` ({"rows": {row: (pixels, reference)}, "labels", "logit_scale"}), or
    None when the folder holds another run's (the model was re-quantised elsewhere)."""
    with np.load(folder / gate.REGATE_SET, allow_pickle=False) as z:
        if str(z["run"]) != run:
            return None
        names = json.loads(str(z["rows"]))
        rows = {r: (z[f"pixels_{i}"].astype(np.float32), z[f"reference_{i}"]) for i, r in enumerate(names)}
        labels = z["labels"] if "labels" in z.files else None
        scale = float(z["logit_scale"]) if "logit_scale" in z.files else 0.0
    return {"rows": rows, "labels": labels, "logit_scale": scale}


def measure(enc, regate_set: dict) -> Metrics:
    """The worst metrics over the set's rows of `enc`'s embeddings against the stored FP32 references."""
    per_row = []
    for pixels, reference in regate_set["rows"].values():
        step = max(1, int(getattr(enc, "max_batch", 1) or 1))
        out = np.concatenate([enc.encode(pixels[i : i + step]).vectors for i in range(0, len(pixels), step)])
        labels = regate_set["labels"]
        extra = (labels, regate_set["logit_scale"]) if labels is not None else ()
        per_row.append(Metrics(**agreement(out, reference, *extra)))
    return gate.worst(per_row)


def regate(enc, info: ModelInfo, runtime: str, isa: dict, elsewhere: Verdict | None) -> Verdict | None:
    """Gate `enc` (runtime `runtime` on ISA `isa`) on the stored held-out set; record the verdict. None: no set."""
    folder, run = report_dir(info)
    stored = load_regate_set(folder, run) if folder is not None and (folder / gate.REGATE_SET).is_file() else None
    if stored is None:
        log.info("INT8 gate: no re-gate set of this model for %s (%s)", info.model_id,
                 f"looked in {folder}" if folder else "the model names no report folder")  # fmt: skip
        return None
    t0 = time.perf_counter()
    spec = _stored_bounds(info, elsewhere)
    m = measure(enc, stored)
    verdict = Verdict(runtime, m.passes(spec), m.as_dict(), isa, "re-gate", spec.as_dict())
    before = f"; quantised on {elsewhere.where()}: {elsewhere.summary()}" if elsewhere else ""
    log.info("INT8 gate: %s re-gated on %s in %.1f s: %s, %s%s", info.model_id, verdict.where(),
             time.perf_counter() - t0, "passed" if verdict.passed else "FAILED", verdict.summary(), before)  # fmt: skip
    record(folder, run, verdict)
    return verdict


def record(folder: Path, run: str, verdict: Verdict) -> None:
    """Add `verdict` to the folder's REGATE_FILE (written whole, then renamed: never half a file). A folder
    we cannot write is said in one line; the model still runs by this verdict, and re-gates next start."""
    rows = _regates(folder, run)
    rows.setdefault(verdict.runtime, {})[verdict.isa_class or "unknown"] = verdict
    text = json.dumps({"run": run, "verdicts": json.loads(gate.encode_regates(rows))}, indent=1)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".regate-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, folder / gate.REGATE_FILE)
    except OSError as err:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        log.warning("INT8 gate: cannot record the re-gate in %s (%s); it runs again at the next start", folder, err)
