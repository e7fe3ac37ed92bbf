"""The fleet's visual memory (issue 36) on a real `chroma run` on loopback: robots' rows visible to every
client's next query, a server client that loads nothing, robot filters, and store and forward through a
server outage and a SIGKILL of the node, and past a batch the server refuses for good.

Planted vectors (test_memory.planted): exact ranks and scores are known, so the server path's answers (its
index's candidates, rescored exactly) are checked against exact top-k, not against themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_memory import (
    T0,
    _cli,
    _features_bag,
    _query,
    as_stored,
    exact_top,
    planted,
    publish_planted,
    start_memory_node,
    status_where,
    unit,
)

from openclaw_vision.memory.store import Rows, StoreUnavailable, VisualMemory


@pytest.fixture
def chroma(tmp_path):
    """A `chroma run` on 127.0.0.1 of this test's own; yields its URL."""
    from openclaw_vision.memory.server import start_server

    child, url = start_server(tmp_path / "server-data", log_path=tmp_path / "chroma.log")
    with child:
        yield url


def test_another_robots_rows_are_found_by_the_next_query(chroma):
    """Robot A's client, opened before robot B wrote anything (the store did not even exist), finds every one
    of B's rows by its exact vector, and both robots' rows by exact rank."""
    a = VisualMemory(chroma)
    assert a.model_id is None and a.held == 0
    rows_b = planted(30, seed=1, source="live", robot="B")
    assert VisualMemory(chroma).add(rows_b).written == 30
    for i in range(30):
        got = a.search(rows_b.vectors[i], rows_b.model_id, top_k=1)
        assert (got[0].stamp_ns, got[0].robot, got[0].source) == (rows_b.stamps_ns[i], "B", "live")
        assert got[0].score == pytest.approx(1.0, abs=1e-5)
    rows_a = planted(30, seed=2, source="live", robot="A")  # the same source, cameras and stamps as B's
    assert a.add(rows_a).written == 30 and len(a) == 60  # two robots never share an id
    both = np.vstack([rows_a.vectors, rows_b.vectors])
    q = unit(rows_b.vectors[3] + 0.4 * rows_a.vectors[5])
    got = a.search(q, rows_a.model_id, top_k=6)
    want = exact_top(Rows(both, [0] * 60, [""] * 60, [""] * 60, "m", "s"), q, 6)
    assert [(m.robot, m.stamp_ns) for m in got] == [("A" if i < 30 else "B", T0 + (i % 30) * 1_000_000) for i in want]
    assert [m.score for m in got] == pytest.approx((both[want] @ q).tolist(), abs=1e-5)


def _http_calls(monkeypatch) -> list[tuple[str, int]]:
    """Every HTTP request the chroma client makes from now on: (path, bytes of the response)."""
    import httpx

    calls: list[tuple[str, int]] = []
    send = httpx.Client.send

    def counted(self, request, *args, **kwargs):
        resp = send(self, request, *args, **kwargs)
        calls.append((request.url.path, len(resp.read())))
        return resp

    monkeypatch.setattr(httpx.Client, "send", counted)
    return calls


def test_a_server_client_loads_nothing_at_open(chroma, monkeypatch):
    """A fresh client of a server holds no row, pages nothing, and what its open reads does not grow with the
    rows the server holds; its queries still rank exactly."""
    writer = VisualMemory(chroma)
    writer.add(planted(50, seed=3, robot="r1"))
    calls = _http_calls(monkeypatch)
    small = VisualMemory(chroma)
    opened_small = list(calls)
    many = planted(3000, seed=4, robot="r2")
    for s in range(0, 3000, 500):
        writer.add(Rows(many.vectors[s : s + 500], many.stamps_ns[s : s + 500], many.frame_ids[s : s + 500],
                        many.cameras[s : s + 500], many.model_id, many.source, robot="r2"))  # fmt: skip
    calls.clear()
    fresh = VisualMemory(chroma)
    assert fresh.held == 0 and fresh.hot is None and small.held == 0
    assert [path for path, _ in calls] == [path for path, _ in opened_small]  # the same requests at 50 and 3050 rows
    assert sum(n for _, n in calls) <= sum(n for _, n in opened_small) + 64  # and no more bytes (ids differ a little)
    assert not any(path.endswith(("/get", "/query")) for path, _ in calls)
    assert len(fresh) == 3050
    q = unit(many.vectors[1234] + 0.2 * many.vectors[17])
    got = fresh.search(q, many.model_id, top_k=5, robot="r2")
    assert [m.stamp_ns for m in got] == [many.stamps_ns[i] for i in exact_top(many, q, 5)]
    assert fresh.held == 0  # a query keeps nothing either


