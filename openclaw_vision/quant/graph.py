"""Which nodes of an exported tower get INT8, and what each one is.

Quantised: MatMul / Gemm / Conv whose second input is a constant weight (patch embedding,
QKV, attention output, MLP fc/proj, final projection). The attention MatMuls QKᵀ and PV
multiply two activations; they stay float with LayerNorm, Softmax, GELU and the residual Adds,
whose quantisation is what collapses ViT accuracy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import onnx

QUANTISABLE_OPS = ("MatMul", "Gemm", "Conv")

# Roles by the module path the exporter writes into node names (open_clip / our vit.py naming).
_ROLES = (
    (re.compile(r"attn/out_proj"), "attn_out"),
    (re.compile(r"attn/"), "qkv"),
    (re.compile(r"mlp/c_fc"), "mlp_fc"),
    (re.compile(r"mlp/c_proj"), "mlp_proj"),
)
_BLOCK = re.compile(r"resblocks\.(\d+)")


@dataclass(frozen=True)
class Layer:
    """One quantisable node: its activation input, its weight and the weight's output-channel axis."""

    node: str
    op_type: str
    activation: str
    weight: str
    channel_axis: int
    role: str
    block: int  # -1 outside the transformer blocks

    @property
    def label(self) -> str:
        return f"{self.role}" if self.block < 0 else f"block{self.block}.{self.role}"

    def names(self) -> dict:
        """How a report names the layer: node, label, role and block."""
        return {"node": self.node, "label": self.label, "role": self.role, "block": self.block}


def _role(name: str) -> str:
    for pattern, role in _ROLES:
        if pattern.search(name):
            return role
    return "other"


def quantisable_layers(model: onnx.ModelProto) -> list[Layer]:
    """Every MatMul/Gemm/Conv with a constant weight, in graph order."""
    inits = {i.name: i for i in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        if node.op_type not in QUANTISABLE_OPS or len(node.input) < 2 or node.input[1] not in inits:
            continue
        if node.input[0] in inits:
            continue
        weight = inits[node.input[1]]
        if node.op_type == "Conv":
            axis = 0
        elif node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            axis = 0 if trans_b else 1
        else:
            if len(weight.dims) != 2:
                continue
            axis = 1
        block = _BLOCK.search(node.name)
        layers.append(
            Layer(
                node=node.name,
                op_type=node.op_type,
                activation=node.input[0],
                weight=node.input[1],
                channel_axis=axis,
                role=_role(node.name),
                block=int(block.group(1)) if block else -1,
            )
        )
    if not layers:
        raise ValueError("no quantisable MatMul/Gemm/Conv with a constant weight in this model")
    # Outside the blocks, the first weight layer embeds the patches and the last projects.
    outside = [i for i, layer in enumerate(layers) if layer.block < 0]
    for i, role in ((outside[0], "patch_embed"), (outside[-1], "proj")) if len(outside) >= 2 else ():
        layers[i] = replace(layers[i], role=role)
    return layers
