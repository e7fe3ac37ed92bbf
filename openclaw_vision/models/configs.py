"""Named CLIP vision-tower configurations.

One dict entry per architecture, as open_clip keeps them, so no code ever hard-codes a
width, depth or embedding size: everything downstream reads it from a `VisionConfig`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class VisionConfig:
    """Shape of a CLIP ViT image tower (the part that turns pixels into one embedding)."""

    image_size: int
    patch_size: int
    width: int
    layers: int
    heads: int
    mlp_dim: int
    embed_dim: int
    act: str = "gelu"  # "gelu" (LAION/open_clip) or "quick_gelu" (OpenAI weights)
    ln_eps: float = 1e-5

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    @property
    def tokens(self) -> int:
        return self.grid * self.grid + 1

    def to_dict(self) -> dict:
        return asdict(self)

    def flops_per_image(self) -> int:
        """Multiply-accumulates ×2 of one forward pass (matmuls and the patch conv only)."""
        t, w = self.tokens, self.width
        patch = 2 * (self.grid**2) * (3 * self.patch_size**2) * w
        attn_proj = 2 * t * w * (3 * w) + 2 * t * w * w
        attn_core = 2 * 2 * t * t * w
        mlp = 2 * 2 * t * w * self.mlp_dim
        proj = 2 * w * self.embed_dim
        return patch + self.layers * (attn_proj + attn_core + mlp) + proj


#: the model every tool and node uses unless told otherwise
DEFAULT_MODEL = "ViT-B-32"

MODEL_CONFIGS: dict[str, VisionConfig] = {
    # A test-sized tower: same code paths, milliseconds per frame.
    "tiny": VisionConfig(image_size=224, patch_size=32, width=64, layers=2, heads=4, mlp_dim=256, embed_dim=32),
    "ViT-B-32": VisionConfig(
        image_size=224, patch_size=32, width=768, layers=12, heads=12, mlp_dim=3072, embed_dim=512
    ),
    "ViT-B-16": VisionConfig(
        image_size=224, patch_size=16, width=768, layers=12, heads=12, mlp_dim=3072, embed_dim=512
    ),
    "ViT-L-14": VisionConfig(
        image_size=224, patch_size=14, width=1024, layers=24, heads=16, mlp_dim=4096, embed_dim=768
    ),
    "ViT-H-14": VisionConfig(
        image_size=224, patch_size=14, width=1280, layers=32, heads=16, mlp_dim=5120, embed_dim=1024
    ),
    "ViT-bigG-14": VisionConfig(
        image_size=224, patch_size=14, width=1664, layers=48, heads=16, mlp_dim=8192, embed_dim=1280
    ),
}


def canonical_name(name: str) -> str:
    """The registered spelling of a model name given in any case (`vit-b-32` → `ViT-B-32`)."""
    for key in MODEL_CONFIGS:
        if key.lower() == name.lower():
            return key
    raise KeyError(f"unknown model {name!r}; known: {', '.join(MODEL_CONFIGS)}")


def get_config(name: str) -> VisionConfig:
    """Look a configuration up by name (case-insensitive), with a clear error listing the known ones."""
    return MODEL_CONFIGS[canonical_name(name)]


@dataclass(frozen=True)
class TextConfig:
    """Shape of a CLIP text tower (token ids → one embedding in the image tower's space).

    Every CLIP in open_clip's table reads the same tokenizer (49 408 byte-level BPE tokens, 77
    positions) and a causal transformer; only width, depth and heads grow with the model. The
    MLP is 4× the width in all of them.
    """

    width: int
    layers: int
    heads: int
    embed_dim: int
    context_length: int = 77
    vocab_size: int = 49408
    act: str = "gelu"  # "gelu" (LAION/open_clip) or "quick_gelu" (OpenAI weights)
    ln_eps: float = 1e-5

    @property
    def mlp_dim(self) -> int:
        return 4 * self.width

    def to_dict(self) -> dict:
        return asdict(self)


#: Text towers beside the image towers of the same name (open_clip's `text_cfg`; embed_dim is shared).
TEXT_CONFIGS: dict[str, TextConfig] = {
    "tiny": TextConfig(width=64, layers=2, heads=4, embed_dim=32),
    "ViT-B-32": TextConfig(width=512, layers=12, heads=8, embed_dim=512),
    "ViT-B-16": TextConfig(width=512, layers=12, heads=8, embed_dim=512),
    "ViT-L-14": TextConfig(width=768, layers=12, heads=12, embed_dim=768),
    "ViT-H-14": TextConfig(width=1024, layers=24, heads=16, embed_dim=1024),
    "ViT-bigG-14": TextConfig(width=1280, layers=32, heads=20, embed_dim=1280),
}


def get_text_config(name: str) -> TextConfig:
    """The text tower paired with the image tower `name` (case-insensitive)."""
    return TEXT_CONFIGS[canonical_name(name)]
