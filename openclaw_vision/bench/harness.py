"""The bench's record of where it ran: the host and the versions of what it timed.

The timing loop itself (Variant, run_interleaved, summarise) is stats.py's, shared with the ladder
and quantize's latency check.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata

from .. import cpu


def host_info() -> dict:
    """Where a run was measured: the CPU's model name (as cpu.py, the one reader, gives it), cores, machine, Python."""
    return {
        "cpu": cpu.model_name(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }


def versions() -> dict:
    out = {}
    for pkg in ("openclaw_vision", "numpy", "onnxruntime", "openvino", "opencv-python-headless", "torch", "cyclonedds",
                "rosbags"):  # fmt: skip
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out
