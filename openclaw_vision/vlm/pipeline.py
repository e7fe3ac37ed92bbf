"""One question about one frame: features → projector → prefix (shared) → question → decoded answer.

The sequence is BOS + system turn + user header + visual tokens (the *prefix*, identical for
every question about a frame) + question + assistant header, then the generated tokens. The
prefix is prefilled once per frame into its own KV sequence; each question forks it, so its
blocks are shared (the partial last block is copied on the first write) and only the question
is prefilled. Prefixes of the last `prefix_frames` frames are kept; older ones are freed.

Admission: a question is accepted only if the free blocks cover its question and
`max_new_tokens` in the worst case, so a running answer never runs out of cache midway; when
short, older frames' prefixes are evicted first, then the request is rejected (OutOfBlocks).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import LLM_BACKENDS, LlamaConfig, get_llm_config
from .decoder import LlamaDecoder
from .kv_cache import OutOfBlocks
from .projector import Projector, ProjectorConfig, projector_shapes, random_projector_params
from .sampling import Sampler, Sampling
from .tokenizer import DEFAULT_SYSTEM, ChatTokenizer, build_default_tokenizer
from .weights import llm_shapes, load_hf_llama, load_projector, place, random_params, validate

log = logging.getLogger("vlm")


@dataclass
class VlmModel:
    cfg: LlamaConfig
    proj_cfg: ProjectorConfig
    decoder: LlamaDecoder
    projector: Projector
    tokenizer: ChatTokenizer
    model_id: str
    xp: object = np
    backend: str = "ours"  # the LLM backend: "ours" (NumPy/CuPy decoder) or "llamacpp"
    backend_reason: str = ""  # why (auto's choice, logged at start)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


FALLBACK = "auto: fell back to ours"  # how a reason starts when auto passed over a llama.cpp that failed its probe


def pick_llm_backend(llm: str, requested: str = "auto") -> tuple[str, str]:
    """(backend, reason): auto takes llamacpp for a GGUF file where it is installed and passed its probe.

    llama.cpp is native code that can kill the process on some CPUs (vlm/probe.py): before it is
    chosen, its recorded verdict for this CPU kind and build is read (the first time, a child
    process makes it). A failed probe makes auto fall back to ours (the reason says why) and an
    explicit llamacpp an error (LlamaCppUnusable, a ValueError: the node and `ask` exit 2 with it).
    """
    from . import llamacpp
    from .gguf import is_gguf
    from .probe import LlamaCppUnusable, verdict

    if requested not in LLM_BACKENDS:
        raise ValueError(f"llm_backend {requested!r}; choose one of {', '.join(LLM_BACKENDS)}")
    gguf = Path(llm).suffix.lower() == ".gguf" or is_gguf(Path(llm))
    if requested == "llamacpp":
        if not gguf:
            raise ValueError(f"llm_backend llamacpp runs GGUF files; {llm!r} is not one")
        if not llamacpp.available():
            raise ValueError(llamacpp.INSTALL_HINT)
        probe = verdict()
        if not probe.ok:
            raise LlamaCppUnusable(f"llm_backend llamacpp: {probe.reason}; use llm_backend ours (or auto, which "
                                   "falls back to ours)")  # fmt: skip
        return "llamacpp", "asked for"
    if requested == "ours":
        return "ours", "asked for" + (" (GGUF dequantised to float32 at load)" if gguf else "")
    if not gguf:
        return "ours", "auto: not a GGUF file"
    if not llamacpp.available():
        return "ours", "auto: a GGUF file but llama-cpp-python is not installed (dequantised to float32)"
    probe = verdict()
    if not probe.ok:
        return "ours", f"{FALLBACK}: {probe.reason} (GGUF dequantised to float32)"
    return "llamacpp", "auto: a GGUF file and llama.cpp is installed"


def load_vlm(
    llm: str = "tiny",
    embed_dim: int = 512,
    visual_tokens: int = 8,
    tokenizer: Path | None = None,
    projector: Path | None = None,
    seed: int = 0,
    xp=np,
    dtype=np.float32,
    tokenizer_home: Path | None = None,
    llm_backend: str = "auto",
    n_ctx: int = 4096,
) -> VlmModel:
    """A named config with random weights, a Hugging Face Llama folder or a GGUF file; validated before use.

    A GGUF runs in llama.cpp (`llm_backend` llamacpp, or auto where it is installed) or in our
    decoder, dequantised to float32 at load (ours). `n_ctx`: llama.cpp's KV cells (the pipeline's
    kv_blocks × block_size must fit).
    """
    path = Path(llm)
    backend, reason = pick_llm_backend(llm, llm_backend)
    if path.suffix.lower() == ".gguf" or path.is_file():
        from .gguf import gguf_params, gguf_tokenizer, read_gguf

        gg = read_gguf(path)  # checks magic, truncation, architecture and shapes before anything else
        cfg, model_id = gg.cfg, gg.model_id
        params = gguf_params(gg) if backend == "ours" else {}
        if tokenizer is None:
            tokenizer = gguf_tokenizer(gg)
    elif path.is_dir():
        cfg, params = load_hf_llama(path)
        model_id = f"{path.name}@{_digest(path)}"
        tokenizer = tokenizer or path
    else:
        cfg = get_llm_config(llm)
        params = random_params(cfg, seed)
        model_id = f"{llm}@random-seed{seed}"
    proj_cfg = ProjectorConfig(embed_dim, cfg.hidden, visual_tokens)
    if projector:
        params |= load_projector(projector)
    else:
        params |= random_projector_params(proj_cfg, seed + 1)
    if tokenizer is None:
        from ..core.resources import data_home

        home = Path(tokenizer_home or data_home() / "vlm" / f"tokenizer-{min(cfg.vocab_size, 512)}")
        tokenizer = home / "tokenizer.json"
        if not tokenizer.is_file():
            build_default_tokenizer(home, min(cfg.vocab_size, 512))
    tok = ChatTokenizer(tokenizer, origin=str(path))
    if tok.vocab_size > cfg.vocab_size:
        raise ValueError(f"tokenizer has {tok.vocab_size} tokens but the model only {cfg.vocab_size}")
    if backend == "llamacpp":
        from .llamacpp import LlamaCppDecoder

        xp = np  # llama.cpp holds the weights; the projector runs on the host and hands it float32
        placed = place(params, np, np.float32)
        validate(placed, projector_shapes(proj_cfg), np, np.float32)
        decoder = LlamaCppDecoder(gg, n_ctx=n_ctx)
        reason += f", {gg.file_type}, {decoder.threads} threads"
    else:
        placed = place(params, xp, dtype)
        validate(placed, llm_shapes(cfg) | projector_shapes(proj_cfg), xp, dtype)
        decoder = LlamaDecoder(cfg, placed, xp, dtype)
    # the choice's one log line, for every caller (node, ask, bench); a fallback is a warning
    log.log(logging.WARNING if reason.startswith(FALLBACK) else logging.INFO, "llm backend %s (%s)", backend, reason)
    return VlmModel(cfg, proj_cfg, decoder, Projector(proj_cfg, placed, xp), tok, model_id, xp, backend, reason)


@dataclass
class Answer:
    text: str
    tokens: list[int]
    prompt_tokens: int
    prefix_tokens: int
    prefix_reused: bool
    stop: str  # "eos" | "max_tokens"
    timings_ms: dict[str, float] = field(default_factory=dict)


class VlmPipeline:
    def __init__(
        self,
        model: VlmModel,
        kv_blocks: int = 256,
        block_size: int = 16,
        sampling: Sampling | None = None,
        max_new_tokens: int = 32,
        system: str = DEFAULT_SYSTEM,
        prefix_frames: int = 2,
    ) -> None:
        self.model = model
        self.cache = model.decoder.new_cache(kv_blocks, block_size)
        self.sampling = sampling or Sampling()
        self.max_new_tokens = max_new_tokens
        self.system = system
        self.prefix_frames = prefix_frames
        self._prefixes: OrderedDict[Hashable, tuple[str, int]] = OrderedDict()  # frame → (seq id, length)
        self._ids = itertools.count()

    @property
    def manager(self):
        return self.cache.manager

    def _evict_prefix(self, keep: Hashable | None) -> bool:
        for frame in self._prefixes:
            if frame != keep:
                seq_id, _ = self._prefixes.pop(frame)
                self.manager.free(seq_id)
                return True
        return False

    def _prefix(self, features, frame_key: Hashable) -> tuple[str, int, bool, float]:
        """The prefix sequence of a frame, prefilled once; (seq id, length, reused, ms)."""
        if frame_key in self._prefixes:
            self._prefixes.move_to_end(frame_key)
            return (*self._prefixes[frame_key], True, 0.0)
        t0 = time.perf_counter()
        m = self.model
        ids = m.tokenizer.chat("", self.system).prefix
        visual = m.projector(features)
        keys = [*ids, *(("image", frame_key, i) for i in range(visual.shape[0]))]
        seq_id = f"prefix-{next(self._ids)}"
        while True:
            try:
                cached = self.manager.allocate(seq_id, keys)
                break
            except OutOfBlocks:
                if not self._evict_prefix(keep=None):
                    raise
        # the leading `cached` positions are in blocks found by content (ours only): run the rest
        parts = [ids[cached:], visual[max(0, cached - len(ids)) :]]
        m.decoder.run(self.cache, seq_id, [p for p in parts if len(p)], cached)
        self._prefixes[frame_key] = (seq_id, len(keys))
        while len(self._prefixes) > self.prefix_frames:
            self._evict_prefix(keep=frame_key)
        return seq_id, len(keys), False, (time.perf_counter() - t0) * 1e3

    def _admit(self, frame_key: Hashable, prefix_len: int, question_len: int) -> None:
        bs = self.manager.block_size
        total = prefix_len + question_len + self.max_new_tokens
        needed = self.manager.blocks_for(total) - prefix_len // bs  # full prefix blocks are shared
        while self.manager.num_free < needed:
            if not self._evict_prefix(keep=frame_key):
                raise OutOfBlocks(
                    f"question needs up to {needed} KV blocks ({total} positions) but only "
                    f"{self.manager.num_free} of {len(self.manager.blocks)} are free; try again later"
                )

    def ask(
        self, features, frame_key: Hashable, question: str, on_token: Callable[[str], None] | None = None
    ) -> Answer:
        """Answer `question` about the frame whose embedding is `features` (see module doc)."""
        if not question.strip():
            raise ValueError("empty question")
        m = self.model
        q_ids = m.tokenizer.chat(question, self.system).question
        prefix_id, prefix_len, reused, prefix_ms = self._prefix(features, frame_key)
        if prefix_len + len(q_ids) + self.max_new_tokens > m.cfg.max_positions:
            raise ValueError(f"question too long: {prefix_len + len(q_ids)} positions + answer > {m.cfg.max_positions}")
        self._admit(frame_key, prefix_len, len(q_ids))
        seq_id = f"q-{next(self._ids)}"
        sampler = Sampler(self.sampling)
        self.manager.fork(prefix_id, seq_id)
        out: list[int] = []
        stop = "max_tokens"
        try:
            t0 = time.perf_counter()
            for tok in q_ids:
                self.manager.append(seq_id, tok)
            logits = m.decoder.run(self.cache, seq_id, [q_ids], prefix_len)
            t1 = time.perf_counter()
            pos = prefix_len + len(q_ids)
            while len(out) < self.max_new_tokens:
                token = sampler(_host(logits))
                if token == m.tokenizer.eos_id:
                    stop = "eos"
                    break
                out.append(token)
                if on_token:
                    on_token(m.tokenizer.decode([token]))
                if len(out) == self.max_new_tokens:
                    break
                self.manager.append(seq_id, token)
                logits = m.decoder.run(self.cache, seq_id, [[token]], pos)
                pos += 1
            t2 = time.perf_counter()
        finally:
            self.manager.free(seq_id)
        return Answer(
            text=m.tokenizer.decode(out),
            tokens=out,
            prompt_tokens=prefix_len + len(q_ids),
            prefix_tokens=prefix_len,
            prefix_reused=reused,
            stop=stop,
            timings_ms={
                "prefix": round(prefix_ms, 2),
                "prefill": round((t1 - t0) * 1e3, 2),
                "decode": round((t2 - t1) * 1e3, 2),
            },
        )


def _host(x) -> np.ndarray:
    return x.get() if hasattr(x, "get") else np.asarray(x)
