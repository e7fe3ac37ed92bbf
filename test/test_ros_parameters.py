"""Parameters the ROS way: descriptors, one type check on every path, run-time changes.

rclpy is not on PyPI, so the rclpy side runs against test/fake_ros: a fake of the Humble rclpy
surface we use (rclpy/node.py parameter rules, rcl_interfaces messages). The first test checks
that the fake refuses what Humble's rclpy refuses, so passing here means something.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from dds_helpers import Inbox, wait_until

from openclaw_vision.config import ConfigError, EncoderConfig, VlmConfig
from openclaw_vision.ros import encoder_node, vlm_node
from openclaw_vision.ros.runner import build_config, ros_overrides

FAKE_ROS = Path(__file__).parent / "fake_ros"


def _forget_fake_modules() -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in ("rclpy", "rcl_interfaces")]:
        del sys.modules[name]


@pytest.fixture()
def fake_rclpy(monkeypatch):
    """`import rclpy` gives the fake for this test only (later tests must not see an rclpy)."""
    _forget_fake_modules()
    monkeypatch.syspath_prepend(str(FAKE_ROS))
    import rclpy

    yield rclpy
    if rclpy.ok():
        rclpy.shutdown()
    _forget_fake_modules()


def _params_file(tmp_path, node: str, text: str) -> Path:
    f = tmp_path / f"{node}.yaml"
    f.write_text(f"{node}:\n  ros__parameters:\n" + "".join(f"    {line}\n" for line in text.splitlines()))
    return f


# --- the fake is honest --------------------------------------------------------------------------
def test_the_fake_refuses_what_humble_rclpy_refuses(fake_rclpy):
    from rcl_interfaces.msg import IntegerRange, ParameterDescriptor
    from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
    from rclpy.parameter import Parameter

    with pytest.raises(TypeError):  # rclpy.init(*, args=None, ...) is keyword-only
        fake_rclpy.init(["prog"])
    fake_rclpy.init(args=["prog", "--ros-args", "-p", "diagnostics_period:=2", "-p", "depth:=0"])
    node = fake_rclpy.create_node("encoder_node")
    # a type inferred from the default (1.0, DOUBLE) refuses the YAML int 2: why we declare dynamically typed
    with pytest.raises(InvalidParameterTypeException):
        node.declare_parameter("diagnostics_period", 1.0)
    with pytest.raises(InvalidParameterValueException, match="out of range"):
        node.declare_parameter("depth", 1, ParameterDescriptor(integer_range=[IntegerRange(from_value=1, to_value=9)]))
    node.declare_parameter("model", "tiny", ParameterDescriptor(read_only=True))  # read_only is not checked here
    result = node.set_parameters([Parameter("model", value="ViT-B-32")])[0]
    assert (result.successful, result.reason) == (False, "Trying to set a read-only parameter: model.")
    with pytest.raises(AssertionError):  # generated messages refuse unknown fields
        ParameterDescriptor(minimum=1)
    assert node.get_parameter("use_sim_time").value is False  # TimeSource declares it on every node


# --- declaration -----------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [EncoderConfig, VlmConfig])
def test_every_key_is_declared_with_the_descriptor_its_config_field_carries(fake_rclpy, cls):
    from openclaw_vision.ros.rclpy_transport import INT64_MAX, RclpyTransport

    t = RclpyTransport("some_node", ["prog"])
    try:
        assert t.declare_parameters(cls()) == cls().as_dict()
        for key, spec in cls.params().items():
            d = t.node.describe_parameter(key)
            assert (d.name, d.description, d.additional_constraints) == (key, spec.description, spec.constraints())
            assert d.read_only is (not spec.runtime) and d.dynamic_typing is True
        describe = t.node.describe_parameter
    finally:
        t.close()
    if cls is EncoderConfig:
        assert [(r.from_value, r.to_value) for r in describe("depth").integer_range] == [(1, INT64_MAX)]
        assert [(r.from_value, r.to_value) for r in describe("diagnostics_period").floating_point_range] == [
            (0.0, float("inf"))
        ]
        assert "one of: auto, rclpy, cyclonedds" in describe("transport").additional_constraints
        assert describe("depth").read_only is False and describe("model").read_only is True
    else:
        assert [(r.from_value, r.to_value) for r in describe("top_p").floating_point_range] == [(0.0, 1.0)]
        runtime = {k for k, p in VlmConfig.params().items() if p.runtime}
        assert runtime == {"max_new_tokens", "temperature", "top_p", "diagnostics_period", "log_throttle_period"}


def test_a_yaml_int_for_a_float_is_taken_the_same_on_every_path(fake_rclpy, tmp_path):
    from openclaw_vision.ros.rclpy_transport import RclpyTransport

    f = _params_file(tmp_path, "vlm_node", "diagnostics_period: 2\ntop_p: 1\nmax_new_tokens: 7")
    pip, _ = build_config(["--config", str(f)], "vlm", "vlm_node", VlmConfig, "vlm.yaml")
    ros, _ = build_config(["--ros-args", "--params-file", str(f)], "vlm", "vlm_node", VlmConfig, "vlm.yaml")
    t = RclpyTransport("vlm_node", ["prog", "--ros-args", "--params-file", str(f)])
    try:
        declared = ros_overrides(t, VlmConfig(), logging.getLogger("test"))
    finally:
        t.close()
    for cfg in (pip, ros, declared):
        assert (cfg.diagnostics_period, cfg.top_p, cfg.max_new_tokens) == (2.0, 1.0, 7)
        assert isinstance(cfg.diagnostics_period, float)


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


def test_a_value_only_rclpy_refuses_is_still_one_configuration_error(fake_rclpy, caplog):
    from openclaw_vision.ros.rclpy_transport import RclpyTransport

    # depth:=0 reaches rclpy directly here (build_config would have refused it first)
    t = RclpyTransport("encoder_node", ["prog", "--ros-args", "-p", "depth:=0"])
    try:
        with pytest.raises(ConfigError, match=r"^parameter depth: .*out of range"):
            t.declare_parameters(EncoderConfig())
    finally:
        t.close()
    t = RclpyTransport("encoder_node", ["prog", "--ros-args", "-p", "threads:=-1"])
    try:
        with caplog.at_level(logging.ERROR):
            assert ros_overrides(t, EncoderConfig(), logging.getLogger("test")) is None
    finally:
        t.close()
    assert "configuration error: parameter threads" in caplog.text


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
def test_run_time_changes_go_through_our_checks_and_read_only_keys_are_refused(fake_rclpy):
    from rclpy.parameter import Parameter

    from openclaw_vision.ros.rclpy_transport import RclpyTransport

    t = RclpyTransport("vlm_node", ["prog"])
    state = {"cfg": VlmConfig()}
    seen = []

    def reconfigure(changes):  # what VlmNode.reconfigure does with the config
        state["cfg"] = state["cfg"].updated(changes)
        seen.append(changes)

    try:
        t.declare_parameters(state["cfg"])
        t.on_parameters_set(reconfigure)

        def set_(name, value):
            return t.node.set_parameters([Parameter(name, value=value)])[0]

        assert set_("temperature", 0.7).successful and state["cfg"].temperature == 0.7
        assert set_("diagnostics_period", 3).successful and state["cfg"].diagnostics_period == 3.0
        refused = {
            "max_new_tokens": (2.5, "parameter max_new_tokens=2.5: expected int"),
            "top_p": (0.0, "parameter top_p=0.0: must be in (0, 1]"),  # inside rclpy's closed range, not ours
            "llm": ("other", "Trying to set a read-only parameter: llm."),  # refused by rclpy itself
        }
        for name, (value, reason) in refused.items():
            result = set_(name, value)
            assert (result.successful, result.reason) == (False, reason)
        assert not set_("top_p", 1.5).successful  # rclpy's own range check comes first
        assert set_("use_sim_time", True).successful  # not ours: passed on untouched
        assert seen == [{"temperature": 0.7}, {"diagnostics_period": 3}]  # only what was taken
        assert t.node.get_parameter("top_p").value == 1.0 and state["cfg"].top_p == 1.0
    finally:
        t.close()


def test_the_rclpy_subscription_can_be_closed_to_change_its_qos(fake_rclpy):
    from openclaw_vision.ros.rclpy_transport import RclpyTransport
    from openclaw_vision.ros.types import QoS

    t = RclpyTransport("encoder_node", ["prog"])
    try:
        t.msg = lambda ros_type: object  # no message packages in the fake
        sub = t.subscribe("/camera/image_raw", "sensor_msgs/msg/Image", QoS("best_effort", 1), lambda m, s: None)
        assert len(t.node.subscriptions) == 1 and t.node.subscriptions[0].qos.depth == 1
        sub.close()
        assert t.node.subscriptions == []
    finally:
        t.close()


# --- the nodes' reconfigure, on the Cyclone path (no parameter services there: a direct call) -------
@pytest.mark.dds
def test_the_encoder_node_changes_run_time_parameters_while_it_runs(dds_domain, tiny_model):
    from openclaw_vision.bags import serialize_image
    from openclaw_vision.encoders import create_encoder
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES

    cfg = EncoderConfig(model="tiny", model_path=str(tiny_model), reliability="reliable", depth=1,
                        diagnostics_period=1000.0, transport="cyclonedds")  # fmt: skip
    node_t, test_t = CycloneTransport("encoder_node"), CycloneTransport("test_params")
    node = encoder_node.EncoderNode(cfg, node_t, create_encoder("onnxruntime", str(tiny_model), 1)).start()
    try:
        features, diags = Inbox(), Inbox()
        test_t.subscribe("/visual_features", VISUAL_FEATURES, DEFAULT, features)
        test_t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, DEFAULT, diags)
        images = test_t.publisher("/camera/image_raw", IMAGE, DEFAULT)
        wait_until(lambda: images.matched() == 1)

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

    cfg = VlmConfig(embed_dim=32, visual_tokens=4, max_new_tokens=4, transport="cyclonedds")
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
