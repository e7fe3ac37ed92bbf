"""Parameters: read Hugging Face Llama safetensors, fuse, namespace, and validate before the first forward.

Names are namespaced by part — `vision.`, `projector.`, `llm.` — so nothing from one part can
collide with another. Hugging Face's separate q/k/v and gate/up projections are concatenated
here, once, into `wqkv` and `w_gate_up` (the decoder runs one matmul for each). `validate`
compares every parameter's dtype, shape and device with what the config says, and names the
parameter, the expectation and what was found.

The safetensors reader is ours (a JSON header and raw little-endian tensors): NumPy has no
bfloat16, and TinyLlama ships bf16, which is widened here to float32 bit-exactly.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from ..core.errors import OpenclawError
from .config import LlamaConfig, config_from_hf

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


class ParameterError(OpenclawError, ValueError):
    """A parameter is missing, unexpected, or has the wrong shape, dtype or device."""


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file as NumPy arrays (BF16 → float32)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    body = memoryview(raw)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        shape, dtype = tuple(info["shape"]), info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(body[start:end], dtype="<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(shape)
        elif dtype in _DTYPES:
            out[name] = np.frombuffer(body[start:end], dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<")).reshape(shape)
        else:
            raise ParameterError(f"{path}: tensor {name} has unsupported dtype {dtype}")
    return out


def read_checkpoint(folder: Path) -> dict[str, np.ndarray]:
    """model.safetensors, or the shards named by model.safetensors.index.json."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, np.ndarray] = {}
        for shard in shards:
            state.update(read_safetensors(folder / shard))
        return state
    single = folder / "model.safetensors"
    if not single.is_file():
        raise ParameterError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    return read_safetensors(single)


