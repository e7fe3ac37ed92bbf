"""Parameters the ROS way: descriptors, one type check on every path, run-time changes.

Here: the pip path and the ROS command line as the nodes read it (no ROS 2 needed). The rclpy side
(descriptors, `ros2 param set` refusals, run-time changes, the QoS re-subscription) runs against a
real Humble in the ros2 tier (test/ros2/test_ros2_nodes.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dds_helpers import Inbox, node_matched, wait_until

from openclaw_vision.ros import encoder_node, vlm_node
from openclaw_vision.ros.runner import build_config
from openclaw_vision.runtime.config import ConfigError, EncoderConfig, VlmConfig


def _params_file(tmp_path, node: str, text: str) -> Path:
    f = tmp_path / f"{node}.yaml"
    f.write_text(f"{node}:\n  ros__parameters:\n" + "".join(f"    {line}\n" for line in text.splitlines()))
    return f


# --- the fake is honest --------------------------------------------------------------------------
# --- declaration -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("node", "main", "line", "expected"),
    [
        ("encoder_node", encoder_node.main, "depth: 2.5", "parameter depth=2.5: expected int"),
        ("encoder_node", encoder_node.main, "model: 5", "parameter model=5: expected str"),
        ("encoder_node", encoder_node.main, "diagnostics_period: '2s'", "parameter diagnostics_period='2s': expected"),
        ("vlm_node", vlm_node.main, "top_p: high", "parameter top_p='high': expected float"),
        ("vlm_node", vlm_node.main, "top_p: 0", r"parameter top_p=0.0: must be in (0, 1]"),
    ],
)
def test_a_bad_value_in_a_users_yaml_is_the_same_one_line_error_on_every_path(
    node, main, line, expected, tmp_path, capsys
):
    f = _params_file(tmp_path, node, line)
    errors = []
    for argv in (
        ["--config", str(f)],  # the pip path
        ["--ros-args", "--params-file", str(f)],  # what ros2 launch passes
        ["--ros-args", "--params-file", str(f), "-p", "transport:=rclpy"],  # rclpy is never reached
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1
        errors.append(err)
    assert errors[0] == errors[1] == errors[2]
    assert errors[0].startswith(f"{node}: configuration error: ") and expected in errors[0]


def test_ros_arguments_win_over_flags_and_the_file_and_choose_the_transport(tmp_path, caplog, dds_domain):
    f = _params_file(tmp_path, "encoder_node", "model: tiny\ndepth: 2\ntransport: rclpy")
    cfg, args = build_config(
        ["--config", str(f), "--depth", "3", "--ros-args", "-p", "depth:=4", "-p", "transport:=cyclonedds",
         "-p", "use_sim_time:=true", "-p", "colour:=red"],
        "encoder", "encoder_node", EncoderConfig, "encoder.yaml",
    )  # fmt: skip
    assert (cfg.model, cfg.depth, cfg.transport) == ("tiny", 4, "cyclonedds")
    assert args.ignored_ros_parameters == ["colour"]
    # the node itself: with transport rclpy from the file it would need rclpy (absent here); the
    # ROS parameter makes it Cyclone, so it gets as far as looking for the model
    rc = encoder_node.main(["--config", str(f), "--model-path", "/nonexistent/m.onnx", "--ros-args", "-p",
                            "transport:=cyclonedds"])  # fmt: skip
    assert rc == 2 and "model file not found: /nonexistent/m.onnx" in caplog.text


# --- run-time changes through rclpy's on-set-parameters callback -----------------------------------
# --- the nodes' reconfigure, on the Cyclone path (no parameter services there: a direct call) -------
@pytest.mark.dds
def test_the_encoder_node_changes_run_time_parameters_while_it_runs(dds_domain, tiny_model):
    from openclaw_vision.encoders import create_encoder
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES
    from openclaw_vision.runtime.bags import serialize_image

    cfg = EncoderConfig(model="tiny", model_path=str(tiny_model), reliability="reliable", depth=1,
                        diagnostics_period=1000.0, transport="cyclonedds")  # fmt: skip
    node_t, test_t = CycloneTransport("encoder_node"), CycloneTransport("test_params")
    node = encoder_node.EncoderNode(cfg, node_t, create_encoder("onnxruntime", str(tiny_model), 1)).start()
    try:
        features, diags = Inbox(), Inbox()
        sub = test_t.subscribe("/visual_features", VISUAL_FEATURES, DEFAULT, features)
        test_t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, DEFAULT, diags)
        images = test_t.publisher("/camera/image_raw", IMAGE, DEFAULT)
        wait_until(lambda: node_matched(node, [images], [sub]))

        def send(i: int) -> None:
            rgb = np.full((48, 64, 3), 40 * i, np.uint8)
            images.publish(test_t.deserialize(serialize_image(rgb, "rgb8", 1_000_000_000 + i), IMAGE))

        send(1)
        features.wait(1)
        assert node.reconfigure({"depth": 3}).depth == 3
        # the new reader is matched and the old one has left the topic (else the writer would see two)
        wait_until(lambda: node.cameras["/camera/image_raw"].images.matched() == 1)
        assert images.matched() == 1
        send(2)
        assert [f.header.stamp.nanosec for f in features.wait(2)] == [1, 2]

        with pytest.raises(ConfigError, match=r"parameter\(s\) model read-only .*restart the node"):
            node.reconfigure({"model": "ViT-B-32"})
        with pytest.raises(ConfigError, match=r"parameter diagnostics_period=0\.0: must be > 0"):
            node.reconfigure({"diagnostics_period": 0.0, "log_throttle_period": 9.0})
        assert (node.cfg.model, node.cfg.diagnostics_period, node.cfg.log_throttle_period) == ("tiny", 1000.0, 2.0)

        assert diags.items == []  # every 1000 s: none yet
        node.reconfigure({"diagnostics_period": 0.2, "log_throttle_period": 9.0})
        diags.wait(2)  # the new period is taken at once, not after the old one ran out
        assert node.cameras["/camera/image_raw"].warn_reject.period == node._warn_fail.period == 9.0
    finally:
        node.stop()
        test_t.close()
        node_t.close()
    st = node.stats()
    assert st["received"] == 2 and st["encoded"] + st["dropped"] == 2


@pytest.mark.dds
@pytest.mark.vlm
def test_the_vlm_node_takes_sampling_changes_between_answers(dds_domain):
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.types import DEFAULT, HEADER, STRING, TIME, VISUAL_FEATURES

    cfg = VlmConfig(model="tiny", visual_tokens=4, max_new_tokens=4, transport="cyclonedds")
    node_t, test_t = CycloneTransport("vlm_node"), CycloneTransport("test_vlm_params")
    node = vlm_node.VlmNode(cfg, node_t, vlm_node.build_pipeline(cfg)).start()
    try:
        answers = Inbox()
        test_t.subscribe("/vlm/answer", vlm_node.VLM_ANSWER, DEFAULT, answers)
        feats = test_t.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
        prompts = test_t.publisher("/vlm/prompt", STRING, DEFAULT)
        wait_until(lambda: feats.matched() == 1 and prompts.matched() == 1)
        header = test_t.msg(HEADER)(stamp=test_t.msg(TIME)(sec=1, nanosec=0), frame_id="cam")
        vec = np.ones(32, np.float32) / np.sqrt(32)
        feats.publish(test_t.msg(VISUAL_FEATURES)(header=header, model_id="m", dim=32,
                                                  embedding=test_t.float_array(vec)))  # fmt: skip
        wait_until(lambda: node.counters.snapshot()["features"] == 1)

        node.reconfigure({"temperature": 0.8, "top_p": 0.9, "max_new_tokens": 2})
        assert node.pipeline.max_new_tokens == 4  # not during an answer: the worker takes it before the next one
        with pytest.raises(ConfigError, match="read-only"):
            node.reconfigure({"kv_blocks": 8})
        prompts.publish(test_t.msg(STRING)(data="what is there?"))
        (answer,) = answers.wait(1)
        assert answer.answer_tokens <= 2
        assert (node.pipeline.sampling.temperature, node.pipeline.sampling.top_p) == (0.8, 0.9)
        assert node.pipeline.max_new_tokens == 2
    finally:
        node.stop()
        test_t.close()
        node_t.close()
