"""llama.cpp is probed in a child process before anything relies on it (vlm/probe.py), with a stand-in that crashes.

The stand-in (test/support/llama_cpp_standin.py) is a `llama_cpp` package whose decode kills its
process with SIGILL, as llama.cpp's AMX path does on some Xeons; it crashes on every CPU, so these
tests say the same on AVX2-only, VNNI and AMX machines. The real wheel's probe is in test_gguf.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from openclaw_vision.core import children
from openclaw_vision.vlm import llamacpp, probe

pytestmark = pytest.mark.vlm
STANDIN = Path(__file__).parent / "support" / "llama_cpp_standin.py"


@pytest.fixture()
def standin(tmp_path) -> Path:
    """A folder holding the stand-in `llama_cpp` (native libraries as dummy files, a dist-info for its version)."""
    root = tmp_path / "standin"
    pkg = root / "llama_cpp"
    (pkg / "lib").mkdir(parents=True)
    shutil.copy(STANDIN, pkg / "__init__.py")
    for lib in ("libllama.so", "libggml-cpu.so", "libggml-base.so"):
        (pkg / "lib" / lib).write_bytes(b"\x7fELF stand-in " + lib.encode())
    dist = root / "llama_cpp_python-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.0.0+standin\n")
    return root


def _decodes(root: Path) -> int:
    """How many times a process reached the stand-in's llama_decode (each probe reaches it once)."""
    log = root / "decodes.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture()
def gguf_file(tmp_path) -> Path:
    """A tiny GGUF (F32) for the VLM to load."""
    from openclaw_vision.vlm.config import LlamaConfig
    from openclaw_vision.vlm.gguf import write_gguf
    from openclaw_vision.vlm.tokenizer import build_default_tokenizer
    from openclaw_vision.vlm.weights import random_params

    cfg = LlamaConfig(vocab_size=512, hidden=64, intermediate=128, layers=1, heads=4, kv_heads=2, max_positions=128)
    tok = build_default_tokenizer(tmp_path / "tok", cfg.vocab_size)
    return write_gguf(tmp_path / "tiny-F32.gguf", cfg, random_params(cfg, 0), tok, "F32")


@pytest.fixture()
def standin_installed(standin, monkeypatch) -> Path:
    """This process takes the stand-in for llama.cpp: found there (never imported here), and 'installed'."""
    monkeypatch.setattr(probe, "library_root", lambda: standin)
    monkeypatch.setattr(llamacpp, "available", lambda: True)
    return standin


def test_a_crash_is_recorded_once_with_how_it_ended(standin, data_home):
    first = probe.verdict(standin)
    assert (first.ok, first.how, first.probed) == (False, "killed by SIGILL", True)
    assert "a 40-token prompt and a one-token decode in a child process): killed by SIGILL" in first.reason
    assert str(data_home / "probes" / "llamacpp.json") in first.reason  # says where, so a user can retry
    assert _decodes(standin) == 1
    again = probe.verdict(standin)  # a later start reads the record: no second probe
    assert (again.ok, again.how, again.probed, again.key) == (False, "killed by SIGILL", False, first.key)
    assert _decodes(standin) == 1
    import json

    entry = json.loads((data_home / "probes" / "llamacpp.json").read_text())["verdicts"][first.key]
    assert entry["how"] == "killed by SIGILL" and entry["identity"]["llama_cpp"] == "0.0.0+standin"
    assert set(entry["identity"]["libs"]) == {"libllama.so", "libggml-cpu.so", "libggml-base.so"}
    # another build of the library (its libggml-cpu changed) is another identity: probed again
    with open(standin / "llama_cpp" / "lib" / "libggml-cpu.so", "ab") as fh:
        fh.write(b"rebuilt")
    rebuilt = probe.verdict(standin)
    assert rebuilt.probed and rebuilt.key != first.key and _decodes(standin) == 2


def test_a_failing_decode_is_recorded_with_its_message(standin, data_home, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "raise")
    v = probe.verdict(standin)
    assert (v.ok, v.how) == (False, "exit 1")
    assert "stand-in: llama_decode failed" in v.reason
    assert not probe.verdict(standin).probed


