"""The `ros2` tier: the package against a real ROS 2 Humble (colcon, rclpy, ros2 launch/run/param/topic).

Every test under test/ros2/ is marked `ros2` (`pytest -m ros2` runs the tier alone). Once per
session: find Humble (support/humble.py says where from), make the robot venv, colcon-build this
checkout into a temporary workspace. No Humble here → the tier is skipped with one line saying
what to install; under CI=true that is a failure instead (CI always has ../shared).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import humble

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.ros2)


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def humble_env(tmp_path_factory) -> humble.Ros2:
    """Humble sourced, with the robot venv; no package built yet (`ros2` builds it)."""
    try:
        prefix, source, venv = humble.prepare()
    except humble.HumbleMissing as err:
        if _ci():
            pytest.fail(f"CI=true and the ros2 tier cannot run: {err}")
        pytest.skip(str(err))
    except humble.SetupFailed as err:
        pytest.fail(str(err))
    humble.become_subreaper()  # a node whose `ros2 run` died first is still ours to reap (its exit code)
    env = humble.Ros2(prefix, source, venv, tmp_path_factory.mktemp("ros2"))
    yield env
    env.close()


@pytest.fixture(scope="session")
def ros2_workspace(humble_env, tmp_path_factory) -> Path:
    """A colcon workspace with this checkout built (`colcon build`, no symlinks), once per session."""
    ws = tmp_path_factory.mktemp("ws")
    result = humble_env.build(ws)
    assert result.returncode == 0, f"colcon build failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    return ws


@pytest.fixture(scope="session")
def ros2_session(humble_env, ros2_workspace) -> humble.Ros2:
    """The session's environment with the built package sourced and the robot venv active."""
    humble_env.use(ros2_workspace / "install")
    return humble_env


@pytest.fixture()
def ros2(ros2_session, dds_domain) -> humble.Ros2:
    """`ros2.run(...)` / `ros2.start(...)` for one test, on a ROS domain of its own; what the test
    started and left running is killed when it ends."""
    yield ros2_session
    ros2_session.close()


@pytest.fixture(scope="session")
def node_params(tiny_model, tiny_text_model) -> dict[str, dict[str, str]]:
    """Per node, the `-p key:=value` parameters that make it start here without a real model: the
    tiny random model (exported by the project venv: torch is not in the robot venv, as on a robot)."""
    from openclaw_vision.text.merges import find_bpe

    return {
        "encoder_node": {"model": "tiny", "model_path": str(tiny_model), "precision": "fp32", "threads": "1"},
        "labels_node": {"model": "tiny", "text_model_path": str(tiny_text_model), "bpe_path": str(find_bpe())},
        "vlm_node": {"model": "tiny", "llm": "tiny"},
    }
