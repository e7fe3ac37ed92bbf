"""Can llama.cpp run here without killing its process? Asked once per CPU kind and build, in a child process.

Why: llama.cpp is native code compiled for the CPU it was built on, and native code can end the
whole process (llama.cpp's AMX matmul, compiled in by `-march=native` on AMX Xeons, dies with
SIGILL in a worker thread; Python cannot catch that). A VLM node that loaded it blindly would vanish
with no message. So before anything in this process touches llama.cpp's compute, a child process
runs a short prompt and a one-token decode on tiny GGUF files of each format we load (F32, F16,
Q8_0, Q4_0, and Q4_K_M from llama.cpp's own quantiser) through the same decoder the node uses. The
prompt is 40 tokens long on purpose: ggml's AMX tile kernels run only for matrix products of more
than one row (a decode step of one token takes its AVX-512 VNNI kernel), in blocks of 32 rows.
Measured with an AMX build on an AMX Xeon: Q8_0, Q4_0 and Q4_K_M died with SIGILL on every prompt
of 8 tokens or more (1 or 2 threads) and ran one token at a time; F32 and F16 ran.

The verdict is kept in the data home (`probes/llamacpp.json`), keyed by what decides it: the CPU's
vector features, llama-cpp-python's version and the size and mtime of each native library in its
`lib/` folder. Later starts read it and skip the probe; another CPU kind, another build or a
reinstall probes again. A crash (a signal or a non-zero exit) is recorded with how the child ended
("killed by SIGILL"); a timeout is not recorded (a loaded machine is not a broken library), so
the next start probes again.

The child imports llama_cpp from the very folder this process found it in (passed on its command
line), so the verdict is about the library this process would load.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import cpu
from ..core.errors import OpenclawError

log = logging.getLogger("vlm")

PROBE_TIMEOUT_S = 300.0  # a tiny model; minutes only on a machine loaded with other work
RECORD = Path("probes") / "llamacpp.json"
FORMATS = ("F32", "F16", "Q8_0", "Q4_0", "Q4_K_M")  # Q4_K_M: llama.cpp's quantiser (gguf-py writes the others)
PROMPT_TOKENS = 40  # > 1 row: the AMX tiles (and any other batched-GEMM kernel) run only for more; > 32: two blocks


class LlamaCppUnusable(OpenclawError, ValueError):
    """llama.cpp is installed but failed its probe here: using it would end the process."""


def library_root() -> Path | None:
    """The sys.path folder llama_cpp is imported from (found, not imported), or None."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).resolve().parent.parent


def identity(root: Path) -> dict:
    """What decides whether the library at `root` runs here: CPU features, version, its native libraries."""
    version = next((d.version for d in importlib.metadata.distributions(name="llama-cpp-python", path=[str(root)])),
                   "unknown")  # fmt: skip
    libs = {}
    lib_dir = root / "llama_cpp" / "lib"
    for f in sorted(lib_dir.glob("*")) if lib_dir.is_dir() else []:
        if f.is_file() and (".so" in f.name or f.suffix in (".dylib", ".dll")):
            st = f.stat()
            libs[f.name] = [st.st_size, st.st_mtime_ns]
    return {"cpu": cpu.vector_features(), "llama_cpp": version, "root": str(root), "libs": libs}


def identity_key(ident: dict) -> str:
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def record_path() -> Path:
    from ..core.resources import data_home

    return data_home() / RECORD


@dataclass(frozen=True)
class Verdict:
    """llama.cpp's probe result for this CPU kind and build. `probed`: this call ran the child."""

    ok: bool
    how: str  # how the child ended: "exit 0", "killed by SIGILL", "exit 1", "timed out"
    key: str
    record: str  # the file the verdict is (or, after a timeout, is not) kept in
    detail: str = ""  # the last lines the child printed, for a failure
    probed: bool = False

    @property
    def reason(self) -> str:
        """One sentence for a log line or an error: what happened, where it is recorded, how to retry."""
        if self.ok:
            return f"llama.cpp passed its probe on this CPU ({self.record})"
        last = self.detail.strip().splitlines()[-1:] if not self.how.startswith("killed") else []
        said = f": {last[0][:200]}" if last else ""
        if self.how == "timed out":
            return f"llama.cpp's probe timed out (not recorded: the next start probes again){said}"
        return (f"llama.cpp failed its probe on this CPU (a {PROMPT_TOKENS}-token prompt and a one-token decode in a "
                f"child process): {self.how}{said} (recorded in {self.record}; delete it to probe again)")  # fmt: skip


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:  # a damaged record is probed again, not trusted
        log.warning("ignoring %s: %s", path, err)
        return {}
    return data.get("verdicts", {}) if isinstance(data, dict) else {}


