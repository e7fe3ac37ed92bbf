"""The `llamacpp` LLM backend: a GGUF file run by llama.cpp (llama-cpp-python's C API), behind our decoder's interface.

The pipeline talks to a decoder through three things: `new_cache(blocks, block_size)` (a cache with
a BlockManager, which admission and prefix bookkeeping use), and `run(cache, seq, parts, start)`
(positions start… of a sequence from parts, each token ids or (T, hidden) embeddings; returns the
last position's logits). Here:

- The K/V live in llama.cpp's unified KV cache (one pool of n_ctx cells for every sequence). The
  cache's manager is our BlockManager — same admission, same counts — whose `fork` also copies the
  llama.cpp sequence (`llama_memory_seq_cp`: the cells gain the child's id, nothing is recomputed
  or copied: the same saving as our copy-on-write) and whose `free` removes it (`seq_rm`). A freed
  sequence's cells are gone, so blocks are never found again by content (no hash index).
- Token parts go in a token batch; embedding parts (the projected visual tokens) in an `embd`
  batch, the way llama.cpp's multimodal path feeds image embeddings. Only the last position asks
  for logits.
- The KV cache is float32, like ours, so F32 files agree with our decoder to float rounding.

llama.cpp is optional (`make llamacpp`, or `pip install '.[llamacpp]'`); `available()` says whether
it is importable. Importable is not usable: native code compiled for this CPU can kill the process
(ggml's AMX path dies with SIGILL on AMX Xeons), so nothing here runs until `probe.verdict()` has
passed it in a child process (the backend choice in pipeline.py asks, and the tests and bench do).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from pathlib import Path

import numpy as np

from ..core.cpu import usable_cores
from .gguf import GgufModel, read_gguf
from .kv_cache import BlockManager, OutOfBlocks

log = logging.getLogger("llamacpp")
INSTALL_HINT = (
    "llama-cpp-python is not installed: `make llamacpp` (compiles llama.cpp for this CPU without its AMX "
    "kernels, ~6 min on 2 cores)"
)


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def _lib():
    try:
        import llama_cpp
    except ImportError as err:
        raise RuntimeError(INSTALL_HINT) from err
    return llama_cpp


_LOG_CALLBACK = None  # kept alive for as long as llama.cpp may call it


def _quiet_logs(lib) -> None:
    """llama.cpp prints every load detail on stderr: route it to Python logging (errors stay visible)."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is not None:
        return

    def forward(level: int, text: bytes, _user) -> None:
        line = text.decode(errors="replace").rstrip()
        if line:
            log.log(logging.WARNING if level in (3, 4) else logging.DEBUG, "%s", line)  # GGML_LOG_LEVEL_WARN, _ERROR

    _LOG_CALLBACK = lib.llama_log_callback(forward)
    lib.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def threads() -> int:
    """llama.cpp's thread count: one per core this process may use (core/cpu.py)."""
    return usable_cores()


