"""One configuration object: YAML parameters file, CLI flags, validation with clear messages."""

from __future__ import annotations

import pytest

from openclaw_vision.ros.runner import build_config
from openclaw_vision.runtime.config import ConfigError, EncoderConfig, VlmConfig, from_sources


def test_file_then_flags_override_defaults(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("encoder_node:\n  ros__parameters:\n    model: tiny\n    threads: 2\n    depth: 3\n")
    cfg = from_sources(f, "encoder_node", {"depth": 7, "image_topic": None})
    assert (cfg.model, cfg.threads, cfg.depth, cfg.image_topic) == ("tiny", 2, 7, "/camera/image_raw")


def test_cli_flags_mirror_the_config_keys():
    cfg, _ = build_config(
        ["--image-topic", "/cam/front", "--model", "tiny", "--reliability", "reliable", "--depth", "4"],
        "encoder", "encoder_node", EncoderConfig, "encoder.yaml",
    )  # fmt: skip
    assert cfg == EncoderConfig(image_topic="/cam/front", model="tiny", reliability="reliable", depth=4)
    vlm, _ = build_config(
        ["--max-new-tokens", "9", "--temperature", "0.7", "--stream-topic", "/s", "--ros-args", "-r", "x:=y", "--"],
        "vlm", "vlm_node", VlmConfig, "vlm.yaml",
    )  # fmt: skip
    assert vlm == VlmConfig(max_new_tokens=9, temperature=0.7, stream_topic="/s")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"backend": "cuda"}, "parameter backend=.cuda.: choose one of auto, tensorrt, torch, openvino, onnxruntime"),
        ({"performance_hint": "fast"}, "parameter performance_hint='fast': choose one of latency, throughput"),
        ({"reliability": "sometimes"}, "parameter reliability='sometimes'"),
        ({"depth": 0}, "parameter depth=0: must be >= 1"),
        ({"model": "ViT-Z"}, "parameter model='ViT-Z': unknown"),
        ({"image_topic": ""}, "parameter image_topic=''"),
        ({"colour": "red"}, "unknown parameter.*colour"),
        ({"threads": "many"}, "parameter threads='many': expected int"),
    ],
)
def test_bad_values_are_rejected_naming_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        EncoderConfig.from_dict(values).validate()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"top_p": 1.5}, r"parameter top_p=1.5: must be in \(0, 1\]"),
        ({"temperature": -1.0}, "parameter temperature=-1.0: must be >= 0"),
        ({"kv_blocks": 0}, "parameter kv_blocks=0: must be >= 1"),
        ({"backend": "tpu"}, "parameter backend='tpu': choose one of auto, numpy, cupy"),
        ({"prompt_topic": ""}, "parameter prompt_topic=''"),
    ],
)
def test_bad_vlm_values_are_rejected_naming_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        VlmConfig.from_dict(values).validate()


def test_a_params_file_without_the_node_section_is_an_error(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("other_node:\n  ros__parameters: {}\n")
    with pytest.raises(ConfigError, match="no 'encoder_node: ros__parameters:' section"):
        from_sources(f, "encoder_node", {})


def test_precision_fp16_is_refused_at_parse_time_naming_the_choices(tmp_path):
    """No tool writes an fp16 model file, so a node given precision fp16 used to die at start looking for
    `<model>.fp16.onnx`; now the configuration refuses it (flag, parameters file or ROS parameter alike)."""
    with pytest.raises(ConfigError, match=r"parameter precision='fp16': choose one of fp32, int8"):
        EncoderConfig(precision="fp16").validate()
    params = tmp_path / "encoder.yaml"
    params.write_text("encoder_node:\n  ros__parameters:\n    precision: fp16\n")
    with pytest.raises(ConfigError, match="choose one of fp32, int8"):
        from_sources(params, "encoder_node", {}, EncoderConfig)


def test_config_and_params_file_read_one_file_the_same_way(tmp_path):
    """`--config F` and `--ros-args --params-file F` read parameters files through one reader: the same file
    gives the node the same values (its sections merged in file order, nested maps as dotted names)."""
    from openclaw_vision.ros.ros_args import ros_parameters
    from openclaw_vision.runtime.config import read_params_file

    f = tmp_path / "p.yaml"
    f.write_text("/**:\n  ros__parameters:\n    depth: 1\n    model: tiny\nencoder_node:\n  ros__parameters:\n"
                 "    depth: 2\n    nested:\n      key: 1\nvlm_node:\n  ros__parameters:\n    seed: 9\n")  # fmt: skip
    want = {"depth": 2, "model": "tiny", "nested.key": 1}
    assert read_params_file(f, "encoder_node") == want
    assert ros_parameters(["--ros-args", "--params-file", str(f)], "encoder_node") == want


@pytest.mark.parametrize(
    ("text", "message"),
    [(None, "No such file"), ("a: [1, 2\n", "while parsing"), ("- encoder_node\n", "not a parameters file")],
)
def test_an_unreadable_params_file_is_a_configuration_error_on_both_paths(tmp_path, text, message):
    """A missing file, bad YAML or a document that is not node sections: one line naming the file (a node exits 2
    with it), whether it came as --config or as --params-file."""
    from openclaw_vision.ros.ros_args import ros_parameters

    f = tmp_path / "p.yaml"
    if text is not None:
        f.write_text(text)
    with pytest.raises(ConfigError, match=f"^{f}: .*{message}"):
        from_sources(f, "encoder_node", {})
    with pytest.raises(ConfigError, match=f"^--params-file {f}: .*{message}"):
        ros_parameters(["--ros-args", "--params-file", str(f)], "encoder_node")
