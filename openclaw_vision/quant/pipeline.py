"""`openclaw-vision quantize`: FP32 ONNX + calibration frames → gated hybrid INT8 Q/DQ model + report.

Steps, in order: frames → preprocessed calibration / held-out tensors → activation statistics
→ ranges (the chosen method; the others are scored too, for the report) → per-layer sensitivity
→ hybrid partition against the gate → model written only if the gate passed → memory, batch
invariance and a quick latency check → report.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from . import calibrate, crossmodal, data, memory, partition, sensitivity
from .evaluate import Evaluator, GateSpec, embed, session, worst
from .graph import quantisable_layers
from .qdq import SCHEMES, build_qdq_model, build_switch_model
from .runtimes import gate_by_runtime, stamp

log = logging.getLogger(__name__)


@dataclass
class QuantOptions:
    fp32_model: Path
    calib: Path
    out: Path
    topic: str | None = None
    limit: int = 0  # the first N frames; 0: up to max_frames spread over the recording
    max_frames: int = data.MAX_FRAMES
    method: str = "percentile"
    percentile: float = 99.99
    scheme: str = "s8s8"
    gate: GateSpec = field(default_factory=GateSpec)
    max_float: int = -1  # -1: a quarter of the quantisable layers
    holdout_every: int = 4
    threads: int = 0
    sensitivity: bool = True
    measure_memory: bool = True
    text_model: Path | None = None  # FP32 text export for the gate's text term; None: the data home's, if any
    text: bool = True  # False: no text term


def _progress():
    try:
        from tqdm import tqdm
    except ImportError:  # progress bars are a nicety, not a dependency of the result
        return None
    return lambda it, desc: tqdm(it, desc=desc, leave=False, disable=None)


def _latency_ms(sessions: dict, x: np.ndarray, rounds: int = 3, iters: int = 5) -> dict[str, float]:
    """Median batch-1 latency of each session, interleaved round by round (indicative; bench is the reference)."""
    times: dict[str, list[float]] = {k: [] for k in sessions}
    name = {k: s.get_inputs()[0].name for k, s in sessions.items()}
    for k, s in sessions.items():
        s.run(None, {name[k]: x})
    for _ in range(rounds):
        for k, s in sessions.items():
            for _ in range(iters):
                t = time.perf_counter()
                s.run(None, {name[k]: x})
                times[k].append((time.perf_counter() - t) * 1000)
    return {k: round(float(np.median(v)), 2) for k, v in times.items()}


def quantize(opts: QuantOptions, frames: list | None = None) -> dict:
    """Run the whole job and return the report dict (`report.write` saves it). See the module doc.

    `frames`: calibration frames already in memory; `opts.calib` is then only their description.
    """
    if opts.scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {opts.scheme!r}; choose one of {', '.join(SCHEMES)}")
    if opts.method not in calibrate.METHODS:
        raise ValueError(f"unknown calibration method {opts.method!r}; choose one of {', '.join(calibrate.METHODS)}")
    t0 = time.perf_counter()
    progress = _progress()
    proto = onnx.load(str(opts.fp32_model))
    meta = {p.key: p.value for p in proto.metadata_props}
    if meta.get("precision", "fp32") != "fp32":
        raise ValueError(f"{opts.fp32_model} is a {meta['precision']} model; quantize the FP32 export")
    image_size = int(meta.get("image_size", 224))
    layers = quantisable_layers(proto)
    max_float = len(layers) // 4 if opts.max_float < 0 else opts.max_float

    if frames is None:
        frames = data.load_frames(opts.calib, opts.topic, opts.limit, opts.max_frames)
    qdata = data.prepare(frames, image_size, str(opts.calib), opts.holdout_every, progress=progress)
    log.info("%d frames: %d for calibration, %d held out", len(frames), qdata.calibration_frames, len(qdata.native))

    stats = calibrate.collect_stats(
        opts.fp32_model, sorted({layer.activation for layer in layers}), qdata.calibration, opts.threads, progress
    )
    ranges = {m: calibrate.compute_ranges(stats, m, opts.percentile) for m in calibrate.METHODS}
    text_ref, text_note = (
        crossmodal.find_reference(meta.get("model_id", opts.fp32_model.stem), opts.text_model, opts.threads)
        if opts.text
        else (None, "not computed (--no-text)")
    )
    log.info("zero-shot text term: %s", text_note)
    evaluator = Evaluator(opts.fp32_model, qdata.heldout, opts.threads, text_ref)
    native = next(iter(qdata.heldout))

    def build(keep: frozenset[str], method: str = opts.method) -> bytes:
        return build_qdq_model(proto, layers, ranges[method], opts.scheme, keep).SerializeToString()

    methods = {}
    for m in calibrate.METHODS:
        scored = evaluator.score(build(frozenset(), m))
        methods[m] = {"worst": worst(scored).as_dict(), "passed": worst(scored).passes(opts.gate)}
        log.info("calibration %s, all layers INT8: %s", m, methods[m]["worst"])
        if m == opts.method:
            all_int8 = scored

    sens, order = [], [layer.node for layer in layers]
    if opts.sensitivity or not worst(all_int8).passes(opts.gate):  # the partition needs the ranking
        switch = build_switch_model(proto, layers, ranges[opts.method], opts.scheme).SerializeToString()
        sens = sensitivity.sweep(layers, switch, evaluator, native, progress)
        order = sensitivity.ranking(sens)
    part = partition.choose(order, build, evaluator, opts.gate, max_float, log.info, all_int8)

    final = build_qdq_model(
        proto,
        layers,
        ranges[opts.method],
        opts.scheme,
        frozenset(part.kept_float),
        metadata={
            "quant_calibration": json.dumps(
                {
                    "method": opts.method,
                    "percentile": opts.percentile,
                    "frames": qdata.calibration_frames,
                    "source": str(opts.calib),
                }
            ),
            "quant_gate": json.dumps({"passed": part.passed, **worst(part.metrics).as_dict()}),
        },
    )
    final_bytes = final.SerializeToString()
    with tempfile.TemporaryDirectory() as tmp:
        candidate = Path(tmp) / "candidate.int8.onnx"
        candidate.write_bytes(final_bytes)
        by_runtime = gate_by_runtime(candidate, evaluator, opts.gate)  # the same model, as each runtime rounds it
        final_bytes = stamp(final, by_runtime)
        mem = (
            {"fp32": memory.measure(opts.fp32_model), "int8": memory.measure(candidate)} if opts.measure_memory else {}
        )
        int8_sess, fp32_sess = session(str(candidate), opts.threads), session(opts.fp32_model, opts.threads)
        one = embed(int8_sess, qdata.native, batch=1)
        eight = embed(int8_sess, qdata.native, batch=8)
        latency = _latency_ms({"fp32": fp32_sess, "int8": int8_sess}, qdata.native[:1])
        if part.passed:
            opts.out.parent.mkdir(parents=True, exist_ok=True)
            opts.out.write_bytes(final_bytes)
        elif opts.out.exists():
            opts.out.unlink()  # a stale model from an earlier passing run must not look like this run's result

    w = worst(part.metrics)
    fp32_mb = opts.fp32_model.stat().st_size / 1e6
    int8_mb = len(final_bytes) / 1e6
    return {
        "passed": part.passed,
        "model": meta.get("model_id", opts.fp32_model.stem),
        "model_note": "random-init weights (no download): accuracy numbers describe this model, not real CLIP"
        if "random" in meta.get("model_id", "")
        else "checkpoint weights",
        "fp32_model": str(opts.fp32_model),
        "int8_model": str(opts.out) if part.passed else None,
        "scheme": opts.scheme,
        "calibration": {
            "method": opts.method,
            "percentile": opts.percentile,
            "source": str(opts.calib),
            "frames": qdata.calibration_frames,
            "heldout_frames": len(qdata.native),
        },
        "gate": {
            "mean_cosine": opts.gate.mean_cosine,
            "min_cosine": opts.gate.min_cosine,
            "nn_agreement": opts.gate.nn_agreement,
            "zero_shot_top1": opts.gate.zero_shot_top1 if text_ref else None,
            "resolutions": list(qdata.heldout),
        },
        "mean_cosine": round(w.mean_cosine, 7),
        "min_cosine": round(w.min_cosine, 7),
        "nn_agreement": round(w.nn_agreement, 4),
        "kl": float(f"{w.kl:.4g}"),
        "collapse": {
            "image": float(f"{w.collapse:.4g}"),
            "text": crossmodal.text_term(),
            "cmcd": float(f"{w.collapse + crossmodal.text_term():.4g}"),
            "text_note": crossmodal.TEXT_TERM_NOTE,
        },
        "zero_shot": {
            "top1_agreement": w.zero_shot_top1,
            "kl": None if w.zero_shot_kl is None else float(f"{w.zero_shot_kl:.4g}"),
            "note": text_note,
            **(text_ref.describe() if text_ref else {}),
        },
        "per_resolution": {res: m.as_dict() for res, m in part.metrics.items()},
        "gate_by_runtime": by_runtime,
        "layers": len(layers),
        "quantised": len(layers) - len(part.kept_float),
        "kept_float": part.kept_float,
        "kept_float_labels": [next(x.label for x in layers if x.node == n) for n in part.kept_float],
        "float_by_construction": "LayerNormalization, Softmax, GELU, residual Add, attention QK^T and PV MatMuls",
        "max_float": max_float,
        "trials": [
            {"keep_float": t.keep_float, **worst(t.metrics).as_dict(), "passed": t.passed(opts.gate)}
            for t in part.trials
        ],
        "methods": methods,
        "sensitivity": [s.as_dict() for s in sens],
        "sensitivity_by_role": {k: float(f"{v:.4g}") for k, v in sensitivity.by_group(sens, "role").items()},
        "sensitivity_by_block": {k: float(f"{v:.4g}") for k, v in sensitivity.by_group(sens, "block").items()},
        "size_mb": {
            "fp32": round(fp32_mb, 2),
            "int8": round(int8_mb, 2),
            "cut_percent": round(100 * (1 - int8_mb / fp32_mb), 1),
        },
        "memory": mem,
        "batch_invariance_max_abs": float(f"{np.abs(one - eight).max():.3g}"),
        "latency_b1_ms": latency,
        "seconds": round(time.perf_counter() - t0, 1),
    }
