"""The labels node as a real process over loopback DDS: VisualFeatures in, VisualLabels out with the same
header; the label set changed while it runs; other models' features refused; every message counted."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from dds_helpers import Inbox, status_reached, wait_until

from openclaw_vision.ros.diagnostics import status_values
from openclaw_vision.ros.process import NodeProcess
from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, HEADER, STRING, TIME, VISUAL_FEATURES, QoS
from openclaw_vision.text.encoder import TextEncoder

pytestmark = pytest.mark.dds
LABELS = "openclaw_vision/msg/VisualLabels"
STATUS = "labels_node: labels"


def _status(msgs) -> list[dict]:
    return [values for m in msgs if (values := status_values(m, STATUS)) is not None]


def _expected(text_model, labels: list[str], vec: np.ndarray) -> np.ndarray:
    enc = TextEncoder(text_model)
    t = enc.encode([f"a photo of a {label}." for label in labels]).vectors
    z = enc.logit_scale * (t @ (vec / np.linalg.norm(vec)))
    return np.exp(z - z.max()) / np.exp(z - z.max()).sum()


def test_labels_node_scores_features_with_their_header_and_takes_new_labels_at_run_time(
    dds_domain, tmp_path, tiny_text_model
):
    from openclaw_vision.ros.cyclone import CycloneTransport

    stats = tmp_path / "stats.json"
    node = NodeProcess(
        ["--text-model-path", str(tiny_text_model), "--labels", "door,forklift,person", "--transport", "cyclonedds",
         "--diagnostics-period", "0.2", "--stats-json", str(stats)],
        log_path=tmp_path / "labels.log", node="labels",
    )  # fmt: skip
    t = CycloneTransport("test_labels")
    try:
        feats = t.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
        setter = t.publisher("/labels_node/set_labels", STRING, DEFAULT)
        labels, diag = Inbox(), Inbox()
        subs = [t.subscribe("/visual_labels", LABELS, DEFAULT, labels),
                t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1), diag)]  # fmt: skip
        wait_until(lambda: all(e.matched() for e in (feats, setter, *subs)) or not node.alive())
        assert node.alive(), node.log_text()
        # and the node's side: its two subscriptions have matched our two writers (no first message lost)
        diag.wait_for(status_reached(STATUS, "publishers", 2), 60, "the node's side")

        def send(sec: int, vec: np.ndarray, model: str = "tiny@random-seed0") -> None:
            header = t.msg(HEADER)(stamp=t.msg(TIME)(sec=sec, nanosec=7), frame_id="cam")
            cls = t.msg(VISUAL_FEATURES)
            feats.publish(cls(header=header, model_id=model, dim=len(vec), embedding=t.float_array(vec)))

        def counts(key: str, value: str):  # the node's own counters, from /diagnostics
            return lambda msgs: any(s.get(key) == value for s in _status(msgs))

        rng = np.random.default_rng(3)
        v1 = rng.standard_normal(32).astype(np.float32)
        send(100, v1)
        first = labels.wait_for(lambda m: len(m) >= 1)[0]
        assert (first.header.stamp.sec, first.header.stamp.nanosec, first.header.frame_id) == (100, 7, "cam")
        assert first.model_id == "tiny@random-seed0" and list(first.labels) == ["door", "forklift", "person"]
        want = _expected(tiny_text_model, ["door", "forklift", "person"], v1)
        np.testing.assert_allclose(np.asarray(first.scores), want, atol=1e-5)
        assert first.top_label == ["door", "forklift", "person"][int(np.argmax(want))]
        assert first.top_score == pytest.approx(want.max(), abs=1e-5) and first.logit_scale == pytest.approx(1 / 0.07)
        assert first.prompt_template == "a photo of a {}." and len(first.similarities) == 3

        send(101, v1, model="ViT-B-32@0123456789ab")  # another model's features: not comparable, refused
        send(102, np.ones(7, np.float32))  # wrong width: rejected
        diag.wait_for(counts("rejected", "1"), what="the rejected count")
        assert diag.wait_for(counts("mismatched", "1"), what="the mismatch count")

        setter.publish(t.msg(STRING)(data="stairs, pallet"))  # a new label set while running
        diag.wait_for(counts("labels", "stairs,pallet"), what="the new label set")
        setter.publish(t.msg(STRING)(data=" , "))  # an empty set is refused; the current one stays
        diag.wait_for(counts("label_sets_refused", "1"), what="the refused label set")
        v2 = rng.standard_normal(32).astype(np.float32)
        send(103, v2)
        second = labels.wait_for(lambda m: len(m) >= 2)[1]
        assert second.header.stamp.sec == 103 and list(second.labels) == ["stairs", "pallet"]
        np.testing.assert_allclose(np.asarray(second.scores), _expected(tiny_text_model, ["stairs", "pallet"], v2),
                                   atol=1e-5)  # fmt: skip
        time.sleep(0.5)
        assert [m.header.stamp.sec for m in labels.items] == [100, 103]  # nothing for the refused features
    finally:
        rc = node.stop()
        t.close()
    assert rc == 0, node.log_text()
    s = json.loads(stats.read_text())
    assert {k: s[k] for k in ("received", "labelled", "mismatched", "rejected", "failed", "label_sets",
                              "label_sets_refused")} == {
        "received": 4, "labelled": 2, "mismatched": 1, "rejected": 1, "failed": 0, "label_sets": 1,
        "label_sets_refused": 1,
    }  # fmt: skip
    log = node.log_text()
    assert "'ViT-B-32@0123456789ab' but the text model is 'tiny@random-seed0'" in log and "not comparable" in log
    assert "label set refused, keeping 2 labels" in log and "label set is empty" in log


def test_label_parameters_change_the_set_and_the_others_are_read_at_start(dds_domain, tiny_text_model):
    """`reconfigure`: what rclpy's on-set-parameters callback calls (here directly: no ROS 2 here)."""
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.labels_node import LabelsNode
    from openclaw_vision.runtime.config import ConfigError, LabelsConfig

    t = CycloneTransport("test_params")
    try:
        node = LabelsNode(LabelsConfig(transport="cyclonedds"), t, TextEncoder(tiny_text_model))
        assert node.label_set.labels == ("door", "forklift", "person")
        assert node.reconfigure({"labels": "door,window"}).labels == "door,window"
        assert node.label_set.labels == ("door", "window") and node.cfg.labels == "door,window"
        before = node.label_set
        node.reconfigure({"template": "{}"})
        assert node.label_set.template == "{}" and not np.allclose(node.label_set.embeddings, before.embeddings)
        with pytest.raises(ConfigError, match="model read-only"):
            node.reconfigure({"model": "ViT-L-14", "labels": "cat"})
        assert node.label_set.labels == ("door", "window")  # refused as a whole
        with pytest.raises(ConfigError, match="duplicated"):
            node.reconfigure({"labels": "cat,cat"})
        with pytest.raises(ConfigError, match="template"):
            node.reconfigure({"template": "no placeholder"})
        node.reconfigure({"use_sim_time": True})  # not ours: ignored
        node.reconfigure({"labels": "door,window"})  # the current value again: nothing to do
        snap = node.counters.snapshot()
        assert (snap["label_sets"], snap["label_sets_refused"]) == (2, 2)
    finally:
        t.close()


