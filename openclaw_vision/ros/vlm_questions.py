"""The VLM node's intake, on the transport threads: the newest /visual_features, and the questions that wait
for the worker, each paired with the features that were newest when it arrived.

Apart from the node because it is the one place a question is admitted or turned away: the queue is bounded
(`QUEUE_DEPTH`), and a question with no features yet, an empty one or one that finds the queue full is
counted as rejected and logged with the reason here, never dropped silently. Features of the wrong width or
with non-finite values are counted as `features_rejected` and never replace the newest good ones."""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..runtime import config as cfgmod
from ..runtime.stats import Counters
from .subscription import Throttle

log = logging.getLogger("vlm_node")  # the node's logger: these lines are the node's

QUEUE_DEPTH = 8
#: the features a question is asked about: (vector, header, features model id, frame key)
Features = tuple[np.ndarray, Any, str, tuple]
#: a question for the worker: (text, the newest features when it arrived, its arrival time on perf_counter)
Question = tuple[str, Features, float]


class Questions:
    """The newest features and the waiting questions, counted in the node's `counters`. `cfg` gives the node's
    configuration now; `warn` is the node's throttle for problems with features."""

    def __init__(self, cfg: Callable[[], cfgmod.VlmConfig], counters: Counters, warn: Throttle) -> None:
        self.cfg, self.counters, self._warn = cfg, counters, warn
        self.latest: Features | None = None
        self._lock = threading.Lock()
        self._queue: queue.Queue[Question] = queue.Queue(maxsize=QUEUE_DEPTH)

    def on_features(self, msg: Any, _deserialize_s: float) -> None:
        """A VisualFeatures message: kept as the newest when it is a finite vector of the node's width."""
        self.counters.inc("features")
        dim = self.cfg().embed_dim
        vec = np.asarray(msg.embedding, dtype=np.float32)
        if vec.shape != (dim,) or not np.isfinite(vec).all():
            self.counters.inc("features_rejected")
            self._warn(log.warning, "rejected features: %d values (expected %d finite)", vec.size, dim)
            return
        key = (int(msg.header.stamp.sec), int(msg.header.stamp.nanosec), str(msg.header.frame_id),
               hashlib.blake2b(vec.tobytes(), digest_size=8).hexdigest())  # fmt: skip
        with self._lock:
            self.latest = (vec, msg.header, str(msg.model_id), key)

    def on_prompt(self, msg: Any, _deserialize_s: float) -> None:
        """A question (std_msgs/String): queued with the newest features at this moment, or rejected."""
        self.counters.inc("prompts")
        with self._lock:
            latest = self.latest
        text = str(msg.data)
        if latest is None:
            return self.reject(f"no {self.cfg().features_topic} received yet", text)
        if not text.strip():
            return self.reject("empty prompt", text)
        try:
            self._queue.put_nowait((text, latest, time.perf_counter()))
        except queue.Full:
            self.reject(f"busy: {QUEUE_DEPTH} questions already waiting", text)

    def reject(self, why: str, text: str) -> None:
        """A question not answered for a reason the asker can act on: counted and logged, never throttled."""
        self.counters.inc("rejected")
        log.warning("rejected prompt %r: %s", text[:80], why)

    def take(self, timeout: float) -> Question | None:
        """The worker's next question, or None when none came within `timeout` seconds."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def drain(self) -> None:
        """At stop: the questions taken but never answered, removed and counted as `unanswered` (not lost
        silently)."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
            self.counters.inc("unanswered")
