"""`roofline` mode: what fraction of this machine's dense-GEMM peak the encoder reaches.

The peak is measured with the engine the encoder runs on (ONNX Runtime's MLAS, one large
float32 MatMul, same thread count), so the fraction compares like with like; NumPy's BLAS
rate is reported beside it.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..models.configs import get_config


def _best_rate(fn, flops: float, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return flops / best / 1e9


def ort_gemm_peak_gflops(n: int, repeats: int, threads: int = 0) -> float:
    """Best float32 MatMul rate of ONNX Runtime on the CPU, GFLOP/s."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "gemm",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or (os.cpu_count() or 1)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((n, n), dtype=np.float32) for x in ("a", "b")}
    return _best_rate(lambda: sess.run(None, feeds), 2 * n**3, repeats)


def numpy_gemm_gflops(n: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return _best_rate(lambda: a @ b, 2 * n**3, repeats)


def run_roofline(model: str, images_per_s: float, quick: bool) -> dict:
    flops = get_config(model).flops_per_image()
    n, repeats = (1024, 5) if quick else (2048, 8)
    peak = ort_gemm_peak_gflops(n, repeats)
    achieved = flops * images_per_s / 1e9
    return {
        "model_gflops_per_image": round(flops / 1e9, 3),
        "gemm_peak_gflops_fp32": round(peak, 1),
        "gemm_engine": f"onnxruntime MatMul {n}x{n}",
        "numpy_gemm_gflops_fp32": round(numpy_gemm_gflops(n, repeats), 1),
        "encoder_images_per_s": round(images_per_s, 2),
        "encoder_achieved_gflops": round(achieved, 1),
        "fraction_of_peak": round(achieved / peak, 3),
    }
