"""Llama-architecture shapes, one dataclass and a dict of named configs (no width is hard-coded)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

#: who runs the VLM's language model: our decoder or llama.cpp (a GGUF file); here, beside the shapes and
#: without NumPy, so the configuration (and the launch file, on the system Python) can read the choices
LLM_BACKENDS = ("auto", "ours", "llamacpp")


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    max_positions: int = 2048
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def qkv_out(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    def param_count(self) -> int:
        per_layer = self.hidden * self.qkv_out + self.hidden * self.hidden + 3 * self.hidden * self.intermediate
        return self.layers * (per_layer + 2 * self.hidden) + 2 * self.vocab_size * self.hidden + self.hidden

    def to_dict(self) -> dict:
        return asdict(self)


LLM_CONFIGS: dict[str, LlamaConfig] = {
    # TinyLlama-1.1B (Chat v1.0): 22 layers, hidden 2048, MLP 5632, 32 query / 4 KV heads of 64.
    "tinyllama-1.1b": LlamaConfig(
        vocab_size=32000, hidden=2048, intermediate=5632, layers=22, heads=32, kv_heads=4, max_positions=2048
    ),
    # Same structure at test size (GQA 4:2 kept), for tests and the default demo.
    "tiny": LlamaConfig(vocab_size=512, hidden=64, intermediate=176, layers=2, heads=4, kv_heads=2, max_positions=512),
}


def get_llm_config(name: str) -> LlamaConfig:
    for key, cfg in LLM_CONFIGS.items():
        if key.lower() == name.lower():
            return cfg
    raise KeyError(f"unknown language model {name!r}; known: {', '.join(LLM_CONFIGS)}")


def config_from_hf(path: Path) -> LlamaConfig:
    """A Hugging Face LlamaConfig (config.json) → LlamaConfig; refuses what this decoder cannot run."""
    c = json.loads(Path(path).read_text())
    if c.get("model_type", "llama") != "llama":
        raise ValueError(f"{path}: model_type {c.get('model_type')!r} is not llama")
    if c.get("rope_scaling"):
        raise ValueError(f"{path}: rope_scaling {c['rope_scaling']} is not supported")
    if c.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{path}: hidden_act {c['hidden_act']!r} is not silu")
    return LlamaConfig(
        vocab_size=c["vocab_size"],
        hidden=c["hidden_size"],
        intermediate=c["intermediate_size"],
        layers=c["num_hidden_layers"],
        heads=c["num_attention_heads"],
        kv_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
        rope_theta=float(c.get("rope_theta", 10000.0)),
        rms_eps=float(c.get("rms_norm_eps", 1e-5)),
        max_positions=c.get("max_position_embeddings", 2048),
        bos_id=c.get("bos_token_id", 1),
        eos_id=c.get("eos_token_id", 2),
    )


def hf_config_dict(cfg: LlamaConfig) -> dict:
    """The config.json Hugging Face writes for this shape (used by tests and the TRT-LLM adapter)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden,
        "intermediate_size": cfg.intermediate,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_positions,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "bos_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
