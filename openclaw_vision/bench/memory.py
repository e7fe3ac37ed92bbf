"""`bench --mode memory`: the visual-memory store at 10k, 100k (and 1M) rows of 512-d, beside exact NumPy top-k.

Per size: insert rate through `VisualMemory.add` (batches of one second of 8 cameras at 30 fps), query
P50/P99 of the three ways to answer (plain NumPy exact top-k, the baseline; the store's hot layer, an
int8 scan with float32 rescoring; the engine's own HNSW index), recall@10 of each against exact, the peak
resident memory of a fresh process that opens the store (loading the hot layer), and bytes on disk per row.

The vectors are what cameras make: 8 random walks on the unit sphere (consecutive frames are near each
other), queries near stored frames plus noise. A size whose store insert would not fit the time is
measured on the hot layer alone and says so (`store: false`).

The fleet section (`run_fleet`; alone: `python -m openclaw_vision.bench.memory fleet [--quick]`): one `chroma
run` server filled to 100k and then 1M rows; at each fill, a fresh client's open time and RSS growth (a process
of its own), the server path's query P50/P99 and recall@10 against exact NumPy top-k; then N robot processes
(N = 1, 4, 8), each writing one camera at 30 fps of 512-d rows in one-second batches (what a memory node's
forwarder sends) while a querier in this process runs queries, for the rows each robot got written and its
backlog, first straight to the server, then through the fleet's ingest (memory/ingest.py: one writer in front
of the server; its querier asks through it too); then the same N flat out to the server, for where its write
path saturates. The robots start writing
together, once every one of them has opened its client (Python's and chromadb's imports take seconds of a
core each: eight robots starting would otherwise be measured as the first ones' backlog). A querier's vectors
stand in for a text tower's (one search each; encoding the text is the text tower's cost, measured elsewhere).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..core import children
from .goals import FLEET_GOAL_ROWS, FLEET_GOAL_WRITERS, GOALS, row
from .harness import Variant, run_interleaved, summarise

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
#: the fleet section: robot processes per run, server fills queried, seconds of paced (30 fps) and flat-out writes
#: (the full sweep ends at the goals' point: they are judged at the largest fill and the most writers measured)
FLEET_WRITERS, QUICK_FLEET_WRITERS = (1, 4, FLEET_GOAL_WRITERS), (1, 2)
FLEET_FILLS, QUICK_FLEET_FILLS = (100_000, FLEET_GOAL_ROWS), (2_000,)
FLEET_SECONDS, QUICK_FLEET_SECONDS = 30.0, 3.0
FLAT_OUT_SECONDS, QUICK_FLAT_OUT_SECONDS = 10.0, 2.0
FLEET_QUERIES, QUICK_FLEET_QUERIES = 300, 30
#: rows per add while the server is filled (the engine's batch limit is larger; this keeps progress visible)
FILL_BATCH = 5000
#: a robot's batch: one second of its camera (the memory node's flush_period), or flat out this many rows a call
FLAT_OUT_BATCH = 240


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
    from ..core.phases import rss_mb
    from ..memory.store import VisualMemory

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


def run_memory(quick: bool, sizes: tuple[int, ...] | None = None, server: bool = True, fleet: bool = True) -> dict:
    """Every size, then the fleet section (`run_fleet`), then the goals (judged at GOAL_ROWS, or the largest store
    size measured; the fleet's at its largest fill)."""
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
    if fleet:
        mem["fleet"] = run_fleet(quick)
    mem["goals"] = goals(mem, recs) + (mem["fleet"]["goals"] if fleet else [])
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
    if mem.get("fleet"):
        lines += fleet_markdown(mem["fleet"])
    return lines


# -- the fleet: many robots, one server -------------------------------------------------------------------------


def _percentiles(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "queries": len(ms)} if ms else {"p50_ms": None, "p99_ms": None, "queries": 0}  # fmt: skip


def _open_child(url: str) -> None:
    """A fresh process: open a client of the server and answer one query; what that cost (JSON on stdout)."""
    import chromadb  # noqa: F401 - the library is not the client's holding: imported before the first figure

    from ..core.phases import rss_mb
    from ..memory.store import VisualMemory

    rss_before = rss_mb()
    t0 = time.perf_counter()
    memory = VisualMemory(url)
    open_s = time.perf_counter() - t0
    rss_open = rss_mb()
    q = camera_vectors(1, seed=99)[0][0]
    t1 = time.perf_counter()
    memory.search(q, memory.model_id or "", K)
    print(json.dumps({"open_s": round(open_s, 3), "open_rss_mb": round(rss_open - rss_before, 1),
                      "first_query_ms": round((time.perf_counter() - t1) * 1e3, 1),
                      "rss_after_query_mb": round(rss_mb() - rss_before, 1), "held_rows": memory.held}))  # fmt: skip


def fresh_client(url: str) -> dict:
    """Open time and RSS growth of a fresh process's client of `url` (never measured inside a long run)."""
    done = children.run(children.python("-m", "openclaw_vision.bench.memory", "open", url), timeout=RSS_TIMEOUT_S)
    if not done.ok:
        raise RuntimeError(f"a fresh client of {url}: the child {done.how}:\n{done.tail()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _robot_child(url: str, name: str, seconds: float, fps: float, seed: int, go: str) -> None:
    """One robot writing one camera's rows to the server: `fps` rows a second in one-second batches (fps 0: flat
    out, FLAT_OUT_BATCH rows a call) for `seconds`, from when the file `go` exists (it says "ready" once its
    client is open); what it offered and got written (JSON on stdout)."""
    from ..memory.store import Rows, VisualMemory

    memory = VisualMemory(url)
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.01)
    rng = np.random.default_rng(seed)
    at = rng.standard_normal(DIM).astype(np.float32)
    stamp0 = 1_800_000_000_000_000_000 + seed * 10**12
    sent = written = 0
    backlog_max = 0
    t0 = time.perf_counter()

    def batch(n: int) -> Rows:
        nonlocal at
        steps = rng.standard_normal((n, DIM)).astype(np.float32) * np.float32(0.15)
        walk = at + np.cumsum(steps, axis=0)
        at = walk[-1]
        v = walk / np.linalg.norm(walk, axis=1, keepdims=True)
        stamps = [stamp0 + (sent + i) * (10**9 // 30) for i in range(n)]
        return Rows(v, stamps, ["cam"] * n, ["/cam/image_raw"] * n, "bench@512", "fleet", robot=name)

    while True:
        elapsed = time.perf_counter() - t0
        if fps:
            due = int(min(elapsed, seconds) * fps)
            n = due - sent
            backlog_max = max(backlog_max, n)
        else:
            n = FLAT_OUT_BATCH if elapsed < seconds else 0
        if n:
            written += memory.add(batch(n), cache=False).written
            sent += n
        if elapsed >= seconds:
            break
        if fps:
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - t0) % 1.0))  # the next one-second batch
    print(json.dumps({"robot": name, "offered": int(seconds * fps) if fps else sent, "sent": sent,
                      "written": written, "seconds": round(time.perf_counter() - t0, 3),
                      "backlog_max_rows": backlog_max}))  # fmt: skip


