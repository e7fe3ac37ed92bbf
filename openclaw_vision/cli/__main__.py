"""`python -m openclaw_vision.cli`: the `openclaw-vision` command (cli/__init__.py)."""

import sys

from . import main

if __name__ == "__main__":  # imported (as every module is by the tests that walk the package), it does nothing
    sys.exit(main())
