"""Time and peak memory of each phase of a long build job (export, quantisation, the model ladder).

Peak memory is the process's RSS high-water mark (VmHWM), reset at the start of every phase
through /proc/self/clear_refs ("5" resets the peak, Linux >= 4.0; see proc(5)), so each phase
reports its own peak rather than the largest so far. Where the reset is not possible (not
Linux, or a kernel that refuses it) the value is the peak since the process started, and the
record says so.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .heap import release_free_memory

log = logging.getLogger(__name__)


def rss_mb(key: str = "VmHWM") -> float:
    """VmHWM (peak resident set size) or VmRSS (current) of this process in MB (10^6 bytes); 0.0 where unknown.

    Note: resetting the peak also resets what getrusage (and so `/usr/bin/time -v`) reports as the
    process's maximum RSS; with phases, the largest phase peak is the process's peak.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024 / 1e6  # the kernel's "kB" are KiB
    except OSError:
        pass
    return 0.0


def reset_peak() -> bool:
    """Start a new high-water mark at the current RSS; False when the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class Phase:
    name: str
    seconds: float
    peak_rss_mb: float
    rss_end_mb: float
    peak_is_since_start: bool = False


@dataclass
class PhaseLog:
    """An ordered record of phases; `with phases.phase("calibration"): ...` adds one."""

    phases: list[Phase] = field(default_factory=list)

    @contextlib.contextmanager
    def phase(self, name: str):
        reset = reset_peak()
        t0 = time.perf_counter()
        log.info("phase %s ...", name)
        try:
            yield
        finally:
            gc.collect()
            release_free_memory()
            seconds = round(time.perf_counter() - t0, 1)
            p = Phase(name, seconds, round(rss_mb(), 1), round(rss_mb("VmRSS"), 1), not reset)
            self.phases.append(p)
            log.info("phase %s: %.1f s, peak RSS %.0f MB", name, p.seconds, p.peak_rss_mb)

    @property
    def peak_rss_mb(self) -> float:
        return max((p.peak_rss_mb for p in self.phases), default=0.0)

    def as_list(self) -> list[dict]:
        return [asdict(p) for p in self.phases]
