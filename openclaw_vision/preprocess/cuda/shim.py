"""Run preprocess.cu on the CPU: g++ through shim.h, optionally under ASan/UBSan.

For tests and the device check's dry run. A job (`KernelJob` + raw bytes) is written to a file
in the layout shim_main.cpp reads, the compiled driver runs the real kernel source over it
with the same grid and block as a GPU launch, and the output comes back as a NumPy array.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from ...core import children
from ...core.errors import OpenclawError
from ..kernel_plan import TERMS, KernelJob
from . import SHIM_MAIN, SOURCE, compile_options

MAGIC = 0x0C1A57
DECODE_BLOCK = (16, 16)
SANITIZERS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
#: one compile of the driver with the kernel (ASan builds take the longest: under a minute here)
COMPILE_TIMEOUT_S = 600.0


class ShimError(OpenclawError, RuntimeError):
    """The CPU build of the kernel failed to compile or to run (a sanitizer report included)."""


def compiler() -> str | None:
    return shutil.which("g++")


def build(out_dir: Path, rows_per_thread: int, sanitize: bool = True, opt: str = "-O1") -> Path:
    """Compile the driver with the kernel for the CPU; returns the executable's path."""
    cxx = compiler()
    if cxx is None:
        raise ShimError("g++ is not installed")
    out_dir.mkdir(parents=True, exist_ok=True)
    exe = out_dir / f"shim_run_r{rows_per_thread}{'_san' if sanitize else ''}"
    defines = [o for o in compile_options(rows_per_thread) if o.startswith("-D")]
    cmd = [cxx, "-std=c++17", opt, "-g", "-Wall", "-Wextra", "-Wno-unknown-pragmas", "-Werror", *defines]
    cmd += [*(SANITIZERS if sanitize else ()), "-I", str(SOURCE.parent), str(SHIM_MAIN), "-o", str(exe)]
    res = children.run(cmd, timeout=COMPILE_TIMEOUT_S)
    if not res.ok:
        raise ShimError(f"g++ {res.how}:\n{res.stderr[-4000:]}")
    return exe


def _header(**fields: int) -> np.ndarray:
    order = (
        "kind",
        "height",
        "width",
        "step",
        "encoding",
        "big_endian",
        "crop_x0",
        "crop_y0",
        "size",
        "y_count",
        "x_count",
        "half_output",
        "src_bytes",
        "grid_x",
        "grid_y",
        "block_x",
        "block_y",
        "slot",
        "slots",
        "magic",
    )
    return np.array([fields.get(k, 0) for k in order], "<i8")


def preprocess_job(
    job: KernelJob, raw: np.ndarray, big_endian: bool = False, half: bool = False, slot: int = 0, slots: int = 1
) -> bytes:
    """A job file for the `preprocess` kernel: exactly `job.nbytes` image bytes, no slack; the
    output is row `slot` of a (slots, 3, S, S) batch (the engine's input buffer on the GPU)."""
    raw = np.ascontiguousarray(raw, np.uint8).reshape(-1)[: job.nbytes]
    if raw.size < job.nbytes:
        raise ValueError(f"{raw.size} bytes, the job reads {job.nbytes}")
    s = job.scalars(big_endian)
    head = _header(
        kind=0,
        half_output=int(half),
        src_bytes=raw.size,
        grid_x=job.grid[0],
        grid_y=job.grid[1],
        block_x=job.block[0],
        block_y=job.block[1],
        slot=slot,
        slots=slots,
        magic=MAGIC,
        **s,
    )
    parts = [
        head,
        job.rows.start.astype("<i4"),
        job.rows.weights.astype("<f4"),
        job.cols.start.astype("<i4"),
        job.cols.weights.astype("<f4"),
        job.affine.astype("<f4"),
        raw,
    ]
    assert job.rows.weights.shape[1] == TERMS
    return b"".join(np.ascontiguousarray(p).tobytes() for p in parts)


def decode_job(height: int, width: int, step: int, code: int, nbytes: int, raw: np.ndarray, big_endian: bool) -> bytes:
    """A job file for `decode_rgb8` (every frame pixel to RGB, for bit-exact colour checks)."""
    raw = np.ascontiguousarray(raw, np.uint8).reshape(-1)[:nbytes]
    gx, gy = -(-width // DECODE_BLOCK[0]), -(-height // DECODE_BLOCK[1])
    head = _header(
        kind=1,
        height=height,
        width=width,
        step=step,
        encoding=code,
        big_endian=int(big_endian),
        src_bytes=raw.size,
        grid_x=gx,
        grid_y=gy,
        block_x=DECODE_BLOCK[0],
        block_y=DECODE_BLOCK[1],
        magic=MAGIC,
    )
    return head.tobytes() + raw.tobytes()


def run(exe: Path, jobs: list[bytes], timeout: float = 900) -> list[bytes]:
    """Run job files through the compiled driver in one process; returns each job's output bytes."""
    with tempfile.TemporaryDirectory(prefix="ocv_shim_") as tmp:
        args = []
        for i, job in enumerate(jobs):
            (Path(tmp) / f"{i}.job").write_bytes(job)
            args += [str(Path(tmp) / f"{i}.job"), str(Path(tmp) / f"{i}.out")]
        env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
        res = children.run([str(exe), *args], timeout=timeout, env=env)
        if not res.ok:
            raise ShimError(f"{exe.name} {res.how}:\n{res.stderr[-6000:]}")
        return [(Path(tmp) / f"{i}.out").read_bytes() for i in range(len(jobs))]


def preprocess(exe: Path, job: KernelJob, raw: np.ndarray, big_endian: bool = False, half: bool = False) -> np.ndarray:
    """The kernel's (3, S, S) output for one frame, float32 (or float16 when `half`)."""
    out = run(exe, [preprocess_job(job, raw, big_endian, half)])[0]
    return np.frombuffer(out, np.float16 if half else np.float32).reshape(3, job.size, job.size)


def preprocess_into_batch(
    exe: Path, jobs: list[tuple[KernelJob, np.ndarray, bool]], half: bool = False
) -> list[np.ndarray]:
    """Frame k of `jobs` (job, raw bytes, big_endian) written by the kernel into row k of a
    (len(jobs), 3, S, S) batch; returns each run's whole batch (rows it must not touch are NaN)."""
    n = len(jobs)
    files = [preprocess_job(job, raw, be, half, slot=k, slots=n) for k, (job, raw, be) in enumerate(jobs)]
    size = jobs[0][0].size
    dtype = np.float16 if half else np.float32
    return [np.frombuffer(out, dtype).reshape(n, 3, size, size) for out in run(exe, files)]
