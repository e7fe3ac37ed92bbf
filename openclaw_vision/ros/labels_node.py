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

`LabelsNode` is the wiring: the subscriptions, the diagnostics thread and the lifecycle, the counts on
/diagnostics. Its two roles are units beside it: the run-time parameters and the label set made from them
(labels_params.py) and the scoring of each features message (labels_scoring.py).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import OpenclawError
from ..runtime import config as cfgmod
from ..runtime import threads
from ..runtime.stats import Counters, StageTimes
from .diagnostics import ERROR, OK, WARN, diagnostic_array, publishers, stage_values
from .labels_params import LIVE, LabelParams
from .labels_scoring import VISUAL_LABELS, Scorer, mismatch_text
from .runner import every, node_main
from .subscription import Throttle
from .types import DEFAULT, DIAGNOSTIC_ARRAY, STRING, VISUAL_FEATURES, QoS, Transport

if TYPE_CHECKING:
    from ..text.zero_shot import LabelSet

#: the node's names, and those of its units that callers import from here
__all__ = ["COUNTS", "LIVE", "NODE_NAME", "STAGES", "STATUS_NAME", "VISUAL_LABELS", "LabelsLoadError",
           "LabelsNode", "main"]  # fmt: skip

log = logging.getLogger("labels_node")

NODE_NAME = "labels_node"
STATUS_NAME = f"{NODE_NAME}: labels"
STAGES = ("deserialize", "score", "publish")
COUNTS = ("received", "labelled", "mismatched", "rejected", "failed", "label_sets", "label_sets_refused")


class LabelsNode:
    """/visual_features → the scorer (against the current label set) → VisualLabels on `cfg.labels_topic`;
    label set changes through the parameters or `cfg.set_labels_topic`; counts on /diagnostics."""

    def __init__(self, cfg: cfgmod.LabelsConfig, transport: Transport, text_encoder) -> None:
        self.transport, self.text = transport, text_encoder
        self.counters = Counters(COUNTS)
        self.times = StageTimes(STAGES)
        self.params = LabelParams(cfg, text_encoder, self.counters)  # raises LabelError: the node does not start
        self._stop = threading.Event()
        self._warn = Throttle()
        self.scorer = Scorer(transport, cfg.labels_topic, lambda: self.params.current, self.counters, self.times,
                             self._warn)  # fmt: skip
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        self._subs = [transport.subscribe(cfg.features_topic, VISUAL_FEATURES, DEFAULT, self.scorer.on_features)]
        if cfg.set_labels_topic:
            self._subs.append(transport.subscribe(cfg.set_labels_topic, STRING, DEFAULT, self._on_set_labels))
        self.supervisor = threads.Supervisor(self._stop, log)
        self.supervisor.thread("diagnostics", self._report)

    @property
    def cfg(self) -> cfgmod.LabelsConfig:
        """The configuration now (labels_params.LabelParams: it changes with the label set)."""
        return self.params.cfg

    @property
    def label_set(self) -> LabelSet:
        return self.params.current

    # label sets ---------------------------------------------------------------------------
    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.LabelsConfig:
        """Apply run-time parameter changes (the runner's protocol): labels_params.LabelParams.reconfigure."""
        return self.params.reconfigure(changes)

    def _on_set_labels(self, msg: Any, _deserialize_s: float) -> None:
        """A label set on `set_labels_topic` ("a,b,c"); it replaces a labels file, as setting `labels` would."""
        values = {"labels": str(msg.data), "labels_file": ""}
        setter = getattr(self.transport, "set_parameters", None)
        if setter is not None:  # rclpy: through the parameters, so `ros2 param get` tells the truth
            setter(values)
            return
        with contextlib.suppress(cfgmod.ConfigError):  # counted and logged by reconfigure; the current set stays
            self.reconfigure(values)

    # diagnostics and lifecycle ------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        current = self.label_set
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
        values["publishers"] = publishers(self._subs)  # features and a label-set topic (diagnostics.publishers)
        fault = self.supervisor.recent_fault()
        if fault:
            level, text = ERROR, fault
        elif st["mismatched"]:
            level, text = WARN, mismatch_text(self.scorer.last_mismatch, st["model"])
        elif st["rejected"] + st["failed"] + st["label_sets_refused"]:
            level, text = WARN, "features rejected or failed, or label sets refused (see the counts)"
        else:
            level, text = OK, f"labelling with {len(st['labels'])} labels"
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, text, values))

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics)

    def start(self) -> LabelsNode:
        self.supervisor.start()
        current = self.label_set
        log.info(
            "ready: %s -> %s, model %s, %d labels (%s), transport %s",
            self.cfg.features_topic, self.cfg.labels_topic, current.model_id, len(current.labels),
            ", ".join(current.labels), self.transport.name,
        )  # fmt: skip
        return self

    def stop(self) -> None:
        self._stop.set()
        self.supervisor.join(timeout=5)
        try:
            self.publish_diagnostics()
        except Exception:
            log.exception("final diagnostics failed")


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
