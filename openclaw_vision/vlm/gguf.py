"""GGUF files (what llama.cpp, Ollama and most model cards ship TinyLlama as): read, check, dequantise, write.

Reading goes through the `gguf` package's reader (a memory map: nothing is read twice). A file is
refused with a GgufError naming the problem when it is not a GGUF (magic), is cut short (a
tensor's bytes run past the end of the file), is not a Llama-architecture model this decoder runs
(architecture, rope scaling, experts, a rope width other than the head width) or has a tensor of
a shape or type the metadata does not imply. `read_gguf` checks all of that without dequantising
anything, so both backends refuse the same files at start with the same message.

Layout. GGUF keeps llama.cpp's names (`blk.N.attn_q.weight` ...) and HF's (out, in) matrices, but
llama.cpp applies RoPE to adjacent pairs (x0, x1), (x2, x3) ... while Hugging Face (and our
decoder) rotate halves (x_i, x_{i+hd/2}). The converter that writes GGUF from HF therefore
permutes the rows of Q and K within each head; `_unpermute` undoes it at load and `_permute`
redoes it when we write a file, so logits agree with llama.cpp on the same file.

Tokenizer. A Llama GGUF holds SentencePiece's vocabulary — pieces, scores and types — not BPE
merges. `gguf_tokenizer` rebuilds a `tokenizers` BPE from it the way Hugging Face's converter
does: every split of a piece into two pieces of the vocabulary is a merge, ranked by the score
of the piece it makes (higher first). Files that carry `tokenizer.ggml.merges` use those.

The model id is the first 12 hex digits of the file's BLAKE2b digest: one id per content,
whatever the file is called.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import LlamaConfig
from .weights import ParameterError

MAGIC = b"GGUF"
ARCH = "llama"
# The GGML types we read (dequantise) and llama.cpp runs on the CPU; by name (gguf.GGMLQuantizationType).
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                   "Q6_K")  # fmt: skip
# The per-layer GGUF tensors (`blk.N.<name>.weight`) we read; q/k/v and gate/up are fused afterwards, as
# from_hf_llama does (gguf_params).
_LAYER = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
_TOKEN_TYPES = {"normal": 1, "unknown": 2, "control": 3, "byte": 6}


class GgufError(ParameterError):
    """The file is not a GGUF we can run: foreign, truncated, another architecture, or a wrong shape."""


@dataclass
class GgufModel:
    """A checked GGUF file: its config, tensors (still quantised, memory-mapped) and tokenizer data."""

    path: Path
    cfg: LlamaConfig
    reader: object  # gguf.GGUFReader
    tensors: dict  # GGUF name → ReaderTensor
    file_type: str  # the matrices' dominant GGML type, e.g. "Q4_0"
    model_id: str

    def field(self, key: str, default=None):
        return _field(self.reader, key, default)


def file_digest(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.blake2b(digest_size=16)
    with Path(path).open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()[:12]


def is_gguf(path: Path) -> bool:
    path = Path(path)
    if not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(4) == MAGIC


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.contents()
    return value


def expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every GGUF tensor a Llama of this config has, with its (out, in) shape."""
    h, hd = cfg.hidden, cfg.head_dim
    v = cfg.vocab_size
    shapes = {"token_embd.weight": (v, h), "output_norm.weight": (h,), "output.weight": (v, h)}
    per = {"attn_norm": (h,), "attn_q": (cfg.heads * hd, h), "attn_k": (cfg.kv_heads * hd, h),
           "attn_v": (cfg.kv_heads * hd, h), "attn_output": (h, h), "ffn_norm": (h,),
           "ffn_gate": (cfg.intermediate, h), "ffn_up": (cfg.intermediate, h),
           "ffn_down": (h, cfg.intermediate)}  # fmt: skip
    for n in range(cfg.layers):
        shapes |= {f"blk.{n}.{k}.weight": s for k, s in per.items()}
    return shapes


def _f32(value) -> float:
    """A float32 metadata value as the decimal it was written from (1e-05, not 9.99999974e-06)."""
    return float(f"{float(value):.7g}")