#: each kind of writers' trial writes rows of its own (a robot's seed sets its stamps, so its rows' ids)
SEED_OFFSET = {"paced-server": 0, "paced-ingest": 250, "flat-server": 500}


def _writers(url: str, n: int, seconds: float, fps: float, folder: Path, qs: np.ndarray | None,
             via: str = "server") -> dict:  # fmt: skip
    """`n` robot processes writing to `url` at once (paced at `fps`, or flat out), a querier of `url` here
    meanwhile; the totals. `via` names the path in the robots' log files ("server", "ingest")."""
    from ..memory.store import VisualMemory

    kind = f"{'paced' if fps else 'flat'}-{via}"  # a seed of its own per kind: rows of their own, never skipped
    go = folder / f"go-{n}-{kind}"
    robots = [children.Child(children.python("-m", "openclaw_vision.bench.memory", "robot", url, f"robot{i}",
                                             str(seconds), str(fps), str(1000 * n + i + SEED_OFFSET[kind]), str(go)),
                             log_path=folder / f"robot{n}-{i}-{kind}.log")
              for i in range(n)]  # fmt: skip
    for r in robots:
        if r.wait_for_line("ready", 300.0) != "ready":
            raise RuntimeError(f"robot writer {r.argv[-5]} did not open its client ({r.how}):\n{r.log_text()[-2000:]}")
    go.touch()
    ms: list[float] = []
    done = threading.Event()

    def querier() -> None:
        memory = VisualMemory(url)
        i = 0
        while not done.is_set():
            t = time.perf_counter()
            memory.search(qs[i % len(qs)], "bench@512", K)
            ms.append((time.perf_counter() - t) * 1e3)
            i += 1

    q = threading.Thread(target=querier, daemon=True) if qs is not None else None
    try:
        if q:
            q.start()
        for r in robots:
            r.wait(seconds + 600)
    finally:
        done.set()
        if q:
            q.join(60)
        for r in robots:
            r.stop()
    out = []
    for r in robots:
        lines = [line for line in r.log_text().splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"robot writer {r.argv[-5]}: {r.how}:\n{r.log_text()[-2000:]}")
        out.append(json.loads(lines[-1]))
    wall = max(o["seconds"] for o in out)
    res = {"writers": n, "offered": sum(o["offered"] for o in out), "written": sum(o["written"] for o in out),
           "rows_per_s": round(sum(o["written"] for o in out) / wall, 1),
           "backlog_max_rows": max(o["backlog_max_rows"] for o in out)}  # fmt: skip
    if fps:  # kept up: every robot got its rows written, never more than two batches behind
        res["kept_up"] = res["written"] == res["offered"] and res["backlog_max_rows"] <= 2 * fps
        res["query_under_load"] = _percentiles(ms)
    return res


