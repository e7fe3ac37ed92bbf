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

`VlmNode` is the wiring: the subscriptions, the threads and their lifecycle, the run-time parameters. Each
role is a unit of its own beside it: the intake (vlm_questions.py: the newest features, the bounded question
queue, admission), the answers (vlm_answers.py: the worker's question → answer → VlmAnswer, and the sampling
changes between answers) and the counts (vlm_status.py: stats, health, /diagnostics).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import numpy as np

from ..core.errors import OpenclawError
from ..runtime import config as cfgmod
from ..runtime import threads
from ..runtime.stats import Counters, StageTimes
from .diagnostics import publishers
from .runner import every, node_main
from .subscription import Throttle
from .types import DEFAULT, STRING, VISUAL_FEATURES, Transport
from .vlm_answers import VLM_ANSWER, Answerer
from .vlm_questions import QUEUE_DEPTH, Features, Questions
from .vlm_status import COUNTS, NODE_NAME, STAGES, STATUS_NAME, VlmStatus

#: the node's names, and those of its units that callers import from here
__all__ = ["COUNTS", "NODE_NAME", "QUEUE_DEPTH", "STAGES", "STATUS_NAME", "STOP_JOIN_S", "VLM_ANSWER",
           "VlmLoadError", "VlmNode", "build_pipeline", "main", "pick_array_module"]  # fmt: skip

log = logging.getLogger("vlm_node")

#: how long stop() waits for an answer in progress (a long answer on a CPU; the runner leaves without one
#: that does not return)
STOP_JOIN_S = 10.0


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
    """/visual_features and questions → the intake's queue → the worker's answers on `cfg.answer_topic`;
    counts on /diagnostics."""

    def __init__(self, cfg: cfgmod.VlmConfig, transport: Transport, pipeline) -> None:
        self.cfg, self.transport, self.pipeline = cfg, transport, pipeline
        self.counters = Counters(COUNTS)
        self.times = StageTimes(STAGES)
        self._stop = threading.Event()
        self._warn = Throttle(cfg.log_throttle_period)
        self._reconfigure_lock = threading.Lock()
        self.questions = Questions(lambda: self.cfg, self.counters, self._warn)
        self.answers = Answerer(cfg, transport, pipeline, self.counters, self.times, self.questions.reject,
                                self._warn)  # fmt: skip
        self.supervisor = threads.Supervisor(self._stop, log)
        self.watchdog = threads.Watchdog(cfg.watchdog_period)
        self.status = VlmStatus(lambda: self.cfg, transport, pipeline, self.counters, self.times, self.supervisor,
                                self.watchdog, lambda: self.answers.last_failure,
                                lambda: publishers(self._subs))  # fmt: skip
        self._subs = [
            transport.subscribe(cfg.features_topic, VISUAL_FEATURES, DEFAULT, self.questions.on_features),
            transport.subscribe(cfg.prompt_topic, STRING, DEFAULT, self.questions.on_prompt),
        ]
        self.supervisor.thread("vlm-worker", self._work)
        self.supervisor.thread("diagnostics", self._report)

    @property
    def _latest(self) -> Features | None:
        """The newest features held (the intake's)."""
        return self.questions.latest

    # worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        while not self._stop.is_set():
            item = self.questions.take(timeout=0.2)
            if item is None:
                continue
            self.answers.take_pending()
            try:
                self._answer(*item)
            except Exception as err:  # not the model's error (counted in _answer): a bug; the supervisor logs it
                self.answers.count_failure(f"{type(err).__name__}: {err}")  # the question is not lost silently
                raise

    def _answer(self, text: str, latest: Features, queued_at: float) -> None:
        """One question (vlm_answers.Answerer.answer); the worker calls it through the node."""
        self.answers.answer(text, latest, queued_at)

    # diagnostics and lifecycle ----------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return self.status.stats()

    def health(self, st: dict[str, Any]) -> str:
        """Why the node is not answering ('' when it is): vlm_status.VlmStatus.health."""
        return self.status.health(st)

    @property
    def last_failure(self) -> str:
        """The latest failed question's reason (the answers')."""
        return self.answers.last_failure

    def publish_diagnostics(self) -> None:
        st = self.stats()
        self.status.publish(st, self.health(st))

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics)

    # run-time parameters ----------------------------------------------------------------
    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.VlmConfig:
        """Apply run-time parameter changes; a ConfigError (bad value, read-only key) changes nothing. The
        pipeline takes them between two answers (vlm_answers.Answerer.take_pending)."""
        from ..vlm.sampling import Sampling

        with self._reconfigure_lock:
            new = self.cfg.updated(changes)
            Sampling(new.temperature, new.top_p, new.seed)  # the pipeline's own checks, before anything changes
            self.cfg = new
            self.answers.offer(new)
            self._warn.period = new.log_throttle_period
            log.info("parameters changed: %s", ", ".join(f"{k}={v!r}" for k, v in changes.items()))
            return new

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
        self.questions.drain()  # questions taken but never answered: counted, not lost silently
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
