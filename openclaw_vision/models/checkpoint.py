"""Load real CLIP weights (image and text towers): open_clip and Hugging Face layouts, safetensors or torch files.

Both layouts end up in our module's (open_clip-style) names. The only layout-specific work is
here: Hugging Face keeps q, k and v as separate Linear layers, open_clip stacks them into one
`in_proj`; we concatenate once, at load time. Every tensor is checked against the config
before it is copied, and a mismatch names the parameter, the expected and the found shape.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from ..core.errors import OpenclawError
from .configs import TextConfig, VisionConfig, get_config, get_text_config
from .text import TextTransformer
from .vit import VisionTransformer

log = logging.getLogger(__name__)


class CheckpointError(OpenclawError, ValueError):
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
    else:
        load_into(model, read_state_dict(Path(checkpoint)))
    return model.eval(), f"{name}@{weights_id(checkpoint, seed)}"


# ---- the text tower (same checkpoint files: one file holds both towers and logit_scale) ----------------


def weights_id(checkpoint: Path | None, seed: int = 0) -> str:
    """The part of a model id after `@`: the checkpoint's content hash, or `random-seed<N>`.

    The image and the text export of one checkpoint get the same id this way, which is what lets
    the labels node check that features and label embeddings come from the same model.
    """
    return f"random-seed{seed}" if checkpoint is None else file_digest(Path(checkpoint))


def detect_text_layout(state: dict[str, torch.Tensor]) -> str:
    if any(k.startswith("text_model.") for k in state):
        return "huggingface"
    if "token_embedding.weight" in state or "text.token_embedding.weight" in state:
        return "open_clip"
    raise CheckpointError(
        "checkpoint has no text tower: neither open_clip (token_embedding.*) nor Hugging Face (text_model.*) keys"
    )


def text_config_from_hf(config_json: Path) -> TextConfig:
    """A TextConfig from a Hugging Face CLIPModel / CLIPTextModelWithProjection config.json."""
    raw = json.loads(Path(config_json).read_text())
    txt = raw.get("text_config", raw)
    act = txt.get("hidden_act", "quick_gelu")
    cfg = TextConfig(
        width=int(txt["hidden_size"]),
        layers=int(txt["num_hidden_layers"]),
        heads=int(txt["num_attention_heads"]),
        embed_dim=int(raw.get("projection_dim", txt.get("projection_dim", 512))),
        context_length=int(txt.get("max_position_embeddings", 77)),
        vocab_size=int(txt.get("vocab_size", 49408)),
        act="quick_gelu" if act == "quick_gelu" else "gelu",
        ln_eps=float(txt.get("layer_norm_eps", 1e-5)),
    )
    if int(txt.get("intermediate_size", cfg.mlp_dim)) != cfg.mlp_dim:
        raise CheckpointError(
            f"{config_json}: text intermediate_size {txt['intermediate_size']} is not 4 × hidden_size"
        )
    return cfg


_TEXT_KEYS = ("token_embedding.weight", "positional_embedding", "ln_final.weight", "ln_final.bias", "text_projection")


def _text_from_open_clip(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """open_clip's CLIP keeps the text tower at the top level (`visual.*` is the image tower);
    its CustomTextCLIP puts it under `text.`. `logit_scale` is top-level in both."""
    prefix = "text." if "text.token_embedding.weight" in state else ""
    out = {
        k[len(prefix) :]: v
        for k, v in state.items()
        if k.startswith(prefix) and (k[len(prefix) :] in _TEXT_KEYS or k[len(prefix) :].startswith("transformer."))
    }
    if "logit_scale" in state:
        out["logit_scale"] = state["logit_scale"]
    return out


def _text_from_huggingface(state: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """Hugging Face CLIPModel: separate q/k/v (concatenated here), nn.Linear projection (transposed here)."""
    out = {
        "token_embedding.weight": state["text_model.embeddings.token_embedding.weight"],
        "positional_embedding": state["text_model.embeddings.position_embedding.weight"],
        "ln_final.weight": state["text_model.final_layer_norm.weight"],
        "ln_final.bias": state["text_model.final_layer_norm.bias"],
        "text_projection": state["text_projection.weight"].t().contiguous(),
    }
    if "logit_scale" in state:
        out["logit_scale"] = state["logit_scale"]
    for i in range(layers):
        src = f"text_model.encoder.layers.{i}."
        dst = f"transformer.resblocks.{i}."
        for kind in ("weight", "bias"):
            out[dst + f"attn.in_proj_{kind}"] = torch.cat(
                [state[src + f"self_attn.{p}_proj.{kind}"] for p in ("q", "k", "v")], dim=0
            )
            for hf, oc in _HF_BLOCK.items():
                out[dst + f"{oc}.{kind}"] = state[src + f"{hf}.{kind}"]
    return out


def load_text_into(model: TextTransformer, state: dict[str, torch.Tensor]) -> None:
    """Copy a checkpoint's text tower (either layout) into `model`, checking every name and shape first.

    A checkpoint without `logit_scale` (a text-only export) keeps open_clip's initial value; the
    log says so, because label scores are softmax(logit_scale × cosine) and depend on it.
    """
    layout = detect_text_layout(state)
    try:
        mapped = (
            _text_from_open_clip(state) if layout == "open_clip" else _text_from_huggingface(state, model.cfg.layers)
        )
    except KeyError as err:
        raise CheckpointError(f"{layout} checkpoint is missing text tensor {err.args[0]!r}") from None
    expected = model.state_dict()
    if "logit_scale" not in mapped:
        log.warning("checkpoint has no logit_scale: using open_clip's initial value (exp = 14.29)")
        mapped["logit_scale"] = expected["logit_scale"]
    missing = sorted(set(expected) - set(mapped))
    if missing:
        raise CheckpointError(f"{layout} checkpoint lacks {len(missing)} text tensors, first: {missing[:3]}")
    for name, want in expected.items():
        got = mapped[name]
        if got.numel() == want.numel() == 1:  # logit_scale: a scalar in open_clip, shape [] or [1] elsewhere
            mapped[name] = got.reshape(want.shape)
        elif tuple(got.shape) != tuple(want.shape):
            raise CheckpointError(
                f"text parameter {name!r}: expected shape {tuple(want.shape)}, found {tuple(got.shape)} "
                f"(is the model config right for this checkpoint?)"
            )
    model.load_state_dict({k: mapped[k].to(torch.float32) for k in expected}, strict=True)


def build_text_model(name: str, checkpoint: Path | None = None, seed: int = 0) -> tuple[TextTransformer, str]:
    """The text tower for `name` with real weights from `checkpoint`, or a seeded random init.

    Returns the model (eval mode) and its id, `<name>@<weights>`, made exactly as the image
    tower's (`build_model`): the same checkpoint gives both towers the same id. For a Hugging
    Face folder with a config.json, the architecture comes from that file.
    """
    if checkpoint is not None and Path(checkpoint).is_dir() and (Path(checkpoint) / "config.json").exists():
        cfg = text_config_from_hf(Path(checkpoint) / "config.json")
    else:
        cfg = get_text_config(name)
    model = TextTransformer(cfg)
    if checkpoint is None:
        model.init_random(seed)
    else:
        load_text_into(model, read_state_dict(Path(checkpoint)))
    return model.eval(), f"{name}@{weights_id(checkpoint, seed)}"
