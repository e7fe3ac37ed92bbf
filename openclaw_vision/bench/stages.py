"""`stages` mode: preprocessing and encoding, ours vs what a user would run instead, same inputs.

Baselines: the standard CLIP preprocessing (PIL bicubic, as open_clip/torchvision do it) and
the same tower in PyTorch eager FP32 (what open_clip runs). Ours: the OpenCV preprocessing and
the ONNX Runtime encoder, FP32 and the gated INT8 model. Batch 1 and batch 8; all variants
interleaved in one run, every ORT session with spinning off, as in the node (measured here with
three ViT-B/32 sessions in one process: INT8 18.9 ms with spinning off, 20.8 ms with it on).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..frame import Frame
from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.reference import reference_preprocess
from ..sample_frames import pan_frames
from .harness import Variant, run_interleaved, summarise


def stage_variants(
    model: str, model_path: Path, int8_path: Path, batches: tuple[int, ...], frames: list[Frame]
) -> tuple[list[Variant], dict]:
    import torch

    from ..encoders.onnxruntime import OnnxRuntimeEncoder
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
    pixels = pre.batch(frames)
    extra = {"model": ort.model_id, "ort_threads": ort.threads, "torch_threads": torch.get_num_threads()}
    for b in batches:
        x = np.ascontiguousarray(np.resize(pixels, (b, *pixels.shape[1:])))
        xt = torch.from_numpy(x)

        def eager(xt=xt):
            with torch.inference_mode():
                return torch_model(xt)

        variants.append(Variant("encode/torch-eager-fp32", eager, batch=b, group="encode", baseline=True))
        variants.append(Variant("encode/ort-fp32", lambda x=x: ort.encode(x), batch=b, group="encode"))
        variants.append(Variant("encode/ort-int8", lambda x=x: int8.encode(x), batch=b, group="encode"))
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


def run_stages(model: str, model_path: Path, int8_path: Path, quick: bool) -> dict:
    frames = [Frame.from_rgb(np.ascontiguousarray(f)) for f in pan_frames(8)]
    fidelity = preprocess_fidelity(model, frames)  # first: its tower is freed before the variants build theirs
    variants, extra = stage_variants(model, model_path, int8_path, (1, 8), frames)
    # batch-8 calls take ~8× longer: time them fewer times per round so each variant gets similar wall time
    rounds, iters = (3, 4) if quick else (8, 10)
    run_interleaved([v for v in variants if v.batch == 1], rounds, iters)
    run_interleaved([v for v in variants if v.batch > 1], rounds, max(1, iters // 4))
    records = summarise(variants)
    p50 = {(r["name"], r["batch"]): r["p50_ms"] for r in records}
    return {
        "variants": records,
        "int8_vs_ort_fp32": {
            f"batch{b}": round(p50[("encode/ort-fp32", b)] / p50[("encode/ort-int8", b)], 2) for b in (1, 8)
        },
        "int8_model": str(int8_path),
        "preprocess_embedding_cosine_min": round(fidelity, 6),
        "input": "1920x1080 rgb8 frames of a camera panning across photographs",
        **extra,
    }
