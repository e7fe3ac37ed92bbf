"""`stages` mode: preprocessing and encoding, ours vs what a user would run instead, same inputs.

Baselines: the standard CLIP preprocessing (PIL bicubic, as open_clip/torchvision do it) and
the same tower in PyTorch eager FP32 (what open_clip runs). Ours: the OpenCV preprocessing and
the encoder on each CPU runtime that is installed (ONNX Runtime; OpenVINO on x86), FP32 and the
gated INT8 model — the same two ONNX files for both. Batch 1 and batch 8; all variants
interleaved in one run, every ORT session with spinning off, as in the node (measured here with
three ViT-B/32 sessions in one process: INT8 18.9 ms with spinning off, 20.8 ms with it on).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core import gate
from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.frame import Frame
from ..preprocess.reference import reference_preprocess
from ..preprocess.sample_frames import pan_frames
from ..quant.runtimes import RUNTIMES
from .harness import Variant, run_interleaved, summarise
from .report import INT8_RUNTIMES


def stage_variants(
    model: str, model_path: Path, int8_path: Path, batches: tuple[int, ...], frames: list[Frame]
) -> tuple[list[Variant], dict]:
    import torch

    from ..encoders.onnxruntime import OnnxRuntimeEncoder
    from ..encoders.openvino import OpenVinoEncoder, usable
    from ..models.checkpoint import build_model

    pre = CpuPreprocessor()
    it = {"i": 0}

    def next_frame() -> Frame:
        it["i"] = (it["i"] + 1) % len(frames)
        return frames[it["i"]]

    variants = [
        Variant(
            "preprocess/pil-reference", lambda: reference_preprocess(next_frame()), group="preprocess", baseline=True
        ),
        Variant("preprocess/ours-cpu", lambda: pre(next_frame()), group="preprocess"),
    ]
    torch_model, _ = build_model(model, seed=0)
    ort = OnnxRuntimeEncoder(model_path)
    int8 = OnnxRuntimeEncoder(int8_path)
    # (variant name, encoder): every runtime runs the same FP32 and INT8 files
    encoders = [("encode/ort-fp32", ort), ("encode/ort-int8", int8)]
    openvino, why = usable()
    if openvino:  # timed whatever its gate said; the report counts it as an INT8 backend only where it passed
        encoders += [
            ("encode/openvino-fp32", OpenVinoEncoder(model_path)),
            ("encode/openvino-int8", OpenVinoEncoder(int8_path)),
        ]
    pixels = pre.batch(frames)
    verdicts = gate.verdicts(int8.info.metadata)
    extra = {
        "model": ort.model_id,
        "ort_threads": ort.threads,
        "torch_threads": torch.get_num_threads(),
        "openvino": why,
        "int8_gate_by_runtime": {rt: v.as_dict() if (v := verdicts.get(rt)) else None for rt in RUNTIMES},
    }
    for b in batches:
        x = np.ascontiguousarray(np.resize(pixels, (b, *pixels.shape[1:])))
        xt = torch.from_numpy(x)

        def eager(xt=xt):
            with torch.inference_mode():
                return torch_model(xt)

        variants.append(Variant("encode/torch-eager-fp32", eager, batch=b, group="encode", baseline=True))
        for name, enc in encoders:
            variants.append(Variant(name, lambda x=x, enc=enc: enc.encode(x), batch=b, group="encode"))
    return variants, extra


def preprocess_fidelity(model: str, frames: list[Frame]) -> float:
    """Min embedding cosine, our tensor vs the reference tensor, through the torch tower."""
    import torch

    from ..models.checkpoint import build_model

    tower, _ = build_model(model, seed=0)
    pre = CpuPreprocessor()
    with torch.inference_mode():
        a = tower(torch.from_numpy(np.stack([pre(f) for f in frames]))).numpy()
        b = tower(torch.from_numpy(np.stack([reference_preprocess(f) for f in frames]))).numpy()
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return float(cos.min())


def peak_variants(int8_names: list[str]) -> list[Variant]:
    """One INT8 GEMM per runtime, timed in the same shuffled rounds as the encoders it bounds (a peak
    timed apart from them once met another job's load and came out below what the encoder reached)."""
    from .roofline import PEAK_GEMM_N, int8_gemm_call

    return [
        Variant(f"peak/int8-gemm-{INT8_RUNTIMES[v]}", int8_gemm_call(INT8_RUNTIMES[v], PEAK_GEMM_N), group="peak")
        for v in int8_names
    ]


def int8_peak(model: str, peaks: list[Variant]) -> dict:
    """What the INT8 goal is measured against: each runtime's best INT8 GEMM rate here and the CPU's INT8 units."""
    from ..models.configs import get_config
    from .roofline import PEAK_GEMM_N, int8_units

    ops = 2 * PEAK_GEMM_N**3
    return {
        "units": int8_units(),
        "gemm": f"Q/DQ MatMul {PEAK_GEMM_N}^3, s8 x s8, the encoders' settings, best call of the interleaved rounds",
        "gops": {v.name.rsplit("-", 1)[-1]: round(ops / (min(v.samples_ms) / 1e3) / 1e9, 1) for v in peaks},
        "model_gflops_per_image": round(get_config(model.split("@")[0]).flops_per_image() / 1e9, 3),
    }


def run_stages(model: str, model_path: Path, int8_path: Path, quick: bool) -> dict:
    frames = [Frame.from_rgb(np.ascontiguousarray(f)) for f in pan_frames(8)]
    fidelity = preprocess_fidelity(model, frames)  # first: its tower is freed before the variants build theirs
    variants, extra = stage_variants(model, model_path, int8_path, (1, 8), frames)
    # batch-8 calls take ~8× longer: time them fewer times per round so each variant gets similar wall time
    rounds, iters = (3, 4) if quick else (8, 10)
    peaks = peak_variants(sorted({v.name for v in variants if v.name in INT8_RUNTIMES}))
    run_interleaved([v for v in variants if v.batch == 1] + peaks, rounds, iters)
    run_interleaved([v for v in variants if v.batch > 1], rounds, max(1, iters // 4))
    records = summarise(variants)
    p50 = {(r["name"], r["batch"]): r["p50_ms"] for r in records}
    return {
        "variants": records,
        "int8_vs_ort_fp32": {
            f"batch{b}": round(p50[("encode/ort-fp32", b)] / p50[("encode/ort-int8", b)], 2) for b in (1, 8)
        },
        "int8_peak": int8_peak(model, peaks),
        "int8_model": str(int8_path),
        "preprocess_embedding_cosine_min": round(fidelity, 6),
        "input": "1920x1080 rgb8 frames of a camera panning across photographs",
        **extra,
    }
