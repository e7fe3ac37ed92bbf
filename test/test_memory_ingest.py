"""The fleet's ingest (memory/ingest.py) in front of a real `chroma run` on loopback: robots' writes that arrive
while one is at the server are merged into one, each robot gets the server's answer for its own rows, a merge
the server refuses is sent again apart, a server that cannot be reached is an error robots retry, and a
memory node writing through the ingest loses nothing when the ingest is SIGKILLed (its spool keeps the rows).

Merging is made certain, not left to timing: the first write is held at the server's door until the others
have arrived (the ingest counted them), so they wait in line together.
"""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest
from test_memory import as_stored, planted, publish_planted, start_memory_node, status_where
from test_memory_fleet import chroma  # noqa: F401 - the fixture

from openclaw_vision.memory.ingest import WRITE_PATH, Ingest, _merge_key, _Write
from openclaw_vision.memory.store import StoreRefused, StoreUnavailable, VisualMemory


@pytest.fixture
def ingest(chroma):  # noqa: F811 - the fixture imported above
    """An Ingest in this process in front of the test's server, serving on a thread of its own."""
    ing = Ingest(chroma)
    t = threading.Thread(target=ing.serve_forever, daemon=True)
    t.start()
    yield ing
    ing.close()
    t.join(10)


def _hold_first_write(ingest: Ingest, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """The first write the ingest sends waits until `release` is set; `held` is set once it is waiting."""
    held, release = threading.Event(), threading.Event()
    send = ingest.send

    def holding(method, path, body, headers):
        if WRITE_PATH.match(path) and not held.is_set():
            held.set()
            assert release.wait(60), "the test never released the first write"
        return send(method, path, body, headers)

    monkeypatch.setattr(ingest, "send", holding)
    return held, release


def _wait(pred, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _robots_at_once(ingest: Ingest, monkeypatch, batches: dict[str, object]) -> dict[str, object]:
    """Robot "first" writes and is held at the server's door; then every other robot writes, each from a client
    of its own; once the ingest counted every write, the first is let through. What each robot's add returned
    (its Counts, or the exception)."""
    VisualMemory(ingest.url).add(planted(2, seed=99, source="setup", robot="setup"))  # the collection exists
    held, release = _hold_first_write(ingest, monkeypatch)
    out: dict[str, object] = {}

    def robot(name: str) -> None:
        try:
            out[name] = VisualMemory(ingest.url).add(batches[name], cache=False)
        except Exception as err:
            out[name] = err

    before = ingest.stats["writes_in"]
    threads = {name: threading.Thread(target=robot, args=(name,)) for name in batches}
    threads["first"].start()
    _wait(held.is_set, "the first robot's write never reached the ingest")
    for name, t in threads.items():
        if name != "first":
            t.start()
    _wait(lambda: ingest.stats["writes_in"] - before == len(batches), "the robots' writes never all arrived")
    release.set()
    for t in threads.values():
        t.join(60)
    return out


def test_writes_that_arrive_together_go_to_the_server_as_one_and_every_row_is_there_once(ingest, monkeypatch):
    """Five robots' writes wait while the first is at the server; they reach it as one write, each robot's add
    reports its own rows written, every row is on the server once, and any client of the ingest finds another
    robot's row by its vector (queries pass through)."""
    batches = {name: planted(20, seed=i, source="live", robot=name)
               for i, name in enumerate(["first", "r1", "r2", "r3", "r4", "r5"])}  # fmt: skip
    sent_before = ingest.stats["writes_sent"]
    got = _robots_at_once(ingest, monkeypatch, batches)
    assert {name: getattr(c, "written", c) for name, c in got.items()} == {name: 20 for name in batches}
    # three writes reached the server: the set-up's, the first robot's and the five others' as one
    assert ingest.stats["writes_sent"] - sent_before == 3 and ingest.stats["largest_merge"] == 5
    reader = VisualMemory(ingest.url)
    assert len(reader) == 2 + 6 * 20
    ids = [i for rows in batches.values() for i in rows.ids()]
    assert sorted(reader._collection.get(ids=ids, include=[])["ids"]) == sorted(ids)
    r3 = batches["r3"]
    hit = reader.search(r3.vectors[7], r3.model_id, top_k=1)[0]
    assert (hit.robot, hit.stamp_ns) == ("r3", r3.stamps_ns[7]) and hit.score == pytest.approx(1.0, abs=1e-5)


def test_a_refused_merge_is_sent_again_apart_so_one_robots_bad_row_costs_no_other_row(ingest, monkeypatch):
    """Robot "bad" sends a NaN (the server's validation refuses it) in the same merge as robot "good": the
    ingest sends both again on their own; good's rows are written, bad's add fails as refused for good (the
    server's reason reaches the robot), and nothing of bad's is on the server."""
    bad = planted(10, seed=2, source="live", robot="bad")
    bad.vectors[4, 0] = np.nan
    batches = {"first": planted(10, seed=0, source="live", robot="first"),
               "good": planted(10, seed=1, source="live", robot="good"), "bad": bad}  # fmt: skip
    got = _robots_at_once(ingest, monkeypatch, batches)
    assert got["first"].written == 10 and got["good"].written == 10
    assert isinstance(got["bad"], StoreRefused) and "Non-finite" in str(got["bad"])
    assert ingest.stats["sent_apart"] == 2
    on_server = VisualMemory(ingest.url)._collection.get(ids=batches["good"].ids() + bad.ids(), include=[])["ids"]
    assert sorted(on_server) == sorted(batches["good"].ids())


def _write(ids: list[str], key: tuple = ("k",)) -> _Write:
    return _Write({"ids": ids}, b"", [], key)


def test_only_writes_that_can_be_one_request_merge_and_the_rest_keep_their_order(chroma):  # noqa: F811
    """Which waiting writes one round takes: the oldest and every later one with the same key (fields, headers),
    ids disjoint from those taken, within max_rows; the others stay in line in arrival order."""
    from openclaw_vision.memory.ingest import _Line

    ing = Ingest(chroma, max_rows=6)
    try:
        line = _Line()
        a, b_other_key, c_same_id, d, e_too_big, f = (_write(["a1", "a2"]), _write(["b1"], ("other",)),
                                                      _write(["a2", "c1"]), _write(["d1", "d2"]),
                                                      _write(["e1", "e2", "e3"]), _write(["f1"]))  # fmt: skip
        line.pending = [a, b_other_key, c_same_id, d, e_too_big, f]
        assert ing._take(line) == [a, d, f]
        assert line.pending == [b_other_key, c_same_id, e_too_big]
        assert ing._take(line) == [b_other_key] and ing._take(line) == [c_same_id, e_too_big]
    finally:
        ing.close()


def test_writes_with_other_credentials_or_fields_never_merge():
    """The merge key: a robot's headers (its credentials) and the body's optional fields and embedding encoding
    are part of it; a body that is not a write of rows has none (the server answers it as it came)."""
    body = {"ids": ["x"], "embeddings": ["AAAA"], "metadatas": [{"robot": "a"}], "documents": None, "uris": None}
    k = _merge_key(body, [("authorization", "Bearer a")])
    assert k == _merge_key({**body, "ids": ["y"], "metadatas": [{"robot": "b"}]}, [("authorization", "Bearer a")])
    assert k != _merge_key(body, [("authorization", "Bearer b")])
    assert k != _merge_key({**body, "embeddings": [[0.0]]}, [("authorization", "Bearer a")])
    assert k != _merge_key({**body, "documents": ["d"]}, [("authorization", "Bearer a")])
    assert _merge_key({"ids": ["x", "y"], "embeddings": ["AAAA"]}, []) is None  # lists of unequal length
    assert _merge_key([1, 2], []) is None and _merge_key({"ids": []}, []) is None


def test_a_server_that_went_away_is_an_error_robots_retry_and_the_command_stops_on_sigterm(chroma, tmp_path):  # noqa: F811
    """`openclaw-vision ingest` as a robot's --store: rows go through it; with the server gone a write fails as
    StoreUnavailable (retried by a robot's forwarder, never set aside), and the command ends cleanly on
    SIGTERM, saying what it did."""
    from openclaw_vision.memory.server import start_ingest, start_server

    server, url = start_server(tmp_path / "own-server", log_path=tmp_path / "own-chroma.log")
    child, ingest_url = start_ingest(url, log_path=tmp_path / "ingest.log")
    with child:
        with server:
            robot = VisualMemory(ingest_url)
            assert robot.add(planted(12, seed=5, source="live", robot="A")).written == 12
        with pytest.raises(StoreUnavailable, match="IngestUpstreamUnavailable"):
            robot.add(planted(12, seed=6, source="live", robot="A"))
        assert child.stop(stop_signal=signal.SIGTERM) == 0
    log = child.log_text()
    assert "SIGTERM: stopping" in log and '"writes_in": 1,' in log and '"server_failures": 0' not in log


@pytest.mark.dds
def test_a_memory_node_writing_through_the_ingest_loses_nothing_when_the_ingest_is_killed(
    dds_domain,
    chroma,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    """The memory node's --store is the ingest: rows forwarded through it; the ingest SIGKILLed, rows keep coming
    (spooled, counted, the forwarder's failures counted); the ingest started again on its port: the spool
    drains and every row is on the server exactly once, in the node's robot's name."""
    from openclaw_vision.core.children import free_port
    from openclaw_vision.memory.server import start_ingest
    from openclaw_vision.ros.cyclone import CycloneTransport

    port = free_port()
    rows = planted(40, seed=41, source="live", robot="A")
    args = ["--store", f"http://127.0.0.1:{port}", "--robot", "A", "--spool", str(tmp_path / "spool"),
            "--transport", "cyclonedds", "--diagnostics-period", "0.2", "--flush-period", "0.2",
            "--batch-rows", "8"]  # fmt: skip
    t = CycloneTransport("test_memory_ingest_kill")
    ingest, _ = start_ingest(chroma, port=port, log_path=tmp_path / "ingest1.log")
    children: list = [ingest]

    try:
        node, feats, diag = start_memory_node(t, args, tmp_path / "memory.log", children)[:3]
        for i in range(16):
            publish_planted(t, feats, rows, i)
        status_where(diag, "16 rows forwarded", lambda st: st.get("forwarded") == "16" and st.get("spool_rows") == "0")
        ingest.send(signal.SIGKILL)
        ingest.wait(10)
        for i in range(16, 40):  # the ingest is gone: the node keeps taking rows
            publish_planted(t, feats, rows, i)
        seen = status_where(diag, "40 rows spooled while the ingest is down",
                            lambda s: s.get("spooled") == "40" and int(s.get("forward_failures", 0)) > 0)  # fmt: skip
        assert seen["refused"] == "0" and seen["set_aside"] == "0"
        again, _ = start_ingest(chroma, port=port, log_path=tmp_path / "ingest2.log")
        children.append(again)
        status_where(diag, "the spool drained", lambda st: st.get("spool_rows") == "0" and st.get("forwarded") == "40")
        assert node.stop() == 0, node.log_text()
    finally:
        for child in children:
            child.stop()
        t.close()
    live = as_stored(rows)
    got = VisualMemory(chroma)._collection.get(ids=live.ids(), include=["metadatas"])
    assert sorted(got["ids"]) == sorted(live.ids()) and {m["robot"] for m in got["metadatas"]} == {"A"}
