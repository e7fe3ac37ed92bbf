"""TensorRT-LLM, the thin adapter: our weights → its Llama checkpoint → `trtllm-build` → an engine.

TensorRT-LLM's libraries cannot be installed on the machines this project is developed on, so
this module only (1) writes the unified checkpoint format — config.json + rank0.safetensors
with TensorRT-LLM's parameter names, tested here as a file format — and (2) calls
`trtllm-build` when it exists, raising TrtLlmUnavailable with the reason otherwise. Running the
engine is TensorRT-LLM's own (its ModelRunner); nothing here drives it, so the VLM pipeline's
decoder interface (vlm/decoder.py, vlm/llamacpp.py) is the one way this package generates.

Name mapping (TensorRT-LLM's GatedMLP computes act(fc(x)) * gate(x)):
  llm.embed_tokens → transformer.vocab_embedding.weight
  llm.layers.i.wqkv → transformer.layers.i.attention.qkv.weight   (rows q, k, v: the same fusion as ours)
  llm.layers.i.wo → …attention.dense.weight
  llm.layers.i.w_gate_up → …mlp.fc.weight (gate_proj rows) and …mlp.gate.weight (up_proj rows)
  llm.layers.i.w_down → …mlp.proj.weight
  llm.layers.i.attn_norm / mlp_norm → …input_layernorm.weight / …post_layernorm.weight
  llm.norm → transformer.ln_f.weight;  llm.lm_head → lm_head.weight
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ..core import children
from ..core.errors import OpenclawError
from .config import LlamaConfig
from .weights import write_safetensors

DTYPES = {"float16": np.float16, "float32": np.float32}
#: an engine build of a 1B model takes minutes; one that hangs is stopped (and its group with it)
BUILD_TIMEOUT_S = 7200.0


class TrtLlmUnavailable(OpenclawError, RuntimeError):
    """TensorRT-LLM (its build tool or runtime) is not installed here."""


def checkpoint_config(cfg: LlamaConfig, dtype: str = "float16") -> dict:
    return {
        "architecture": "LlamaForCausalLM",
        "dtype": dtype,
        "logits_dtype": "float32",
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_positions,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_size": cfg.head_dim,
        "intermediate_size": cfg.intermediate,
        "hidden_act": "silu",
        "norm_epsilon": cfg.rms_eps,
        "position_embedding_type": "rope_gpt_neox",
        "rotary_base": cfg.rope_theta,
        "use_parallel_embedding": False,
        "embedding_sharding_dim": 0,
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
    }


def checkpoint_tensors(cfg: LlamaConfig, params: dict, dtype: str = "float16") -> dict[str, np.ndarray]:
    """Our `llm.*` parameters under TensorRT-LLM's names, in `dtype` (host NumPy arrays)."""
    cast = DTYPES[dtype]

    def host(name: str) -> np.ndarray:
        v = params[name]
        return np.asarray(v.get() if hasattr(v, "get") else v, dtype=cast)

    out = {
        "transformer.vocab_embedding.weight": host("llm.embed_tokens"),
        "transformer.ln_f.weight": host("llm.norm"),
        "lm_head.weight": host("llm.lm_head"),
    }
    for i in range(cfg.layers):
        src, dst = f"llm.layers.{i}.", f"transformer.layers.{i}."
        gate_up = host(src + "w_gate_up")
        out |= {
            dst + "attention.qkv.weight": host(src + "wqkv"),
            dst + "attention.dense.weight": host(src + "wo"),
            dst + "mlp.fc.weight": gate_up[: cfg.intermediate],
            dst + "mlp.gate.weight": gate_up[cfg.intermediate :],
            dst + "mlp.proj.weight": host(src + "w_down"),
            dst + "input_layernorm.weight": host(src + "attn_norm"),
            dst + "post_layernorm.weight": host(src + "mlp_norm"),
        }
    return out


def write_checkpoint(cfg: LlamaConfig, params: dict, out: Path, dtype: str = "float16") -> Path:
    """A TensorRT-LLM unified checkpoint folder: config.json + rank0.safetensors."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(checkpoint_config(cfg, dtype), indent=2))
    write_safetensors(out / "rank0.safetensors", checkpoint_tensors(cfg, params, dtype))
    return out


def build_engine(checkpoint: Path, out: Path, max_input_len: int = 512, max_seq_len: int = 1024) -> Path:
    """Run `trtllm-build` on a checkpoint folder (TensorRT-LLM must be installed)."""
    exe = shutil.which("trtllm-build")
    if exe is None:
        raise TrtLlmUnavailable("trtllm-build is not on PATH (TensorRT-LLM is not installed here)")
    cmd = [
        exe, "--checkpoint_dir", str(checkpoint), "--output_dir", str(out), "--gemm_plugin", "auto",
        "--max_input_len", str(max_input_len), "--max_seq_len", str(max_seq_len),
        "--max_prompt_embedding_table_size", "256",
    ]  # fmt: skip
    done = children.run(cmd, timeout=BUILD_TIMEOUT_S)
    if not done.ok:
        raise RuntimeError(f"trtllm-build {done.how}:\n{done.tail()}")
    return Path(out)
