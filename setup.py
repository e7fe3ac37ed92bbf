"""pip install path (colcon uses CMakeLists.txt). Installs launch/, config/, msg/ and srv/ under share/."""

from pathlib import Path

from setuptools import setup

PACKAGE = "openclaw_vision"
root = Path(__file__).parent


def files(folder: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / folder).glob("*") if p.is_file())


setup(
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", files("launch")),
        (f"share/{PACKAGE}/config", files("config")),
        (f"share/{PACKAGE}/msg", files("msg")),
        (f"share/{PACKAGE}/srv", files("srv")),
    ],
)
