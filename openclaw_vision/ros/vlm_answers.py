"""The VLM node's answers, on the worker thread: one question → pipeline.ask (the prefix shared per frame) →
a VlmAnswer with the frame's header on `answer_topic`, pieces on `stream_topic` while it decodes; and the
run-time sampling settings, handed to the pipeline between two answers.

Apart from the node because it is where each queued question ends and is accounted for: answered, rejected
(no KV room, or a prompt the pipeline refuses: the intake's `reject`) or failed (the model or the publisher
raised: the reason kept for /diagnostics before the count, then logged). The pipeline takes new settings
only between answers, never during one: admission reserved its KV room for the max_new_tokens it started
with."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..runtime import config as cfgmod
from ..runtime.stats import Counters, StageTimes
from .subscription import Throttle
from .types import DEFAULT, STRING, Transport
from .vlm_questions import Features

log = logging.getLogger("vlm_node")  # the node's logger: these lines are the node's

VLM_ANSWER = "openclaw_vision/msg/VlmAnswer"


class Answerer:
    """Answers questions with `pipeline` and publishes them, counting in the node's `counters` and `times`.
    `reject(why, text)` accounts for a question the pipeline refuses; `warn` is the node's throttle."""

    def __init__(self, cfg: cfgmod.VlmConfig, transport: Transport, pipeline, counters: Counters,
                 times: StageTimes, reject: Callable[[str, str], None], warn: Throttle) -> None:  # fmt: skip
        self.transport, self.pipeline, self.counters, self.times = transport, pipeline, counters, times
        self._reject, self._warn = reject, warn
        self.last_failure = ""  # the latest failed question's reason (/diagnostics)
        self._answers = transport.publisher(cfg.answer_topic, VLM_ANSWER, DEFAULT)
        self._stream = transport.publisher(cfg.stream_topic, STRING, DEFAULT) if cfg.stream_topic else None
        self._pending_lock = threading.Lock()
        self._pending: cfgmod.VlmConfig | None = None  # sampling changes for the worker to take

    def answer(self, text: str, latest: Features, queued_at: float) -> None:
        """One question about `latest`, answered and published, or rejected or failed with the reason."""
        from ..vlm.kv_cache import OutOfBlocks

        vec, header, features_model, key = latest
        t0 = time.perf_counter()
        self.times.add("queue", t0 - queued_at)
        stream = self._stream_piece if self._stream else None
        try:
            ans = self.pipeline.ask(vec, key, text, on_token=stream)
        except (OutOfBlocks, ValueError) as err:
            return self._reject(str(err), text)
        except Exception as err:  # keep serving; the counter and the log make it visible
            return self._fail(f"answering {text[:80]!r} failed: {err!r}")
        t1 = time.perf_counter()
        cls = self.transport.msg(VLM_ANSWER)
        t = ans.timings_ms
        try:
            self._answers.publish(
                cls(header=header, prompt=text, answer=ans.text, model_id=self.pipeline.model.model_id,
                    features_model_id=features_model, prompt_tokens=ans.prompt_tokens, answer_tokens=len(ans.tokens),
                    stop_reason=ans.stop, prefix_reused=ans.prefix_reused, prefix_ms=t["prefix"],
                    prefill_ms=t["prefill"], decode_ms=t["decode"], total_ms=(t1 - queued_at) * 1e3)
            )  # fmt: skip
        except Exception as err:  # as the encoder does with its features: counted, logged, the node goes on
            return self._fail(f"publishing the answer to {text[:80]!r} failed: {err!r}")
        for stage in ("prefix", "prefill", "decode"):
            self.times.add(stage, t[stage] / 1e3)
        self.times.add("publish", time.perf_counter() - t1)
        self.counters.inc("answered")

    def count_failure(self, why: str) -> None:
        """A failed question: the reason kept before the count (a /diagnostics message that shows a failure
        has its reason)."""
        self.last_failure = why
        self.counters.inc("failed")

    def _fail(self, why: str) -> None:
        self.count_failure(why)
        self._warn(log.error, "%s", why)

    def _stream_piece(self, piece: str) -> None:
        self._stream.publish(self.transport.msg(STRING)(data=piece))

    def offer(self, cfg: cfgmod.VlmConfig) -> None:
        """Any thread: the newest run-time settings, for the worker to take before its next answer."""
        with self._pending_lock:
            self._pending = cfg

    def take_pending(self) -> None:
        """Worker thread, between answers: hand the pipeline the newest sampling settings."""
        from ..vlm.sampling import Sampling

        with self._pending_lock:
            cfg, self._pending = self._pending, None
        if cfg is not None:
            self.pipeline.sampling = Sampling(cfg.temperature, cfg.top_p, cfg.seed)
            self.pipeline.max_new_tokens = cfg.max_new_tokens
