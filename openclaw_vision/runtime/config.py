"""One configuration object per node: the same keys in config/*.yaml, ROS parameters and CLI flags.

The YAML file is a ROS 2 parameters file (`<node>: ros__parameters: {...}`), so `ros2 launch`
passes it to the node unchanged and the pip/Cyclone path reads the very same file. Values are
validated when the node starts; a wrong one stops it with a message naming the key.

Each field carries a `Param` (its description, range or choices, and whether it may change
while the node runs): the one source for the pip path's checks, the YAML files' comments
(test_packaging checks them) and the ROS ParameterDescriptors (rclpy_transport.py), so the
three cannot drift. Types are checked the same way on every path (`coerce`): an int is taken
where a float is expected (YAML's `2` for 2.0), nothing else is converted. The launch file's argument
descriptions and the docs' parameter tables come from it too, so this module imports without NumPy:
`ros2 launch` reads it on the system Python.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from ..core import gate
from ..core.commands import field_flag
from ..core.errors import OpenclawError
from ..core.resources import PRECISIONS
from ..encoders import PERFORMANCE_HINTS, backends
from ..encoders.options import GATE_AUTO, EncoderOptions
from ..models.configs import MODEL_CONFIGS
from ..models.naming import output_width
from ..vlm.config import LLM_BACKENDS
from ..vlm.tokenizer import DEFAULT_SYSTEM

#: image_transport's two plugins we read: raw Image, or its `compressed` CompressedImage sub-topic
IMAGE_TRANSPORTS = ("raw", "compressed")
#: the `transport` key: rclpy (ROS 2 sourced) or Cyclone DDS from pip (ros/transport.py makes them)
TRANSPORTS = ("auto", "rclpy", "cyclonedds")
#: the image subscription's `reliability` key (ros/types.QoS maps it onto each transport's QoS)
RELIABILITIES = ("reliable", "best_effort")


class ConfigError(OpenclawError, ValueError):
    """A configuration value that the node cannot run with."""


@dataclass(frozen=True)
class Param:
    """What every path says about one key: the pip path's checks, the YAML comment, the ROS descriptor."""

    description: str
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False  # the minimum itself is excluded (> rather than >=)
    choices: tuple[str, ...] = ()
    runtime: bool = False  # may change while the node runs; otherwise read-only (takes effect at start)

    def range_text(self) -> str:
        """'>= 1', '> 0', 'in (0, 1]', or '' when unbounded."""
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return f"in {'(' if self.above else '['}{lo:g}, {hi:g}]"
        if lo is not None:
            return f"{'>' if self.above else '>='} {lo:g}"
        return f"<= {hi:g}" if hi is not None else ""

    def limits(self) -> str:
        """'one of: a, b', a range ('>= 1'), both ('; '-joined), or '' when anything of its type goes."""
        parts = [f"one of: {', '.join(self.choices)}"] if self.choices else []
        parts += [self.range_text()] if self.range_text() else []
        return "; ".join(parts)

    def constraints(self) -> str:
        """One line for ParameterDescriptor.additional_constraints."""
        when = "changes at run time" if self.runtime else "read-only: used at start, restart the node to change"
        return f"{self.limits()}; {when}" if self.limits() else when

    def check(self, key: str, value: Any) -> None:
        """Raise the configuration error for a value outside the choices or the range."""
        if self.choices and value not in self.choices:
            raise ConfigError(f"parameter {key}={value!r}: choose one of {', '.join(self.choices)}")
        lo, hi = self.minimum, self.maximum
        low = lo is not None and (value <= lo if self.above else value < lo)
        if low or (hi is not None and value > hi):
            raise ConfigError(f"parameter {key}={value!r}: must be {self.range_text()}")


def param(default: Any, description: str, **kw: Any) -> Any:
    """A config field with its `Param` (see the module docstring)."""
    return field(default=default, metadata={"param": Param(description, **kw)})


TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", tuple: "list of str"}


def coerce(key: str, value: Any, want: type) -> Any:
    """`value` as type `want`, or the configuration error. Only int → float is converted (YAML
    and ROS parameters write 2 for 2.0); a float for an int, a number for a string, a bool for
    a number are errors on every path, as a statically typed ROS parameter would be."""
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is tuple and isinstance(value, list | tuple) and all(type(v) is str for v in value):
        return tuple(value)  # a string array (YAML list, ROS string array); kept as a tuple: configs are frozen
    if type(value) is want:
        return value
    raise ConfigError(f"parameter {key}={value!r}: expected {TYPE_NAMES.get(want, want.__name__)}")