@pytest.mark.parametrize("role", ["embedded", "server"])
def test_a_robot_filter_with_the_other_filters(role, chroma, tmp_path):
    """Two robots' rows with the same source, cameras and stamps: each robot's own, by exact rank, alone or with
    a camera and a window; a robot no row names: nothing."""
    spec = chroma if role == "server" else tmp_path / "store"
    rows = {r: planted(40, seed=10 + n, source="live", robot=r) for n, r in enumerate(("A", "B"))}
    with VisualMemory(spec) as memory:
        for r in rows.values():
            memory.add(r)
        q = unit(rows["A"].vectors[8] + rows["B"].vectors[8])
        for robot, r in rows.items():
            got = memory.search(q, r.model_id, top_k=4, robot=robot)
            assert [(m.robot, m.stamp_ns) for m in got] == [(robot, r.stamps_ns[i]) for i in exact_top(r, q, 4)]
            cams, stamps = np.array(r.cameras), np.array(r.stamps_ns)
            mask = (cams == "/cam0/image_raw") & (stamps >= r.stamps_ns[10]) & (stamps <= r.stamps_ns[30])
            got = memory.search(q, r.model_id, top_k=3, robot=robot, camera="/cam0/image_raw",
                                since_ns=r.stamps_ns[10], until_ns=r.stamps_ns[30])  # fmt: skip
            assert [m.stamp_ns for m in got] == [r.stamps_ns[i] for i in exact_top(r, q, 3, mask)]
            assert {m.robot for m in got} == {robot}
        assert memory.search(q, rows["A"].model_id, robot="C") == []


def test_search_by_robot_from_the_command_line(tiny_text_model, tmp_path, capsys):
    """One features bag indexed as two robots' (`index --robot`): both kept, `search --robot` shows one."""
    from openclaw_vision.text.encoder import TextEncoder

    prompt = TextEncoder(tiny_text_model).encode(["a forklift"])
    v = unit(np.random.default_rng(6).standard_normal((6, prompt.dim)))
    v[2] = prompt.vectors[0]
    bag = tmp_path / "features"
    _features_bag(bag, Rows(v, [T0 + i for i in range(6)], ["cam"] * 6, ["/visual_features"] * 6, prompt.model_id,
                            "x"))  # fmt: skip
    store = tmp_path / "store"
    for robot in ("r1", "r2"):
        code, out, err = _cli(capsys, "index", bag, "--store", store, "--robot", robot)
        assert code == 0 and "6 rows written" in out, err
    code, out, err = _cli(capsys, "search", "a forklift", "--top-k", "4", "--store", store, "--robot", "r2",
                          "--text-model", tiny_text_model)  # fmt: skip
    lines = [line.split() for line in out.splitlines()]
    assert code == 0 and len(lines) == 4 and {f[4] for f in lines} == {"r2"}, err
    assert int(lines[0][0]) == T0 + 2 and float(lines[0][3]) == pytest.approx(1.0, abs=1e-4)


