"""The labels node's scoring, on the transport thread: one VisualFeatures message → its model id checked →
one (labels × D) product and a softmax against the current label set → VisualLabels with the features' header.

Apart from the node because it is where each features message is accounted for: labelled, mismatched (another
model's embedding: not comparable with these label embeddings; logged with what to do), rejected (wrong width,
non-finite or all 0) or failed (an unexpected error, logged); scoring goes on through all of them. It costs
microseconds, so it runs on the transport thread: there is no queue and nothing to drop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.stats import Counters, StageTimes
from .subscription import Throttle
from .types import DEFAULT, Transport

if TYPE_CHECKING:
    from ..text.zero_shot import LabelSet

log = logging.getLogger("labels_node")  # the node's logger: these lines are the node's

VISUAL_LABELS = "openclaw_vision/msg/VisualLabels"


class Scorer:
    """Scores features against `label_set()` (the set now) and publishes VisualLabels on `labels_topic`,
    counting in the node's `counters` and `times`; `warn` is the node's throttle for problems with frames."""

    def __init__(self, transport: Transport, labels_topic: str, label_set: Callable[[], LabelSet],
                 counters: Counters, times: StageTimes, warn: Throttle) -> None:  # fmt: skip
        self.transport, self.label_set, self.counters, self.times = transport, label_set, counters, times
        self._warn = warn
        self.last_mismatch = ""  # the latest mismatched features' model id (/diagnostics)
        self._labels = transport.publisher(labels_topic, VISUAL_LABELS, DEFAULT)

    def on_features(self, msg: Any, deserialize_s: float) -> None:
        """One VisualFeatures message → one VisualLabels message, or counted as not labelled and why."""
        self.counters.inc("received")
        t0 = time.perf_counter()
        current = self.label_set()
        try:
            model = str(msg.model_id)
            if model != current.model_id:
                self.counters.inc("mismatched")
                self.last_mismatch = model
                self._warn(log.error, "%s", mismatch_text(model, current.model_id))
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


def mismatch_text(features_model: str, text_model: str) -> str:
    """What a log line and /diagnostics say about features of another model than the text tower's."""
    from ..text.zero_shot import ModelMismatch, check_same_model

    try:
        check_same_model(features_model, text_model)
    except ModelMismatch as err:
        return f"refused features: {err}"
    return ""
