"""`bench --mode memory`: the visual-memory store at 10k, 100k (and 1M) rows of 512-d, beside exact NumPy top-k.

Per size: insert rate through `VisualMemory.add` (batches of one second of 8 cameras at 30 fps), query
P50/P99 of the three ways to answer (plain NumPy exact top-k, the baseline; the store's hot layer, an
int8 scan with float32 rescoring; the engine's own HNSW index), recall@10 of each against exact, the peak
resident memory of a fresh process that opens the store (loading the hot layer), and bytes on disk per row.

The vectors are what cameras make: 8 random walks on the unit sphere (consecutive frames are near each
other), queries near stored frames plus noise. A size whose store insert would not fit the time is
measured on the hot layer alone and says so (`store: false`).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import children
from ..stats import Variant, run_interleaved, summarise
from .goals import GOALS, row

DIM = 512
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000,)
#: sizes whose rows also go through the persistent store (larger: the hot layer alone)
STORE_MAX_ROWS = 100_000
CAMERAS, FPS = 8, 30
#: the size the query goals are judged at
GOAL_ROWS = 100_000
QUERIES = 200
K = 10
RSS_TIMEOUT_S = 600


def camera_vectors(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """n unit vectors from 8 cameras' random walks (interleaved as they arrive), stamps and camera topics."""
    rng = np.random.default_rng(seed)
    per = -(-n // CAMERAS)
    steps = rng.standard_normal((CAMERAS, per, DIM), dtype=np.float32) * np.float32(0.15)
    steps[:, 0] = rng.standard_normal((CAMERAS, DIM), dtype=np.float32)
    walk = np.cumsum(steps, axis=1)
    v = walk.transpose(1, 0, 2).reshape(-1, DIM)[:n]
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    stamps = 1_700_000_000_000_000_000 + (np.arange(n) // CAMERAS) * (10**9 // FPS) + np.arange(n) % CAMERAS
    cams = [f"/cam{i % CAMERAS}/image_raw" for i in range(n)]
    return v, stamps.astype(np.int64), cams


def queries(v: np.ndarray, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = v[rng.integers(0, len(v), QUERIES)] + rng.standard_normal((QUERIES, DIM), dtype=np.float32) * 0.05
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def numpy_top(v: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    """The baseline: one GEMV and a partial sort, best first."""
    s = v @ q
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.argsort(-s[top])]


def _cycle(fn, qs: np.ndarray):
    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % len(qs)
        return fn(qs[state["i"]])

    return call


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def resident_open_mb(store: Path) -> float:
    """Peak RSS (MB) of a fresh process that opens `store` and answers one query (hot layer loaded)."""
    done = children.run(children.python("-m", "openclaw_vision.bench.memory", "rss", str(store)), timeout=RSS_TIMEOUT_S)
    if not done.ok:
        raise RuntimeError(f"resident memory of the store {store}: the child {done.how}:\n{done.tail()}")
    return float(done.stdout.split()[-1])


def _rss_child(store: str) -> None:
    from ..memory.store import VisualMemory
    from ..phases import rss_mb

    with VisualMemory(store) as memory:
        memory.search(memory.hot.vectors[0], memory.model_id, K)
    print(round(rss_mb(), 1))


def measure_size(n: int, folder: Path, quick: bool, server_url: str | None = None) -> tuple[dict, list[Variant]]:
    from ..memory.hot import HotIndex
    from ..memory.store import Rows, VisualMemory

    v, stamps, cams = camera_vectors(n)
    qs = queries(v)
    exact = [numpy_top(v, q) for q in qs]
    batch = CAMERAS * FPS  # one second of 8 cameras
    out: dict = {"rows": n, "dim": DIM, "store": n <= STORE_MAX_ROWS}
    variants = [Variant(f"memory/numpy-exact@{n}", _cycle(lambda q: numpy_top(v, q), qs), group=f"memory@{n}",
                        baseline=True)]  # fmt: skip

    def recall(search) -> float:
        got = [set(search(q)) for q in qs[:100]]
        return round(float(np.mean([len(g & set(e.tolist())) / K for g, e in zip(got, exact, strict=False)])), 4)

    if out["store"]:
        path = folder / f"store-{n}"
        memory = VisualMemory(server_url or path)
        t0 = time.perf_counter()
        for s in range(0, n, batch):
            memory.add(Rows(v[s : s + batch], stamps[s : s + batch], ["cam"] * len(v[s : s + batch]),
                            cams[s : s + batch], "bench@512", "bench"))  # fmt: skip
        out["insert_rows_per_s"] = round(n / (time.perf_counter() - t0), 1)
        row_of = {int(s): i for i, s in enumerate(stamps)}

        def by_stamp(matches):
            return [row_of[m.stamp_ns] for m in matches]

        variants.append(Variant(f"memory/hot@{n}", _cycle(lambda q: memory.search(q, "bench@512", K), qs),
                                group=f"memory@{n}"))  # fmt: skip
        variants.append(Variant(f"memory/engine-hnsw@{n}",
                                _cycle(lambda q: memory.search(q, "bench@512", K, exact=False), qs),
                                group=f"memory@{n}"))  # fmt: skip
        out["recall_at_10"] = {
            "hot": recall(lambda q: by_stamp(memory.search(q, "bench@512", K))),
            "engine-hnsw": recall(lambda q: by_stamp(memory.search(q, "bench@512", K, exact=False))),
        }
        rounds, iters = (3, 10) if quick else (5, 40)
        run_interleaved(variants, rounds=rounds, iters=iters, warmup=3)
        memory.close()
        if server_url is None:
            out["bytes_on_disk_per_row"] = round(_folder_bytes(path) / n, 1)
            out["rss_open_mb"] = resident_open_mb(path)
    else:
        hot = HotIndex(DIM, n)
        t0 = time.perf_counter()
        for s in range(0, n, batch):
            hot.add(v[s : s + batch], stamps[s : s + batch], np.zeros(len(v[s : s + batch]), np.int32))
        out["insert_rows_per_s"] = round(n / (time.perf_counter() - t0), 1)
        out["insert_note"] = "hot layer only (the store's insert at this size does not fit the bench's time)"
        variants.append(Variant(f"memory/hot@{n}", _cycle(lambda q: hot.search(q, K), qs), group=f"memory@{n}"))
        out["recall_at_10"] = {"hot": recall(lambda q: hot.search(q, K).rows.tolist())}
        run_interleaved(variants, rounds=3, iters=10, warmup=2)
        out["hot_bytes_per_row"] = DIM * 4 + DIM + 4  # float32 row, int8 row, its scale (ORT's packing aside)
    return out, variants


def run_memory(quick: bool, sizes: tuple[int, ...] | None = None, server: bool = True) -> dict:
    """Every size, then the goals (judged at GOAL_ROWS, or the largest store size measured)."""
    from ..memory.server import start_server

    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    results, variants = [], []
    with tempfile.TemporaryDirectory(prefix="openclaw-memory-bench-") as tmp:
        for n in sizes:
            print(f"bench memory: {n} rows ...", file=sys.stderr, flush=True)
            res, vs = measure_size(n, Path(tmp), quick)
            results.append(res)
            variants += vs
        server_row = None
        if server:  # the server engine at the smallest size: the same client over HTTP on loopback
            n = sizes[0]
            child, url = start_server(Path(tmp) / "server-data", log_path=Path(tmp) / "chroma.log")
            with child:
                server_row, vs = measure_size(n, Path(tmp), quick, server_url=url)
            for x in vs:
                x.name = x.name.replace("memory/", "memory-server/")
                x.group = f"memory-server@{n}"
            variants += vs
    recs = summarise(variants)
    mem = {"sizes": results, "server": server_row, "cameras_fps": CAMERAS * FPS}
    mem["goals"] = goals(mem, recs)
    return {"memory": mem, "variants": recs}


def _rec(recs: list[dict], name: str) -> dict | None:
    return next((r for r in recs if r["name"] == name), None)


def goals(mem: dict, recs: list[dict]) -> list[dict]:
    stored = [s for s in mem["sizes"] if s["store"]]
    if not stored:
        return []
    at = next((s for s in stored if s["rows"] == GOAL_ROWS), stored[-1])
    n = at["rows"]
    hot, engine = _rec(recs, f"memory/hot@{n}"), _rec(recs, f"memory/engine-hnsw@{n}")
    p99, rec = GOALS["memory_query_p99_ms"], GOALS["memory_recall_at_10"]
    need = GOALS["memory_insert_ratio"] * mem["cameras_fps"]
    r10 = at["recall_at_10"]
    out = [
        row(
            f"query P99 <= {p99:g} ms at {GOAL_ROWS:,} rows (hot layer: int8 scan, float32 rescoring)",
            f"{hot['p99_ms']} ms at {n:,} rows (engine HNSW: {engine['p99_ms']} ms)",
            hot["p99_ms"] <= p99 and n >= GOAL_ROWS,
        ),
        row(
            f"recall@10 >= {rec:g} vs exact top-k",
            f"hot {r10['hot']}, engine HNSW {r10['engine-hnsw']}",
            r10["hot"] >= rec,
        ),
        row(
            f"insert >= {GOALS['memory_insert_ratio']:g} x {mem['cameras_fps']} rows/s (8 cameras x 30 fps)",
            f"{at['insert_rows_per_s']:,} rows/s at {n:,} rows",
            at["insert_rows_per_s"] >= need,
        ),
    ]
    return out


def markdown(mem: dict) -> list[str]:
    lines = ["", "Visual memory (512-d; store: Chroma embedded; queries: the hot layer, int8 scan + float32 "
             "rescoring):", "",
             "| rows | insert rows/s | recall@10 (hot / engine HNSW) | RSS open MB | disk bytes/row (hot only: RAM) |",
             "|---|---|---|---|---|"]  # fmt: skip
    for s in [*mem["sizes"], *([mem["server"]] if mem.get("server") else [])]:
        r = s["recall_at_10"]
        name = f"{s['rows']:,}" + (" (server)" if s is mem.get("server") else "")
        name += "" if s["store"] else " (hot only)"
        disk = s.get("bytes_on_disk_per_row", s.get("hot_bytes_per_row", "-"))
        lines.append(
            f"| {name} | {s['insert_rows_per_s']:,} | {r['hot']} / {r.get('engine-hnsw', '-')} | "
            f"{s.get('rss_open_mb', '-')} | {disk} |"
        )
    return lines


if __name__ == "__main__":
    if sys.argv[1:2] == ["rss"]:
        _rss_child(sys.argv[2])