def test_a_server_that_hangs_is_an_error_not_a_hang(tmp_path, monkeypatch):
    """A server stopped mid-run (SIGSTOP: it holds its socket and answers nothing) makes each call fail with
    StoreUnavailable after the call timeout (a query, and a write: a timeout is retried by the forwarder, never
    taken for a refusal), and a client opened meanwhile fails too; once the server runs
    again the same client answers (it connects again), with exact ranks."""
    import signal

    from openclaw_vision.memory import remote
    from openclaw_vision.memory.server import start_server

    monkeypatch.setattr(remote, "SERVER_TIMEOUT_S", 2.0)
    monkeypatch.setattr(remote, "CONNECT_TIMEOUT_S", 2.0)
    rows = planted(30, seed=9, robot="A")
    child, url = start_server(tmp_path / "server-data", log_path=tmp_path / "chroma.log")
    with child:
        memory = VisualMemory(url)
        memory.add(rows)
        writer = VisualMemory(url)  # another client, its collection known: its next call is a write
        child.send(signal.SIGSTOP)
        try:
            with pytest.raises(StoreUnavailable, match="a query failed"):
                memory.search(rows.vectors[4], rows.model_id, top_k=1)
            with pytest.raises(StoreUnavailable, match="ReadTimeout"):  # a write timing out: retried, not refused
                writer.add(planted(4, seed=19, robot="A"))
            with pytest.raises(StoreUnavailable, match="no Chroma server answers"):
                VisualMemory(url)
        finally:
            child.send(signal.SIGCONT)
        got = memory.search(rows.vectors[4], rows.model_id, top_k=3)
        assert [m.stamp_ns for m in got] == [rows.stamps_ns[i] for i in exact_top(rows, rows.vectors[4], 3)]


def test_a_batch_sent_again_after_a_crash_mid_forward_is_on_the_server_once(chroma, tmp_path):
    """The forwarder's crash window: the server took a batch, the spool never heard (no ack). The next start
    sends it again: the server holds each row once, and says they were there."""
    from openclaw_vision.memory.spool import Spool

    rows = planted(24, seed=7, source="live", robot="A")
    spool = Spool(tmp_path / "spool", 16)
    assert spool.put(rows) == 24
    first = spool.peek(100)
    assert [len(b.rows.vectors) for b in first] == [24]
    assert VisualMemory(chroma).add(first[0].rows, cache=False).written == 24
    spool.close()  # killed before the ack
    spool = Spool(tmp_path / "spool", 16)
    again = spool.peek(100)
    assert len(spool) == 24 and again[0].rows.ids() == rows.ids()
    counts = VisualMemory(chroma).add(again[0].rows, cache=False)
    assert (counts.written, counts.skipped) == (0, 24)
    assert spool.ack(again[0].last_seq) == 24 and len(spool) == 0
    assert len(VisualMemory(chroma)) == 24
    spool.close()


def test_a_full_spool_refuses_rows_counts_and_logs_them(tmp_path, caplog):
    """Past spool_max_mb the node takes what fits (in order), refuses the rest with the reason, counted and
    logged; the rows it took are queryable from its cache while the server is down."""
    from openclaw_vision.core.children import free_port
    from openclaw_vision.memory.spool import Spool
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.memory_node import MemoryNode
    from openclaw_vision.runtime import config

    url = f"http://127.0.0.1:{free_port()}"  # nobody answers there
    cfg = config.MemoryConfig(store=url, spool=str(tmp_path / "spool"), spool_max_mb=1.0, robot="A")
    memory = VisualMemory(url, cache_rows=100, connect=False)
    spool = Spool(cfg.spool, cfg.spool_max_mb)
    t = CycloneTransport("test_memory_spool_full")
    try:
        node = MemoryNode(cfg, t, memory, None, spool, "A")
        v = unit(np.random.default_rng(8).standard_normal((800, 512)))  # 2 kB each: about 500 fit in 1 MiB
        node._pending = [("m@1", T0 + i, "f", "/visual_features", v[i]) for i in range(800)]
        with caplog.at_level("ERROR", logger="memory_node"):
            node.flush()
        st = node.stats()
        assert 400 < st["spooled"] < 800 and st["spooled"] + st["refused"] == 800
        assert st["spool_rows"] == st["spooled"] == len(spool)
        assert "spool" in caplog.text and "is full" in caplog.text and "spool_max_mb 1" in caplog.text
        assert 100 <= memory.held <= 100 + 100 // 8  # the cache: the newest cache_rows (and at most an eighth more)
        last = st["spooled"] - 1
        got, note = node.query(_query(t, vector=v[last], top_k=1))
        assert got[0].stamp_ns == T0 + last and "did not answer" in note and st["robot"] == "A"
        assert node.counters.snapshot()["queries_local"] == 1
        with pytest.raises(StoreUnavailable):
            node.forward()
        assert len(spool) == st["spooled"]  # nothing left the spool without the server
        assert spool.aside_rows == 0 and node.stats()["set_aside"] == 0  # connection refused: retried, not set aside
    finally:
        spool.close()
        t.close()