def _ingest_stats(url: str) -> dict:
    """The ingest's counters (memory/ingest.py, STATS_PATH): how many robot writes it merged into how many."""
    import urllib.request

    from ..memory.ingest import STATS_PATH

    with urllib.request.urlopen(url + STATS_PATH, timeout=10) as r:
        return json.loads(r.read())


def _fill(url: str, v: np.ndarray, stamps: np.ndarray, cams: list[str], start: int, stop: int) -> float:
    """Rows start..stop of the camera walks into the server (robot "fill"); rows/s."""
    from ..memory.store import Rows, VisualMemory

    memory = VisualMemory(url)
    t0 = time.perf_counter()
    for s in range(start, stop, FILL_BATCH):
        e = min(stop, s + FILL_BATCH)
        memory.add(Rows(v[s:e], stamps[s:e], ["cam"] * (e - s), cams[s:e], "bench@512", "bench", robot="fill"),
                   cache=False)  # fmt: skip
        print(f"\rbench memory fleet: {e:,} rows on the server", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return round((stop - start) / max(1e-9, time.perf_counter() - t0), 1)


def run_fleet(quick: bool, fills: tuple[int, ...] | None = None, writers: tuple[int, ...] | None = None) -> dict:
    """The fleet table: per fill, a fresh client's open and the server path's queries; then per N, paced and
    flat-out writers with a querier (see the module's docstring)."""
    from ..memory.server import start_ingest, start_server
    from ..memory.store import SERVER_HNSW, VisualMemory

    fills = fills or (QUICK_FLEET_FILLS if quick else FLEET_FILLS)
    writers = writers or (QUICK_FLEET_WRITERS if quick else FLEET_WRITERS)
    seconds = QUICK_FLEET_SECONDS if quick else FLEET_SECONDS
    flat_seconds = QUICK_FLAT_OUT_SECONDS if quick else FLAT_OUT_SECONDS
    n_queries = QUICK_FLEET_QUERIES if quick else FLEET_QUERIES
    v, stamps, cams = camera_vectors(max(fills))
    out: dict = {"fills": [], "writers": [], "fps_per_robot": FPS, "server_hnsw": dict(SERVER_HNSW)}
    with tempfile.TemporaryDirectory(prefix="openclaw-memory-fleet-") as tmp:
        folder = Path(tmp)
        child, url = start_server(folder / "server-data", log_path=folder / "chroma.log")
        with child:
            done = 0
            for n in fills:
                print(f"bench memory fleet: filling the server to {n:,} rows ...", file=sys.stderr, flush=True)
                fill_rate = _fill(url, v, stamps, cams, done, n)
                done = n
                qs = queries(v[:n])[:n_queries]
                exact = [set(numpy_top(v[:n], q).tolist()) for q in qs]
                memory = VisualMemory(url)
                row_of = {int(s): i for i, s in enumerate(stamps[:n])}
                for q in qs[:5]:  # warm: the client's connection, the server's caches
                    memory.search(q, "bench@512", K)
                ms, got = [], []
                for q in qs:
                    t = time.perf_counter()
                    got.append(memory.search(q, "bench@512", K))
                    ms.append((time.perf_counter() - t) * 1e3)
                recall = np.mean(
                    [len({row_of[m.stamp_ns] for m in g} & e) / K for g, e in zip(got, exact, strict=True)]
                )
                out["fills"].append({"rows": n, "fill_rows_per_s": fill_rate, "query": _percentiles(ms),
                                     "recall_at_10": round(float(recall), 4),
                                     "fresh_client": fresh_client(url)})  # fmt: skip
            qs = queries(v[: fills[-1]])[:n_queries]
            ingest, ingest_url = start_ingest(url, log_path=folder / "ingest.log")
            with ingest:
                for n in writers:
                    print(f"bench memory fleet: {n} robot(s) at {FPS} fps to the server, through the ingest, then "
                          "flat out ...", file=sys.stderr, flush=True)  # fmt: skip
                    paced = _writers(url, n, seconds, FPS, folder, qs)
                    ingested = _writers(ingest_url, n, seconds, FPS, folder, qs, "ingest")
                    flat = _writers(url, n, flat_seconds, 0.0, folder, None)
                    out["writers"].append({"writers": n, "server_rows": fills[-1], "paced": paced,
                                           "ingest": ingested, "flat_out_rows_per_s": flat["rows_per_s"]})  # fmt: skip
                out["ingest_stats"] = _ingest_stats(ingest_url)
    rates = [w["flat_out_rows_per_s"] for w in out["writers"]]
    # saturated: the first N whose flat-out total is within 10 % of the previous N's (more robots, no more rows)
    out["saturates_at_writers"] = next((out["writers"][i]["writers"] for i in range(1, len(rates))
                                        if rates[i] < 1.1 * rates[i - 1]), None)  # fmt: skip
    out["goals"] = fleet_goals(out)
    return out


def fleet_goals(fleet: dict) -> list[dict]:
    """The issue's fleet goals (goals.GOALS' fleet_* rows), judged at the largest fill and the most writers
    measured; a run that stopped short of FLEET_GOAL_ROWS or FLEET_GOAL_WRITERS (--quick) does not meet them."""
    if not fleet.get("fills"):
        return []
    at = fleet["fills"][-1]
    n, fresh, g, big = at["rows"], at["fresh_client"], GOALS, at["rows"] >= FLEET_GOAL_ROWS
    rows = [
        row(f"a fresh client of the server opens in <= {g['fleet_open_s']:g} s, RSS growth <= "
            f"{g['fleet_open_rss_mb']:g} MB (at {FLEET_GOAL_ROWS:,} rows)",
            f"{fresh['open_s']} s, {fresh['open_rss_mb']} MB at {n:,} rows",
            fresh["open_s"] <= g["fleet_open_s"] and fresh["open_rss_mb"] <= g["fleet_open_rss_mb"] and big),
        row(f"server query P99 <= {g['fleet_query_p99_ms']:g} ms, recall@10 >= {g['fleet_recall_at_10']:g} "
            f"(at {FLEET_GOAL_ROWS:,} rows)", f"P99 {at['query']['p99_ms']} ms, recall@10 {at['recall_at_10']} at "
            f"{n:,} rows", (at["query"]["p99_ms"] or 1e9) <= g["fleet_query_p99_ms"]
            and at["recall_at_10"] >= g["fleet_recall_at_10"] and big),
    ]  # fmt: skip
    most = max(fleet["writers"], key=lambda w: w["writers"], default=None)
    if most is not None:  # judged on the fleet's write path, the ingest (memory/ingest.py); the server's beside it
        p, d = most.get("ingest", most["paced"]), most["paced"]
        path, also = "straight to the server", ""
        if "ingest" in most:
            path = "through the ingest"
            also = f" (straight to the server: {d['written']:,}, backlog {d['backlog_max_rows']})"
        rows.append(row(f"{FLEET_GOAL_WRITERS} writers at {FPS} fps each sustained, nothing lost",
                        f"{most['writers']} writers {path}: {p['written']:,} of {p['offered']:,} rows written, "
                        f"backlog at most {p['backlog_max_rows']} rows{also}",
                        p["kept_up"] and most["writers"] >= FLEET_GOAL_WRITERS))  # fmt: skip
    return rows


def fleet_markdown(fleet: dict) -> list[str]:
    h = fleet["server_hnsw"]
    lines = ["", f"Fleet: one Chroma server (its HNSW index: M {h['max_neighbors']}, ef_construction "
             f"{h['ef_construction']}, ef_search {h['ef_search']}; the top 10 rescored exactly):", "",
             "| server rows | query P50 / P99 ms | recall@10 vs exact | fresh client open s | open RSS MB |",
             "|---|---|---|---|---|"]  # fmt: skip
    for f in fleet["fills"]:
        c = f["fresh_client"]
        lines.append(f"| {f['rows']:,} | {f['query']['p50_ms']} / {f['query']['p99_ms']} | {f['recall_at_10']} | "
                     f"{c['open_s']} | {c['open_rss_mb']} |")  # fmt: skip
    lines += ["", f"| robots ({fleet['fps_per_robot']} fps each) | writing to | rows/s written | kept up | backlog "
              "max | query P50 / P99 ms meanwhile | flat-out rows/s |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for w in fleet["writers"]:
        for via, name in (("paced", "the server"), ("ingest", "the ingest")):
            if via not in w:
                continue
            p, q = w[via], w[via]["query_under_load"]
            kept = "yes" if p["kept_up"] else "NO"
            flat = w["flat_out_rows_per_s"] if via == "paced" else "-"
            lines.append(f"| {w['writers']} | {name} | {p['rows_per_s']} | {kept} | {p['backlog_max_rows']} | "
                         f"{q['p50_ms']} / {q['p99_ms']} | {flat} |")  # fmt: skip
    st = fleet.get("ingest_stats")
    if st:
        lines += ["", f"The ingest sent the robots' {st['writes_in']:,} writes to the server as {st['writes_sent']:,} "
                  f"(at most {st['largest_merge']} merged into one; {st['sent_apart']} sent again apart after a "
                  "refusal)."]  # fmt: skip
    sat = fleet.get("saturates_at_writers")
    lines.append("")
    lines.append(f"Flat-out writes stop growing at {sat} writers." if sat else
                 "Flat-out writes still grew with the last writer count measured.")  # fmt: skip
    return lines


def main(argv: list[str]) -> int:
    """`fleet [--quick] [--json PATH]`: the fleet section alone; `open URL`, `robot ...`, `rss STORE`: children."""
    if argv[:1] == ["rss"]:
        _rss_child(argv[1])
    elif argv[:1] == ["open"]:
        _open_child(argv[1])
    elif argv[:1] == ["robot"]:
        _robot_child(argv[1], argv[2], float(argv[3]), float(argv[4]), int(argv[5]), argv[6])
    else:
        p = argparse.ArgumentParser(prog="python -m openclaw_vision.bench.memory")
        p.add_argument("what", choices=["fleet"])
        p.add_argument("--quick", action="store_true", help="small fills, 1 and 2 writers, seconds not minutes")
        p.add_argument("--json", type=Path, default=None, help="write the results here too")
        args = p.parse_args(argv)
        fleet = run_fleet(args.quick)
        print("\n".join(fleet_markdown(fleet)))
        for g in fleet["goals"]:
            print(f"- {'met' if g['met'] else 'NOT met'}: {g['goal']}: {g['measured']}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(fleet, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
