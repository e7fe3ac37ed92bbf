"""The one place an ONNX Runtime session is made: the node's encoder, the text tower, the quantiser,
the export check and the benches all take theirs from here, so a session setting (threads,
spinning, graph optimisation level, exact integer kernels) is decided once.

A leaf of the package (ONNX Runtime is imported when a session is made): the export check
(models/) and the encoders both need sessions, and models/ sits below encoders/.
"""

from __future__ import annotations

from pathlib import Path

from .cpu import usable_cores


def session_options(threads: int = 0, spinning: bool = False, exact_u8s8: bool = True, lanes: int = 1):
    """ONNX Runtime CPU session options shared by the node, the quantiser and the benchmarks.

    `threads` 0: the usable cores. `lanes`: calls made at once on the session (the encoder node's lanes),
    each gets its share of the threads (at least one).

    `session.x64quantprecision`: on x86 CPUs without VNNI (AVX2-only, e.g. the AMD EPYC
    machines here), ORT's default U8S8 integer GEMM pairs products in saturating 16-bit adds
    (vpmaddubsw); our INT8 models then drift from what they were gated on (measured: the
    switch model and the real Q/DQ model differed by 2e-3 instead of 2e-5; the tiny tower's
    gate fell from 0.9999 to 0.9988). The option makes ORT use exact U8U8 kernels on such CPUs
    only; it changes nothing on VNNI machines (ORT's session-option header documents it).
    `exact_u8s8=False` leaves ORT's default kernel (tests use it to check the gate on both paths).
    Spinning is off by default: a node runs one session next to DDS threads, and spinning idle
    threads steal the CPU the transport and preprocessing need.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, (threads if threads > 0 else usable_cores()) // max(1, lanes))
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    opts.add_session_config_entry("session.x64quantprecision", "1" if exact_u8s8 else "0")
    return opts


def session(
    model: str | Path | bytes,
    threads: int = 0,
    *,
    level: str = "all",
    providers: list[str] | None = None,
    spinning: bool = False,
    exact_u8s8: bool = True,
    quiet: bool = False,
    lanes: int = 1,
):
    """The one place an ONNX Runtime session is made (the node, text tower, quantiser, export check, benches).

    `model`: a path, or the bytes of a model with embedded weights. `level="basic"`: only graph
    optimisations that keep every intermediate tensor as the graph has it (for observing
    activations); "all" is what the node runs. `quiet`: warnings off (the quantiser's many
    candidate models would repeat the same ones). `lanes`: see `session_options`.
    """
    import onnxruntime as ort

    opts = session_options(threads, spinning, exact_u8s8, lanes)
    if level == "basic":
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if quiet:
        opts.log_severity_level = 3
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, opts, providers=providers or ["CPUExecutionProvider"])