def test_a_batch_the_server_refuses_is_set_aside_and_the_rows_behind_it_go_on(chroma, tmp_path, caplog):
    """Three spooled batches, the middle one holding a NaN (the server's validation refuses it, every time):
    the forwarder sends the first and the third, moves the middle one to the spool's `refused` table with the
    server's reason, counts it and logs it once; forwarding again sends nothing more. The set-aside rows stay on
    disk, readable with sqlite3, after the spool is closed and opened again."""
    import sqlite3

    from openclaw_vision.memory.spool import SPOOL_FILE, Spool
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.memory_node import MemoryNode
    from openclaw_vision.runtime import config

    rows = planted(24, seed=30, source="live", robot="A")
    bad = rows.vectors.copy()
    bad[10, 3] = np.nan
    cfg = config.MemoryConfig(store=chroma, spool=str(tmp_path / "spool"), batch_rows=8, robot="A")
    spool = Spool(cfg.spool, cfg.spool_max_mb)
    assert spool.put(Rows(bad, rows.stamps_ns, rows.frame_ids, rows.cameras, rows.model_id, "live",
                          robot="A")) == 24  # fmt: skip
    t = CycloneTransport("test_memory_set_aside")
    try:
        node = MemoryNode(cfg, t, VisualMemory(chroma), None, spool, "A")
        with caplog.at_level("ERROR", logger="memory_node"):
            node.forward()  # batches of batch_rows: seq 1-8, 9-16 (the NaN), 17-24
            assert node.forward() == 0  # the refused batch is not sent again
        st = node.stats()
        assert (st["forwarded"], st["set_aside"], st["spool_set_aside"], st["spool_rows"]) == (16, 8, 8, 0)
        assert st["forward_failures"] == 0 and st["refused"] == 0
        lines = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
        assert len(lines) == 1 and "8 rows" in lines[0] and "Non-finite" in lines[0], lines
        ids = rows.ids()
        on_server = VisualMemory(chroma)._collection.get(ids=ids, include=[])["ids"]
        assert sorted(on_server) == sorted(ids[:8] + ids[16:])
    finally:
        spool.close()
        t.close()
    spool = Spool(cfg.spool, cfg.spool_max_mb)  # the next start: still set aside, not in line
    assert (len(spool), spool.aside_rows, spool.peek(100)) == (0, 8, [])
    spool.close()
    con = sqlite3.connect(f"file:{tmp_path / 'spool' / SPOOL_FILE}?mode=ro", uri=True)
    kept = con.execute("SELECT robot, stamp_ns, vector, reason FROM refused ORDER BY seq").fetchall()
    con.close()
    assert [k[1] for k in kept] == list(rows.stamps_ns[8:16]) and {k[0] for k in kept} == {"A"}
    np.testing.assert_array_equal(np.stack([np.frombuffer(k[2], np.float32) for k in kept]), bad[8:16])
    assert all("Non-finite" in k[3] for k in kept)


