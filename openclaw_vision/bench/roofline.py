"""`roofline` mode: what fraction of this machine's dense-GEMM peak the encoder reaches."""

from __future__ import annotations

import time

import numpy as np

from ..models.configs import get_config


def gemm_peak_gflops(n: int = 1024, repeats: int = 10) -> float:
    """Best observed float32 GEMM rate (NumPy's BLAS, all cores), GFLOP/s."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def run_roofline(model: str, images_per_s: float, quick: bool) -> dict:
    flops = get_config(model).flops_per_image()
    peak = gemm_peak_gflops(1024 if quick else 2048, 5 if quick else 10)
    achieved = flops * images_per_s / 1e9
    return {
        "model_gflops_per_image": round(flops / 1e9, 3),
        "gemm_peak_gflops_fp32": round(peak, 1),
        "encoder_images_per_s": round(images_per_s, 2),
        "encoder_achieved_gflops": round(achieved, 1),
        "fraction_of_peak": round(achieved / peak, 3),
    }
