"""Model file size and the resident memory of an ONNX Runtime session, one process per model.

Two numbers: `session_mb`, the peak over loading and one run (what must fit), and `steady_mb`,
what stays resident afterwards (what the node keeps while it runs); loading needs transient
buffers (the INT8 ViT-bigG-14: 2.9 GB peak, 1.8 GB steady).

Each measurement runs in a fresh interpreter (`python -m openclaw_vision.quant.memory MODEL`):
peak RSS is a per-process high-water mark, so two sessions in one process would blur it. The
baseline is the same interpreter after importing numpy and onnxruntime, before the session.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..core import children
from ..core.errors import OpenclawError
from ..core.heap import release_free_memory
from ..core.phases import rss_mb
from ..models.onnx_files import files_size

#: ViT-bigG-14 FP32: minutes to load 7.4 GB
MEASURE_TIMEOUT_S = 3600.0


class MemoryMeasureError(OpenclawError, RuntimeError):
    """The child that measures a session's memory failed (its output's tail says why)."""


def _peak_mb() -> float:
    """This process's RSS high-water mark in MB. VmHWM, not getrusage's ru_maxrss: that one survives
    fork+exec and would report the (large) parent's peak."""
    peak = rss_mb("VmHWM")
    if not peak:
        raise OSError("no VmHWM in /proc/self/status (Linux only)")
    return peak


def measure_here(model: Path) -> dict[str, float]:
    """Peak RSS over loading `model` and one batch-1 run, and what stays resident after it (steady)."""
    import numpy as np

    base = _peak_mb()
    from ..core.ortsession import session

    sess = session(model)
    inp = sess.get_inputs()[0]
    size = inp.shape[-1] if isinstance(inp.shape[-1], int) else 224
    sess.run(None, {inp.name: np.zeros((1, 3, size, size), np.float32)})
    peak = _peak_mb()
    release_free_memory()  # load-time buffers ONNX Runtime has freed but glibc still holds
    steady = rss_mb("VmRSS")
    return {
        "baseline_rss_mb": round(base, 1),
        "peak_rss_mb": round(peak, 1),
        "session_mb": round(peak - base, 1),
        "steady_mb": round(steady - base, 1),
    }


def measure(model: Path) -> dict[str, float]:
    """File size and session memory of `model`, measured in a child interpreter."""
    done = children.run(children.python("-m", "openclaw_vision.quant.memory", str(model)), timeout=MEASURE_TIMEOUT_S)
    if not done.ok:
        raise MemoryMeasureError(f"measuring the session memory of {model}: the child {done.how}:\n{done.tail()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["file_mb"] = round(files_size(Path(model)) / 1e6, 2)  # the .onnx and its data file
    return result


if __name__ == "__main__":
    print(json.dumps(measure_here(Path(sys.argv[1]))))
