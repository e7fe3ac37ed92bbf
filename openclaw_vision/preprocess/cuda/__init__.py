"""The fused preprocessing kernel's CUDA source (preprocess.cu) and how it is compiled.

The source is compiled at run time (CuPy's NVRTC on the robot or the GPU machine; the tests
use NVRTC from the `cuda-bindings` wheel for sm_87 and sm_90, and g++ through shim.h), so the
package ships the .cu file itself, not a binary for one GPU.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "preprocess.cu"
SHIM_MAIN = HERE / "shim_main.cpp"


@lru_cache(maxsize=1)
def kernel_source() -> str:
    return SOURCE.read_text()


def compile_options(rows_per_thread: int) -> tuple[str, ...]:
    """NVRTC options shared by the run-time build (CuPy) and the static checks."""
    return ("--std=c++17", f"-DROWS_PER_THREAD={int(rows_per_thread)}")