def _write(path: Path, key: str, entry: dict) -> None:
    """Add one verdict; the file is replaced whole (two nodes starting at once never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    verdicts = _read(path) | {key: entry}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".llamacpp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"verdicts": verdicts}, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def verdict(root: Path | None = None, timeout: float = PROBE_TIMEOUT_S) -> Verdict:
    """The recorded verdict for the llama_cpp under `root` (default: the one this process would import),
    probing it first if there is none."""
    root = Path(root) if root else library_root()
    if root is None:
        raise RuntimeError("llama_cpp is not installed: nothing to probe")
    ident = identity(root)
    key, path = identity_key(ident), record_path()
    known = _read(path).get(key)
    if isinstance(known, dict) and "ok" in known:
        return Verdict(bool(known["ok"]), str(known.get("how", "")), key, str(path), str(known.get("detail", "")))
    return _probe(root, ident, key, path, timeout)


def _probe(root: Path, ident: dict, key: str, path: Path, timeout: float) -> Verdict:
    from ..core import children

    log.info("llama.cpp %s at %s: first use of this build on this CPU kind, probing it in a child process",
             ident["llama_cpp"], root)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="openclaw-llamacpp-probe-") as work:  # removed even if the child died
        done = children.run(children.python("-m", __name__, work, str(root)), timeout=timeout)
    v = Verdict(done.ok, done.how, key, str(path), "" if done.ok else done.tail(8), probed=True)
    if not done.timed_out:
        entry = {"ok": v.ok, "how": v.how, "detail": v.detail, "identity": ident,
                 "probed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": done.seconds}  # fmt: skip
        try:
            _write(path, key, entry)
        except OSError as err:  # a read-only data home: the verdict still holds for this start
            log.warning("could not record llama.cpp's probe verdict in %s (%s): the next start probes again", path, err)
    return v


# --- the child ---------------------------------------------------------------------------------
def _run_formats(work: Path) -> dict:
    """Write the tiny GGUF files and run each through LlamaCppDecoder: prompt, then one decoded token."""
    import numpy as np

    from .config import LlamaConfig
    from .gguf import write_gguf
    from .llamacpp import LlamaCppDecoder, quantize_gguf
    from .tokenizer import build_default_tokenizer
    from .weights import random_params

    # rows divisible by 256 (the K-quants' block; ggml's AMX kernels want multiples of 32), GQA
    cfg = LlamaConfig(vocab_size=512, hidden=256, intermediate=512, layers=1, heads=4, kv_heads=2, max_positions=64)
    tok = build_default_tokenizer(work / "tokenizer", cfg.vocab_size)
    params = random_params(cfg, 0, std=0.06)
    ids = list(range(3, 3 + PROMPT_TOKENS))
    out = {}
    for fmt in FORMATS:
        if fmt == "Q4_K_M":
            path = quantize_gguf(work / "probe-F32.gguf", work / f"probe-{fmt}.gguf", fmt)
        else:
            path = write_gguf(work / f"probe-{fmt}.gguf", cfg, params, tok, fmt)
        dec = LlamaCppDecoder(path, n_ctx=64, sequences=1)
        try:
            cache = dec.new_cache(4, 16)
            cache.manager.allocate("p", [("p", i) for i in range(len(ids))])
            logits = dec.run(cache, "p", [ids], 0)
            cache.manager.append("p", ("p", len(ids)))
            logits = dec.run(cache, "p", [[int(np.argmax(logits))]], len(ids))
            if not np.isfinite(logits).all():
                raise RuntimeError(f"{fmt}: llama.cpp returned non-finite logits")
            out[fmt] = int(np.argmax(logits))
        finally:
            dec.close()
    return out


def main(argv: list[str]) -> int:
    """`python -m openclaw_vision.vlm.probe WORKDIR LIBRARY_ROOT`: exit 0 and one JSON line if llama.cpp ran."""
    work, root = Path(argv[0]), argv[1]
    sys.path.insert(0, root)  # the library the parent found, before any import of llama_cpp
    t0 = time.perf_counter()
    tokens = _run_formats(work)
    print(json.dumps({"ok": True, "next_token": tokens, "seconds": round(time.perf_counter() - t0, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
