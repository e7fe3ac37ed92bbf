"""The VLM node: /visual_features + questions (std_msgs/String) in, stamped answers (VlmAnswer) out.

Threads and data flow, one direction:

    transport thread (features): keep the newest VisualFeatures (vector, header, model id)
    transport thread (prompts):  pair the question with the newest features *at that moment*
                                 and queue it (bounded); no features yet or queue full → rejected
    worker thread:               queue → pipeline.ask (prefix shared per frame) → publish VlmAnswer
                                 with the frame's header; pieces on stream_topic while decoding
    diagnostics:                 counters and per-stage percentiles on /diagnostics

Every question is counted once as answered, rejected (no features yet, busy, empty, or no KV
room — with the reason logged) or failed (an unexpected error, logged). The node keeps running.

`reconfigure` changes the run-time parameters (sampling, max_new_tokens, periods); the
pipeline takes them between two answers, never during one (admission reserved its KV room for
the max_new_tokens it started with).
"""

from __future__ import annotations

import hashlib
import logging
import queue
import sys
import threading
import time
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

log = logging.getLogger("vlm_node")

NODE_NAME = "vlm_node"
STATUS_NAME = f"{NODE_NAME}: pipeline"
VLM_ANSWER = "openclaw_vision/msg/VlmAnswer"
STAGES = ("queue", "prefix", "prefill", "decode", "publish")
COUNTS = ("features", "features_rejected", "prompts", "answered", "rejected", "failed", "unanswered")
#: how long stop() waits for an answer in progress (a long answer on a CPU; the runner leaves without one
#: that does not return)
STOP_JOIN_S = 10.0
QUEUE_DEPTH = 8


def pick_array_module(backend: str):
    """NumPy, or CuPy when asked (or on `auto` when a CUDA device is usable)."""
    if backend == "numpy":
        return np
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
        reason = "no CUDA device"
    except Exception as err:  # ImportError, or CUDA driver errors: fall back with the reason
        reason = repr(err)
    if backend == "cupy":
        raise RuntimeError(f"backend cupy is not usable here: {reason}")
    return np


