#!/usr/bin/env python3
"""Serial vs parallel preparation of a batch (issue 27 item 3), measured side by side in one run.

    flock /tmp/openclaw-cpu.lock .venv/bin/python scripts/prep_figures.py [--rounds 8]

1. `FramePipeline.prepare` of a batch of 4 1080p frames, JPEG and raw rgb8 (sample_frames' pan),
   one frame after another (prep_threads=1) vs in parallel (prep_threads=2), each with cv2's own
   threads at its default and at 1 (cv2.setNumThreads), interleaved round by round
   (stats.run_interleaved). The two batches are checked bitwise equal first.
2. `FramePipeline.run` (prepare + encode) of the same batches with the node's backend (auto, INT8):
   whether the parallel preparation slows the encode that follows it.

Prints each variant's P50 and its ratio to the serial baseline of its group.
"""

from __future__ import annotations

import argparse

import cv2
import numpy as np

from openclaw_vision.bench.harness import Variant, run_interleaved, summarise
from openclaw_vision.build_tools.first_use import ensure_int8
from openclaw_vision.encoders import create_encoder
from openclaw_vision.models.configs import DEFAULT_MODEL, canonical_name
from openclaw_vision.preprocess.compressed import CompressedFrame
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.sample_frames import compress_rgb, pan_frames
from openclaw_vision.runtime.pipeline import FramePipeline


def batches() -> dict[str, list]:
    rgb = [np.ascontiguousarray(f) for f in pan_frames(4, 1920, 1080)]
    jpeg = []
    for f in rgb:
        fmt, data = compress_rgb(f, "rgb8", "jpeg")
        jpeg.append(CompressedFrame.from_buffer(data, fmt))
    return {"jpeg": jpeg, "rgb8": [Frame.from_rgb(f) for f in rgb]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    enc = create_encoder("auto", ensure_int8(canonical_name(DEFAULT_MODEL)))
    serial, parallel = FramePipeline(enc, prep_threads=1), FramePipeline(enc, prep_threads=2)
    frames = batches()
    for batch in frames.values():
        assert np.array_equal(serial.prepare(batch).pixels, parallel.prepare(batch).pixels)
    cv_default = cv2.getNumThreads()

    def prep(pipe: FramePipeline, batch: list, cv_threads: int):
        def fn():
            cv2.setNumThreads(cv_threads)
            return pipe.prepare(batch)

        return fn

    variants, stage_ms = [], {}
    for kind, batch in frames.items():
        for name, pipe in (("serial", serial), ("parallel2", parallel)):
            for cv in (cv_default, 1):
                variants.append(Variant(f"prepare {kind} {name} cv{cv}", prep(pipe, batch, cv), 4, f"prepare {kind}",
                                        baseline=(name, cv) == ("serial", cv_default)))  # fmt: skip
            ms = stage_ms[f"run {kind} {name}"] = {"prepare": [], "encode": []}

            def run(pipe=pipe, batch=batch, ms=ms):
                cv2.setNumThreads(cv_default)
                r = pipe.run(batch)
                ms["prepare"].append(r.prepare_s * 1e3)
                ms["encode"].append(r.encode_s * 1e3)

            variants.append(Variant(f"run {kind} {name}", run, 4, f"run {kind}", baseline=name == "serial"))
    run_interleaved(variants, rounds=args.rounds, iters=4, warmup=2)
    print(f"backend {enc.backend}/{enc.precision}, cv2 threads by default {cv_default}")
    for r in summarise(variants):
        line = f"{r['name']:32s} p50 {r['p50_ms']:7.2f} ms  x{r.get('speedup_vs_baseline', 1.0):.2f} of serial"
        if r["name"] in stage_ms:
            ms = stage_ms[r["name"]]
            line += f"  (prepare p50 {np.median(ms['prepare']):.2f}, encode p50 {np.median(ms['encode']):.2f} ms)"
        print(line)


if __name__ == "__main__":
    main()
