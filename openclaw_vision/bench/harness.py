"""The bench's record of where it ran: the host and the versions of what it timed.

The timing loop itself (Variant, run_interleaved, summarise) is stats.py's, shared with the ladder
and quantize's latency check.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata


def host_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:  # not Linux: the platform's own name stands
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()}


def versions() -> dict:
    out = {}
    for pkg in ("openclaw_vision", "numpy", "onnxruntime", "openvino", "opencv-python-headless", "torch", "cyclonedds",
                "rosbags"):  # fmt: skip
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out
