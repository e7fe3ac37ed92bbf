"""The VLM node's counts for whoever asks: `stats()` (counts, per-stage percentiles, the model and its KV room),
its health, and all of it on /diagnostics under `STATUS_NAME`.

Apart from the node because it only reads: the counting is the intake's (vlm_questions.py) and the answers'
(vlm_answers.py). Health is the one judgement made here: a thread that failed lately, or a stall (questions
waiting and none answered for `watchdog_period`) is ERROR; any rejected or failed prompt or features WARN."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..runtime import config as cfgmod
from ..runtime import threads
from ..runtime.stats import Counters, StageTimes
from .diagnostics import ERROR, OK, WARN, diagnostic_array, stage_values
from .types import DIAGNOSTIC_ARRAY, QoS, Transport

NODE_NAME = "vlm_node"
STATUS_NAME = f"{NODE_NAME}: pipeline"
STAGES = ("queue", "prefix", "prefill", "decode", "publish")
COUNTS = ("features", "features_rejected", "prompts", "answered", "rejected", "failed", "unanswered")


class VlmStatus:
    """Reads the node's `counters`, `times`, `pipeline`, `supervisor` and `watchdog`; `cfg` gives the node's
    configuration now and `last_failure` the latest failed question's reason."""

    def __init__(self, cfg: Callable[[], cfgmod.VlmConfig], transport: Transport, pipeline, counters: Counters,
                 times: StageTimes, supervisor: threads.Supervisor, watchdog: threads.Watchdog,
                 last_failure: Callable[[], str], publishers: Callable[[], int]) -> None:  # fmt: skip
        self.cfg, self.transport, self.pipeline, self.counters, self.times = cfg, transport, pipeline, counters, times
        self.supervisor, self.watchdog, self.last_failure = supervisor, watchdog, last_failure
        self.publishers = publishers  # its subscriptions' (features, prompts): diagnostics.publishers
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))

    def stats(self) -> dict[str, Any]:
        return {
            **self.counters.snapshot(),
            "stages_ms": self.times.summary(),
            "model": self.pipeline.model.model_id,
            "array_module": self.pipeline.model.xp.__name__,
            "llm_backend": self.pipeline.model.backend,
            "kv_blocks_free": self.pipeline.manager.num_free,
            "transport": self.transport.name,
            "thread_failures": self.supervisor.failures(),
            "stalls": self.watchdog.stalls,
        }

    def health(self, st: dict[str, Any]) -> str:
        """Why the node is not answering ('' when it is): a thread that failed lately, or a stall (questions
        waiting and none answered for watchdog_period)."""
        self.watchdog.period = self.cfg().watchdog_period
        stalled = self.watchdog.check(st["prompts"] - st["rejected"], st["answered"] + st["failed"])
        if stalled:
            return f"stalled: questions waiting and none answered for {stalled:.0f} s"
        return self.supervisor.recent_fault()

    def publish(self, st: dict[str, Any], problem: str) -> None:
        """`st` (from stats()) and `problem` (from health()) as one DiagnosticArray."""
        values = {k: st[k] for k in (*COUNTS, "model", "array_module", "kv_blocks_free", "transport")}
        values.update(stage_values(st["stages_ms"]))
        values.update(thread_failures=st["thread_failures"], stalls=self.watchdog.stalls,
                      last_failure=self.last_failure(), publishers=self.publishers())  # fmt: skip
        bad = st["rejected"] + st["failed"] + st["features_rejected"]
        level, msg = (WARN, f"{bad} prompts/features rejected or failed") if bad else (OK, "answering")
        if problem:
            level, msg = ERROR, problem
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, msg, values))