@pytest.mark.parametrize(
    ("kind", "args", "for_good"),
    [
        ("chromadb.errors.InvalidArgumentError", ("Non-finite float value at embedding index 0: NaN",), True),
        ("chromadb.errors.DuplicateIDError", ("Expected IDs to be unique",), True),
        ("builtins.ValueError", ("Expected metadata to be a non-empty dict",), True),  # chromadb's own checks
        ("builtins.TypeError", ("Integer exceeds 64-bit range",), True),  # orjson cannot encode the batch
        ("httpx.ConnectError", ("[Errno 111] Connection refused",), False),
        ("httpx.ReadTimeout", ("timed out",), False),
        ("chromadb.errors.InternalError", ("the server failed",), False),
        ("chromadb.errors.RateLimitError", ("slow down",), False),
        ("chromadb.errors.AuthorizationError", ("no token",), False),
        ("chromadb.errors.NotFoundError", ("the collection went away",), False),
        ("builtins.Exception", ("<html>502 Bad Gateway</html>",), False),  # an error body chromadb cannot name
        ("json.JSONDecodeError", ("a truncated reply", "{", 1), False),
    ],
)
def test_only_a_refusal_of_what_was_sent_is_for_good(kind, args, for_good):
    """What the forwarder sets aside (for good) and what it retries with its backoff: the request's fault
    against the server's or the network's, over the exception types chromadb's client raises."""
    import importlib

    from openclaw_vision.memory.store import refused_for_good

    module, name = kind.rsplit(".", 1)
    assert refused_for_good(getattr(importlib.import_module(module), name)(*args)) is for_good


@pytest.mark.dds
def test_store_and_forward_through_a_server_outage_and_a_sigkill(dds_domain, tmp_path):
    """The memory node on a server store: rows forwarded while the server is up; the server killed, rows keep
    coming (spooled, counted); the node SIGKILLed; the node started again before the server (it starts, and
    waits), then the server: every row is on the server exactly once, in the node's robot's name. Then robot
    B writes through its own client, and robot A's node finds B's rows by the next query, filtered by robot."""
    import json
    import signal

    from dds_helpers import wait_until

    from openclaw_vision.core.children import free_port
    from openclaw_vision.memory.server import start_server
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.types import QUERY_MEMORY

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data = tmp_path / "server-data"
    rows = planted(60, seed=21, source="live", robot="A")
    args = ["--store", url, "--robot", "A", "--spool", str(tmp_path / "spool"), "--transport", "cyclonedds",
            "--diagnostics-period", "0.2", "--flush-period", "0.2", "--batch-rows", "8"]  # fmt: skip
    t = CycloneTransport("test_memory_forward")
    children: list = []

    def start_node(log_name: str, stats=None):
        return start_memory_node(t, args, tmp_path / log_name, children, stats)[:3]

    server, _ = start_server(data, port=port, log_path=tmp_path / "chroma1.log")
    children.append(server)
    try:
        node, feats, diag = start_node("memory1.log")
        for i in range(20):
            publish_planted(t, feats, rows, i)
        status_where(diag, "20 rows forwarded", lambda st: st.get("forwarded") == "20" and st.get("spool_rows") == "0")
        server.stop()  # the server goes away
        for i in range(20, 45):  # the server is down: the node keeps taking rows
            publish_planted(t, feats, rows, i)
        seen = status_where(diag, "45 rows spooled while the server is down",
                            lambda s: s.get("spooled") == "45" and int(s.get("forward_failures", 0)) > 0)  # fmt: skip
        assert seen["forwarded"] == "20" and seen["spool_rows"] == "25" and seen["refused"] == "0"
        node.send(signal.SIGKILL)
        node.wait(10)
        node.stop()

        stats = tmp_path / "stats.json"
        node, feats, diag = start_node("memory2.log", stats)  # the server is still down: the node starts anyway
        status_where(diag, "the spool found again", lambda s: s.get("spool_rows") == "25")
        for i in range(45, 60):  # and keeps taking rows
            publish_planted(t, feats, rows, i)
        status_where(diag, "60 rows in all", lambda st: st.get("spooled") == "15" and st.get("spool_rows") == "40")
        server, _ = start_server(data, port=port, log_path=tmp_path / "chroma2.log")
        children.append(server)
        status_where(diag, "the spool drained", lambda st: st.get("spool_rows") == "0" and st.get("forwarded") == "40")

        live = as_stored(rows)
        with VisualMemory(url) as fleet:  # every row once, as the node's robot's
            assert len(fleet) == 60
            got = fleet._collection.get(ids=live.ids(), include=["embeddings", "metadatas"])
            assert sorted(got["ids"]) == sorted(live.ids())
            order = {rid: i for i, rid in enumerate(live.ids())}
            stored = np.asarray(got["embeddings"], np.float32)
            want = rows.vectors[[order[rid] for rid in got["ids"]]]
            np.testing.assert_allclose(stored, want, atol=1e-6)
            assert {m["robot"] for m in got["metadatas"]} == {"A"}

        rows_b = planted(10, seed=22, source="live", robot="B")  # robot B, after A's node opened
        VisualMemory(url).add(rows_b)
        cli = t.client("/query_memory", QUERY_MEMORY)
        wait_until(cli.ready)
        for i in (0, 7):
            found = cli.call(_query(t, vector=rows_b.vectors[i], top_k=1), 10)
            assert found.ok and list(found.robots) == ["B"] and found.stamps_ns[0] == rows_b.stamps_ns[i], found
        q = unit(rows_b.vectors[2] + rows.vectors[33])
        only_a = cli.call(_query(t, vector=q, top_k=4, robot="A"), 10)
        assert list(only_a.robots) == ["A"] * 4
        assert list(only_a.stamps_ns) == [rows.stamps_ns[i] for i in exact_top(rows, q, 4)]
        assert cli.call(_query(t, vector=q, top_k=1, robot="B"), 10).stamps_ns[0] == rows_b.stamps_ns[2]
        assert node.stop() == 0, node.log_text()
    finally:
        for child in children:
            child.stop()
        t.close()
    st = json.loads(stats.read_text())
    assert st["spooled"] + st["rejected"] + st["dropped"] + st["refused"] == st["received"] == 15
    assert st["forwarded"] == st["written"] == 40 and st["spool_rows"] == 0 and st["robot"] == "A"
    assert "does not answer" in (tmp_path / "memory1.log").read_text()


