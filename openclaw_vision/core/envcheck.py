"""A start-up check for the colcon-installed nodes: say exactly what to run when the Python
packages they need are missing or broken, instead of a traceback.

Why (Ubuntu 22.04 "Jammy", ROS 2 Humble): Jammy's numpy is 1.21.5 and its OpenCV
(python3-opencv) is built for numpy 1.x. Every onnxruntime wheel for Python 3.10 from 1.16 on
requires numpy >= 1.21.6 (PyPI metadata), so `pip install onnxruntime` (also rosdep's
`pip install -U`, rosdep2/platforms/pip.py) installs the newest numpy, 2.x, in pip's
site-packages, ahead of Jammy's; `import cv2` then fails, and so do the numpy-using message
modules rosidl generated against 1.21. numpy 1.x keeps the C ABI for modules built against older
1.x: pinning `numpy>=1.21.6,<2` satisfies onnxruntime and keeps Jammy's cv2 working. The robot
set-up (README "On the robot"; docs/robot-and-dds.md) installs that in a venv made with --system-site-packages.

Imports only the standard library at module level: it runs before anything that needs numpy.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

NUMPY_PIN = "numpy>=1.21.6,<2"
#: the memory node's store engine (setup.cfg's memory extra)
MEMORY_PIN = "chromadb>=1.5,<2"
#: the venv the README makes; the message names it so the fix can be pasted as it is
VENV = "~/.venvs/openclaw_vision"
REQUIREMENTS = "requirements-humble.txt"  # installed to share/openclaw_vision/ by CMakeLists.txt

#: what each colcon-installed executable imports that Humble's apt packages may lack
NEEDS = {
    "encoder_node": ("numpy", "cv2", "onnxruntime"),
    "vlm_node": ("numpy", "tokenizers"),
    "labels_node": ("numpy", "onnxruntime", "ftfy", "regex"),
    "memory_node": ("numpy", "chromadb"),
    "openclaw-vision": ("numpy", "cv2"),
}


def _pip(python: str, numpy_dir: str | None) -> str:
    """`python -m pip install`, with sudo when the site-packages numpy came from is not writable."""
    sudo = "sudo " if numpy_dir and not os.access(numpy_dir, os.W_OK) else ""
    return f"{sudo}{python} -m pip install"


def problems(program: str, import_module: Callable = importlib.import_module) -> list[str]:
    """What is wrong for `program` (empty when it can start), each with the command that fixes it."""
    errors: dict[str, str] = {}
    numpy = None
    for name in NEEDS.get(program, ("numpy",)):
        try:
            mod = import_module(name)
        except Exception as err:  # ImportError, or numpy's AttributeError/RuntimeError from a 1.x module
            errors[name] = f"{type(err).__name__}: {err}".splitlines()[0]
            continue
        if name == "numpy":
            numpy = mod
    out = []
    python = sys.executable
    if numpy is not None and int(str(numpy.__version__).split(".")[0]) >= 2 and errors:
        where = str(Path(numpy.__file__).parent.parent)
        broken = ", ".join(errors)
        out.append(
            f"numpy {numpy.__version__} (from {where}) breaks {broken}: Jammy's OpenCV and ROS 2 Humble are built"
            f" for numpy 1.x. Fix: {_pip(python, where)} '{NUMPY_PIN}'"
        )
        errors = {}
    for name, why in errors.items():
        if name == "numpy":
            out.append(f"numpy cannot be imported ({why}). Fix: sudo apt install python3-numpy")
        elif name == "chromadb":  # the memory extra, not in requirements-humble.txt (its many dependencies)
            out.append(
                f"chromadb cannot be imported for {python} ({why}). Fix: {VENV}/bin/pip install "
                f"'{MEMORY_PIN}' (in the venv of {REQUIREMENTS}), then `source {VENV}/bin/activate`"
            )
        elif name == "cv2":
            out.append(f"OpenCV cannot be imported ({why}). Fix: sudo apt install python3-opencv")
        else:
            out.append(
                f"{name} cannot be imported for {python} ({why}). Fix: python3 -m venv --system-site-packages {VENV}"
                f" && {VENV}/bin/pip install -r $(ros2 pkg prefix openclaw_vision)/share/openclaw_vision/"
                f"{REQUIREMENTS}, then `source {VENV}/bin/activate` before `ros2 launch`/`ros2 run`"
            )
    return out


def exit_if_broken(program: str) -> None:
    """Print each problem on one line and exit 2 (what node_main does for a bad configuration)."""
    found = problems(program)
    for line in found:
        print(f"{program}: cannot start: {line}", file=sys.stderr)
    if found:
        raise SystemExit(2)
