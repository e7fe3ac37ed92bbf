"""The Llama decoder (TinyLlama's architecture) over the paged KV cache, on NumPy or CuPy.

One implementation over an array module `xp`. Per layer: RMSNorm (float32) → fused QKV
projection → RoPE (rotate-half convention, tables computed once) → K/V written into the
sequence's cache slots → grouped-query attention over the sequence's cached K/V (gathered by
its block table; causal inside the new tokens) → output projection + residual → RMSNorm →
fused gate/up projection → SiLU(gate)·up → down projection + residual. `forward` takes input
*embeddings*, so projected visual tokens splice into the prompt like any token.
Weights keep Hugging Face's (out, in) layout; `x @ W.T` is a transposed BLAS call, no copy.
"""

from __future__ import annotations

import numpy as np

from ..core.numerics import softmax
from .config import LlamaConfig
from .kv_cache import BlockManager, PagedKVPool


class PagedKVCache:
    """The allocator and the storage together: what a decoder writes into and reads from."""

    def __init__(self, cfg: LlamaConfig, num_blocks: int, block_size: int, xp=np, dtype=np.float32) -> None:
        self.manager = BlockManager(num_blocks, block_size)
        self.pool = PagedKVPool(cfg.layers, num_blocks, block_size, cfg.kv_heads, cfg.head_dim, xp, dtype)

    @classmethod
    def for_tokens(cls, cfg: LlamaConfig, tokens: int, block_size: int = 16, xp=np, dtype=np.float32):
        return cls(cfg, -(-tokens // block_size), block_size, xp, dtype)


def rope_tables(cfg: LlamaConfig, xp=np) -> tuple:
    """cos and sin, (max_positions, head_dim) float32, in the rotate-half layout."""
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    angles = np.outer(np.arange(cfg.max_positions, dtype=np.float64), inv)
    angles = np.concatenate([angles, angles], axis=1)
    return xp.asarray(np.cos(angles), dtype=np.float32), xp.asarray(np.sin(angles), dtype=np.float32)


def apply_rope(x, cos, sin, xp=np):
    """x (T, heads, hd); cos/sin (T, hd)."""
    half = x.shape[-1] // 2
    rotated = xp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class LlamaDecoder:
    """Holds the `llm.*` parameters (validated beforehand, see weights.py) on its array module.

    The pipeline's interface (shared with llamacpp.LlamaCppDecoder): `new_cache` and `run`.
    """

    backend = "ours"

    def __init__(self, cfg: LlamaConfig, params: dict, xp=np, dtype=np.float32) -> None:
        self.cfg, self.xp, self.dtype = cfg, xp, dtype

        def get(name: str):
            return xp.asarray(params[f"llm.{name}"], dtype=dtype)

        self.embed_tokens = get("embed_tokens")
        self.layers = [
            {k: get(f"layers.{i}.{k}") for k in ("attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down")}
            for i in range(cfg.layers)
        ]
        self.norm = get("norm")
        self.lm_head = get("lm_head")
        self.cos, self.sin = rope_tables(cfg, xp)

    # --- pieces ---------------------------------------------------------------------------------
    def rms_norm(self, x, weight):
        xp = self.xp
        x32 = x.astype(xp.float32)
        x32 = x32 / xp.sqrt(xp.mean(x32 * x32, axis=-1, keepdims=True) + self.cfg.rms_eps)
        return (x32 * weight.astype(xp.float32)).astype(self.dtype)

    def embed(self, token_ids) -> object:
        return self.embed_tokens[self.xp.asarray(token_ids, dtype=self.xp.int64)]

    def attention(self, q, k, v, start: int):
        """Grouped-query attention of T new queries (at positions start…) over L cached keys.

        q (T, heads, hd); k, v (L, kv_heads, hd) with L = start + T. Query head h uses KV head
        h // (heads / kv_heads), as Hugging Face's repeat_kv does.
        """
        xp, cfg = self.xp, self.cfg
        t, length, hd = q.shape[0], k.shape[0], cfg.head_dim
        group = cfg.heads // cfg.kv_heads
        qg = q.reshape(t, cfg.kv_heads, group, hd).transpose(1, 2, 0, 3)  # (kvh, g, T, hd)
        scores = (qg @ k.transpose(1, 2, 0)[:, None]).astype(xp.float32) * (hd**-0.5)  # (kvh, g, T, L)
        if t > 1:
            future = xp.arange(length)[None, :] > (start + xp.arange(t))[:, None]
            scores = xp.where(future, -xp.inf, scores)
        probs = softmax(scores, xp)
        out = probs.astype(self.dtype) @ v.transpose(1, 0, 2)[:, None]  # (kvh, g, T, hd)
        return out.transpose(2, 0, 1, 3).reshape(t, cfg.heads * hd)

    # --- the pipeline's interface ----------------------------------------------------------------
    def new_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        return PagedKVCache(self.cfg, num_blocks, block_size, self.xp, self.dtype)

    def run(self, cache: PagedKVCache, seq_id, parts, start: int):
        """Positions [start, …) of a sequence from `parts` in order, each token ids (1-D) or embeddings
        (T, hidden) — the projected visual tokens; returns the last position's logits (see `forward`)."""
        xp = self.xp
        embeds = [self.embed(p) if np.ndim(p) == 1 else xp.asarray(p, dtype=self.dtype) for p in parts]
        return self.forward(cache, seq_id, embeds[0] if len(embeds) == 1 else xp.concatenate(embeds), start)

    # --- the forward pass -----------------------------------------------------------------------
    def forward(self, cache: PagedKVCache, seq_id, embeds, start: int):
        """Run positions [start, start + T) of a sequence whose keys are already in the cache's table.

        Writes their K/V into the paged cache and returns the logits of the last position (vocab,).
        """
        xp, cfg = self.xp, self.cfg
        x = xp.asarray(embeds, dtype=self.dtype)
        t = x.shape[0]
        end = start + t
        if end > cfg.max_positions:
            raise ValueError(f"sequence of {end} positions exceeds the model's {cfg.max_positions}")
        cache.pool.copy_blocks(cache.manager.take_copies())
        blocks, offsets = cache.manager.slots(seq_id, start, end)
        blocks, offsets = xp.asarray(blocks), xp.asarray(offsets)
        table = xp.asarray(cache.manager.table(seq_id))
        cos, sin = self.cos[start:end], self.sin[start:end]
        nq, nkv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        for i, layer in enumerate(self.layers):
            h = self.rms_norm(x, layer["attn_norm"])
            qkv = h @ layer["wqkv"].T
            q = apply_rope(qkv[:, :nq].reshape(t, cfg.heads, cfg.head_dim), cos, sin, xp)
            k = apply_rope(qkv[:, nq : nq + nkv].reshape(t, cfg.kv_heads, cfg.head_dim), cos, sin, xp)
            v = qkv[:, nq + nkv :].reshape(t, cfg.kv_heads, cfg.head_dim)
            cache.pool.write(i, blocks, offsets, k, v)
            keys, values = cache.pool.gather(i, table, end)
            x = x + self.attention(q, keys, values, start) @ layer["wo"].T
            h = self.rms_norm(x, layer["mlp_norm"])
            gate_up = h @ layer["w_gate_up"].T
            gate, up = gate_up[:, : cfg.intermediate], gate_up[:, cfg.intermediate :]
            x = x + ((gate / (1 + xp.exp(-gate))) * up) @ layer["w_down"].T
        last = self.rms_norm(x[-1:], self.norm)
        return (last @ self.lm_head.T)[0].astype(xp.float32)


def dense_attention_reference(q, k, v, start: int, group: int):
    """Plain NumPy attention over contiguous K/V with repeated KV heads: what paged attention must equal."""
    t, heads, hd = q.shape
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    out = np.empty((t, heads, hd), np.float64)
    for i in range(t):
        s = np.einsum("hd,lhd->hl", q[i].astype(np.float64), k[: start + i + 1].astype(np.float64)) / np.sqrt(hd)
        p = softmax(s)
        out[i] = np.einsum("hl,lhd->hd", p, v[: start + i + 1].astype(np.float64))
    return out.reshape(t, heads * hd)
