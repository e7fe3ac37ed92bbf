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


class ConfigError(ValueError):
    """A configuration value that the node cannot run with."""


@dataclass(frozen=True)
class EncoderConfig:
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
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"parameter {key}={getattr(self, key)!r}: {why}")

        for key in ("image_topic", "features_topic"):
            if not getattr(self, key) or " " in getattr(self, key):
                raise bad(key, "must be a non-empty ROS topic name")
        if self.model not in MODEL_CONFIGS and not self.model_path:
            raise bad("model", f"unknown; known: {', '.join(MODEL_CONFIGS)} (or set model_path)")
        if self.backend not in BACKENDS:
            raise bad("backend", f"choose one of {', '.join(BACKENDS)}")
        if self.precision not in ("fp32", "fp16", "int8"):
            raise bad("precision", "choose fp32, fp16 or int8")
        if self.threads < 0:
            raise bad("threads", "must be >= 0")
        if self.reliability not in RELIABILITIES:
            raise bad("reliability", f"choose one of {', '.join(RELIABILITIES)}")
        if self.depth < 1:
            raise bad("depth", "must be >= 1")
        if self.diagnostics_period <= 0:
            raise bad("diagnostics_period", "must be > 0 seconds")
        if self.transport not in TRANSPORTS:
            raise bad("transport", f"choose one of {', '.join(TRANSPORTS)}")
        return self

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> EncoderConfig:
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


__all__ = ["ConfigError", "EncoderConfig", "add_arguments", "from_sources", "read_params_file", "replace"]