def llm_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every `llm.*` parameter this config needs, with its shape."""
    h, i = cfg.hidden, cfg.intermediate
    shapes = {"llm.embed_tokens": (cfg.vocab_size, h), "llm.norm": (h,), "llm.lm_head": (cfg.vocab_size, h)}
    for n in range(cfg.layers):
        p = f"llm.layers.{n}."
        shapes |= {
            p + "attn_norm": (h,),
            p + "wqkv": (cfg.qkv_out, h),
            p + "wo": (h, h),
            p + "mlp_norm": (h,),
            p + "w_gate_up": (2 * i, h),
            p + "w_down": (h, i),
        }
    return shapes


def from_hf_llama(state: dict[str, np.ndarray], cfg: LlamaConfig) -> dict[str, np.ndarray]:
    """Hugging Face LlamaForCausalLM names → `llm.*`, q/k/v and gate/up concatenated."""
    state = {k: v for k, v in state.items() if "rotary_emb" not in k}  # precomputed tables, not weights

    def take(name: str) -> np.ndarray:
        if name not in state:
            raise ParameterError(f"checkpoint has no {name}")
        return state.pop(name)

    out = {"llm.embed_tokens": take("model.embed_tokens.weight"), "llm.norm": take("model.norm.weight")}
    out["llm.lm_head"] = state.pop("lm_head.weight") if "lm_head.weight" in state else out["llm.embed_tokens"]
    for n in range(cfg.layers):
        hf, p = f"model.layers.{n}.", f"llm.layers.{n}."
        attn = [take(hf + f"self_attn.{x}_proj.weight") for x in ("q", "k", "v")]
        out[p + "wqkv"] = np.concatenate(attn, axis=0)
        out[p + "wo"] = take(hf + "self_attn.o_proj.weight")
        out[p + "w_gate_up"] = np.concatenate([take(hf + "mlp.gate_proj.weight"), take(hf + "mlp.up_proj.weight")])
        out[p + "w_down"] = take(hf + "mlp.down_proj.weight")
        out[p + "attn_norm"] = take(hf + "input_layernorm.weight")
        out[p + "mlp_norm"] = take(hf + "post_attention_layernorm.weight")
    if state:
        raise ParameterError(f"unexpected checkpoint tensors: {', '.join(sorted(state)[:8])}")
    return out


def load_hf_llama(folder: Path) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """A Hugging Face Llama folder (config.json + safetensors) → (config, `llm.*` parameters)."""
    folder = Path(folder)
    cfg = config_from_hf(folder / "config.json")
    return cfg, from_hf_llama(read_checkpoint(folder), cfg)


def load_projector(path: Path) -> dict[str, np.ndarray]:
    """A projector file: safetensors with `projector.*` names (or LLaVA's `model.mm_projector.{0,2}.*`)."""
    state = read_safetensors(path)
    llava = {"model.mm_projector.0.": "projector.fc1.", "model.mm_projector.2.": "projector.fc2."}
    out = {}
    for name, value in state.items():
        for old, new in llava.items():
            if name.startswith(old):
                name = new + name[len(old) :]
        if not name.startswith("projector."):
            raise ParameterError(f"{path}: tensor {name} is not a projector parameter")
        out[name] = value
    return out


def random_params(cfg: LlamaConfig, seed: int = 0, std: float = 0.02) -> dict:
    """Deterministic random `llm.*` weights (normal(0, std); norms 1), float32: shaped right, meaning nothing.

    Tensors are cut, at shifting offsets, from one draw of at most 16 M normals: drawing
    TinyLlama's 1.1 G values one by one takes ~20 s here, and nothing that uses random weights
    (speed, shapes, plumbing) needs them independent.
    """
    shapes = llm_shapes(cfg)
    total = sum(int(np.prod(shape)) for shape in shapes.values())
    pool = np.random.default_rng(seed).standard_normal(min(total, 1 << 24), dtype=np.float32) * np.float32(std)
    out, offset = {}, 0
    for name, shape in shapes.items():
        if name.endswith("norm"):
            out[name] = np.ones(shape, np.float32)
            continue
        # a copy: np.resize returns a view into its longer concatenation (TinyLlama held 7.4 GB for 4.1)
        out[name] = np.resize(pool[offset:], int(np.prod(shape))).reshape(shape).copy()
        offset = (offset + 7919) % (pool.size // 2)
    return out


def to_hf_llama(params: dict, cfg: LlamaConfig) -> dict[str, np.ndarray]:
    """`llm.*` → Hugging Face LlamaForCausalLM names: the inverse of `from_hf_llama` (row views, no copies)."""
    nq, nkv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    out = {
        "model.embed_tokens.weight": params["llm.embed_tokens"],
        "model.norm.weight": params["llm.norm"],
        "lm_head.weight": params["llm.lm_head"],
    }
    for n in range(cfg.layers):
        p, hf = f"llm.layers.{n}.", f"model.layers.{n}."
        qkv, gate_up = params[p + "wqkv"], params[p + "w_gate_up"]
        out |= {
            hf + "self_attn.q_proj.weight": qkv[:nq],
            hf + "self_attn.k_proj.weight": qkv[nq : nq + nkv],
            hf + "self_attn.v_proj.weight": qkv[nq + nkv :],
            hf + "self_attn.o_proj.weight": params[p + "wo"],
            hf + "mlp.gate_proj.weight": gate_up[: cfg.intermediate],
            hf + "mlp.up_proj.weight": gate_up[cfg.intermediate :],
            hf + "mlp.down_proj.weight": params[p + "w_down"],
            hf + "input_layernorm.weight": params[p + "attn_norm"],
            hf + "post_attention_layernorm.weight": params[p + "mlp_norm"],
        }
    return out


def place(params: dict, xp=np, dtype=np.float32) -> dict:
    """Parameters on the array module's device in the compute dtype."""
    return {k: xp.asarray(v, dtype=dtype) for k, v in params.items()}


def validate(params: dict, shapes: dict[str, tuple[int, ...]], xp=np, dtype=np.float32) -> None:
    """Every expected parameter present, none unexpected, each with the right shape, dtype and device."""
    missing = sorted(set(shapes) - set(params))
    if missing:
        raise ParameterError(
            f"missing parameter {missing[0]} (expected shape {shapes[missing[0]]}; {len(missing)} missing)"
        )
    extra = sorted(k for k in set(params) - set(shapes) if k.split(".")[0] in ("llm", "projector"))
    if extra:
        raise ParameterError(f"unexpected parameter {extra[0]} ({len(extra)} unexpected)")
    want_dtype = np.dtype(dtype)
    for name, shape in shapes.items():
        value = params[name]
        if not isinstance(value, xp.ndarray):
            found = f"{type(value).__module__}.{type(value).__name__}"
            raise ParameterError(f"parameter {name}: expected a {xp.__name__} array (device), found {found}")
        if tuple(value.shape) != tuple(shape):
            raise ParameterError(f"parameter {name}: expected shape {tuple(shape)}, found {tuple(value.shape)}")
        if value.dtype != want_dtype:
            raise ParameterError(f"parameter {name}: expected dtype {want_dtype}, found {value.dtype}")


_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> Path:
    """Write tensors in the safetensors layout (8-byte header length, JSON header, raw little-endian data)."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    blobs, offset = [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {
            "dtype": _CODES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format aligns the data start to 8 bytes
    path = Path(path)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)
    return path
