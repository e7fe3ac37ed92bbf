"""CLIP text tower in plain PyTorch (build-time only: export and the quantiser's reference).

token ids (N, 77) → token + positional embedding → causal pre-LN transformer blocks (the same
blocks as the image tower, with a causal mask) → final LayerNorm → the features at each row's
end-of-text token → text projection → (N, embed_dim), not yet L2-normalised.

End-of-text pooling takes the position of the largest token id in each row: the end-of-text
token (49407) is the largest id of CLIP's vocabulary, and padding is 0, so the argmax is the
first end-of-text token. The ids go through int32 before the ArgMax: ONNX Runtime's CPU ArgMax
has no int64 kernel, and 49 408 fits with room to spare.

`logit_scale` (log of the temperature's inverse) belongs to the CLIP model as a whole; it lives
here because the text side is where labels are scored, and the export writes its exp into the
ONNX metadata, not into the graph.

Parameter names follow open_clip's top-level text names (`token_embedding`, `transformer.*`,
`ln_final`, `text_projection`), so an open_clip checkpoint loads by name and a Hugging Face one
through one renaming table (`checkpoint.py`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .configs import TextConfig
from .vit import Transformer

#: open_clip's initial logit scale: log(1 / 0.07). A random tower keeps it (exp ≈ 14.29).
INIT_LOGIT_SCALE = math.log(1 / 0.07)


def causal_mask(positions: int) -> torch.Tensor:
    """(T, T) additive mask: 0 on and below the diagonal, -inf above (a token sees only its past)."""
    return torch.full((positions, positions), float("-inf")).triu_(1)


class TextTransformer(nn.Module):
    """token ids (N, context_length) int64 → embedding (N, embed_dim), not yet L2-normalised."""

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.cfg = cfg
        w = cfg.width
        self.token_embedding = nn.Embedding(cfg.vocab_size, w)
        self.positional_embedding = nn.Parameter(torch.empty(cfg.context_length, w))
        self.transformer = Transformer(cfg)
        self.ln_final = nn.LayerNorm(w, eps=cfg.ln_eps)
        self.text_projection = nn.Parameter(torch.empty(w, cfg.embed_dim))
        self.register_buffer("logit_scale", torch.tensor(INIT_LOGIT_SCALE))  # not in the graph: metadata
        self.register_buffer("attn_mask", causal_mask(cfg.context_length), persistent=False)

    def init_random(self, seed: int) -> TextTransformer:
        """Deterministic random init with open_clip's text scales (std 0.02 tokens, 0.01 positions)."""
        gen = torch.Generator().manual_seed(seed)
        w = self.cfg.width
        with torch.no_grad():
            self.token_embedding.weight.normal_(0, 0.02, generator=gen)
            self.positional_embedding.normal_(0, 0.01, generator=gen)
            self.transformer.init_random(w, gen)
            self.ln_final.weight.fill_(1.0)
            self.ln_final.bias.zero_()
            self.text_projection.normal_(0, w**-0.5, generator=gen)
            self.logit_scale.fill_(INIT_LOGIT_SCALE)
        return self

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(N, T) ids, T ≤ context_length: the tokenizer gives 77; any T that holds every row's end token gives
        the same embeddings (the mask is causal), which is what lets the runtime cut the padding off."""
        t = input_ids.shape[1]
        x = self.token_embedding(input_ids) + self.positional_embedding[:t]
        x = self.ln_final(self.transformer(x, self.attn_mask[:t, :t]))
        eot = input_ids.to(torch.int32).argmax(dim=-1, keepdim=True)  # first end-of-text token of each row
        pooled = x.gather(1, eot.to(torch.int64)[:, :, None].expand(-1, 1, self.cfg.width)).squeeze(1)
        return pooled @ self.text_projection