class NodeConfig:
    """Shared behaviour of node configurations: dict conversion with type checks, validation hook."""

    def validate(self):
        self._check_params()
        return self

    def as_dict(self) -> dict[str, Any]:
        """Every key's value as a parameters file or ROS holds it (a string array as a list)."""
        return {f.name: (lambda v: list(v) if isinstance(v, tuple) else v)(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def params(cls) -> dict[str, Param]:
        """Each key's `Param`, in declaration order."""
        return {f.name: f.metadata["param"] for f in fields(cls)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown parameter(s): {', '.join(unknown)}; known: {', '.join(known)}")
        defaults = cls()
        return cls(**{key: coerce(key, value, type(getattr(defaults, key))) for key, value in values.items()})

    def updated(self, changes: Mapping[str, Any]):
        """This configuration with `changes` made while the node runs, validated; a key that is not
        `runtime` is refused with the reason (it is read only after start)."""
        self.check_runtime(changes)
        return type(self).from_dict({**self.as_dict(), **changes}).validate()

    def check_runtime(self, changes: Mapping[str, Any]) -> None:
        """A ConfigError unless every key of `changes` is this node's and may change while it runs."""
        unknown = sorted(set(changes) - set(self.params()))
        if unknown:
            raise ConfigError(f"unknown parameter(s): {', '.join(unknown)}")
        fixed = [key for key in changes if not self.params()[key].runtime]
        if fixed:
            raise ConfigError(f"parameter(s) {', '.join(fixed)} read-only (used at start): restart the node to change")

    def _check_params(self) -> None:
        for key, spec in self.params().items():
            spec.check(key, getattr(self, key))
        if getattr(self, "output_dim", 0) and getattr(self, "model", None) in MODEL_CONFIGS:
            from ..models.projection import ProjectionError  # NumPy: imported only where a projection is asked for

            try:
                output_width(self.model, self.output_dim)  # above the tower's width: said at start
            except ProjectionError as err:
                raise self._bad("output_dim", str(err)) from None

    def _bad(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"parameter {key}={getattr(self, key)!r}: {why}")


VLM_BACKENDS = ("auto", "numpy", "cupy")
PERIOD = {"minimum": 0.0, "above": True, "runtime": True}  # seconds, > 0, changes at run time
WATCHDOG = {"minimum": 0.0, "runtime": True}  # seconds, 0 = off, changes at run time
_OPTS = EncoderOptions()  # the backend options' defaults: the encoder's keys of the same names start from them


@dataclass(frozen=True)
class EncoderConfig(NodeConfig):
    # The descriptions are the comments of config/encoder.yaml, word for word (test_packaging checks).
    image_topic: str = param("/camera/image_raw", "sensor_msgs/Image topic to encode")
    features_topic: str = param("/visual_features", "where one VisualFeatures per encoded frame goes")
    image_topics: tuple = param(
        (), "several cameras, one batch: these topics instead of image_topic (a .../compressed one: CompressedImage)"
    )  # fmt: skip
    features_pattern: str = param(
        "{camera}/visual_features", "each camera's features topic with image_topics; {camera}: its topic's namespace"
    )  # fmt: skip
    max_batch: int = param(0, "most frames (one per camera) encoded in one batch; 0: the model's maximum", minimum=0)
    model: str = param("ViT-B-32", "named CLIP architecture (tiny, ViT-B-32, ViT-L-14, ...) unless model_path is set")
    output_dim: int = param(
        0, "published width: 0 = the tower's; below it, a fitted projection in the graph (id <id>/<width>)", minimum=0
    )  # fmt: skip
    model_path: str = param(
        "", "ONNX file; empty: ~/.cache/openclaw_vision/models/<model>[-<output_dim>].<precision>.onnx"
    )  # fmt: skip
    backend: str = param("auto", "inference backend; auto: the GPU when one is usable", choices=backends.choices())
    # fp16 is refused here, by name (issue 34): no tool writes an fp16 model file. On a GPU, TensorRT 10 builds
    # the INT8 engine with fp16 allowed for its float layers (engine_cache: typing int8+fp16, its default
    # there) and the torch CUDA encoder computes in fp16 from the fp32 file.
    precision: str = param(
        "int8", "int8: the gated Q/DQ model (openclaw-vision quantize); fp32 on request", choices=PRECISIONS
    )  # fmt: skip
    threads: int = param(_OPTS.threads, "inference threads, 0 = one per core", minimum=0)
    encode_lanes: int = param(
        0, "batches encoded at once, each on its share of the inference threads (ONNX Runtime; other backends "
        "run one); 0: one per core, at most one per camera", minimum=0
    )  # fmt: skip
    prep_threads: int = param(
        0, "threads preparing (decoding, resizing) the frames of one batch at once; 0: min(max_batch, cores)", minimum=0
    )  # fmt: skip
    performance_hint: str = param(
        _OPTS.performance_hint,
        "OpenVINO: latency = a batch as one request on all threads; throughput = each frame a request on one of "
        "NUM_STREAMS streams (more memory; slower in the node on 2 cores)",
        choices=PERFORMANCE_HINTS,
    )  # fmt: skip
    gate: str = param(
        _OPTS.gate, "INT8 accuracy gate: require = run only where it passed on this runtime and CPU; warn = also "
        "run unmeasured ones; auto = require under backend auto, else warn",
        choices=(GATE_AUTO, *(p for p in gate.POLICIES if p != "ignore")),
    )  # fmt: skip
    reliability: str = param("best_effort", "image subscription QoS (best_effort = sensor data)", choices=RELIABILITIES)
    depth: int = param(32, "image subscription history depth (re-subscribes when changed)", minimum=1, runtime=True)
    # issue 38: core/heap.py says why, docs/cameras-and-capacity.md what it saved and cost
    frame_heap_mb: int = param(
        64, "MB of freed frame buffers malloc keeps for the next frames (glibc; 0: its own adaptive thresholds)",
        minimum=0,
    )  # fmt: skip
    # issue 38: intake.py says why, docs/cameras-and-capacity.md what it saved and cost
    held_samples: int = param(
        3, "samples a camera's subscription holds undecoded while the camera's newest frame waits for the encoder, "
        "then handles back to back (rclpy, whose executor takes every sample; less CPU per dropped frame; up to that "
        "many more frames in memory per camera; 0: every sample handled as it comes)",
        minimum=0,
    )  # fmt: skip
    reader_samples: int = param(
        8, "samples a camera's DDS reader may fill while the camera's newest frame waits for the encoder, then "
        "taken and handled together (pip path: no wake-up of the take thread per frame; up to that many more "
        "frames in memory per camera; 0: every sample taken as it comes)",
        minimum=0,
    )  # fmt: skip
    diagnostics_period: float = param(1.0, "seconds between /diagnostics messages", **PERIOD)
    log_throttle_period: float = param(2.0, "seconds between log lines about one repeated problem", **PERIOD)
    watchdog_period: float = param(
        15.0, "seconds of frames arriving and none encoded before /diagnostics says ERROR (0: off)", **WATCHDOG
    )  # fmt: skip
    transport: str = param("auto", "auto: rclpy if ROS 2 is sourced, else cyclonedds", choices=TRANSPORTS)
    image_transport: str = param(
        "raw", "raw: sensor_msgs/Image on image_topic; compressed: CompressedImage on <image_topic>/compressed",
        choices=IMAGE_TRANSPORTS,
    )  # fmt: skip
    triton_url: str = param(_OPTS.triton_url, "backend triton: the server's gRPC HOST:PORT")
    triton_model: str = param(
        _OPTS.triton_model, "backend triton: model name on the server; empty: <model>_<precision>"
    )  # fmt: skip
    triton_model_version: str = param(
        _OPTS.triton_model_version, "backend triton: model version; empty: the server's latest"
    )  # fmt: skip
    triton_shared_memory: str = param(
        _OPTS.triton_shared_memory,
        "backend triton: auto = system shared memory when the server is on this host; off = pixels over gRPC",
        choices=("auto", "off"),
    )  # fmt: skip
    triton_timeout: float = param(_OPTS.triton_timeout, "backend triton: seconds one request may take before its "
                                  "frame fails", minimum=0.0, above=True)  # fmt: skip

    def validate(self) -> EncoderConfig:
        for key in ("image_topic", "features_topic"):
            if not getattr(self, key) or " " in getattr(self, key):
                raise self._bad(key, "must be a non-empty ROS topic name")
        if any(not t or " " in t for t in self.image_topics) or len(set(self.image_topics)) < len(self.image_topics):
            raise self._bad("image_topics", "must be distinct, non-empty ROS topic names")
        try:
            pattern = self.features_pattern
            one = pattern.format(camera="/a", topic="/a/b") != pattern.format(camera="/c", topic="/c/d")
        except (KeyError, IndexError, ValueError):
            one = False
        if not one:
            raise self._bad("features_pattern", "must contain {camera} or {topic} (one features topic per camera)")
        if self.model not in MODEL_CONFIGS and not self.model_path:
            raise self._bad("model", f"unknown; known: {', '.join(MODEL_CONFIGS)} (or set model_path)")
        self._check_params()
        return self


@dataclass(frozen=True)
class VlmConfig(NodeConfig):
    # The descriptions are the comments of config/vlm.yaml, word for word (test_packaging checks).
    features_topic: str = param("/visual_features", "VisualFeatures topic (the encoder node's)")
    prompt_topic: str = param("/vlm/prompt", "std_msgs/String questions")
    answer_topic: str = param("/vlm/answer", "openclaw_vision/VlmAnswer, header of the frame answered about")
    stream_topic: str = param("", "e.g. /vlm/answer_stream: each decoded piece as std_msgs/String; empty: off")
    llm: str = param("tiny", "tiny | tinyllama-1.1b (random weights) | a Hugging Face Llama folder | a .gguf file")
    llm_backend: str = param(
        "auto", "ours | llamacpp; auto: llamacpp for a GGUF file where installed and it passed its probe here",
        choices=LLM_BACKENDS,
    )  # fmt: skip
    tokenizer: str = param("", "tokenizer.json; empty: the checkpoint folder's, or the built-in one")
    projector: str = param("", "projector safetensors (projector.fc1/fc2); empty: random init")
    # The width of /visual_features is the encoder model's (models/configs.py), not a second copy here:
    # `ros2 launch … model:=ViT-L-14` gives this node the encoder's model too (launch_args.VLM_SHARED).
    model: str = param("ViT-B-32", "the encoder's named CLIP architecture: /visual_features has its embedding width")
    output_dim: int = param(
        0, "the encoder's output_dim (0: the tower's width): the width of /visual_features", minimum=0
    )  # fmt: skip
    visual_tokens: int = param(8, "prefix positions one embedding is projected to", minimum=1)
    max_new_tokens: int = param(32, "longest answer, in tokens (from the next question on)", minimum=1, runtime=True)
    temperature: float = param(0.0, "sampling temperature, 0 = greedy", minimum=0.0, runtime=True)
    top_p: float = param(1.0, "nucleus sampling mass", minimum=0.0, above=True, maximum=1.0, runtime=True)
    seed: int = param(0, "sampling and random-weights seed")
    system_prompt: str = param(DEFAULT_SYSTEM, "system turn of every conversation")
    kv_blocks: int = param(256, "paged KV cache size, in blocks of block_size positions", minimum=1)
    block_size: int = param(16, "positions per KV cache block", minimum=1)
    backend: str = param("auto", "array backend; auto: cupy when a GPU is usable", choices=VLM_BACKENDS)
    diagnostics_period: float = param(1.0, "seconds between /diagnostics messages", **PERIOD)
    log_throttle_period: float = param(2.0, "seconds between log lines about one repeated problem", **PERIOD)
    watchdog_period: float = param(
        60.0, "seconds of questions waiting and none answered before /diagnostics says ERROR (0: off)", **WATCHDOG
    )  # fmt: skip
    transport: str = param("auto", "auto: rclpy if ROS 2 is sourced, else cyclonedds", choices=TRANSPORTS)

    def validate(self) -> VlmConfig:
        for key in ("features_topic", "prompt_topic", "answer_topic"):
            if not getattr(self, key) or " " in getattr(self, key):
                raise self._bad(key, "must be a non-empty ROS topic name")
        if " " in self.stream_topic:
            raise self._bad("stream_topic", "must be a ROS topic name or empty")
        if self.model not in MODEL_CONFIGS:
            raise self._bad("model", f"unknown; known: {', '.join(MODEL_CONFIGS)}")
        self._check_params()
        return self

    @property
    def embed_dim(self) -> int:
        """The width of the features this node takes: the encoder's output_dim, else its model's embedding width."""
        return output_width(self.model, self.output_dim) or MODEL_CONFIGS[self.model].embed_dim


@dataclass(frozen=True)
class LabelsConfig(NodeConfig):
    """The labels node. `labels`, `labels_file` and `template` may change while it runs."""

    # The descriptions are the comments of config/labels.yaml, word for word (test_packaging checks).
    features_topic: str = param("/visual_features", "VisualFeatures topic (the encoder's output)")
    labels_topic: str = param("/visual_labels", "openclaw_vision/VisualLabels, with the features' header")
    set_labels_topic: str = param(
        "/labels_node/set_labels", 'std_msgs/String "a,b,c": a new label set; empty: no such topic'
    )
    labels: str = param("door,forklift,person", "comma-separated label set", runtime=True)
    labels_file: str = param(
        "", "one label per line ('#' comments); when set, used instead of labels", runtime=True
    )  # fmt: skip
    template: str = param("a photo of a {}.", 'prompt per label; "{}" alone uses the label as it is', runtime=True)
    model: str = param(
        "ViT-B-32", "named CLIP architecture; its text export is <model>.text.fp32.onnx in the data home"
    )  # fmt: skip
    output_dim: int = param(
        0, "the encoder's output_dim (0: full width): the text export <model>-<output_dim>.text.fp32.onnx", minimum=0
    )  # fmt: skip
    text_model_path: str = param("", "a text tower export instead (the same model id as the features')")
    bpe_path: str = param("", "CLIP's merges file; empty: the data home's, or an installed open_clip's")
    threads: int = param(1, "text tower threads (it runs once per label set)", minimum=0)
    diagnostics_period: float = param(1.0, "seconds between /diagnostics messages", **PERIOD)
    transport: str = param("auto", "auto: rclpy if ROS 2 is sourced, else cyclonedds", choices=TRANSPORTS)

    def validate(self) -> LabelsConfig:
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
        self._check_params()
        return self


@dataclass(frozen=True)
class MemoryConfig(NodeConfig):
    """The memory node: /visual_features rows into a visual-memory store, in batches, with retention."""

    def topics(self) -> tuple[str, ...]:
        """The features topics the node subscribes to; each row's camera is the topic it came on."""
        return tuple(self.features_topics) or (self.features_topic,)

    # The descriptions are the comments of config/memory.yaml, word for word (test_packaging checks).
    features_topic: str = param("/visual_features", "VisualFeatures topic (the encoder's output)")
    features_topics: tuple = param(
        (), "several features topics (a multi-camera node's per-camera ones) instead of features_topic"
    )  # fmt: skip
    store: str = param("", "store folder or http://HOST:PORT of a Chroma server or its ingest (openclaw-vision "
                       "ingest); empty: memory/ in the data home")  # fmt: skip
    source: str = param("live", "the rows' source name (part of each row's id, as a bag's path is for `index`)")
    robot: str = param("", "this robot's name on every row (part of its id; queries filter by it); empty: the "
                       "node's namespace, else the host name")  # fmt: skip
    cache_rows: int = param(20000, "with a server store: this robot's newest rows kept here for queries (the "
                            "server's index answers the rest)", minimum=0)  # fmt: skip
    cache_seconds: float = param(600.0, "with a server store: rows older than this (s) leave that cache; 0: "
                                 "cache_rows alone bounds it", minimum=0.0)  # fmt: skip
    spool: str = param("", "with a server store: the folder rows wait in until the server has them; empty: "
                       "memory-spool/ROBOT in the data home")  # fmt: skip
    spool_max_mb: float = param(2048.0, "with a server store: the spool's bound (MiB of rows); rows beyond it "
                                "are refused and counted", minimum=1.0)  # fmt: skip
    batch_rows: int = param(240, "rows written per store call (one second of 8 cameras at 30 fps)", minimum=1)
    flush_period: float = param(1.0, "seconds a row waits at most before it is written", **PERIOD)
    queue_rows: int = param(20000, "rows waiting to be written at most; beyond, new rows are dropped", minimum=1)
    max_rows: int = param(0, "retention: keep at most this many rows (oldest deleted first); 0: no limit", minimum=0)
    max_age: float = param(0.0, "retention: delete rows older than this many seconds; 0: keep all", minimum=0.0)
    min_free_mb: float = param(
        64.0, "rows are refused while the store's disk has less free (MiB): the engine hangs on a full disk",
        minimum=0.0,
    )  # fmt: skip
    query_service: str = param("/query_memory", "QueryMemory service name (text or vector queries)")
    text_model: str = param("", "text tower ONNX export for text queries (the store's model); empty: vectors only")
    bpe_path: str = param("", "CLIP's merges file for text_model; empty: the data home's, or an installed open_clip's")
    diagnostics_period: float = param(1.0, "seconds between /diagnostics messages", **PERIOD)
    transport: str = param("auto", "auto: rclpy if ROS 2 is sourced, else cyclonedds", choices=TRANSPORTS)

    def validate(self) -> MemoryConfig:
        if not self.features_topic or " " in self.features_topic:
            raise self._bad("features_topic", "must be a non-empty ROS topic name")
        topics = self.features_topics
        if any(not t or " " in t for t in topics) or len(set(topics)) < len(topics):
            raise self._bad("features_topics", "must be distinct, non-empty ROS topic names")
        if not self.query_service or " " in self.query_service:
            raise self._bad("query_service", "must be a non-empty ROS service name")
        if not self.source or "|" in self.source:
            raise self._bad("source", "must be non-empty and without '|' (it is part of each row's id)")
        if "|" in self.robot:
            raise self._bad("robot", "must be without '|' (it is part of each row's id)")
        if self.queue_rows < self.batch_rows:
            raise self._bad("queue_rows", f"must be at least batch_rows ({self.batch_rows})")
        self._check_params()
        return self


def node_key_matches(key: str, fqn: str) -> bool:
    """Whether a parameters file's node key ('encoder_node', '/**', '/robot/*/encoder_node') names
    the node `fqn` ('/encoder_node'). rclpy's rule (Humble rclpy/src/rclpy/node.cpp,
    _populate_node_parameters_from_rcl_params): prefix '/', then '/*' → one name and '/**' → any
    number of them, matched against the whole name."""
    pattern = key if key.startswith("/") else "/" + key
    regex = pattern.replace("/*", r"(/\w+)")  # what rclpy does: '/**' becomes '(/\w+)*'
    return re.fullmatch(regex, fqn) is not None


def flatten_parameters(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML maps become dotted names ('a: {b: 1}' is parameter 'a.b'), as rcl reads them."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        out.update(flatten_parameters(value, name + ".") if isinstance(value, Mapping) else {name: value})
    return out


def params_file_sections(path: Path) -> dict[str, dict[str, Any]]:
    """Every node section of a ROS 2 parameters YAML file: node key ('encoder_node', '/**', ...) → its
    `ros__parameters`, flattened, in file order. The one reader of parameters files: `--config` here and
    `--ros-args --params-file` (ros/ros_args.py) both read them through it. An unreadable file or bad YAML is
    the configuration error '<path>: <why>'."""
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: {err}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{path}: not a parameters file (expected '<node>: ros__parameters: {{...}}' sections)")
    sections = ((str(key), section) for key, section in doc.items())
    return {key: flatten_parameters(section["ros__parameters"] or {})
            for key, section in sections if isinstance(section, Mapping) and "ros__parameters" in section}  # fmt: skip


def node_parameters(sections: Mapping[str, Mapping[str, Any]], fqn: str) -> dict[str, Any] | None:
    """The parameters that node sections (node key → parameters: a parameters file's, or rcl's table of
    every file and `-p` rule) give the node `fqn`: every matching section, later ones overriding earlier
    ones (the order rclpy applies them in); None if none matches."""
    found: dict[str, Any] | None = None
    for key, values in sections.items():
        if node_key_matches(key, fqn):
            found = {**(found or {}), **values}
    return found


def read_params_file(path: Path, node: str) -> dict[str, Any]:
    """The `ros__parameters` a ROS 2 parameters YAML file gives `node` (its own section, '/**', ...)."""
    values = node_parameters(params_file_sections(path), node if node.startswith("/") else "/" + node)
    if values is None:
        raise ConfigError(f"{path}: no '{node}: ros__parameters:' section")
    return values


def add_arguments(parser: argparse.ArgumentParser, cls=EncoderConfig) -> None:
    """One --flag per config key (underscores become dashes), made by commands.field_flag (type from the key's
    default), its help the key's `Param` (description, limits) and default; unset flags are None and keep the
    file's value."""
    defaults = cls()
    for name, spec in cls.params().items():
        default = getattr(defaults, name)
        many = {"type": str, "nargs": "+"} if isinstance(default, tuple) else {}  # --image-topics T1 T2 ...
        limits = f"{spec.limits()}; " if spec.limits() else ""
        text = f"{spec.description} ({limits}default: {default!r})".replace("%", "%%")  # argparse formats help
        field_flag(parser, "--" + name.replace("_", "-"), cls, name, default=None, help=text, **many)


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
    "LabelsConfig",
    "MemoryConfig",
    "Param",
    "VlmConfig",
    "add_arguments",
    "coerce",
    "from_sources",
    "node_parameters",
    "params_file_sections",
    "read_params_file",
    "replace",
]
