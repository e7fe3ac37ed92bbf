#!/usr/bin/env python3
"""Figures of one `output_dim` projection, measured side by side in one run (issue 29's closing note).

    OPENCLAW_VISION_HOME=/tmp/ovfig .venv/bin/python scripts/projection_figures.py --model ViT-bigG-14 --output-dim 512

1. The full-width FP32 image and text exports in the data home (exported now if missing; random-init
   weights unless the home holds a checkpoint's exports).
2. The projection built as every entry point builds it (quant/projection.py: fit on the sample frames'
   calibration split and the gate's label prompts, gated on the held-out frames): retained variance,
   NN and zero-shot agreement vs full width, and the same for the image-only and text-only fits.
3. Encode latency through the node's ONNX Runtime encoder (one preprocessed 224² frame, batch 1), full
   width vs projected, interleaved round by round (stats.run_interleaved) under the CPU lock: the script
   takes /tmp/openclaw-cpu.lock itself around the timing, as `flock` would (so do not wrap it in `flock`:
   it would wait for itself).

At an `output_dim` equal to the tower's width (ViT-B-32 at 512) there is no projection: the script says
so and checks that the model it gets is the full-width file, with the same id.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import time
from pathlib import Path

import numpy as np

from openclaw_vision.bench.harness import Variant, run_interleaved
from openclaw_vision.build_tools.first_use import ensure_fp32, ensure_projected, sample_calibration_frames
from openclaw_vision.encoders import create_encoder
from openclaw_vision.encoders.options import EncoderOptions
from openclaw_vision.models import onnx_files
from openclaw_vision.models.naming import output_width
from openclaw_vision.quant import projection
from openclaw_vision.quant.projection import preprocess, stored_result
from openclaw_vision.runtime.stats import percentiles
from openclaw_vision.text.build import ensure_text_fp32

LOCK = Path("/tmp/openclaw-cpu.lock")


def latency(paths: dict[str, Path], pixels: np.ndarray, rounds: int, iters: int) -> dict[str, dict]:
    """P50/P99 ms of each model's encode (batch 1), interleaved, under the CPU lock."""
    encoders = {k: create_encoder("onnxruntime", p, options=EncoderOptions(gate="warn")) for k, p in paths.items()}
    variants = [Variant(k, lambda e=e: e.encode(pixels)) for k, e in encoders.items()]
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        run_interleaved(variants, rounds, iters, warmup=1)
    out = {}
    for v in variants:
        p = percentiles(v.samples_ms)
        out[v.name] = {"p50_ms": round(p["p50"], 2), "p99_ms": round(p["p99"], 2), "n": p["n"]}
    return out


def cache_embeddings(path: Path) -> None:
    """Keep the full-width embeddings the fit reads in `path` (an .npz) and read them back on a later run of
    the same model: a ViT-bigG-14 pass over the 64 sample frames is ~20 min on 2 cores. The cache is keyed by
    the model id and the number of frames; anything else recomputes."""
    compute = projection.embed_all

    def cached(image_model, text_model, pixels, threads=0):
        key = f"{onnx_files.read_metadata(image_model)['model_id']}:{len(pixels)}"
        if path.is_file():
            z = np.load(path)
            if str(z["key"]) == key:
                return z["image"], z["text"], float(z["logit_scale"]), key.split(":")[0]
        image, text, scale, model_id = compute(image_model, text_model, pixels, threads)
        np.savez(path, key=key, image=image, text=text, logit_scale=scale)
        return image, text, scale, model_id

    projection.embed_all = cached


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--output-dim", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10, help="timed encodes per variant per round")
    ap.add_argument("--no-latency", action="store_true", help="the fit's figures only")
    ap.add_argument(
        "--embeddings-cache",
        type=Path,
        default=None,
        help="an .npz keeping the full-width embeddings between runs (see cache_embeddings)",
    )
    ap.add_argument("--force", action="store_true", help="rebuild the projected files (re-fit, re-gate)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    full = ensure_fp32(args.model)
    ensure_text_fp32(args.model)
    out: dict = {"model": args.model, "output_dim": args.output_dim, "weights": "random init (seed 0)"}
    out["full_model_id"] = onnx_files.read_metadata(full)["model_id"]
    out["export_s"] = round(time.perf_counter() - t0, 1)
    if not output_width(args.model, args.output_dim):
        same = ensure_fp32(args.model, output_dim=args.output_dim)
        out["projection"] = f"none: {args.output_dim} is the tower's width; model {same} (same file: {same == full})"
        out["model_id"] = onnx_files.read_metadata(same)["model_id"]
        print(json.dumps(out, indent=1))
        return 0
    if args.embeddings_cache:
        cache_embeddings(args.embeddings_cache)
    if args.force:
        from openclaw_vision.core.resources import default_model_path
        from openclaw_vision.models.naming import projected_name
        from openclaw_vision.text.build import default_text_model_path

        stem = projected_name(args.model, args.output_dim)
        for path in (default_model_path(stem), default_text_model_path(stem)):
            onnx_files.remove_model(path)
    t1 = time.perf_counter()
    projected = ensure_projected(args.model, args.output_dim)
    out["fit_and_write_s"] = round(time.perf_counter() - t1, 1)
    out.update(stored_result(projected))
    if args.no_latency:
        print(json.dumps(out, indent=1))
        return 0
    pixels = preprocess(sample_calibration_frames()[:1], int(onnx_files.read_metadata(full).get("image_size", 224)))
    out["encode_b1_ort"] = latency({"full width": full, f"projected {args.output_dim}": projected}, pixels,
                                   args.rounds, args.iters)  # fmt: skip
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
