"""The Humble interop check (docker/): what it relies on, checked here where no Docker engine runs.

The check itself needs Docker and the ros:humble image (docs/robot-and-dds.md, "What ran here on a real
Humble …"); these tests keep its scripts runnable (shell syntax), its names equal to the code's (topics,
types, the diagnostics status), its files where the Dockerfile looks for them, and its bag one Humble reads.
"""

from __future__ import annotations

import re
import shlex
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from openclaw_vision.ros import node_counters, types
from openclaw_vision.runtime.config import EncoderConfig, read_params_file

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
CHECK = (DOCKER / "interop_check.sh").read_text()
RUN = (DOCKER / "run_check.sh").read_text()
DOCKERFILE = (DOCKER / "Dockerfile").read_text()


def _shell_var(text: str, name: str) -> str:
    return re.search(rf"^{name}=(.*)$", text, re.M).group(1).strip("\"'")


@pytest.mark.parametrize("script", ["interop_check.sh", "run_check.sh"])
def test_the_scripts_are_valid_bash(script):
    subprocess.run(["bash", "-n", str(DOCKER / script)], check=True)
    assert (DOCKER / script).stat().st_mode & 0o111


def test_the_check_listens_where_the_node_publishes():
    cfg = EncoderConfig()
    assert _shell_var(CHECK, "FEATURES") == cfg.features_topic
    assert _shell_var(CHECK, "FEATURES_TYPE") == types.VISUAL_FEATURES
    assert _shell_var(CHECK, "DIAGNOSTICS_TYPE") == types.DIAGNOSTIC_ARRAY
    assert _shell_var(CHECK, "STATUS") == node_counters.STATUS_NAME
    assert "ros2 topic echo --once $FEATURES $FEATURES_TYPE" in CHECK and "ros2 topic hz $FEATURES" in CHECK
    assert "ros2 launch openclaw_vision vision.launch.py config:=$CHECK/encoder.yaml" in CHECK
    assert "ros2 bag play $CHECK/sample_bag" in CHECK


def test_the_checks_parameters_file_is_a_valid_encoder_configuration_the_image_can_satisfy():
    values = read_params_file(DOCKER / "check.yaml", "encoder_node")
    cfg = EncoderConfig.from_dict(values).validate()
    assert (cfg.transport, cfg.model, cfg.precision, cfg.backend) == ("rclpy", "tiny", "fp32", "onnxruntime")
    # run_check.sh writes it (and the model it names) into docker/check, which the image copies to /check
    assert 'cp docker/check.yaml "$out/encoder.yaml"' in RUN and "out=docker/check" in RUN
    assert f'--out "$out/{Path(cfg.model_path).name}"' in RUN and cfg.model_path.startswith("/check/")
    assert "COPY docker/check /check" in DOCKERFILE
    # launched with no override: the check asserts the file's model and precision are in force
    assert "String value is: tiny" in CHECK and "String value is: fp32" in CHECK
    # the check reads the image topic of check.yaml from the bag
    assert f"topics.name = '{cfg.image_topic}'" in CHECK


def test_the_dockerfile_does_what_the_readme_tells_a_user():
    assert "\nFROM ros:humble\n" in DOCKERFILE  # the official image: ros-base, rosdep initialised
    assert "rosdep install --from-paths src --ignore-src -y" in DOCKERFILE
    assert "colcon build --packages-select openclaw_vision" in DOCKERFILE
    assert "python3 -m venv --system-site-packages" in DOCKERFILE and "requirements-humble.txt" in DOCKERFILE
    for src in re.findall(r"^COPY (\S+(?: \S+)*) /\S*$", DOCKERFILE, re.M):
        for path in src.split():
            if not path.startswith("docker/check"):  # written by run_check.sh
                assert (ROOT / path).exists(), path
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_bag_run_check_writes_is_one_humble_reads(tmp_path):
    """The exact `bag sample` command of run_check.sh: a version-8 sqlite3 bag with the tables and
    columns Humble's sqlite3 storage reads (rosbag2 humble, sqlite_storage.cpp: topics(name, type,
    serialization_format, offered_qos_profiles), messages(id, topic_id, timestamp, data))."""
    from openclaw_vision.cli import main

    line = next(x for x in RUN.splitlines() if "openclaw-vision bag sample" in x)
    args = shlex.split(line)[1:]
    args[args.index("$out/sample_bag")] = str(tmp_path / "sample_bag")
    assert main(args) == 0
    meta = yaml.safe_load((tmp_path / "sample_bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert (meta["version"], meta["storage_identifier"]) == (8, "sqlite3")
    (topic,) = meta["topics_with_message_count"]
    assert topic["topic_metadata"]["name"] == EncoderConfig().image_topic
    assert topic["topic_metadata"]["type"] == types.IMAGE and topic["message_count"] == 30
    (db,) = (tmp_path / "sample_bag").glob("*.db3")
    con = sqlite3.connect(db)
    columns = {t: {r[1] for r in con.execute(f"PRAGMA table_info({t})")} for t in ("topics", "messages")}
    assert {"name", "type", "serialization_format", "offered_qos_profiles"} <= columns["topics"]
    assert {"id", "topic_id", "timestamp", "data"} <= columns["messages"]
    assert con.execute("SELECT COUNT(*) FROM messages").fetchone() == (30,)
