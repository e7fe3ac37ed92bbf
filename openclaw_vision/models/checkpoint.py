"""Load real CLIP vision weights: open_clip and Hugging Face layouts, safetensors or torch files.

Both layouts end up in our module's (open_clip-style) names. The only layout-specific work is
here: Hugging Face keeps q, k and v as separate Linear layers, open_clip stacks them into one
`in_proj`; we concatenate once, at load time. Every tensor is checked against the config
before it is copied, and a mismatch names the parameter, the expected and the found shape.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from .configs import VisionConfig, get_config
from .vit import VisionTransformer


class CheckpointError(ValueError):
    """A checkpoint that does not fit the architecture it is loaded into."""


class LazyState(Mapping):
    """The tensors of safetensors files, each read only when asked for.

    A full open_clip ViT-bigG-14 checkpoint is ~10 GB (text tower included); read whole, it and
    the tower it is copied into would not fit beside each other here. Keys and shapes come from
    the files' headers; `state[key]` reads that one tensor.
    """

    def __init__(self, files: list[Path]) -> None:
        from safetensors import safe_open

        self._where: dict[str, Path] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        for file in files:
            with safe_open(str(file), framework="pt") as fh:
                for key in fh.keys():  # noqa: SIM118 - safe_open is not a dict
                    self._where[key] = file
                    self._shapes[key] = tuple(fh.get_slice(key).get_shape())

    def __getitem__(self, key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(str(self._where[key]), framework="pt") as fh:
            return fh.get_tensor(key)

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def shape(self, key: str) -> tuple[int, ...]:
        return self._shapes[key]


def _shape(state: Mapping, key: str) -> tuple[int, ...]:
    return state.shape(key) if isinstance(state, LazyState) else tuple(state[key].shape)


def read_state_dict(path: Path) -> Mapping[str, torch.Tensor]:
    """A safetensors file, a torch file, or a Hugging Face folder of *.safetensors — read lazily.

    safetensors: `LazyState` (one tensor at a time); torch files are memory-mapped.
    """
    path = Path(path)
    if path.is_dir():
        candidates = sorted(path.glob("*.safetensors"))
        if not candidates:
            raise CheckpointError(f"{path}: no *.safetensors file in this folder")
        return LazyState(candidates)
    if path.suffix == ".safetensors":
        return LazyState([path])
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # an old (non-zip) torch file cannot be memory-mapped
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    if isinstance(obj, dict) and "state_dict" in obj:
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a state dict, found {type(obj).__name__}")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def detect_layout(state: dict[str, torch.Tensor]) -> str:
    if any(k.startswith("vision_model.") for k in state):
        return "huggingface"
    if any(k.startswith("visual.") for k in state) or "conv1.weight" in state:
        return "open_clip"
    raise CheckpointError("checkpoint has neither open_clip (visual.*) nor Hugging Face (vision_model.*) keys")


def config_from_hf(config_json: Path) -> VisionConfig:
    """Build a VisionConfig from a Hugging Face CLIPModel / CLIPVisionModelWithProjection config.json."""
    raw = json.loads(Path(config_json).read_text())
    vis = raw.get("vision_config", raw)
    act = vis.get("hidden_act", "quick_gelu")
    return VisionConfig(
        image_size=int(vis.get("image_size", 224)),
        patch_size=int(vis["patch_size"]),
        width=int(vis["hidden_size"]),
        layers=int(vis["num_hidden_layers"]),
        heads=int(vis["num_attention_heads"]),
        mlp_dim=int(vis["intermediate_size"]),
        embed_dim=int(raw.get("projection_dim", vis.get("projection_dim", 512))),
        act="quick_gelu" if act == "quick_gelu" else "gelu",
        ln_eps=float(vis.get("layer_norm_eps", 1e-5)),
    )


#: How one tensor of our tower is made from checkpoint tensors: (source keys, combine).
Plan = dict[str, tuple[list[str], Callable[..., torch.Tensor]]]


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _open_clip_plan(state: Mapping, names: list[str]) -> Plan:
    prefix = "visual." if any(k.startswith("visual.") for k in state) else ""
    return {name: ([prefix + name], _same) for name in names}


_HF_BLOCK = {
    "layer_norm1": "ln_1",
    "layer_norm2": "ln_2",
    "self_attn.out_proj": "attn.out_proj",
    "mlp.fc1": "mlp.c_fc",
    "mlp.fc2": "mlp.c_proj",
}


def _cat(*parts: torch.Tensor) -> torch.Tensor:
    return torch.cat(parts, dim=0)


def _transpose(t: torch.Tensor) -> torch.Tensor:
    return t.t().contiguous()


def _hf_plan(layers: int) -> Plan:
    plan: Plan = {
        "conv1.weight": (["vision_model.embeddings.patch_embedding.weight"], _same),
        "class_embedding": (["vision_model.embeddings.class_embedding"], _same),
        "positional_embedding": (["vision_model.embeddings.position_embedding.weight"], _same),
        "ln_pre.weight": (["vision_model.pre_layrnorm.weight"], _same),
        "ln_pre.bias": (["vision_model.pre_layrnorm.bias"], _same),
        "ln_post.weight": (["vision_model.post_layernorm.weight"], _same),
        "ln_post.bias": (["vision_model.post_layernorm.bias"], _same),
        "proj": (["visual_projection.weight"], _transpose),
    }
    for i in range(layers):
        src = f"vision_model.encoder.layers.{i}."
        dst = f"transformer.resblocks.{i}."
        for kind in ("weight", "bias"):
            plan[dst + f"attn.in_proj_{kind}"] = ([src + f"self_attn.{p}_proj.{kind}" for p in "qkv"], _cat)
            for hf, oc in _HF_BLOCK.items():
                plan[dst + f"{oc}.{kind}"] = ([src + f"{hf}.{kind}"], _same)
    return plan


def _planned_shape(state: Mapping, keys: list[str], combine) -> tuple[int, ...]:
    shapes = [_shape(state, k) for k in keys]
    if combine is _cat:
        return (sum(s[0] for s in shapes), *shapes[0][1:])
    if combine is _transpose:
        return tuple(reversed(shapes[0]))
    return shapes[0]


def load_into(model: VisionTransformer, state: Mapping[str, torch.Tensor]) -> None:
    """Copy a checkpoint (either layout) into `model`, checking every name and shape first.

    Tensors are read and copied one at a time (`LazyState`), so loading ViT-bigG-14 needs the
    tower plus one tensor, not the tower plus the checkpoint. The only layout-specific work
    (q/k/v concatenation, the projection's transpose) happens here, per tensor.
    """
    layout = detect_layout(state)
    expected = model.state_dict()
    plan = _open_clip_plan(state, list(expected)) if layout == "open_clip" else _hf_plan(model.cfg.layers)
    missing = sorted({k for name in expected for k in plan[name][0] if k not in state})
    if missing:
        raise CheckpointError(f"{layout} checkpoint lacks {len(missing)} tensors, first: {missing[:3]}")
    for name, want in expected.items():
        got = _planned_shape(state, *plan[name])
        if got != tuple(want.shape):
            raise CheckpointError(
                f"parameter {name!r}: expected shape {tuple(want.shape)}, found {got} "
                f"(is the model config right for this checkpoint?)"
            )
    with torch.no_grad():
        for name, target in expected.items():
            keys, combine = plan[name]
            target.copy_(combine(*(state[k] for k in keys)).to(torch.float32))


def file_digest(path: Path) -> str:
    """Short content hash, so a model id says which weights it is."""
    h = hashlib.sha256()
    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else [Path(path)]
    for file in files:
        with open(file, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:12]


def build_model(name: str, checkpoint: Path | None = None, seed: int = 0) -> tuple[VisionTransformer, str]:
    """The tower for `name` with real weights from `checkpoint`, or a seeded random init.

    Returns the model (eval mode) and its id: `<name>@<weights>` where weights is the
    checkpoint's content hash or `random-seed<N>`, so features say what produced them.
    For a Hugging Face folder with a config.json, the architecture comes from that file.
    """
    if checkpoint is not None and Path(checkpoint).is_dir() and (Path(checkpoint) / "config.json").exists():
        cfg = config_from_hf(Path(checkpoint) / "config.json")
    else:
        cfg = get_config(name)
    model = VisionTransformer(cfg)
    if checkpoint is None:
        model.init_random(seed)
        weights = f"random-seed{seed}"
    else:
        load_into(model, read_state_dict(Path(checkpoint)))
        weights = file_digest(Path(checkpoint))
    return model.eval(), f"{name}@{weights}"
