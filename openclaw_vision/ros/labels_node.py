"""The labels node: /visual_features in, openclaw_vision/VisualLabels out, one message per features message.

Threads and data flow, one direction:

    transport thread (features):   check the model id → score against the current label set
                                   → publish VisualLabels with the features' header
    label set changes (parameter   parse → embed each label once with the text tower → swap in;
    callback or set_labels_topic):  frames keep using the previous set until the new one is ready
    diagnostics:                   counters and per-stage percentiles on /diagnostics

Scoring a frame is one (labels × D) product and a softmax (microseconds), so it runs on the
transport thread: there is no queue and nothing to drop. Every features message is counted once
as labelled, mismatched (another model's embedding: not comparable with these label
embeddings; logged with what to do), rejected (wrong width or non-finite values) or failed (an
unexpected error, logged). The node keeps running through all of them. A label set change that
cannot be used (empty, duplicates, unreadable file) is refused with the reason and the previous
set stays.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import OpenclawError
from ..runtime import config as cfgmod
from ..runtime import threads
from ..runtime.stats import Counters, StageTimes
from .diagnostics import ERROR, OK, WARN, diagnostic_array, stage_values
from .runner import every, node_main
from .subscription import Throttle
from .types import DEFAULT, DIAGNOSTIC_ARRAY, STRING, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger("labels_node")

NODE_NAME = "labels_node"
STATUS_NAME = f"{NODE_NAME}: labels"
VISUAL_LABELS = "openclaw_vision/msg/VisualLabels"
STAGES = ("deserialize", "score", "publish")
COUNTS = ("received", "labelled", "mismatched", "rejected", "failed", "label_sets", "label_sets_refused")
#: Parameters that change the label set while the node runs; every other key is read at start.
LIVE = ("labels", "labels_file", "template")


class LabelsNode:
    def __init__(self, cfg: cfgmod.LabelsConfig, transport: Transport, text_encoder) -> None:
        from ..text.zero_shot import LabelSet

        self.cfg, self.transport, self.text = cfg, transport, text_encoder
        self.counters = Counters(COUNTS)
        self.times = StageTimes(STAGES)
        self._params = {key: getattr(cfg, key) for key in LIVE}
        self._current: LabelSet = self._label_set(self._params)  # raises LabelError: the node does not start
        self._change = threading.Lock()  # one label set change at a time; frames never wait for it
        self._stop = threading.Event()
        self._warn = Throttle()
        self._last_mismatch = ""
        self._labels = transport.publisher(cfg.labels_topic, VISUAL_LABELS, DEFAULT)
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        self._subs = [transport.subscribe(cfg.features_topic, VISUAL_FEATURES, DEFAULT, self._on_features)]
        if cfg.set_labels_topic:
            self._subs.append(transport.subscribe(cfg.set_labels_topic, STRING, DEFAULT, self._on_set_labels))
        self.supervisor = threads.Supervisor(self._stop, log)
        self.supervisor.thread("diagnostics", self._report)

    # label sets ---------------------------------------------------------------------------
    def _label_set(self, params: dict[str, Any]):
        from ..text.zero_shot import LabelSet, parse_labels, read_labels_file

        file = str(params["labels_file"])
        labels = read_labels_file(file) if file else parse_labels(str(params["labels"]))
        return LabelSet.build(self.text, labels, str(params["template"]))

    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.LabelsConfig:
        """Apply run-time parameter changes: a new label set, embedded now, used from the next frame;
        diagnostics_period from the next report.

        The runner's protocol (rclpy's on-set-parameters callback, `ros2 param set`): a
        ConfigError refuses the change with its reason and changes nothing. Which keys change at
        run time is the config's (`Param.runtime`, as the ROS descriptors say); a label set that
        cannot be used is counted as refused. Keys that are not this node's (use_sim_time) are
        ignored. Label values equal to the current ones embed nothing (so the same change seen
        twice is not embedded twice)."""
        from ..text.zero_shot import LabelError

        changes = {k: v for k, v in changes.items() if k in self.cfg.params()}
        self.cfg.check_runtime(changes)  # a read-only key: refused, nothing counted
        with self._change:
            live = {**self._params, **{k: v for k, v in changes.items() if k in LIVE}}
            try:
                cfg = self.cfg.updated(changes)
                new = self._label_set(live) if live != self._params else None
            except (cfgmod.ConfigError, LabelError, ValueError) as err:
                if not set(changes) & set(LIVE):
                    raise
                self.counters.inc("label_sets_refused")
                log.warning("label set refused, keeping %d labels: %s", len(self._current.labels), err)
                raise cfgmod.ConfigError(str(err)) from None
            self.cfg = cfg
            if new is None:
                return cfg
            self._params, self._current = live, new
        self.counters.inc("label_sets")
        log.info("label set: %s (template %r)", ", ".join(new.labels), new.template)
        return cfg

    def _on_set_labels(self, msg: Any, _deserialize_s: float) -> None:
        """A label set on `set_labels_topic` ("a,b,c"); it replaces a labels file, as setting `labels` would."""
        values = {"labels": str(msg.data), "labels_file": ""}
        setter = getattr(self.transport, "set_parameters", None)
        if setter is not None:  # rclpy: through the parameters, so `ros2 param get` tells the truth
            setter(values)
            return
        with contextlib.suppress(cfgmod.ConfigError):  # counted and logged by reconfigure; the current set stays
            self.reconfigure(values)

    @property
    def label_set(self):
        return self._current

    # transport thread (features) ----------------------------------------------------------
    def _on_features(self, msg: Any, deserialize_s: float) -> None:
        self.counters.inc("received")
        t0 = time.perf_counter()
        current = self._current
        try:
            model = str(msg.model_id)
            if model != current.model_id:
                self.counters.inc("mismatched")
                self._last_mismatch = model
                self._warn(log.error, "%s", _mismatch_text(model, current.model_id))
                return
            vec = np.asarray(msg.embedding, dtype=np.float32)
            if vec.shape != (current.dim,) or not np.isfinite(vec).all() or not np.any(vec):
                self.counters.inc("rejected")
                self._warn(log.warning, "rejected features: %d values (expected %d finite, not all 0)", vec.size,
                           current.dim)  # fmt: skip
                return
            scores, cos = current.score(vec)
            top = int(np.argmax(scores))
            t1 = time.perf_counter()
            # rclpy's generated setters (humble rosidl_generator_py, resource/_msg.py.em) take a list of
            # str for string[], an array('f') for float32[] (transport.float_array), a Python float for float32.
            fa = self.transport.float_array
            self._labels.publish(
                self.transport.msg(VISUAL_LABELS)(
                    header=msg.header, model_id=model, labels=list(current.labels), prompt_template=current.template,
                    scores=fa(scores), similarities=fa(cos), logit_scale=current.logit_scale,
                    top_label=current.labels[top], top_score=float(scores[top]),
                )
            )  # fmt: skip
            t2 = time.perf_counter()
        except Exception as err:  # keep labelling; the counter and the log make it visible
            self.counters.inc("failed")
            self._warn(log.error, "labelling a frame failed: %r", err)
            return
        self.times.add("deserialize", deserialize_s)
        self.times.add("score", t1 - t0)
        self.times.add("publish", t2 - t1)
        self.counters.inc("labelled")

    # diagnostics and lifecycle ------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        current = self._current
        return {
            **self.counters.snapshot(),
            "stages_ms": self.times.summary(),
            "model": current.model_id,
            "labels": list(current.labels),
            "template": current.template,
            "logit_scale": current.logit_scale,
            "transport": self.transport.name,
            "thread_failures": self.supervisor.failures(),
        }

    def publish_diagnostics(self) -> None:
        st = self.stats()
        values = {k: st[k] for k in (*COUNTS, "model", "template", "logit_scale", "transport")}
        values["labels"] = ",".join(st["labels"])
        values.update(stage_values(st["stages_ms"]))
        values["thread_failures"] = st["thread_failures"]
        fault = self.supervisor.recent_fault()
        if fault:
            level, text = ERROR, fault
        elif st["mismatched"]:
            level, text = WARN, _mismatch_text(self._last_mismatch, st["model"])
        elif st["rejected"] + st["failed"] + st["label_sets_refused"]:
            level, text = WARN, "features rejected or failed, or label sets refused (see the counts)"
        else:
            level, text = OK, f"labelling with {len(st['labels'])} labels"
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, text, values))

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics)

    def start(self) -> LabelsNode:
        self.supervisor.start()
        log.info(
            "ready: %s -> %s, model %s, %d labels (%s), transport %s",
            self.cfg.features_topic, self.cfg.labels_topic, self._current.model_id, len(self._current.labels),
            ", ".join(self._current.labels), self.transport.name,
        )  # fmt: skip
        return self

    def stop(self) -> None:
        self._stop.set()
        self.supervisor.join(timeout=5)
        try:
            self.publish_diagnostics()
        except Exception:
            log.exception("final diagnostics failed")


def _mismatch_text(features_model: str, text_model: str) -> str:
    from ..text.zero_shot import ModelMismatch, check_same_model

    try:
        check_same_model(features_model, text_model)
    except ModelMismatch as err:
        return f"refused features: {err}"
    return ""


class LabelsLoadError(OpenclawError, RuntimeError):
    """The text model, the tokenizer's merges file or the initial label set could not be used."""


def _build(cfg: cfgmod.LabelsConfig, transport: Transport) -> LabelsNode:
    from ..encoders.base import EncoderError
    from ..models.naming import projected_name
    from ..text.build import default_text_model_path
    from ..text.encoder import TextEncoder
    from ..text.merges import TokenizerError
    from ..text.zero_shot import LabelError

    path = (
        Path(cfg.text_model_path)
        if cfg.text_model_path
        else default_text_model_path(projected_name(cfg.model, cfg.output_dim))
    )
    try:
        text = TextEncoder(path, cfg.threads, cfg.bpe_path or None)
        return LabelsNode(cfg, transport, text)
    except (EncoderError, TokenizerError, LabelError) as err:
        raise LabelsLoadError(f"cannot start the labels node: {err}") from err


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return node_main(argv, "openclaw-vision labels", NODE_NAME, cfgmod.LabelsConfig, "labels.yaml", COUNTS,
                     _build, (LabelsLoadError,), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
