"""What this CPU is, in the terms that change our numbers: its vector features and ISA class.

These machines change between AVX2-only EPYCs, AVX-512 VNNI Xeons/EPYCs and AMX Xeons, and each
change moved something: INT8 runtimes round a Q/DQ model differently per ISA (OpenVINO's oneDNN
kernels under AVX2 gave a lower cosine than under VNNI), llama.cpp's AMX path crashed. So an INT8
verdict is stamped with the ISA class it was measured on (`isa_class`), and a native build is cached
per feature set (`vector_features`). One reading of /proc/cpuinfo for the whole package: the bench's
host record, the ladder and the Makefile ask this module too.

It runs on its own as well, standard library only, so the Makefile can ask it with the system
Python before the venv (or the package) exists: `python3 -m openclaw_vision.core.cpu --vector-features`
from the checkout names the folder the llama.cpp wheel for this CPU kind is cached in, and
`--no-amx-cflags` gives the compiler flags that keep AMX out of it (the AMX features are listed here once).

oneDNN (OpenVINO's CPU kernels) can be held below the CPU's ISA with `ONEDNN_MAX_CPU_ISA`; a
runtime that honours it runs at `effective_class(onednn=True)`, the lower of the two.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from functools import lru_cache

#: ISA classes that change INT8 arithmetic, lowest first (AVX2: 16-bit pair sums; VNNI: int8 dot
#: products into int32; AMX: tile multiplies).
CLASSES = ("avx2", "avx_vnni", "avx512", "avx512_vnni", "amx")
#: The flags that decide the class, highest class first.
_CLASS_FLAGS = (("amx", "amx_int8"), ("avx512_vnni", "avx512_vnni"), ("avx512", "avx512bw"),
                ("avx_vnni", "avx_vnni"), ("avx2", "avx2"))  # fmt: skip
#: The AMX features (tile multiplies): llama.cpp is compiled with each of them off (`no_amx_cflags`).
AMX_FEATURES = ("amx_tile", "amx_int8", "amx_bf16")
#: Vector features that a native build (-march=native) depends on: the cache key of such builds.
VECTOR_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi",
                   "avx512_vbmi2", "avx512_vpopcntdq", "avx512_bitalg", "avx512_vnni", "avx512_bf16",
                   "avx512_fp16", "avx_vnni", *AMX_FEATURES)  # fmt: skip
#: oneDNN's ONEDNN_MAX_CPU_ISA values (and their older AVX10 names) → our class.
ONEDNN_ISAS = {
    "SSE41": "sse", "AVX": "avx", "AVX2": "avx2", "AVX2_VNNI": "avx_vnni", "AVX2_VNNI_2": "avx_vnni",
    "AVX512_CORE": "avx512", "AVX512_CORE_VNNI": "avx512_vnni", "AVX512_CORE_BF16": "avx512_vnni",
    "AVX512_CORE_FP16": "avx512_vnni", "AVX10_1_512": "avx512_vnni", "AVX512_CORE_AMX": "amx",
    "AVX10_1_512_AMX": "amx", "AVX512_CORE_AMX_FP16": "amx", "AVX10_1_512_AMX_FP16": "amx",
}  # fmt: skip
#: The forced levels a test can ask oneDNN for, with the flag the CPU needs for each.
ONEDNN_FORCIBLE = (("AVX2", "avx2"), ("AVX512_CORE_VNNI", "avx512_vnni"), ("AVX512_CORE_AMX", "amx_int8"))
_BELOW_AVX2 = ("sse", "avx")


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask (taskset, a container's cpuset), not the machine's
    count; the count where the platform has no affinity call. Every default thread count reads this one (the
    inference runtimes, the prepare pool, llama.cpp), so a node pinned to two cores of eight runs two threads."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def flags() -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo has none: not Linux, or not x86)."""
    try:
        with open("/proc/cpuinfo") as fh:
            line = next((ln for ln in fh if ln.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.split(":", 1)[-1].split())


def model_name() -> str:
    """The CPU's model name, e.g. 'Intel(R) Xeon(R) Processor' (the machine type where none is given)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def isa_class(have: frozenset[str] | None = None) -> str:
    """The CPU's INT8 ISA class ('avx2', 'avx512_vnni', 'amx', ...; the machine type elsewhere, e.g. 'aarch64')."""
    have = flags() if have is None else have
    for name, flag in _CLASS_FLAGS:
        if flag in have:
            return name
    return platform.machine().lower() or "unknown"


def int8_dot_units(have: frozenset[str] | None = None) -> list[str]:
    """The CPU's INT8 dot-product extensions (AMX, AVX-512 VNNI, AVX-VNNI), best first."""
    have = flags() if have is None else have
    return [f for f in ("amx_int8", "avx512_vnni", "avx_vnni") if f in have]


def vector_features(have: frozenset[str] | None = None) -> str:
    """The features a -march=native build depends on, as one stable string ('avx2-avx512f-...')."""
    have = flags() if have is None else have
    return "-".join(f for f in VECTOR_FEATURES if f in have) or platform.machine().lower()


def no_amx_cflags() -> str:
    """GCC's flags that turn every AMX feature off, even under -march=native ('-mno-amx-tile ...'): ggml's AMX
    matmul dies with SIGILL on these Xeons (the Makefile compiles llama.cpp with them). Only the features GCC 11
    knows: a compiler that refuses one of them is given none (the Makefile checks), and without AMX-TILE no
    other AMX instruction is emitted."""
    return " ".join("-mno-" + feature.replace("_", "-") for feature in AMX_FEATURES)


def onednn_max_isa() -> str | None:
    """ONEDNN_MAX_CPU_ISA as set in this process's environment (upper case), or None."""
    value = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return value if value and value != "DEFAULT" else None


def effective_class(onednn: bool = False) -> str:
    """The ISA class a runtime computes at: the CPU's, or for oneDNN (onednn=True) the lower of the
    CPU's and ONEDNN_MAX_CPU_ISA's. An unknown cap value is taken as given (oneDNN ignores it)."""
    own = isa_class()
    cap = ONEDNN_ISAS.get(onednn_max_isa() or "") if onednn else None
    if cap is None or own not in CLASSES:
        return own
    if cap in _BELOW_AVX2:
        return cap
    return CLASSES[min(CLASSES.index(own), CLASSES.index(cap))]


def isa_record(onednn: bool = False) -> dict[str, str | None]:
    """What a verdict says about where it was measured: the class the runtime ran at, the CPU's own
    class, and oneDNN's cap where one was set (for a runtime that honours it)."""
    cap = onednn_max_isa() if onednn else None
    return {"class": effective_class(onednn), "cpu": isa_class(), "onednn_max_isa": cap}


def onednn_forcible() -> list[tuple[str, str]]:
    """(ONEDNN_MAX_CPU_ISA value, class) this CPU can be held to: AVX2 always on x86-64 with AVX2,
    AVX512_CORE_VNNI with VNNI, AVX512_CORE_AMX with AMX."""
    return [(value, ONEDNN_ISAS[value]) for value, flag in ONEDNN_FORCIBLE if flag in flags()]


def main(argv: list[str] | None = None) -> int:
    """Print one fact about this CPU: for shell callers (the Makefile) that must not parse /proc/cpuinfo again."""
    parser = argparse.ArgumentParser(prog="python3 -m openclaw_vision.core.cpu", description=main.__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--vector-features", action="store_true", help="the -march=native cache key (vector_features)")
    what.add_argument("--isa-class", action="store_true", help="the INT8 ISA class (isa_class)")
    what.add_argument("--no-amx-cflags", action="store_true", help="GCC's flags for no AMX code (no_amx_cflags)")
    args = parser.parse_args(argv)
    print(vector_features() if args.vector_features else no_amx_cflags() if args.no_amx_cflags else isa_class())
    return 0


if __name__ == "__main__":
    sys.exit(main())