def test_labels_node_refuses_a_bad_configuration_and_a_missing_text_model(dds_domain, tmp_path):
    node = NodeProcess(["--template", "no placeholder", "--transport", "cyclonedds"], log_path=tmp_path / "a.log",
                       node="labels")  # fmt: skip
    assert node.proc.wait(60) == 2
    node.stop()
    assert "template" in node.log_text()
    node = NodeProcess(["--text-model-path", str(tmp_path / "none.onnx"), "--transport", "cyclonedds"],
                       log_path=tmp_path / "b.log", node="labels")  # fmt: skip
    assert node.proc.wait(60) == 2
    node.stop()
    assert "text model not found" in node.log_text() and "--tower text" in node.log_text()


def test_bench_labels_accounts_for_every_frame(dds_domain, tmp_path, tiny_text_model):
    """The latency benchmark's bookkeeping (not its numbers: tests do not time anything)."""
    from openclaw_vision.bench.labels import format_result, label_set, run

    assert len(set(label_set(300))) == 300
    r = run(tiny_text_model, (2, 12), frames=6, fps=30.0, work=tmp_path)
    assert [row["labels"] for row in r["sizes"]] == [2, 12]
    for row in r["sizes"]:
        assert row["sent"] == row["received"] == 6
        assert (
            set(row["end_to_end_ms"]) >= {"p50", "p95", "p99"} and row["node_stages_ms"]["score"]["n"] >= 6
        )  # and the probes
    assert "12 vs 2 labels" in format_result(r)