def test_a_probe_that_times_out_is_not_recorded(standin, data_home, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "hang")
    v = probe.verdict(standin, timeout=5)
    assert (v.ok, v.how, v.probed) == (False, "timed out", True)
    assert "next start probes again" in v.reason
    assert not (data_home / "probes" / "llamacpp.json").exists()


def test_auto_falls_back_to_ours_with_one_log_line_and_an_explicit_llamacpp_is_refused(
    standin_installed, data_home, gguf_file, caplog
):
    from openclaw_vision.vlm.pipeline import load_vlm, pick_llm_backend

    with caplog.at_level(logging.INFO):
        model = load_vlm(str(gguf_file), 32, 4, llm_backend="auto")
    assert model.backend == "ours" and "killed by SIGILL" in model.backend_reason
    said = [r for r in caplog.records if "killed by SIGILL" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, [r.getMessage() for r in caplog.records]
    assert said[0].getMessage().startswith("llm backend ours (auto: fell back to ours: llama.cpp failed its probe")
    with pytest.raises(probe.LlamaCppUnusable) as refused:
        pick_llm_backend(str(gguf_file), "llamacpp")
    said_refused = str(refused.value)
    assert said_refused.startswith("llm_backend llamacpp: llama.cpp failed its probe on this CPU (a 40-token prompt "
                                   "and a one-token decode in a child process): killed by SIGILL")  # fmt: skip
    assert _decodes(standin_installed) == 1  # probed once, for both choices


def test_bench_vlm_skips_the_llamacpp_rows_with_the_reason(standin_installed, data_home):
    from openclaw_vision.bench.report import _gguf_lines
    from openclaw_vision.bench.vlm import _gguf_part

    got = _gguf_part(True, "tiny", 1.0)
    assert set(got) == {"vlm_gguf"} and "killed by SIGILL" in got["vlm_gguf"]["skipped"]
    assert "GGUF / llama.cpp rows skipped: llama.cpp failed its probe" in "\n".join(_gguf_lines(got["vlm_gguf"]))


def _vlm_node(argv: list[str], log: Path, standin: Path) -> children.Child:
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(standin), os.environ.get("PYTHONPATH", "")) if p)}
    return children.Child(children.cli("vlm", *argv), log_path=log, env=env)


@pytest.mark.dds
def test_the_vlm_node_never_dies_of_a_crashing_llamacpp(standin, data_home, gguf_file, dds_domain, tmp_path):
    """The node sees the stand-in as its llama_cpp (PYTHONPATH): auto falls back to ours and keeps running
    (probed at the first start only), an explicit llamacpp exits 2 with the reason."""
    args = ["--llm", str(gguf_file), "--model", "tiny", "--visual-tokens", "4", "--transport", "cyclonedds"]
    logs = []
    for start in range(2):
        log = tmp_path / f"auto-{start}.log"
        with _vlm_node(args, log, standin) as node:
            deadline = time.monotonic() + 120
            while node.alive() and "ready:" not in node.log_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert node.alive() and "ready:" in node.log_text(), node.log_text()
            rc = node.stop()
        assert rc == 0, node.log_text()
        logs.append(log.read_text())
        said = [line for line in logs[-1].splitlines() if "killed by SIGILL" in line]
        assert len(said) == 1 and "WARNING: llm backend ours (auto: fell back to ours:" in said[0], logs[-1]
    assert "probing it in a child process" in logs[0] and "probing" not in logs[1]
    assert _decodes(standin) == 1
    with _vlm_node([*args, "--llm-backend", "llamacpp"], tmp_path / "explicit.log", standin) as node:
        assert node.wait(120) == 2, node.log_text()
        text = node.log_text()
    assert ("cannot load the VLM: llm_backend llamacpp: llama.cpp failed its probe on this CPU (a 40-token prompt and "
            "a one-token decode in a child process): killed by SIGILL") in text  # fmt: skip
    assert _decodes(standin) == 1  # the recorded verdict, not a third probe
