"""TensorRT engines on disk: built once, found again by what they were built from and for.

An engine is only valid for the exact ONNX file, GPU (name and compute capability), TensorRT
version and build options it was built with, so those make its key:

    key = sha256(json{onnx sha256, gpu name, compute capability, TensorRT version, build options})

Each engine file `<model>/<key16>.engine` has a JSON record beside it with those fields and the
sha256 of the engine bytes. At start the encoder asks for its key:

- found, record intact, bytes match their checksum → used as is (never rebuilt);
- record missing or unreadable, bytes truncated or changed → one log line, rebuilt;
- not found, but engines of the same model for another key exist → one log line naming what
  changed (ONNX, GPU, TensorRT, options: stale or foreign), then built.

Plain Python and JSON: no TensorRT or GPU needed to test it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.resources import data_home

log = logging.getLogger(__name__)

KEY_FIELDS = ("onnx_sha256", "gpu", "compute_capability", "tensorrt", "options")


@dataclass(frozen=True)
class BuildOptions:
    """What changes the engine TensorRT builds (part of the cache key)."""

    max_batch: int = 8  # the optimisation profile covers batch 1..max_batch, tuned for batch 1
    workspace_mb: int = 1024
    typing: str = "auto"  # auto: strongly typed on TensorRT >= 11, INT8 + FP16 flags on TensorRT 10

    def resolved(self, tensorrt_major: int) -> BuildOptions:
        typing = self.typing
        if typing == "auto":
            typing = "strong" if tensorrt_major >= 11 else "int8+fp16"
        if typing not in ("strong", "int8+fp16"):
            raise ValueError(f"unknown typing {self.typing!r}; choose auto, strong or int8+fp16")
        if typing == "int8+fp16" and tensorrt_major >= 11:
            raise ValueError("TensorRT 11 has no INT8/FP16 builder flags: Q/DQ networks are built strongly typed")
        return BuildOptions(self.max_batch, self.workspace_mb, typing)


@dataclass(frozen=True)
class EngineKey:
    onnx_sha256: str
    gpu: str
    compute_capability: str
    tensorrt: str
    options: BuildOptions = field(default_factory=BuildOptions)

    def fields(self) -> dict:
        return {**asdict(self), "options": asdict(self.options)}

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def describe_change(old: dict, new: dict) -> str:
    """'TensorRT 10.16.1.11 -> 11.4.0.106, GPU …' — what differs between two engine records."""
    names = {
        "onnx_sha256": "ONNX",
        "gpu": "GPU",
        "compute_capability": "compute capability",
        "tensorrt": "TensorRT",
        "options": "build options",
    }
    parts = []
    for k in KEY_FIELDS:
        a, b = old.get(k), new.get(k)
        if a != b:
            if k == "onnx_sha256":
                parts.append(f"ONNX changed ({str(a)[:12]} -> {str(b)[:12]})")
            else:
                parts.append(f"{names[k]} {a} -> {b}")
    return ", ".join(parts) or "same key"


class EngineCache:
    """Engines under `root/<model name>/`, one JSON record each."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root else data_home() / "engines"

    def paths(self, model: str, key: EngineKey) -> tuple[Path, Path]:
        folder = self.root / model
        return folder / f"{key.digest[:16]}.engine", folder / f"{key.digest[:16]}.json"

    def load(self, model: str, key: EngineKey) -> bytes | None:
        """The cached engine's bytes, or None (with one log line saying why) when it must be built."""
        engine, record = self.paths(model, key)
        if not engine.exists():
            others = self._others(model, key)
            if others:
                what = "; ".join(f"{p.name}: {describe_change(r, key.fields())}" for p, r in others)
                log.warning(
                    "no TensorRT engine of %s for this build; stale or foreign engines beside it (%s): building",
                    model,
                    what,
                )
            return None
        try:
            meta = json.loads(record.read_text())
            data = engine.read_bytes()
        except (OSError, ValueError) as err:
            log.warning("TensorRT engine %s has no readable record (%s): rebuilding", engine, err)
            return None
        if meta.get("key") != key.digest:
            log.warning(
                "TensorRT engine %s was built for another key (%s): rebuilding",
                engine,
                describe_change(meta, key.fields()),
            )
            return None
        if hashlib.sha256(data).hexdigest() != meta.get("engine_sha256"):
            log.warning(
                "TensorRT engine %s is corrupt (%d bytes, checksum differs from its record): rebuilding",
                engine,
                len(data),
            )
            return None
        return data

    def store(self, model: str, key: EngineKey, data: bytes, **extra) -> Path:
        """Write engine and record atomically (a crash mid-write leaves no half engine behind)."""
        engine, record = self.paths(model, key)
        engine.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "key": key.digest,
            **key.fields(),
            "engine_sha256": hashlib.sha256(data).hexdigest(),
            "engine_bytes": len(data),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **extra,
        }
        _atomic_write(engine, data)
        _atomic_write(record, json.dumps(meta, indent=2).encode())
        return engine

    def invalidate(self, model: str, key: EngineKey) -> None:
        for p in self.paths(model, key):
            p.unlink(missing_ok=True)

    def _others(self, model: str, key: EngineKey) -> list[tuple[Path, dict]]:
        out = []
        for rec in sorted((self.root / model).glob("*.json")):
            try:
                meta = json.loads(rec.read_text())
            except (OSError, ValueError):
                continue
            if meta.get("key") != key.digest:
                out.append((rec.with_suffix(".engine"), meta))
        return out


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