def test_bench_fleet_section_accounts_for_every_robots_rows(monkeypatch):
    """A small run of the bench's fleet section (no timing is asserted): robot processes' rows all written, the
    server path's recall against exact top-k, a fresh client that holds nothing, the goals judged at 1M rows."""
    from openclaw_vision.bench import memory as bench_memory
    from openclaw_vision.bench.goals import FLEET_GOAL_ROWS, FLEET_GOAL_WRITERS, GOALS

    monkeypatch.setattr(bench_memory, "QUICK_FLEET_SECONDS", 2.0)
    monkeypatch.setattr(bench_memory, "QUICK_FLAT_OUT_SECONDS", 1.0)
    fleet = bench_memory.run_fleet(True, fills=(600,), writers=(1, 2))
    (fill,) = fleet["fills"]
    assert fill["rows"] == 600 and fill["recall_at_10"] >= 0.9 and fill["query"]["queries"] == 30
    assert fill["fresh_client"]["held_rows"] == 0
    assert [w["writers"] for w in fleet["writers"]] == [1, 2]
    for w in fleet["writers"]:
        for via in ("paced", "ingest"):  # straight to the server, and through the fleet's ingest
            assert w[via]["written"] == w[via]["offered"] == w["writers"] * 60 and w[via]["kept_up"]
            assert w[via]["query_under_load"]["queries"] > 0
        assert w["flat_out_rows_per_s"] > 0
    assert fleet["ingest_stats"]["rows"] == 3 * 60  # every row of the ingest trials went through it
    assert [g["met"] for g in fleet["goals"]] == [False, False, False]  # 600 rows and 2 writers are not the goal's
    open_goal, query_goal, writers_goal = (g["goal"] for g in fleet["goals"])  # worded from goals.GOALS, once
    assert f"<= {GOALS['fleet_open_s']:g} s" in open_goal and f"<= {GOALS['fleet_open_rss_mb']:g} MB" in open_goal
    assert f"P99 <= {GOALS['fleet_query_p99_ms']:g} ms, recall@10 >= {GOALS['fleet_recall_at_10']:g}" in query_goal
    assert f"at {FLEET_GOAL_ROWS:,} rows" in query_goal and writers_goal.startswith(f"{FLEET_GOAL_WRITERS} writers")
    text = "\n".join(bench_memory.fleet_markdown(fleet))
    assert "| 600 |" in text and "| 2 | the server |" in text and "| 2 | the ingest |" in text