class LlamaCppManager(BlockManager):
    """Our block bookkeeping (admission, the counts the node reports) mirrored into llama.cpp sequences."""

    def __init__(self, decoder: LlamaCppDecoder, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self.decoder = decoder
        self.native: dict = {}  # our sequence id → llama.cpp seq id

    def _index(self, block, previous, keys) -> None:  # a freed llama.cpp sequence's cells are gone
        return None

    def seq(self, seq_id) -> int:
        if seq_id not in self.native:
            self.native[seq_id] = self.decoder.take_seq()
        return self.native[seq_id]

    def fork(self, parent_id, child_id) -> None:
        super().fork(parent_id, child_id)
        self.decoder.copy_seq(self.seq(parent_id), self.seq(child_id))

    def free(self, seq_id) -> None:
        super().free(seq_id)
        if seq_id in self.native:
            self.decoder.drop_seq(self.native.pop(seq_id))


class LlamaCppCache:
    def __init__(self, decoder: LlamaCppDecoder, num_blocks: int, block_size: int) -> None:
        self.manager = LlamaCppManager(decoder, num_blocks, block_size)


class LlamaCppDecoder:
    """One GGUF model and one llama.cpp context (unified KV of n_ctx cells, up to `sequences` sequences)."""

    backend = "llamacpp"

    def __init__(self, model: GgufModel | Path, n_ctx: int = 4096, sequences: int = 8, n_threads: int | None = None,
                 n_batch: int = 512) -> None:  # fmt: skip
        lib = self.lib = _lib()
        self.gguf = model if isinstance(model, GgufModel) else read_gguf(model)
        self.cfg, self.dtype, self.xp = self.gguf.cfg, np.float32, np
        _quiet_logs(lib)
        lib.llama_backend_init()
        mp = lib.llama_model_default_params()
        mp.n_gpu_layers = 0
        self._model = lib.llama_model_load_from_file(str(self.gguf.path).encode(), mp)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {self.gguf.path} (see the log above)")
        self.n_ctx = min(n_ctx, self.cfg.max_positions * sequences)
        cp = lib.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = self.n_ctx, n_batch, n_batch, sequences
        cp.n_threads = cp.n_threads_batch = n_threads or threads()
        cp.type_k = cp.type_v = lib.GGML_TYPE_F32
        cp.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.kv_unified = True
        self._ctx = lib.llama_init_from_model(self._model, cp)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise RuntimeError(f"llama.cpp could not create a context of {self.n_ctx} positions")
        self._mem = lib.llama_get_memory(self._ctx)
        self.n_batch, self.vocab = n_batch, self.cfg.vocab_size
        self._tokens = lib.llama_batch_init(n_batch, 0, 1)
        self._embd = lib.llama_batch_init(n_batch, self.cfg.hidden, 1)
        self._free_seqs = list(range(sequences))
        self.threads = cp.n_threads

    # --- sequences ---------------------------------------------------------------------------
    def take_seq(self) -> int:
        if not self._free_seqs:
            raise OutOfBlocks("no free llama.cpp sequence (raise `sequences`); try again later")
        return self._free_seqs.pop(0)

    def copy_seq(self, src: int, dst: int) -> None:
        self.lib.llama_memory_seq_cp(self._mem, src, dst, -1, -1)

    def drop_seq(self, seq: int) -> None:
        self.lib.llama_memory_seq_rm(self._mem, seq, -1, -1)
        self._free_seqs.append(seq)

    def new_cache(self, num_blocks: int, block_size: int) -> LlamaCppCache:
        if num_blocks * block_size > self.n_ctx:
            raise ValueError(f"{num_blocks} KV blocks of {block_size} exceed the llama.cpp context of {self.n_ctx}")
        return LlamaCppCache(self, num_blocks, block_size)

    # --- the forward pass --------------------------------------------------------------------
    def _decode(self, batch, n: int) -> None:
        batch.n_tokens = n
        rc = self.lib.llama_decode(self._ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc}): {'no KV cell free' if rc == 1 else 'error'}")

    def _fill(self, batch, n: int, seq: int, pos0: int, last: bool) -> None:
        for i in range(n):
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if (last and i == n - 1) else 0

    def run(self, cache: LlamaCppCache, seq_id, parts, start: int) -> np.ndarray:
        """Positions [start, …) of the sequence from `parts` (token ids, or (T, hidden) embeddings); last logits."""
        cache.manager.take_copies()  # llama.cpp shares cells between sequences: no block copies to apply
        seq = cache.manager.seq(seq_id)
        pos = start
        chunks = []
        for part in parts:
            if np.ndim(part) == 1:
                ids = np.asarray(part, np.int64)
                chunks += [("t", ids[i : i + self.n_batch]) for i in range(0, len(ids), self.n_batch)]
            else:
                emb = np.ascontiguousarray(np.asarray(part), dtype=np.float32)
                if emb.shape[1] != self.cfg.hidden:
                    raise ValueError(f"embeddings of width {emb.shape[1]}; the model's is {self.cfg.hidden}")
                chunks += [("e", emb[i : i + self.n_batch]) for i in range(0, len(emb), self.n_batch)]
        if pos + sum(len(c) for _, c in chunks) > self.cfg.max_positions:
            raise ValueError(f"sequence exceeds the model's {self.cfg.max_positions} positions")
        for k, (kind, chunk) in enumerate(chunks):
            n, last = len(chunk), k == len(chunks) - 1
            if kind == "t":
                batch = self._tokens
                for i, tok in enumerate(chunk.tolist()):
                    batch.token[i] = tok
            else:
                batch = self._embd
                ctypes.memmove(batch.embd, chunk.ctypes.data, chunk.nbytes)
            self._fill(batch, n, seq, pos, last)
            self._decode(batch, n)
            pos += n
        ptr = self.lib.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.vocab,)).copy()

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self.lib.llama_batch_free(self._tokens)
            self.lib.llama_batch_free(self._embd)
            self.lib.llama_free(self._ctx)
            self.lib.llama_model_free(self._model)
            self._ctx = self._model = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may be gone already
            self.close()


def quantize_gguf(src: Path, dst: Path, ftype: str) -> Path:
    """llama.cpp's own quantiser (`llama_model_quantize`), e.g. ftype "Q4_K_M": the K-quants gguf-py cannot write."""
    lib = _lib()
    _quiet_logs(lib)
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = threads()
    if lib.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src} to {ftype}")
    return Path(dst)
