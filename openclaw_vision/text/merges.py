"""Where CLIP's BPE merges file comes from, without a model hub and without a copy in this repository.

Every CLIP model (OpenAI's and open_clip's) reads the same merges file,
`bpe_simple_vocab_16e6.txt.gz`, and open_clip ships it inside its wheel on PyPI
(`open_clip/bpe_simple_vocab_16e6.txt.gz` in `open_clip_torch`). We look for it, in order:

1. a path the user gives (`--bpe`, the node's `bpe_path` parameter);
2. the data home: `$OPENCLAW_VISION_HOME/tokenizer/` or `~/.cache/openclaw_vision/tokenizer/`
   (`openclaw-vision tokenizer fetch` puts it there);
3. an installed `open_clip` package, located with `importlib.util.find_spec`, which finds the
   package's folder without importing it (importing open_clip pulls torchvision).

`fetch` takes the file out of the open_clip_torch wheel: `pip download --no-deps` of the pinned
version (never an install with dependencies: open_clip_torch depends on torch and torchvision,
gigabytes of CUDA wheels), or a wheel file the user copied over (for a robot without PyPI).
Whatever the source, the file's decompressed content must have the SHA-256 below: a different
merges file would give different token ids, and every label embedding would be wrong.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import sys
import tempfile
import zipfile
from pathlib import Path

from ..core import children
from ..core.commands import Command
from ..core.errors import OpenclawError
from ..core.resources import data_home

BPE_FILE = "bpe_simple_vocab_16e6.txt.gz"
#: SHA-256 of the decompressed merges text in open_clip_torch 3.3.0 (the same file OpenAI's CLIP ships).
BPE_SHA256 = "67603cfda2e032ad77b5f8808af37789d590db664b26df8705d2bf8b3c553fc8"
#: The open_clip_torch release `fetch` downloads (and the Makefile installs, without dependencies, for tests).
OPEN_CLIP_VERSION = "3.3.0"
WHEEL_MEMBER = f"open_clip/{BPE_FILE}"
#: the one download a fetch makes (a wheel of a few MB); a registry that hangs is given up on
PIP_TIMEOUT_S = 600.0


class TokenizerError(OpenclawError, ValueError):
    """The merges file is missing or is not CLIP's, or the tokenizer's own dependencies are missing."""


def data_home_bpe() -> Path:
    return data_home() / "tokenizer" / BPE_FILE


def installed_open_clip_bpe() -> Path | None:
    """The merges file inside an installed open_clip package (found, not imported), if there is one."""
    try:
        spec = importlib.util.find_spec("open_clip")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if (Path(folder) / BPE_FILE).is_file():
            return Path(folder) / BPE_FILE
    return None


def _candidates(explicit: str | Path | None) -> list[Path]:
    if explicit:
        return [Path(explicit)]
    found = [data_home_bpe()]
    installed = installed_open_clip_bpe()
    return found + ([installed] if installed else [])


def check_merges(raw: bytes, source: str | Path) -> str:
    """The merges text of `raw` (gzip as shipped, or already decompressed), checked against BPE_SHA256."""
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != BPE_SHA256:
        raise TokenizerError(
            f"{source} is not CLIP's BPE merges file (sha256 {digest[:16]}…, expected {BPE_SHA256[:16]}…); "
            f"take it from open_clip_torch=={OPEN_CLIP_VERSION}: `openclaw-vision tokenizer fetch`"
        )
    return raw.decode("utf-8")


def read_merges_text(path: Path) -> str:
    return check_merges(Path(path).read_bytes(), path)


def find_bpe(explicit: str | Path | None = None) -> Path:
    """The merges file to use: `explicit`, else the data home's, else an installed open_clip's."""
    tried = _candidates(explicit)
    for path in tried:
        if path.is_file():
            return path
    raise TokenizerError(
        "CLIP's BPE merges file was not found (looked at: " + ", ".join(map(str, tried)) + "). "
        f"Get it from the open_clip_torch wheel with `openclaw-vision tokenizer fetch` (pip download --no-deps "
        f"open_clip_torch=={OPEN_CLIP_VERSION}), or give its path (--bpe / the bpe_path parameter)"
    )


def _download_wheel(folder: Path) -> Path:
    """pip download the pinned open_clip_torch wheel, and nothing else (--no-deps, binary only)."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
           "--dest", str(folder), f"open_clip_torch=={OPEN_CLIP_VERSION}"]  # fmt: skip
    done = children.run(cmd, timeout=PIP_TIMEOUT_S)
    wheels = sorted(folder.glob("open_clip_torch-*.whl"))
    if not done.ok or not wheels:
        why = done.stderr.strip()[-400:] or ("no wheel downloaded" if done.ok else done.how)
        raise TokenizerError(f"`{' '.join(cmd)}` failed: {why}")
    return wheels[0]


def fetch(wheel: Path | None = None, dest: Path | None = None) -> Path:
    """Put the checked merges file into the data home (or `dest`), from `wheel` or a fresh pip download."""
    dest = Path(dest) if dest else data_home_bpe()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(wheel) if wheel else _download_wheel(Path(tmp))
        try:
            with zipfile.ZipFile(source) as zf:
                data = zf.read(WHEEL_MEMBER)
        except (OSError, KeyError, zipfile.BadZipFile) as err:
            raise TokenizerError(f"{source}: cannot read {WHEEL_MEMBER} from it ({err})") from None
    check_merges(data, f"{source}:{WHEEL_MEMBER}")  # refuse a wrong file before it lands where it would be used
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(data)
    part.replace(dest)
    return dest


def _fetch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wheel", type=Path, default=None, help="an open_clip_torch wheel already here (no download)")
    p.add_argument("--out", type=Path, default=None, help="default: <data home>/tokenizer/bpe_simple_vocab_16e6.txt.gz")


def _fetch(args: argparse.Namespace) -> int:
    try:
        path = fetch(args.wheel, args.out)
    except TokenizerError as err:
        print(f"tokenizer fetch: {err}", file=sys.stderr)
        return 1
    print(f"wrote {path} (CLIP's BPE merges, checked)")
    return 0


#: `openclaw-vision tokenizer fetch`
COMMAND = Command(_fetch_arguments, _fetch)
