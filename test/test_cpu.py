"""One reader of /proc/cpuinfo (core/cpu.py): the bench, the ladder and the Makefile ask it.

The Makefile names llama.cpp's cached wheel by this CPU's vector features before the venv exists,
so the module must answer from the checkout with nothing but the standard library.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from openclaw_vision.core import cpu

ROOT = Path(__file__).resolve().parents[1]


def test_the_module_answers_from_the_checkout_with_the_standard_library_only():
    # -S: no site-packages (neither the editable install nor numpy), as on a machine before `make setup`
    for flag, want in (
        ("--vector-features", cpu.vector_features()),
        ("--isa-class", cpu.isa_class()),
        ("--no-amx-cflags", cpu.no_amx_cflags()),
    ):
        out = subprocess.run([sys.executable, "-S", "-m", "openclaw_vision.core.cpu", flag], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        assert out.strip() == want


def test_nothing_else_reads_proc_cpuinfo_and_the_makefile_asks_the_module():
    readers = [p.relative_to(ROOT).as_posix() for folder in ("openclaw_vision", "scripts")
               for p in (ROOT / folder).rglob("*.py") if "/proc/cpuinfo" in p.read_text()]  # fmt: skip
    assert readers == ["openclaw_vision/core/cpu.py"]
    make = (ROOT / "Makefile").read_text()
    assert not [line for line in make.splitlines() if "cpuinfo" in line and not line.startswith("#")]
    assert "LLAMACPP_ISA := $(shell $(PYTHON) -m openclaw_vision.core.cpu --vector-features)" in make
    # nor a list of AMX features of its own: the flags that keep AMX out of llama.cpp are core/cpu.py's
    assert "LLAMACPP_AMX_OFF := $(shell $(PYTHON) -m openclaw_vision.core.cpu --no-amx-cflags)" in make
    assert not [line for line in make.splitlines() if "-mno-amx-" in line and not line.startswith("#")]


def test_llamacpp_is_compiled_with_every_amx_feature_off():
    """`make llamacpp`'s flags turn off each AMX feature core/cpu.py names (ggml's AMX matmul dies with SIGILL),
    and a compiler that knows them then defines no AMX macro even under -march=native."""
    import shutil

    assert cpu.no_amx_cflags() == "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    assert {f for f in cpu.VECTOR_FEATURES if f.startswith("amx")} == set(cpu.AMX_FEATURES)
    if shutil.which("cc") is None:
        return
    probe = subprocess.run(["cc", "-march=native", *cpu.no_amx_cflags().split(), "-dM", "-E", "-"], input="",
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode == 0:  # a compiler that refuses the flags is given none (and emits no AMX code)
        assert "__AMX" not in probe.stdout


def test_the_bench_and_the_ladder_name_the_cpu_as_cpu_py_reads_it(monkeypatch):
    from openclaw_vision.bench import ladder
    from openclaw_vision.bench.harness import host_info

    assert host_info()["cpu"] == cpu.model_name()
    vnni = frozenset({"avx2", "avx512f", "avx512_vnni"})
    monkeypatch.setattr(cpu, "flags", lambda: vnni)
    assert ladder.host()["vnni"] == "yes" and ladder.host()["avx2"] is True
    monkeypatch.setattr(cpu, "flags", lambda: frozenset({"avx2", "fma"}))
    assert ladder.host()["vnni"] == "no"
