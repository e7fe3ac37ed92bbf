"""Where the package's non-Python files live: msg/, config/, launch/.

Three layouts must work: a source checkout (`pip install -e .`, tests, CI), a pip install
(data_files under <prefix>/share/openclaw_vision) and a colcon install (the ament share dir).
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path

PACKAGE = "openclaw_vision"
MARKER = Path("msg") / "VisualFeatures.msg"


@lru_cache(maxsize=1)
def share_dir() -> Path:
    candidates = []
    if os.environ.get("OPENCLAW_VISION_SHARE"):
        candidates.append(Path(os.environ["OPENCLAW_VISION_SHARE"]))
    candidates.append(Path(__file__).resolve().parents[2])  # source checkout
    candidates.append(Path(sys.prefix) / "share" / PACKAGE)
    ament = ""
    try:
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory(PACKAGE)))
    except ImportError:
        ament = "; no ament index (not in a ROS 2 environment)"
    except (LookupError, OSError) as err:  # PackageNotFoundError is a KeyError; AMENT_PREFIX_PATH unset: OSError
        ament = f"; the ament index has no {PACKAGE} ({err})"
    for cand in candidates:
        if (cand / MARKER).is_file():
            return cand
    raise FileNotFoundError(f"cannot find {MARKER} in any of: {', '.join(map(str, candidates))}{ament}")


def share_path(*parts: str) -> Path:
    return share_dir().joinpath(*parts)


def data_home() -> Path:
    """Where built models live by default: $OPENCLAW_VISION_HOME or ~/.cache/openclaw_vision."""
    return Path(os.environ.get("OPENCLAW_VISION_HOME", Path.home() / ".cache" / PACKAGE))


#: the image tower's builds in the data home: the FP32 export and the gated INT8 model
PRECISIONS = ("fp32", "int8")


def default_model_path(model: str, precision: str = "fp32") -> Path:
    return data_home() / "models" / f"{model}.{precision}.onnx"
