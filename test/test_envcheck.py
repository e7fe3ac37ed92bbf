"""The start-up check of the colcon-installed executables: one line saying exactly what to run."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from openclaw_vision.core.envcheck import NUMPY_PIN, problems

ROOT = Path(__file__).resolve().parents[1]


def _importer(numpy_version: str, numpy_file: str, failing: dict[str, Exception]):
    def import_module(name: str):
        if name in failing:
            raise failing[name]
        if name == "numpy":
            return types.SimpleNamespace(__version__=numpy_version, __file__=numpy_file)
        return types.SimpleNamespace()

    return import_module


def test_pip_numpy_2_over_jammys_opencv_names_the_pin_that_fixes_it():
    imp = _importer("2.2.6", "/usr/local/lib/python3.10/dist-packages/numpy/__init__.py",
                    {"cv2": ImportError("numpy.core.multiarray failed to import")})  # fmt: skip
    (line,) = problems("encoder_node", imp)
    assert "numpy 2.2.6 (from /usr/local/lib/python3.10/dist-packages) breaks cv2" in line
    assert f"-m pip install '{NUMPY_PIN}'" in line and NUMPY_PIN == "numpy>=1.21.6,<2"


def test_a_missing_onnxruntime_names_the_venv_and_the_pinned_requirements():
    imp = _importer("1.21.5", "/usr/lib/python3/dist-packages/numpy/__init__.py",
                    {"onnxruntime": ModuleNotFoundError("No module named 'onnxruntime'")})  # fmt: skip
    (line,) = problems("encoder_node", imp)
    assert "onnxruntime cannot be imported" in line
    assert "python3 -m venv --system-site-packages ~/.venvs/openclaw_vision" in line
    assert "share/openclaw_vision/requirements-humble.txt" in line
    assert "source ~/.venvs/openclaw_vision/bin/activate" in line


def test_nothing_to_say_when_everything_imports():
    assert problems("encoder_node", _importer("1.26.4", "/x/numpy/__init__.py", {})) == []
    # numpy 2 is fine where nothing built for 1.x fails (a pip OpenCV built for numpy 2)
    assert problems("encoder_node", _importer("2.2.6", "/x/numpy/__init__.py", {})) == []


@pytest.mark.parametrize("script", ["encoder_node", "vlm_node", "openclaw-vision"])
def test_the_installed_executables_check_before_importing_the_node(script, tmp_path):
    """What a robot with pip's numpy 2 over Jammy's cv2 sees: one line, exit 2, no traceback."""
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("__version__ = '2.2.6'\n")
    for mod in ("cv2", "tokenizers"):
        (tmp_path / f"{mod}.py").write_text("raise ImportError('numpy.core.multiarray failed to import')\n")
    (tmp_path / "onnxruntime.py").write_text("")  # imports (the real one would, with numpy 2)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / script)], capture_output=True, text=True, env=env,
                         timeout=60)  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith(f"{script}: cannot start: numpy 2.2.6") and NUMPY_PIN in res.stderr
