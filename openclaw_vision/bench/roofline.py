"""`roofline` mode: what fraction of this machine's dense-GEMM peak the encoder reaches.

The peak is measured with the engine the encoder runs on (ONNX Runtime's MLAS, one large
float32 MatMul, same thread count), so the fraction compares like with like; NumPy's BLAS
rate is reported beside it.
"""

from __future__ import annotations

import numpy as np

from ..core.cpu import usable_cores
from ..models.configs import get_config
from .harness import Variant, run_interleaved

#: the INT8 GEMM that bounds the encoders (stages and capacity modes): n x n x n
PEAK_GEMM_N = 1024


def _best_rate(fn, flops: float, repeats: int) -> float:
    """GFLOP/s of the fastest of `repeats` calls of `fn` (after one warm-up call)."""
    v = Variant("gemm", fn)
    run_interleaved([v], rounds=repeats, iters=1, warmup=1)
    return flops / (min(v.samples_ms) / 1e3) / 1e9


def fp32_gemm_call(n: int, threads: int = 0, spinning: bool = False):
    """A callable running one n×n×n float32 MatMul on ONNX Runtime (`session_options`; spinning off unless
    asked, as the encoders run)."""
    from onnx import TensorProto, helper

    from ..core.ortsession import session

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "gemm",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = session(model.SerializeToString(), threads, spinning=spinning)
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((n, n), dtype=np.float32) for x in ("a", "b")}
    return lambda: sess.run(None, feeds)


def ort_gemm_peak_gflops(n: int, repeats: int, threads: int = 0) -> float:
    """Best float32 MatMul rate of ONNX Runtime on the CPU, GFLOP/s (spinning on, ORT's default, for the peak)."""
    return _best_rate(fp32_gemm_call(n, threads, spinning=True), 2 * n**3, repeats)


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


def int8_units() -> str:
    """The CPU's INT8 dot-product units, as the goal's 'VNNI peak' needs them named."""
    from ..core.cpu import int8_dot_units

    have = int8_dot_units()
    if have:
        return ", ".join(have)
    return "no VNNI/AMX (AVX2 only: INT8 dot products take 3 instructions, no 4-way u8·s8 accumulate)"


def qdq_matmul_model(n: int) -> bytes:
    """One n×n×n MatMul in our INT8 form (s8 activations and weights, zero point 0, Q/DQ): the
    INT8 GEMM that each runtime fuses out of our models' weight layers, alone."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (n, n), dtype=np.int8)
    inits = [
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(4 / 127, np.float32), "a_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["a", "a_scale", "zp"], ["a_q"]),
        helper.make_node("DequantizeLinear", ["a_q", "a_scale", "zp"], ["a_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "zp"], ["w_dq"]),
        helper.make_node("MatMul", ["a_dq", "w_dq"], ["c"]),
    ]
    graph = helper.make_graph(
        nodes,
        "int8_gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def int8_gemm_call(runtime: str, n: int, threads: int = 0):
    """A callable running one n×n×n INT8 GEMM (a Q/DQ MatMul) on `runtime` with the encoders' own
    settings (ONNX Runtime: `session_options`, exact U8U8 kernels where there is no VNNI)."""
    import tempfile
    from pathlib import Path

    x = np.random.default_rng(1).uniform(-4, 4, (n, n)).astype(np.float32)
    blob = qdq_matmul_model(n)
    if runtime == "onnxruntime":
        from ..core.ortsession import session

        sess = session(blob, threads)
        return lambda: sess.run(None, {"a": x})
    if runtime == "openvino":
        import openvino as ov

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "gemm.onnx"
            path.write_bytes(blob)
            compiled = ov.Core().compile_model(
                str(path),
                "CPU",
                {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads or usable_cores()},
            )
        req = compiled.create_infer_request()
        return lambda: req.infer({0: x})
    raise ValueError(f"unknown runtime {runtime!r}")
