"""CLIP ViT image tower in plain PyTorch (build-time only: export and calibration).

Parameter names follow open_clip's `visual.*` layout, so an open_clip checkpoint loads with a
prefix strip and a Hugging Face one with one renaming table (see `checkpoint.py`). Attention
is written out as matmul + softmax rather than `nn.MultiheadAttention`: that keeps PyTorch's
fused fast path out of the graph, so both ONNX exporters see plain MatMul/Softmax nodes that
ONNX Runtime fuses and that quantisation tools can address one by one.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .configs import TextConfig, VisionConfig


class QuickGELU(nn.Module):
    """The sigmoid GELU approximation that OpenAI's CLIP weights were trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Attention(nn.Module):
    """Multi-head self-attention with open_clip's fused `in_proj` weight (q, k, v stacked)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by heads {heads}")
        self.heads = heads
        self.scale = 1.0 / math.sqrt(width // heads)
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width))
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """`attn_mask`: (T, T) added to the scores (the text tower's causal mask: -inf above the diagonal)."""
        b, t, w = x.shape
        qkv = nn.functional.linear(x, self.in_proj_weight, self.in_proj_bias)
        qkv = qkv.reshape(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q * self.scale) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores + attn_mask
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, t, w)
        return self.out_proj(out)


class MLP(nn.Module):
    def __init__(self, width: int, hidden: int, act: str) -> None:
        super().__init__()
        self.c_fc = nn.Linear(width, hidden)
        self.gelu = QuickGELU() if act == "quick_gelu" else nn.GELU()
        self.c_proj = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class ResidualBlock(nn.Module):
    """Pre-norm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).

    Shared by the image and the text tower: `cfg` needs width, heads, mlp_dim, act and ln_eps.
    """

    def __init__(self, cfg: VisionConfig | TextConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.width, eps=cfg.ln_eps)
        self.attn = Attention(cfg.width, cfg.heads)
        self.ln_2 = nn.LayerNorm(cfg.width, eps=cfg.ln_eps)
        self.mlp = MLP(cfg.width, cfg.mlp_dim, cfg.act)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), attn_mask)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, cfg: VisionConfig | TextConfig) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualBlock(cfg) for _ in range(cfg.layers))

    def init_random(self, width: int, gen: torch.Generator) -> None:
        """open_clip's block init, the same for the image and the text tower (one draw order, so a seed
        gives the same weights as before this was shared): N(0, w^-1/2) attention in, N(0, (2w)^-1/2)
        MLP in, both output projections N(0, w^-1/2 (2 layers)^-1/2), zero biases, unit LayerNorms."""
        proj_std = width**-0.5 * (2 * len(self.resblocks)) ** -0.5
        for block in self.resblocks:
            block.attn.in_proj_weight.normal_(0, width**-0.5, generator=gen)
            block.attn.in_proj_bias.zero_()
            block.attn.out_proj.weight.normal_(0, proj_std, generator=gen)
            block.attn.out_proj.bias.zero_()
            block.mlp.c_fc.weight.normal_(0, (2 * width) ** -0.5, generator=gen)
            block.mlp.c_fc.bias.zero_()
            block.mlp.c_proj.weight.normal_(0, proj_std, generator=gen)
            block.mlp.c_proj.bias.zero_()
        for ln in (m for b in self.resblocks for m in (b.ln_1, b.ln_2)):
            ln.weight.fill_(1.0)
            ln.bias.zero_()

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x, attn_mask)
        return x


class VisionTransformer(nn.Module):
    """pixels (N, 3, S, S), normalised → embedding (N, embed_dim), not yet L2-normalised."""

    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        w = cfg.width
        self.conv1 = nn.Conv2d(3, w, kernel_size=cfg.patch_size, stride=cfg.patch_size, bias=False)
        self.class_embedding = nn.Parameter(torch.empty(w))
        self.positional_embedding = nn.Parameter(torch.empty(cfg.tokens, w))
        self.ln_pre = nn.LayerNorm(w, eps=cfg.ln_eps)
        self.transformer = Transformer(cfg)
        self.ln_post = nn.LayerNorm(w, eps=cfg.ln_eps)
        self.proj = nn.Parameter(torch.empty(w, cfg.embed_dim))

    def init_random(self, seed: int) -> VisionTransformer:
        """Deterministic random init with open_clip's scales, so activations look like a real tower's."""
        gen = torch.Generator().manual_seed(seed)
        w = self.cfg.width
        scale = w**-0.5
        with torch.no_grad():
            self.conv1.weight.normal_(0, (3 * self.cfg.patch_size**2) ** -0.5, generator=gen)
            self.class_embedding.normal_(0, scale, generator=gen)
            self.positional_embedding.normal_(0, scale, generator=gen)
            self.transformer.init_random(w, gen)
            for ln in (self.ln_pre, self.ln_post):
                ln.weight.fill_(1.0)
                ln.bias.zero_()
            self.proj.normal_(0, scale, generator=gen)
        return self

    def embed_patches(self, pixels: torch.Tensor) -> torch.Tensor:
        """(N, 3, S, S) → (N, g*g, W): conv1 with stride = kernel, written as one MatMul on the patches.

        Same numbers as `self.conv1(pixels)`, but the exported graph gets a MatMul with a constant
        weight instead of a Conv: ONNX Runtime runs it as an integer GEMM once quantised (its
        CPU Conv stays float behind Q/DQ: ~2 ms of a ~21 ms INT8 ViT-B/32 here), and TensorRT
        quantises either form.
        """
        p = self.cfg.patch_size
        g = self.cfg.image_size // p
        patches = pixels.reshape(-1, 3, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(-1, g * g, 3 * p * p)
        return patches @ self.conv1.weight.reshape(self.cfg.width, 3 * p * p).t()

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.embed_patches(pixels)  # (N, g*g, W)
        cls = self.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.transformer(self.ln_pre(x))
        return self.ln_post(x[:, 0]) @ self.proj