def _config(reader, path: Path) -> LlamaConfig:
    arch = _field(reader, "general.architecture")
    if arch != ARCH:
        raise GgufError(f"{path}: architecture {arch!r} is not supported (only {ARCH!r}: TinyLlama's family)")

    def need(key: str):
        value = _field(reader, f"{ARCH}.{key}")
        if value is None:
            raise GgufError(f"{path}: metadata {ARCH}.{key} is missing")
        return value

    if _field(reader, f"{ARCH}.expert_count"):
        raise GgufError(f"{path}: mixture-of-experts models are not supported")
    scaling = _field(reader, f"{ARCH}.rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise GgufError(f"{path}: rope scaling {scaling!r} is not supported")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    if tokens is None:
        raise GgufError(f"{path}: no tokenizer in the file (tokenizer.ggml.tokens)")
    heads = int(need("attention.head_count"))
    try:
        cfg = LlamaConfig(
            vocab_size=int(_field(reader, f"{ARCH}.vocab_size", len(tokens))),
            hidden=int(need("embedding_length")),
            intermediate=int(need("feed_forward_length")),
            layers=int(need("block_count")),
            heads=heads,
            kv_heads=int(_field(reader, f"{ARCH}.attention.head_count_kv", heads)),
            rope_theta=_f32(_field(reader, f"{ARCH}.rope.freq_base", 10000.0)),
            rms_eps=_f32(need("attention.layer_norm_rms_epsilon")),
            max_positions=int(need("context_length")),
            bos_id=int(_field(reader, "tokenizer.ggml.bos_token_id", 1)),
            eos_id=int(_field(reader, "tokenizer.ggml.eos_token_id", 2)),
        )
    except ValueError as err:
        raise GgufError(f"{path}: {err}") from err
    rope_dim = int(_field(reader, f"{ARCH}.rope.dimension_count", cfg.head_dim))
    if rope_dim != cfg.head_dim:
        raise GgufError(f"{path}: partial rotary embedding ({rope_dim} of {cfg.head_dim}) is not supported")
    return cfg


def read_gguf(path: Path) -> GgufModel:
    """Open and check a GGUF file (see the module doc); nothing is dequantised yet."""
    import gguf

    path = Path(path)
    if not path.is_file():
        raise GgufError(f"{path}: no such file")
    if not is_gguf(path):
        raise GgufError(f"{path}: not a GGUF file (it does not start with {MAGIC!r})")
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as err:  # the reader's own errors: struct, index, value, memmap past the end
        raise GgufError(f"{path}: unreadable GGUF (truncated or corrupt: {type(err).__name__}: {err})") from err
    size = path.stat().st_size
    tensors = {t.name: t for t in reader.tensors}
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise GgufError(f"{path}: truncated: tensor {t.name} ends at byte {t.data_offset + t.n_bytes} of {size}")
    cfg = _config(reader, path)
    shapes = expected_shapes(cfg)
    if "output.weight" not in tensors:  # tied embeddings: llama.cpp reads token_embd for the output
        shapes.pop("output.weight")
    missing = [n for n in shapes if n not in tensors]
    if missing:
        raise GgufError(f"{path}: missing tensor {missing[0]} ({len(missing)} missing)")
    extra = sorted(n for n in tensors if n not in shapes and not n.endswith("rope_freqs.weight"))
    if extra:
        raise GgufError(f"{path}: unexpected tensor {extra[0]} ({len(extra)} unexpected)")
    counts: dict[str, int] = {}
    for name, shape in shapes.items():
        t = tensors[name]
        found = tuple(int(x) for x in reversed(t.shape.tolist()))  # GGUF lists dimensions innermost first
        if found != shape:
            raise GgufError(f"{path}: tensor {name}: expected shape {shape}, found {found}")
        kind = t.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise GgufError(f"{path}: tensor {name} has type {kind}; supported: {', '.join(SUPPORTED_TYPES)}")
        if len(shape) == 2:
            counts[kind] = counts.get(kind, 0) + t.n_elements
    file_type = max(counts, key=counts.get)
    return GgufModel(path, cfg, reader, tensors, file_type, f"{path.stem}@{file_digest(path)}")


def _dequantise(t) -> np.ndarray:
    import gguf

    out = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
    shape = tuple(int(x) for x in reversed(t.shape.tolist()))
    return np.ascontiguousarray(out.reshape(shape), dtype=np.float32)


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """Rotate-half rows (HF) → adjacent-pair rows (GGUF), per head: what HF → GGUF converters do."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_params(model: GgufModel) -> dict[str, np.ndarray]:
    """The file's weights as our `llm.*` float32 parameters (dequantised, Q/K rows back to rotate-half)."""
    cfg, t = model.cfg, model.tensors
    embed = _dequantise(t["token_embd.weight"])
    out = {"llm.embed_tokens": embed, "llm.norm": _dequantise(t["output_norm.weight"])}
    out["llm.lm_head"] = _dequantise(t["output.weight"]) if "output.weight" in t else embed
    for n in range(cfg.layers):
        w = {k: _dequantise(t[f"blk.{n}.{k}.weight"]) for k in _LAYER}
        p = f"llm.layers.{n}."
        q, k = _unpermute(w["attn_q"], cfg.heads), _unpermute(w["attn_k"], cfg.kv_heads)
        out[p + "wqkv"] = np.concatenate([q, k, w["attn_v"]])
        out[p + "wo"] = w["attn_output"]
        out[p + "w_gate_up"] = np.concatenate([w["ffn_gate"], w["ffn_up"]])
        out[p + "w_down"] = w["ffn_down"]
        out[p + "attn_norm"], out[p + "mlp_norm"] = w["attn_norm"], w["ffn_norm"]
    return out


# --- tokenizer ---------------------------------------------------------------------------------
def gguf_tokenizer(model: GgufModel):
    """A `tokenizers.Tokenizer` from the file's vocabulary (see the module doc)."""
    from tokenizers import Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    kind = model.field("tokenizer.ggml.model", "llama")
    if kind != "llama":
        raise GgufError(f"{model.path}: tokenizer {kind!r} is not supported (only SentencePiece 'llama')")
    pieces = list(model.field("tokenizer.ggml.tokens"))
    scores = model.field("tokenizer.ggml.scores")
    types = model.field("tokenizer.ggml.token_type")
    scores = [0.0] * len(pieces) if scores is None else [float(s) for s in scores]
    types = [1] * len(pieces) if types is None else [int(x) for x in types]
    vocab = {p: i for i, p in enumerate(pieces)}
    stored = model.field("tokenizer.ggml.merges")
    if stored is not None:
        merges = [tuple(m.split(" ", 1)) for m in stored]
    else:
        ranked = []
        for piece, i in vocab.items():
            if types[i] != _TOKEN_TYPES["normal"] or len(piece) < 2:
                continue
            for cut in range(1, len(piece)):
                left, right = piece[:cut], piece[cut:]
                if left in vocab and right in vocab:
                    ranked.append((-scores[i], i, vocab[left], vocab[right], left, right))
        merges = [(left, right) for *_, left, right in sorted(ranked)]
    unk = next((p for p, i in vocab.items() if types[i] == _TOKEN_TYPES["unknown"]), None)
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token=unk, byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([p for p, i in vocab.items() if types[i] == _TOKEN_TYPES["control"]])
    return tok


# --- writing (tests, the bench, converting our weights) ------------------------------------------
def _piece_type(piece: str, special: set[str]) -> int:
    if piece in special:
        return _TOKEN_TYPES["unknown"] if piece == "<unk>" else _TOKEN_TYPES["control"]
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return _TOKEN_TYPES["byte"]
    return _TOKEN_TYPES["normal"]


def write_gguf(path: Path, cfg: LlamaConfig, params: dict, tokenizer_json: Path, qtype: str = "F32") -> Path:
    """Our `llm.*` parameters and a Llama tokenizer.json → a GGUF llama.cpp reads, matrices in `qtype`.

    Norm vectors stay F32 (llama.cpp's convention). Scores rank the pieces so that merges rebuilt
    from them (`gguf_tokenizer`) follow the tokenizer's merge order: a piece made by an earlier
    merge scores higher.
    """
    import gguf

    qt = gguf.GGMLQuantizationType[qtype]
    tok = json.loads(Path(tokenizer_json).read_text())
    vocab = tok["model"]["vocab"]
    pieces = [p for p, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    if len(pieces) > cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(pieces)} pieces, the model {cfg.vocab_size}")
    pieces += [f"<extra_{i}>" for i in range(cfg.vocab_size - len(pieces))]
    special = {t["content"] for t in tok.get("added_tokens", [])}
    rank = {}
    for r, m in enumerate(tok["model"]["merges"]):
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        rank.setdefault(left + right, r)
    scores = [-float(rank.get(p, len(rank) + i)) if _piece_type(p, special) == 1 else 0.0 for i, p in enumerate(pieces)]
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name(Path(path).stem)
    w.add_context_length(cfg.max_positions)
    w.add_embedding_length(cfg.hidden)
    w.add_block_count(cfg.layers)
    w.add_feed_forward_length(cfg.intermediate)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_head_count(cfg.heads)
    w.add_head_count_kv(cfg.kv_heads)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(int(gguf.LlamaFileType[f"MOSTLY_{qtype}"]) if qtype != "F32" else int(gguf.LlamaFileType.ALL_F32))
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types([_piece_type(p, special) for p in pieces])
    w.add_bos_token_id(cfg.bos_id)
    w.add_eos_token_id(cfg.eos_id)
    w.add_unk_token_id(0)

    def put(name: str, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value, dtype=np.float32)
        if value.ndim == 1 or qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, value)
        elif qt == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, value.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(value, qt), raw_dtype=qt)

    nq, nkv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    put("token_embd.weight", params["llm.embed_tokens"])
    put("output_norm.weight", params["llm.norm"])
    put("output.weight", params["llm.lm_head"])
    for n in range(cfg.layers):
        p, b = f"llm.layers.{n}.", f"blk.{n}."
        qkv, gate_up = params[p + "wqkv"], params[p + "w_gate_up"]
        put(b + "attn_norm.weight", params[p + "attn_norm"])
        put(b + "attn_q.weight", _permute(qkv[:nq], cfg.heads))
        put(b + "attn_k.weight", _permute(qkv[nq : nq + nkv], cfg.kv_heads))
        put(b + "attn_v.weight", qkv[nq + nkv :])
        put(b + "attn_output.weight", params[p + "wo"])
        put(b + "ffn_norm.weight", params[p + "mlp_norm"])
        put(b + "ffn_gate.weight", gate_up[: cfg.intermediate])
        put(b + "ffn_up.weight", gate_up[cfg.intermediate :])
        put(b + "ffn_down.weight", params[p + "w_down"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
