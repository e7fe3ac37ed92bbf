"""Outlier profiles: our random-init towers given the activation statistics real CLIP checkpoints have.

NOT a user-facing model. A random-init export has LayerNorm gamma = 1 in every channel and no
outlier of any kind, so an INT8 verdict measured on it alone is optimistic. These transforms give
the tower, at any architecture (tiny for the tests; ViT-B-32, ViT-L-14, ViT-bigG-14 for the
figures), the outliers the literature measured on real weights, deterministically (a profile and a
seed give the same weights every time), so the quantiser's tests and figures meet them:

- `ln-channels` — post-LayerNorm channel outliers (RepQ-ViT, Li et al. 2023; FQ-ViT, Lin et al.
  2022: gamma and beta vary across channels by orders of magnitude, so the QKV and FC1 inputs
  have a few channels tens of times wider than the rest; plain 8-bit MinMax took ViT-L from 85.8 to
  3.4 % top-1). Here: a fixed set of ~W/128 channels (at least 2), the same in every LayerNorm as
  in real towers, widened 20–100× through gamma and beta, with an offset of 1–3 (widened units)
  so the channel is not centred on 0; the factor and the offset are folded back out of the next
  GEMM's weight rows and bias. The FP32 function is unchanged (ln_post → proj has no bias, so
  it gets the factor only).
- `massive` — massive activations (Sun et al. 2024, "Massive Activations in Large Language
  Models", §5 CLIP ViT-L): two fixed residual dimensions reach > 100 and >= 1000× the median on
  two fixed patch tokens, from the middle block on. Made as real towers make them: one MLP hidden
  unit of that block fires on those tokens only (an FC2 input near 200 against single digits) and
  writes into the two dimensions; the residual stream keeps them. In every later block they are attention
  sinks, as Sun et al. (§4) found massive-activation tokens to be: attention gathers on them and they act as
  fixed biases (a query bias toward their keys, as in `registers`); without that, at width 1024 and 257 tokens,
  two tokens of two dimensions were too weak to fail plain INT8 (ViT-L/14: mean cosine 0.99973). The tokens
  are marked through one positional-embedding dimension. Changes the function: its own FP32 reference.
- `registers` — high-norm tokens (Darcet et al. 2023, "Vision Transformers Need Registers":
  OpenCLIP and DINOv2 ViT-L and up, from about a third of the depth, ~2 % of the patch tokens
  reach norms above 150 against tens elsewhere, and the CLS token's attention gathers on them).
  Here: four MLP hidden units of block depth//3 fire on ~2 % of the patch tokens (at least 2) and
  write a dense random direction with norm ~max(300, 10× the median token norm) (> 150 on every frame); in every later
  block a query bias makes those tokens attention sinks (their keys score ~+5 in every head). Fixed
  positions stand in for real towers' low-information background patches: what quantisation meets
  (a few FC2 inputs tens of times the rest, and the attention resting on few tokens) is the same.
  Changes the function: its own FP32 reference.
- `k-narrow` — the seed's narrow K channels (per-tensor scales squeezed K channels of small range
  and softmax ranking errors reached 12.4 %): in every block, W/8 of ln_1's channels are narrowed
  20–100× (gamma and beta; the QKV weight rows grown to match) and the K channels of a quarter of
  the heads are shrunk 20–100× with the same heads' Q channels grown to match (QKᵀ unchanged).
  The FP32 function is unchanged.
- `clip-like` — all of them (the function-changing ones first, then the exact rescales).

`apply` transforms a built tower in place; `export_profile` builds, transforms, exports and checks
one (its model id stays the base tower's, so the gate's text term pairs with the base text tower;
the metadata key `outlier_profile` names the profile).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..models.vit import VisionTransformer

PROFILES = ("ln-channels", "massive", "registers", "k-narrow", "clip-like")
#: Profiles whose FP32 function is the base tower's (exact rescales): tests check it.
FUNCTION_KEPT = frozenset({"ln-channels", "k-narrow"})
#: The metadata key that names an export's profile.
PROFILE_KEY = "outlier_profile"
#: The metadata key holding `source_digest()` of the code that made it (a cached export of older code is stale).
DIGEST_KEY = "outlier_profile_digest"
WIDEN = (20.0, 100.0)  # RepQ-ViT / FQ-ViT: post-LN channel ranges tens of times the median channel's
MASSIVE_FC2 = 200.0  # the FC2 input of the firing unit
REGISTER_UNITS = 4
SINK_LOGIT = 5.0


@dataclass
class ProfileInfo:
    """What a profile did, for docs, tests and figures."""

    profile: str
    function_kept: bool
    notes: dict = field(default_factory=dict)


def _rng(profile: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(profile.encode()), seed])


def _log_uniform(rng: np.random.Generator, n: int, lo_hi: tuple[float, float] = WIDEN) -> np.ndarray:
    lo, hi = np.log(lo_hi[0]), np.log(lo_hi[1])
    return np.exp(rng.uniform(lo, hi, n))


def _probe_pixels(model: VisionTransformer, n: int = 4) -> torch.Tensor:
    """Fixed probe images for the thresholds the profiles set (smooth noise, the scale of normalised pixels)."""
    s = model.cfg.image_size
    g = torch.Generator().manual_seed(1234)
    low = torch.randn(n, 3, s // 8, s // 8, generator=g)
    x = torch.nn.functional.interpolate(low, size=(s, s), mode="bilinear", align_corners=False)
    return x / x.std()


def _capture(model: VisionTransformer, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`module`'s output on `x` (one forward with a hook)."""
    got = {}
    handle = module.register_forward_hook(lambda m, i, o: got.setdefault("y", o.detach()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return got["y"]


def _mark_tokens(model: VisionTransformer, dim: int, tokens: list[int]) -> None:
    """Make residual dimension `dim` a marker: zero from the patches, class and other positions, large at `tokens`."""
    w = model.cfg.width
    with torch.no_grad():
        x = model.embed_patches(_probe_pixels(model)) + model.positional_embedding[1:]
        sigma = float(x.std())
        model.conv1.weight[dim] = 0.0
        model.class_embedding[dim] = 0.0
        model.positional_embedding[:, dim] = 0.0
        model.positional_embedding[tokens, dim] = 3 * sigma * w**0.5  # ln_pre saturates it: ~0.95·sqrt(W) on any image


def _detector(model: VisionTransformer, block: int, dim: int, tokens: list[int], units: list[int], fire: float) -> None:
    """MLP hidden `units` of `block` read marker `dim` of ln_2 and reach `fire` on `tokens`, ~0 elsewhere."""
    blk = model.transformer.resblocks[block]
    v = _capture(model, blk.ln_2, _probe_pixels(model))[..., dim]  # (N, T)
    on = torch.zeros(v.shape[1], dtype=torch.bool)
    on[tokens] = True
    hi, lo = float(v[:, on].min()), float(v[:, ~on].max())
    if hi <= lo:
        raise RuntimeError(f"marker dimension {dim} does not separate tokens {tokens} at block {block}")
    thr = lo + 0.25 * (hi - lo)  # nearer the unmarked tokens: frames brighter than the probe mark less
    gain = fire / max(hi - thr, 1e-6)  # the weakest marked token reaches `fire`
    with torch.no_grad():
        for u in units:
            blk.mlp.c_fc.weight[u] = 0.0
            blk.mlp.c_fc.weight[u, dim] = gain
            blk.mlp.c_fc.bias[u] = -gain * thr


def _sinks(model: VisionTransformer, first: int, token: torch.Tensor) -> None:
    """From block `first` on, tokens whose residual is dominated by `token` become attention sinks: a query bias
    toward their key, so every query scores them ~SINK_LOGIT above the rest in every head."""
    cfg = model.cfg
    w, hd = cfg.width, cfg.width // cfg.heads
    for later in model.transformer.resblocks[first:]:
        with torch.no_grad():
            y = later.ln_1(token)  # what ln_1 makes of such a token (its norm dominates)
            k = torch.nn.functional.linear(y, later.attn.in_proj_weight[w : 2 * w], later.attn.in_proj_bias[w : 2 * w])
            for h in range(cfg.heads):
                kh = k[h * hd : (h + 1) * hd]
                later.attn.in_proj_bias[h * hd : (h + 1) * hd] += SINK_LOGIT * hd**0.5 * kh / kh.dot(kh)


def _residual(model: VisionTransformer, block: int) -> torch.Tensor:
    return _capture(model, model.transformer.resblocks[block], _probe_pixels(model))


def massive(model: VisionTransformer, rng: np.random.Generator, avoid: tuple[int, ...] = ()) -> dict:
    cfg = model.cfg
    layer = cfg.layers // 2
    dims = [int(d) for d in rng.choice(cfg.width, 3, replace=False)]
    marker, out_dims = dims[0], dims[1:]
    tokens = [t for t in range(1, cfg.tokens) if t not in avoid][:: max(1, cfg.grid**2 // 2)][:2]
    unit = int(rng.integers(cfg.mlp_dim))
    _mark_tokens(model, marker, tokens)
    _detector(model, layer, marker, tokens, [unit], MASSIVE_FC2)
    median = float(_residual(model, layer).abs().median())
    target = max(200.0, 2000.0 * median)  # margin over >100 and >=1000x: frames fire the unit unevenly
    blk = model.transformer.resblocks[layer]
    sign = torch.tensor([1.0, -1.0])
    with torch.no_grad():
        blk.mlp.c_proj.weight[:, unit] = 0.0
        blk.mlp.c_proj.weight[out_dims, unit] = sign * target / MASSIVE_FC2
    token = torch.zeros(cfg.width)
    token[out_dims] = sign * target
    _sinks(model, layer + 1, token)  # Sun et al. §4: attention gathers on the massive tokens (fixed biases)
    return {"block": layer, "dims": out_dims, "tokens": tokens, "marker_dim": marker, "fc2_unit": unit,
            "target": round(target, 1)}  # fmt: skip


def registers(model: VisionTransformer, rng: np.random.Generator, avoid: tuple[int, ...] = ()) -> dict:
    cfg = model.cfg
    layer = cfg.layers // 3
    n = max(2, round(0.02 * cfg.grid**2))
    free = [t for t in range(1, cfg.tokens) if t not in avoid]
    tokens = sorted(int(t) for t in rng.choice(free, n, replace=False))
    marker = int(rng.integers(cfg.width))
    units = [int(u) for u in rng.choice(cfg.mlp_dim, REGISTER_UNITS, replace=False)]
    _mark_tokens(model, marker, tokens)
    _detector(model, layer, marker, tokens, units, MASSIVE_FC2 / 4)
    norms = _residual(model, layer).norm(dim=-1)
    target = max(300.0, 10.0 * float(norms.median()))  # margin: frames fire the detector unevenly
    direction = torch.from_numpy(rng.standard_normal(cfg.width)).float()
    direction /= direction.norm()
    blk = model.transformer.resblocks[layer]
    with torch.no_grad():
        blk.mlp.c_proj.weight[:, units] = (direction * target / (REGISTER_UNITS * MASSIVE_FC2 / 4))[:, None]
    _sinks(model, layer + 1, direction * target)
    return {"block": layer, "tokens": tokens, "marker_dim": marker, "fc2_units": units, "norm": round(target, 1)}


def _widen_ln(ln: torch.nn.LayerNorm, chans: np.ndarray, factors: np.ndarray, offsets: np.ndarray,
              weight: torch.Tensor, bias: torch.Tensor | None, in_axis: int) -> None:  # fmt: skip
    """LayerNorm channels × factors (+ factor·offset), folded out of the next GEMM: y' = f·y + f·u on
    channel c, so weight[.., c] / f and bias − u·weight[.., c] give the same GEMM output."""
    c = torch.from_numpy(chans).long()
    f = torch.from_numpy(factors).float()
    u = torch.from_numpy(offsets).float()
    with torch.no_grad():
        cols = weight.index_select(in_axis, c)
        if bias is not None:
            bias -= (cols * u.reshape([-1 if a == in_axis else 1 for a in range(2)])).sum(dim=in_axis)
        else:
            u = torch.zeros_like(u)
        ln.weight[c] *= f
        ln.bias[c] = (ln.bias[c] + u) * f
        shape = [-1 if a == in_axis else 1 for a in range(2)]
        weight.index_copy_(in_axis, c, cols / f.reshape(shape))


def ln_channels(model: VisionTransformer, rng: np.random.Generator, avoid: tuple[int, ...] = ()) -> dict:
    cfg = model.cfg
    n = max(2, cfg.width // 128)
    chans = np.sort(rng.choice([c for c in range(cfg.width) if c not in avoid], n, replace=False))
    for blk in model.transformer.resblocks:
        for ln, lin_w, lin_b in ((blk.ln_1, blk.attn.in_proj_weight, blk.attn.in_proj_bias),
                                 (blk.ln_2, blk.mlp.c_fc.weight, blk.mlp.c_fc.bias)):  # fmt: skip
            offsets = rng.uniform(1.0, 3.0, n) * rng.choice([-1.0, 1.0], n)
            _widen_ln(ln, chans, _log_uniform(rng, n), offsets, lin_w, lin_b, in_axis=1)
    _widen_ln(model.ln_post, chans, _log_uniform(rng, n), np.zeros(n), model.proj, None, in_axis=0)
    return {"channels": chans.tolist(), "factors": list(WIDEN)}


def k_narrow(model: VisionTransformer, rng: np.random.Generator, avoid: tuple[int, ...] = ()) -> dict:
    cfg = model.cfg
    w, hd = cfg.width, cfg.width // cfg.heads
    n = max(2, w // 8)
    chans = np.sort(rng.choice([c for c in range(w) if c not in avoid], n, replace=False))
    heads = sorted(int(h) for h in rng.choice(cfg.heads, max(1, cfg.heads // 4), replace=False))
    for blk in model.transformer.resblocks:
        _widen_ln(blk.ln_1, chans, 1.0 / _log_uniform(rng, n), np.zeros(n), blk.attn.in_proj_weight, None, 1)
        with torch.no_grad():
            for h in heads:
                t = float(_log_uniform(rng, 1)[0])
                q, k = slice(h * hd, (h + 1) * hd), slice(w + h * hd, w + (h + 1) * hd)
                blk.attn.in_proj_weight[q] *= t
                blk.attn.in_proj_bias[q] *= t
                blk.attn.in_proj_weight[k] /= t
                blk.attn.in_proj_bias[k] /= t
    return {"ln_1_channels": len(chans), "k_heads": heads}


def apply(model: VisionTransformer, profile: str, seed: int = 0) -> ProfileInfo:
    """Give `model` (a freshly built random-init tower) the outliers of `profile`, in place."""
    if profile not in PROFILES:
        raise ValueError(f"unknown outlier profile {profile!r}; choose one of {', '.join(PROFILES)}")
    rng = _rng(profile, seed)
    notes: dict = {}
    if profile == "ln-channels":
        notes["ln-channels"] = ln_channels(model, rng)
    elif profile == "massive":
        notes["massive"] = massive(model, rng)
    elif profile == "registers":
        notes["registers"] = registers(model, rng)
    elif profile == "k-narrow":
        notes["k-narrow"] = k_narrow(model, rng)
    else:
        # registers first: massive's detector is then set on a tower whose attention already has the sinks
        notes["registers"] = r = registers(model, rng)
        notes["massive"] = m = massive(model, rng, avoid=tuple(r["tokens"]))
        taken = (*m["dims"], m["marker_dim"], r["marker_dim"])
        notes["k-narrow"] = k_narrow(model, rng, avoid=taken)
        notes["ln-channels"] = ln_channels(model, rng, avoid=taken)
    return ProfileInfo(profile, profile in FUNCTION_KEPT, notes)


def export_profile(name: str, profile: str, out: Path, seed: int = 0) -> Path:
    """The random-init tower `name` with `profile` applied, exported (and checked against PyTorch) at `out`."""
    from ..models.checkpoint import build_model
    from ..models.export import TowerIO, check_cases, compare_onnx, export_onnx, torch_outputs

    model, model_id = build_model(name, seed=seed)
    info = apply(model, profile, seed)
    path = export_onnx(model, model_id, Path(out))
    cases = check_cases(model)
    compare_onnx(path, TowerIO.of(model, model_id), cases, torch_outputs(model, cases))
    _stamp_profile(path, info)
    return path


def source_digest() -> str:
    """CRC-32 of this module's source: what made a profile export, so a cache (the figures script) knows stale."""
    return f"{zlib.crc32(Path(__file__).read_bytes()):08x}"


def _stamp_profile(path: Path, info: ProfileInfo) -> None:
    """Name the profile in the export's metadata (the graph is rewritten; external weights stay where they are)."""
    import json

    import onnx

    from ..models import onnx_files

    full = onnx.load(str(path), load_external_data=False)
    meta = onnx_files.metadata_of(full)
    meta.update(
        {PROFILE_KEY: info.profile, f"{PROFILE_KEY}_notes": json.dumps(info.notes), DIGEST_KEY: source_digest()}
    )
    onnx_files.set_metadata(full, meta)
    Path(path).write_bytes(full.SerializeToString())
