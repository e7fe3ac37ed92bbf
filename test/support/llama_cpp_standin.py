"""A stand-in for llama-cpp-python whose decode ends its process, as llama.cpp's AMX path does on some CPUs.

test_llamacpp_probe.py copies this file to `<root>/llama_cpp/__init__.py` (with dummy native
libraries in `llama_cpp/lib/` and a dist-info, so the probe's identity has something to read).
Importing it is harmless, like the real package's import; everything up to `llama_decode`
behaves like llama.cpp enough for vlm/llamacpp.py's decoder to get there. Then, by
$STANDIN_MODE: `sigill` (default) kills the process with SIGILL, `raise` raises (the child exits
1), `hang` never returns (the probe's timeout). Each decode reached is appended to
`<root>/decodes.log`, so a test can tell whether a probe ran.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

__version__ = "0.0.0+standin"
GGML_TYPE_F32 = 0
LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
LLAMA_FTYPE_MOSTLY_Q4_K_M = 15
DECODES = Path(__file__).resolve().parents[1] / "decodes.log"


def llama_log_callback(fn):
    return fn


def llama_log_set(callback, user) -> None:
    return None


def llama_backend_init() -> None:
    return None


def llama_model_default_params() -> SimpleNamespace:
    return SimpleNamespace(n_gpu_layers=-1)


def llama_context_default_params() -> SimpleNamespace:
    return SimpleNamespace()


def llama_model_load_from_file(path: bytes, params) -> object:
    if not Path(path.decode()).is_file():
        return None
    return object()


def llama_init_from_model(model, params) -> object:
    return object()


def llama_get_memory(ctx) -> object:
    return object()


def llama_batch_init(n: int, embd: int, seqs: int) -> SimpleNamespace:
    return SimpleNamespace(
        n_tokens=0, token=[0] * n, pos=[0] * n, n_seq_id=[0] * n, seq_id=[[0] for _ in range(n)], logits=[0] * n,
        embd=(ctypes.c_float * (n * embd))() if embd else None,
    )  # fmt: skip


def llama_decode(ctx, batch) -> int:
    with open(DECODES, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    mode = os.environ.get("STANDIN_MODE", "sigill")
    if mode == "raise":
        raise RuntimeError("stand-in: llama_decode failed")
    if mode == "hang":
        time.sleep(3600)
    os.kill(os.getpid(), signal.SIGILL)
    time.sleep(60)  # the signal is delivered before this returns
    return -1


def llama_model_free(model) -> None:
    return None


def llama_free(ctx) -> None:
    return None


def llama_batch_free(batch) -> None:
    return None
