"""The VLM node as a real process over loopback DDS: features and questions in, stamped answers out."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from dds_helpers import Inbox, status_reached, wait_until

from openclaw_vision.ros.process import NodeProcess
from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, HEADER, STRING, TIME, VISUAL_FEATURES
from openclaw_vision.ros.vlm_node import STATUS_NAME

pytestmark = [pytest.mark.vlm, pytest.mark.dds]
ANSWER = "openclaw_vision/msg/VlmAnswer"


def test_vlm_node_answers_about_the_newest_frame_and_counts_every_prompt(dds_domain, tmp_path):
    from openclaw_vision.ros.cyclone import CycloneTransport

    stats = tmp_path / "vlm_stats.json"
    node = NodeProcess(
        ["--llm", "tiny", "--model", "tiny", "--visual-tokens", "4", "--max-new-tokens", "6",
         "--stream-topic", "/vlm/answer_stream", "--transport", "cyclonedds", "--diagnostics-period", "0.2",
         "--stats-json", str(stats)],
        log_path=tmp_path / "vlm.log", node="vlm",
    )  # fmt: skip
    t = CycloneTransport("test_vlm")
    try:
        feats_pub = t.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
        prompt_pub = t.publisher("/vlm/prompt", STRING, DEFAULT)
        answers, pieces, diagnostics = Inbox(), Inbox(), Inbox()
        subs = [
            t.subscribe("/vlm/answer", ANSWER, DEFAULT, answers),
            t.subscribe("/vlm/answer_stream", STRING, DEFAULT, pieces),
        ]
        t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, DEFAULT, diagnostics)

        def counted(key: str, n: int) -> None:
            """Wait until the node's own /diagnostics says `key` reached n: topics are not ordered
            with each other, so the next message waits for the node to have handled this one."""
            diagnostics.wait_for(status_reached(STATUS_NAME, key, n), 60, f"{key} {n}")

        ends = [feats_pub, prompt_pub, *subs]  # both directions matched before anything is sent
        wait_until(lambda: all(e.matched() for e in ends) or not node.alive(), 60)
        assert node.alive(), node.log_text()
        counted("publishers", 2)  # the node's side: its features and prompt subscriptions matched our writers

        def features(sec: int, dim: int = 32, seed: int = 0):
            header = t.msg(HEADER)(stamp=t.msg(TIME)(sec=sec, nanosec=5), frame_id="cam")
            vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
            cls = t.msg(VISUAL_FEATURES)
            feats_pub.publish(cls(header=header, model_id="enc@test", dim=dim, embedding=t.float_array(vec)))

        def ask(text: str) -> None:
            prompt_pub.publish(t.msg(STRING)(data=text))

        ask("anything there?")  # no features yet: rejected, counted, logged
        counted("rejected", 1)
        features(100)
        counted("features", 1)
        features(101, dim=7)  # wrong width: rejected, the frame of sec 100 stays the newest
        counted("features_rejected", 1)
        ask("Is the door open?")
        first = answers.wait(1)[0]
        assert (first.header.stamp.sec, first.header.stamp.nanosec, first.header.frame_id) == (100, 5, "cam")
        assert first.prompt == "Is the door open?" and 1 <= first.answer_tokens <= 6
        assert first.model_id == "tiny@random-seed0" and first.features_model_id == "enc@test"
        assert first.stop_reason in ("eos", "max_tokens") and not first.prefix_reused and first.total_ms > 0
        ask("What is in front of the robot?")
        second = answers.wait(2)[1]
        assert second.prefix_reused and second.header.stamp.sec == 100
        features(102, seed=1)
        counted("features", 3)
        ask("Is the door open?")
        third = answers.wait(3)[2]
        assert third.header.stamp.sec == 102 and not third.prefix_reused
        tokens = sum(a.answer_tokens for a in (first, second, third))
        time.sleep(0.3)
        assert len(pieces.wait(tokens)) == tokens  # one streamed piece per answer token, none extra
    finally:
        rc = node.stop()
        t.close()
    assert rc == 0, node.log_text()
    s = json.loads(stats.read_text())
    assert {k: s[k] for k in ("features", "features_rejected", "prompts", "answered", "rejected", "failed")} == {
        "features": 3, "features_rejected": 1, "prompts": 4, "answered": 3, "rejected": 1, "failed": 0,
    }  # fmt: skip
    log = node.log_text()
    assert "rejected prompt 'anything there?': no /visual_features received yet" in log
    assert "rejected features: 7 values (expected 32 finite)" in log


def test_vlm_node_refuses_a_bad_configuration(dds_domain, tmp_path):
    node = NodeProcess(["--top-p", "0", "--transport", "cyclonedds"], log_path=tmp_path / "l.log", node="vlm")
    assert node.proc.wait(60) == 2
    node.stop()
    assert "top_p" in node.log_text()
