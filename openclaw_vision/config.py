"""One configuration object per node: the same keys in config/*.yaml, ROS parameters and CLI flags.

The YAML file is a ROS 2 parameters file (`<node>: ros__parameters: {...}`), so `ros2 launch`
passes it to the node unchanged and the pip/Cyclone path reads the very same file. Values are
validated when the node starts; a wrong one stops it with a message naming the key.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from .encoders import BACKENDS
from .models.configs import MODEL_CONFIGS
from .ros.transport import RELIABILITIES, TRANSPORTS
from .vlm.tokenizer import DEFAULT_SYSTEM


class ConfigError(ValueError):
    """A configuration value that the node cannot run with."""


class NodeConfig:
    """Shared behaviour of node configurations: dict conversion with type checks, validation hook."""

    def validate(self):
        return self

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown parameter(s): {', '.join(unknown)}; known: {', '.join(known)}")
        typed = {}
        for key, value in values.items():
            want = type(getattr(cls(), key))
            try:
                typed[key] = want(value)
            except (TypeError, ValueError):
                raise ConfigError(f"parameter {key}={value!r}: expected {want.__name__}") from None
        return cls(**typed)

    def _bad(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"parameter {key}={getattr(self, key)!r}: {why}")


@dataclass(frozen=True)
class EncoderConfig(NodeConfig):
    image_topic: str = "/camera/image_raw"
    features_topic: str = "/visual_features"
    model: str = "ViT-B-32"
    model_path: str = ""  # empty: the built model for `model` and `precision` in the data home
    backend: str = "auto"
    precision: str = "int8"  # the gated INT8 model (`openclaw-vision quantize`); fp32 on request
    threads: int = 0  # 0: one per core
    reliability: str = "best_effort"  # image subscription; sensor-data QoS by default
    depth: int = 1
    diagnostics_period: float = 1.0
    transport: str = "auto"

    def validate(self) -> EncoderConfig:
        for key in ("image_topic", "features_topic"):
            if not getattr(self, key) or " " in getattr(self, key):
                raise self._bad(key, "must be a non-empty ROS topic name")
        if self.model not in MODEL_CONFIGS and not self.model_path:
            raise self._bad("model", f"unknown; known: {', '.join(MODEL_CONFIGS)} (or set model_path)")
        if self.backend not in BACKENDS:
            raise self._bad("backend", f"choose one of {', '.join(BACKENDS)}")
        if self.precision not in ("fp32", "fp16", "int8"):
            raise self._bad("precision", "choose fp32, fp16 or int8")
        if self.threads < 0:
            raise self._bad("threads", "must be >= 0")
        if self.reliability not in RELIABILITIES:
            raise self._bad("reliability", f"choose one of {', '.join(RELIABILITIES)}")
        if self.depth < 1:
            raise self._bad("depth", "must be >= 1")
        if self.diagnostics_period <= 0:
            raise self._bad("diagnostics_period", "must be > 0 seconds")
        if self.transport not in TRANSPORTS:
            raise self._bad("transport", f"choose one of {', '.join(TRANSPORTS)}")
        return self


VLM_BACKENDS = ("auto", "numpy", "cupy")


@dataclass(frozen=True)
class VlmConfig(NodeConfig):
    features_topic: str = "/visual_features"
    prompt_topic: str = "/vlm/prompt"
    answer_topic: str = "/vlm/answer"
    stream_topic: str = ""  # non-empty: each decoded piece is also published there (std_msgs/String)
    llm: str = "tiny"  # a named config with random weights (tiny | tinyllama-1.1b) or a Hugging Face folder
    tokenizer: str = ""  # tokenizer.json or its folder; empty: the checkpoint's, or the built-in one
    projector: str = ""  # projector safetensors; empty: random init
    embed_dim: int = 512  # width of the incoming embeddings (the encoder model's)
    visual_tokens: int = 8
    max_new_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    system_prompt: str = DEFAULT_SYSTEM
    kv_blocks: int = 256
    block_size: int = 16
    backend: str = "auto"  # auto (cupy when a GPU is usable) | numpy | cupy
    diagnostics_period: float = 1.0
    transport: str = "auto"

    def validate(self) -> VlmConfig:
        for key in ("features_topic", "prompt_topic", "answer_topic"):
            if not getattr(self, key) or " " in getattr(self, key):
                raise self._bad(key, "must be a non-empty ROS topic name")
        if " " in self.stream_topic:
            raise self._bad("stream_topic", "must be a ROS topic name or empty")
        for key in ("embed_dim", "visual_tokens", "max_new_tokens", "kv_blocks", "block_size"):
            if getattr(self, key) < 1:
                raise self._bad(key, "must be >= 1")
        if self.temperature < 0:
            raise self._bad("temperature", "must be >= 0 (0 = greedy)")
        if not 0 < self.top_p <= 1:
            raise self._bad("top_p", "must be in (0, 1]")
        if self.backend not in VLM_BACKENDS:
            raise self._bad("backend", f"choose one of {', '.join(VLM_BACKENDS)}")
        if self.diagnostics_period <= 0:
            raise self._bad("diagnostics_period", "must be > 0 seconds")
        if self.transport not in TRANSPORTS:
            raise self._bad("transport", f"choose one of {', '.join(TRANSPORTS)}")
        return self


@dataclass(frozen=True)
class ZeroShotConfig(NodeConfig):
    """The labels node. `labels`, `labels_file` and `template` may change while it runs."""

    features_topic: str = "/visual_features"
    labels_topic: str = "/visual_labels"
    set_labels_topic: str = "/zero_shot_node/set_labels"  # std_msgs/String: a new label set (both transports)
    labels: str = "door,forklift,person"  # comma-separated
    labels_file: str = ""  # one label per line; when set, it is the label set (`labels` is not used)
    template: str = "a photo of a {}."  # prompt per label; "{}" alone uses the labels as they are
    model: str = "ViT-B-32"
    text_model_path: str = ""  # empty: ~/.cache/openclaw_vision/models/<model>.text.fp32.onnx
    bpe_path: str = ""  # CLIP's merges file; empty: the data home's, or an installed open_clip's
    threads: int = 1  # the text tower runs once per label set; keep the cores for the encoder
    diagnostics_period: float = 1.0
    transport: str = "auto"

    def validate(self) -> ZeroShotConfig:
        for key in ("features_topic", "labels_topic"):
            if not getattr(self, key) or " " in getattr(self, key):
                raise self._bad(key, "must be a non-empty ROS topic name")
        if " " in self.set_labels_topic:
            raise self._bad("set_labels_topic", "must be a ROS topic name or empty")
        if self.model not in MODEL_CONFIGS and not self.text_model_path:
            raise self._bad("model", f"unknown; known: {', '.join(MODEL_CONFIGS)} (or set text_model_path)")
        if not self.labels.strip() and not self.labels_file:
            raise self._bad("labels", "give at least one label (or labels_file)")
        if self.template.count("{}") != 1:
            raise self._bad("template", "must contain '{}' exactly once (where the label goes)")
        if self.threads < 0:
            raise self._bad("threads", "must be >= 0")
        if self.diagnostics_period <= 0:
            raise self._bad("diagnostics_period", "must be > 0 seconds")
        if self.transport not in TRANSPORTS:
            raise self._bad("transport", f"choose one of {', '.join(TRANSPORTS)}")
        return self


def read_params_file(path: Path, node: str) -> dict[str, Any]:
    """The `ros__parameters` of `node` (or of '/**') in a ROS 2 parameters YAML file."""
    doc = yaml.safe_load(Path(path).read_text()) or {}
    for key in (node, f"/{node}", "/**", "**"):
        if isinstance(doc.get(key), dict) and "ros__parameters" in doc[key]:
            return dict(doc[key]["ros__parameters"] or {})
    raise ConfigError(f"{path}: no '{node}: ros__parameters:' section")


def add_arguments(parser: argparse.ArgumentParser, cls=EncoderConfig) -> None:
    """One --flag per config key (underscores become dashes); unset flags keep the file's value."""
    for f in fields(cls):
        default = getattr(cls(), f.name)
        kind = type(default)
        parser.add_argument(
            "--" + f.name.replace("_", "-"), dest=f.name, type=kind, default=None, help=f"(default: {default!r})"
        )


def from_sources(config_file: Path | None, node: str, overrides: dict[str, Any], cls=EncoderConfig):
    """Defaults ← YAML file ← explicit overrides (CLI flags or ROS parameters), then validate."""
    values: dict[str, Any] = {}
    if config_file is not None:
        values.update(read_params_file(config_file, node))
    values.update({k: v for k, v in overrides.items() if v is not None})
    cfg = cls.from_dict(values)
    return cfg.validate()


__all__ = [
    "ConfigError",
    "EncoderConfig",
    "VlmConfig",
    "ZeroShotConfig",
    "add_arguments",
    "from_sources",
    "read_params_file",
    "replace",
]