class VlmNode:
    def __init__(self, cfg: cfgmod.VlmConfig, transport: Transport, pipeline) -> None:
        self.cfg, self.transport, self.pipeline = cfg, transport, pipeline
        self.counters = Counters(COUNTS)
        self.times = StageTimes(STAGES)
        self._latest: tuple | None = None  # (vector, header, model id, frame key)
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        self._stop = threading.Event()
        self._warn = Throttle(cfg.log_throttle_period)
        self._reconfigure_lock = threading.Lock()
        self._pending: cfgmod.VlmConfig | None = None  # sampling changes for the worker to take
        self._answers = transport.publisher(cfg.answer_topic, VLM_ANSWER, DEFAULT)
        self._stream = transport.publisher(cfg.stream_topic, STRING, DEFAULT) if cfg.stream_topic else None
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        self._subs = [
            transport.subscribe(cfg.features_topic, VISUAL_FEATURES, DEFAULT, self._on_features),
            transport.subscribe(cfg.prompt_topic, STRING, DEFAULT, self._on_prompt),
        ]
        self.last_failure = ""
        self.supervisor = threads.Supervisor(self._stop, log)
        self.watchdog = threads.Watchdog(cfg.watchdog_period)
        self.supervisor.thread("vlm-worker", self._work)
        self.supervisor.thread("diagnostics", self._report)

    # transport threads ------------------------------------------------------------------
    def _on_features(self, msg: Any, _deserialize_s: float) -> None:
        self.counters.inc("features")
        vec = np.asarray(msg.embedding, dtype=np.float32)
        if vec.shape != (self.cfg.embed_dim,) or not np.isfinite(vec).all():
            self.counters.inc("features_rejected")
            self._warn(log.warning, "rejected features: %d values (expected %d finite)", vec.size, self.cfg.embed_dim)
            return
        key = (int(msg.header.stamp.sec), int(msg.header.stamp.nanosec), str(msg.header.frame_id),
               hashlib.blake2b(vec.tobytes(), digest_size=8).hexdigest())  # fmt: skip
        with self._lock:
            self._latest = (vec, msg.header, str(msg.model_id), key)

    def _on_prompt(self, msg: Any, _deserialize_s: float) -> None:
        self.counters.inc("prompts")
        with self._lock:
            latest = self._latest
        text = str(msg.data)
        if latest is None:
            return self._reject(f"no {self.cfg.features_topic} received yet", text)
        if not text.strip():
            return self._reject("empty prompt", text)
        try:
            self._queue.put_nowait((text, latest, time.perf_counter()))
        except queue.Full:
            self._reject(f"busy: {QUEUE_DEPTH} questions already waiting", text)

    def _reject(self, why: str, text: str) -> None:
        self.counters.inc("rejected")
        log.warning("rejected prompt %r: %s", text[:80], why)

    # worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            self._take_pending()
            try:
                self._answer(*item)
            except Exception as err:  # not the model's error (counted in _answer): a bug; the supervisor logs it
                self.last_failure = f"{type(err).__name__}: {err}"
                self.counters.inc("failed")  # the question is not lost silently
                raise

    def _answer(self, text: str, latest: tuple, queued_at: float) -> None:
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

    def _fail(self, why: str) -> None:
        self.last_failure = why  # before the count: a /diagnostics message that shows a failure has its reason
        self.counters.inc("failed")
        self._warn(log.error, "%s", why)

    def _stream_piece(self, piece: str) -> None:
        self._stream.publish(self.transport.msg(STRING)(data=piece))

    # diagnostics and lifecycle ----------------------------------------------------------
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
        self.watchdog.period = self.cfg.watchdog_period
        stalled = self.watchdog.check(st["prompts"] - st["rejected"], st["answered"] + st["failed"])
        if stalled:
            return f"stalled: questions waiting and none answered for {stalled:.0f} s"
        return self.supervisor.recent_fault()

    def publish_diagnostics(self) -> None:
        st = self.stats()
        problem = self.health(st)
        values = {k: st[k] for k in (*COUNTS, "model", "array_module", "kv_blocks_free", "transport")}
        values.update(stage_values(st["stages_ms"]))
        values.update(thread_failures=st["thread_failures"], stalls=self.watchdog.stalls,
                      last_failure=self.last_failure)  # fmt: skip
        bad = st["rejected"] + st["failed"] + st["features_rejected"]
        level, msg = (WARN, f"{bad} prompts/features rejected or failed") if bad else (OK, "answering")
        if problem:
            level, msg = ERROR, problem
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, msg, values))

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics)

    # run-time parameters ----------------------------------------------------------------
    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.VlmConfig:
        """Apply run-time parameter changes; a ConfigError (bad value, read-only key) changes nothing."""
        from ..vlm.sampling import Sampling

        with self._reconfigure_lock:
            new = self.cfg.updated(changes)
            Sampling(new.temperature, new.top_p, new.seed)  # the pipeline's own checks, before anything changes
            self.cfg, self._pending = new, new
            self._warn.period = new.log_throttle_period
            log.info("parameters changed: %s", ", ".join(f"{k}={v!r}" for k, v in changes.items()))
            return new

    def _take_pending(self) -> None:
        """Worker thread, between answers: hand the pipeline the newest sampling settings."""
        from ..vlm.sampling import Sampling

        with self._reconfigure_lock:
            cfg, self._pending = self._pending, None
        if cfg is not None:
            self.pipeline.sampling = Sampling(cfg.temperature, cfg.top_p, cfg.seed)
            self.pipeline.max_new_tokens = cfg.max_new_tokens

    def start(self) -> VlmNode:
        self.supervisor.start()
        log.info(
            "ready: %s (%d-d, of %s) + %s -> %s, model %s on %s, transport %s",
            self.cfg.features_topic, self.cfg.embed_dim, self.cfg.model, self.cfg.prompt_topic, self.cfg.answer_topic,
            self.pipeline.model.model_id, self.pipeline.model.xp.__name__, self.transport.name,
        )  # fmt: skip
        return self

    def stop(self) -> None:
        self._stop.set()
        late = self.supervisor.join(timeout=STOP_JOIN_S)  # an answer in progress ends within it
        while True:  # questions taken but never answered: counted, not lost silently
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            self.counters.inc("unanswered")
        if late:
            log.warning("thread(s) %s still in a call at stop: not waited for", ", ".join(late))
        try:
            self.publish_diagnostics()
        except Exception:
            log.exception("final diagnostics failed")


def build_pipeline(cfg: cfgmod.VlmConfig):
    from pathlib import Path

    from ..vlm.pipeline import VlmPipeline, load_vlm
    from ..vlm.sampling import Sampling

    xp = pick_array_module(cfg.backend)
    model = load_vlm(
        cfg.llm, cfg.embed_dim, cfg.visual_tokens, Path(cfg.tokenizer) if cfg.tokenizer else None,
        Path(cfg.projector) if cfg.projector else None, cfg.seed, xp, llm_backend=cfg.llm_backend,
        n_ctx=cfg.kv_blocks * cfg.block_size,
    )  # fmt: skip
    sampling = Sampling(cfg.temperature, cfg.top_p, cfg.seed)
    return VlmPipeline(model, cfg.kv_blocks, cfg.block_size, sampling, cfg.max_new_tokens, cfg.system_prompt)


class VlmLoadError(OpenclawError, RuntimeError):
    """The language model, tokenizer or projector could not be loaded."""


def _build(cfg: cfgmod.VlmConfig, transport: Transport) -> VlmNode:
    try:
        pipeline = build_pipeline(cfg)
    except Exception as err:  # missing files, bad checkpoints, wrong shapes, no GPU: say which and stop
        raise VlmLoadError(f"cannot load the VLM: {err}") from err
    return VlmNode(cfg, transport, pipeline)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return node_main(argv, "openclaw-vision vlm", NODE_NAME, cfgmod.VlmConfig, "vlm.yaml", COUNTS, _build,
                     (VlmLoadError,), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
