"""Visual memory: the store seam (embedded and a real `chroma run` server on loopback), index and search.

Random weights make every real match meaningless, so the store tests plant known vectors and check exact
ranks, stamps and cameras; the CLI tests check what a user sees (lines, a resumed index adding nothing).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from openclaw_vision.encoders.base import Embedding
from openclaw_vision.memory.store import (
    DB_FILE,
    Rows,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreMismatch,
    VisualMemory,
)

DIM = 16
T0 = 1_700_000_000_000_000_000


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def planted(n: int = 40, seed: int = 0, source: str = "bag-a", model: str = "tiny@seed0", robot: str = "") -> Rows:
    """n random unit rows over two cameras, stamps 1 ms apart."""
    v = unit(np.random.default_rng(seed).standard_normal((n, DIM)))
    return Rows(v, [T0 + i * 1_000_000 for i in range(n)], [f"cam{i % 2}_optical" for i in range(n)],
                [f"/cam{i % 2}/image_raw" for i in range(n)], model, source, robot=robot)  # fmt: skip


def exact_top(rows: Rows, q: np.ndarray, k: int, mask=None) -> list[int]:
    s = rows.vectors @ q
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return [int(i) for i in np.argsort(-s, kind="stable")[:k]]


def check_store(memory: VisualMemory, rows: Rows) -> None:
    """Ranks, stamps, cameras and scores of planted rows, with and without filters."""
    q = unit(rows.vectors[7] + 0.1 * rows.vectors[3])
    got = memory.search(q, rows.model_id, top_k=5)
    want = exact_top(rows, q, 5)
    assert [m.stamp_ns for m in got] == [rows.stamps_ns[i] for i in want]
    assert got[0].stamp_ns == rows.stamps_ns[7] and got[0].camera == "/cam1/image_raw"
    assert got[0].frame_id == "cam1_optical" and got[0].source == rows.source
    assert got[0].score == pytest.approx(float(rows.vectors[7] @ q), abs=1e-5)
    cams = np.array(rows.cameras)
    got = memory.search(q, rows.model_id, top_k=3, camera="/cam0/image_raw")
    assert [m.stamp_ns for m in got] == [rows.stamps_ns[i] for i in exact_top(rows, q, 3, cams == "/cam0/image_raw")]
    assert {m.camera for m in got} == {"/cam0/image_raw"}
    stamps = np.array(rows.stamps_ns)
    lo, hi = rows.stamps_ns[10], rows.stamps_ns[20]
    got = memory.search(q, rows.model_id, top_k=4, since_ns=lo, until_ns=hi)
    window = (stamps >= lo) & (stamps <= hi)
    assert [m.stamp_ns for m in got] == [rows.stamps_ns[i] for i in exact_top(rows, q, 4, window)]


def test_planted_rows_rank_exactly_and_survive_a_reopen(tmp_path):
    rows = planted()
    with VisualMemory(tmp_path / "store") as memory:
        assert memory.add(rows).written == 40
        check_store(memory, rows)
    with VisualMemory(tmp_path / "store") as memory:  # a new process would see the same: read back from disk
        assert len(memory) == 40 and memory.model_id == "tiny@seed0" and memory.dim == DIM
        check_store(memory, rows)
        again = memory.add(rows)  # the same bag indexed twice adds nothing
        assert (again.written, again.skipped) == (0, 40)
        assert len(memory) == 40


def test_another_model_or_width_is_refused_naming_both(tmp_path):
    with VisualMemory(tmp_path / "store") as memory:
        memory.add(planted(8))
        other = planted(8, model="ViT-B-32@random-seed0")
        with pytest.raises(StoreMismatch, match=r"tiny@seed0.*ViT-B-32@random-seed0"):
            memory.add(other)
        wide = Rows(unit(np.ones((2, DIM * 2))), [1, 2], ["f", "f"], ["/c", "/c"], "tiny@seed0", "x")
        with pytest.raises(StoreMismatch, match=rf"{DIM}-d.*{DIM * 2}-d"):
            memory.add(wide)
        assert memory.refused == 10 and len(memory) == 8

        class OtherTower:
            def encode(self, texts):
                return Embedding(unit(np.ones((len(texts), DIM))), "ViT-L-14@abc")

        with pytest.raises(StoreMismatch, match=r"tiny@seed0.*ViT-L-14@abc"):
            memory.search_text(OtherTower(), "a forklift")


def test_a_query_from_the_text_tower_of_the_same_model(tmp_path):
    rows = planted(12)
    prompt_vec = unit(np.arange(DIM, dtype=np.float32) - 3)

    class Tower:  # a tower whose embedding of the prompt is known: the planted row 5 is it
        def encode(self, texts):
            return Embedding(np.repeat(prompt_vec[None], len(texts), 0), "tiny@seed0")

    vectors = rows.vectors.copy()
    vectors[5] = prompt_vec
    rows = Rows(vectors, rows.stamps_ns, rows.frame_ids, rows.cameras, rows.model_id, rows.source)
    with VisualMemory(tmp_path / "store") as memory:
        memory.add(rows)
        top = memory.search_text(Tower(), "a forklift", top_k=1)
        assert top[0].stamp_ns == rows.stamps_ns[5] and top[0].score == pytest.approx(1.0, abs=1e-5)


def test_the_int8_scan_past_a_block_returns_float32_ranks_and_scores(monkeypatch):
    """Sealed int8 blocks + the float32 tail: the same rows, order and scores as exact top-k, filters too."""
    from openclaw_vision.memory import hot

    monkeypatch.setattr(hot, "BLOCK", 64)
    rows = planted(500, seed=4)
    index = hot.HotIndex(DIM)
    cams = np.array([i % 2 for i in range(500)], np.int32)
    index.add(rows.vectors[:300], np.asarray(rows.stamps_ns[:300]), cams[:300])
    index.add(rows.vectors[300:], np.asarray(rows.stamps_ns[300:]), cams[300:])
    # 448 rows sealed (7 blocks of 64 merged like a binary counter: 256 + 128 + 64), 52 in the float32 tail
    assert [b.stop - b.start for b in index._blocks] == [256, 128, 64]
    rng = np.random.default_rng(5)
    for i in range(0, 500, 25):
        q = unit(rows.vectors[i] + 0.2 * rng.standard_normal(DIM))
        got = index.search(q, 10)
        want = exact_top(rows, q, 10)
        assert got.rows.tolist() == want
        np.testing.assert_allclose(got.scores, rows.vectors[want] @ q, atol=1e-6)
        got = index.search(q, 5, camera_code=1)
        assert got.rows.tolist() == exact_top(rows, q, 5, cams == 1)
    index.keep(np.arange(500) >= 100)  # retention moves rows: blocks sealed again over what is left
    assert [b.stop - b.start for b in index._blocks] == [256, 128] and len(index) == 400


def test_a_locked_store_is_refused_and_left_alone(tmp_path):
    with VisualMemory(tmp_path / "store") as memory:
        memory.add(planted(4))
        with pytest.raises(StoreLocked, match="another process"):
            VisualMemory(tmp_path / "store")
        assert len(memory) == 4
    with VisualMemory(tmp_path / "store") as memory:  # the lock goes with its holder
        assert len(memory) == 4


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_store_is_refused_and_nothing_written_over_it(tmp_path, damage):
    folder = tmp_path / "store"
    with VisualMemory(folder) as memory:
        memory.add(planted(4))
    db = folder / DB_FILE
    data = db.read_bytes()
    db.write_bytes(b"not a database at all" * 100 if damage == "garbage" else data[: len(data) // 3])
    before = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != "openclaw-memory.lock"}
    with pytest.raises(StoreCorrupt, match="nothing was written"):
        VisualMemory(folder)
    after = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != "openclaw-memory.lock"}
    assert after == before


def test_a_file_where_the_store_folder_should_be(tmp_path):
    (tmp_path / "store").write_text("x")
    with pytest.raises(StoreError, match="not a store folder"):
        VisualMemory(tmp_path / "store")


def test_retention_keeps_the_newest_rows(tmp_path):
    rows = planted(30)
    with VisualMemory(tmp_path / "store") as memory:
        memory.add(rows)
        assert memory.retain(max_age_ns=19_000_000) == 10  # newest stamp is 29 ms in: rows 10..29 stay
        assert memory.retain(max_rows=5) == 15
        kept = sorted(m.stamp_ns for m in memory.search(rows.vectors[0], rows.model_id, top_k=50))
        assert kept == list(rows.stamps_ns[25:])
    with VisualMemory(tmp_path / "store") as memory:
        assert len(memory) == 5


def test_the_server_engine_behind_the_same_client(tmp_path):
    """A real `chroma run` on 127.0.0.1: the same checks through http://, rows kept across clients."""
    from openclaw_vision.memory.server import start_server

    rows = planted()
    child, url = start_server(tmp_path / "server-data", log_path=tmp_path / "chroma.log")
    with child:
        with VisualMemory(url) as memory:
            assert memory.add(rows).written == 40
            check_store(memory, rows)
            approx = memory.search(rows.vectors[7], rows.model_id, top_k=1, exact=False)  # the engine's own index
            assert approx[0].stamp_ns == rows.stamps_ns[7]
        with VisualMemory(url) as memory:
            assert len(memory) == 40 and memory.add(rows).written == 0
            with pytest.raises(StoreMismatch):
                memory.add(planted(2, model="other@1"))
    with pytest.raises(StoreError, match="no Chroma server"):
        VisualMemory(url)


# -- index and search, the commands --------------------------------------------------------------------------


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from openclaw_vision import cli

    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_index_a_bag_of_images_then_search_it_with_a_contact_sheet(tiny_model, tiny_text_model, sample_bag,
                                                                   tmp_path, capsys):  # fmt: skip
    import cv2

    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
    from openclaw_vision.runtime.bags import iter_frames
    from openclaw_vision.runtime.pipeline import FramePipeline
    from openclaw_vision.text.encoder import TextEncoder

    store = tmp_path / "store"
    flags = ("--store", store, "--model-path", tiny_model, "--text-model", tiny_text_model)
    code, out, err = _cli(capsys, "index", sample_bag, "--batch", "5", *flags)
    assert code == 0, err
    assert "12 rows written, 0 already stored" in out and "12/12 messages" in err
    code, out, err = _cli(capsys, "index", sample_bag, *flags)  # resumed: nothing added, nothing encoded
    assert code == 0 and "0 rows written, 12 already stored" in out and "holds 12" in out

    sheet = tmp_path / "sheet.png"
    code, out, err = _cli(capsys, "search", "a forklift", "--top-k", "5", "--images", sample_bag, "--sheet", sheet,
                          "--store", store, "--text-model", tiny_text_model)  # fmt: skip
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    # what the same frames and prompt give through the stages by hand
    frames = list(iter_frames(sample_bag))
    pipe = FramePipeline(OnnxRuntimeEncoder(tiny_model))
    image = np.vstack([pipe.run(frames[i : i + 4]).vectors for i in range(0, len(frames), 4)])
    scores = image @ TextEncoder(tiny_text_model).encode(["a forklift"]).vectors[0]
    order = np.argsort(-scores, kind="stable")[:5]
    assert [float(f[3]) for f in lines] == pytest.approx([float(scores[i]) for i in order], abs=2e-4)
    margins = np.diff(np.sort(scores)[::-1][:6])
    if np.all(np.abs(margins) > 1e-3):  # random weights: near-ties may fall either way
        assert [int(f[0]) for f in lines] == [frames[i].stamp_ns for i in order]
    assert {f[1] for f in lines} == {"/camera/image_raw"} and {f[2] for f in lines} == {"camera"}
    png = cv2.imread(str(sheet))
    assert png is not None and png.shape[1] == 4 * 320 and png.shape[0] == 2 * (180 + 44)  # 5 frames: 2 rows of 4


def _features_bag(path, rows: Rows, topic: str = "/visual_features") -> None:
    from openclaw_vision.runtime.bags import FEATURES_TYPE, BagWriter, typestore

    store = typestore()
    msg_type, header = store.types[FEATURES_TYPE], store.types["std_msgs/msg/Header"]
    stamp_type = store.types["builtin_interfaces/msg/Time"]
    with BagWriter(path) as bag:
        for v, s, f in zip(rows.vectors, rows.stamps_ns, rows.frame_ids, strict=True):
            m = msg_type(header=header(stamp=stamp_type(sec=s // 10**9, nanosec=s % 10**9), frame_id=f),
                         model_id=rows.model_id, dim=len(v), embedding=v.astype(np.float32))  # fmt: skip
            bag.write(topic, FEATURES_TYPE, s, bytes(store.serialize_cdr(m, FEATURES_TYPE)))


def test_index_a_features_bag_as_recorded_and_find_the_planted_prompt(tiny_text_model, tmp_path, capsys):
    from openclaw_vision.text.encoder import TextEncoder

    text = TextEncoder(tiny_text_model)
    prompt = text.encode(["a forklift"])
    n = 20
    v = unit(np.random.default_rng(3).standard_normal((n, prompt.dim)))
    v[13] = prompt.vectors[0]  # the frame that is "a forklift"
    rows = Rows(v, [T0 + i * 33_000_000 for i in range(n)], ["cam"] * n, ["/visual_features"] * n, prompt.model_id,
                "x")  # fmt: skip
    bag = tmp_path / "features"
    _features_bag(bag, rows)
    store = tmp_path / "store"
    code, out, err = _cli(capsys, "index", bag, "--store", store)
    assert code == 0 and f"{n} rows written" in out, err
    code, out, err = _cli(capsys, "search", "a forklift", "--top-k", "2", "--store", store, "--text-model",
                          tiny_text_model)  # fmt: skip
    first = out.splitlines()[0].split()
    assert code == 0 and first[:3] == [str(T0 + 13 * 33_000_000), "/visual_features", "cam"]
    assert float(first[3]) == pytest.approx(1.0, abs=1e-4)
    assert len(out.splitlines()) == 2

    other = tmp_path / "other"  # another model's features into the same store: refused and counted
    _features_bag(other, Rows(v[:3], rows.stamps_ns[:3], ["cam"] * 3, ["/f"] * 3, "ViT-B-32@random-seed0", "y"))
    code, out, err = _cli(capsys, "index", other, "--store", store)
    assert "0 rows written, 0 already stored, 3 refused" in out and "ViT-B-32@random-seed0" in err


def test_search_an_empty_or_locked_store_says_so(tiny_text_model, tmp_path, capsys):
    code, _, err = _cli(capsys, "search", "a door", "--store", tmp_path / "s", "--text-model", tiny_text_model)
    assert code == 2 and "the store is empty" in err
    with VisualMemory(tmp_path / "s"):
        code, _, err = _cli(capsys, "search", "a door", "--store", tmp_path / "s", "--text-model", tiny_text_model)
    assert code == 2 and "open in another process" in err


def test_bench_memory_mode_reports_every_size_and_judges_the_goals(monkeypatch):
    """A small run of `bench --mode memory` (no timing is asserted): its rows, recall and goal table."""
    from openclaw_vision.bench import memory as bench_memory
    from openclaw_vision.bench.report import markdown

    monkeypatch.setattr(bench_memory, "STORE_MAX_ROWS", 600)
    res = bench_memory.run_memory(True, sizes=(600, 1200), server=False, fleet=False)
    stored, hot_only = res["memory"]["sizes"]
    assert stored["store"] and not hot_only["store"]
    assert stored["recall_at_10"]["hot"] == 1.0 and hot_only["recall_at_10"]["hot"] == 1.0
    assert 0 <= stored["recall_at_10"]["engine-hnsw"] <= 1 and stored["bytes_on_disk_per_row"] > 512 * 4
    names = {v["name"] for v in res["variants"]}
    assert {"memory/numpy-exact@600", "memory/hot@600", "memory/engine-hnsw@600"} <= names
    goals = res["memory"]["goals"]
    assert len(goals) == 3 and not goals[0]["met"]  # judged at 600 rows, not the 100k the goal names
    text = markdown({"mode": "memory", "host": {"cpu": "x", "cores": 2}, **res, "goals": goals})
    assert "| 1,200 (hot only) |" in text and "query P99 <= 20 ms at 100,000 rows" in text


# -- the memory node, a real process over loopback DDS ---------------------------------------------------------


def memory_status(msgs) -> list[dict]:
    """The memory node's key-value status of each /diagnostics message received."""
    return [{kv.key: kv.value for kv in st.values} for m in msgs for st in m.status
            if st.name == "memory_node: memory"]  # fmt: skip


def publish_row(t, pub, stamp_ns: int, frame_id: str, model_id: str, vector: np.ndarray) -> None:
    """One VisualFeatures sample on `pub` (a publisher of `t`'s): a row as a memory node receives it, its stamp
    and frame_id in the header."""
    from openclaw_vision.ros.types import HEADER, TIME, VISUAL_FEATURES

    header = t.msg(HEADER)(stamp=t.msg(TIME)(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9), frame_id=frame_id)
    pub.publish(t.msg(VISUAL_FEATURES)(header=header, model_id=model_id, dim=len(vector),
                                       embedding=t.float_array(vector)))  # fmt: skip


def publish_planted(t, pub, rows: Rows, i: int) -> None:
    """Row i of `rows` (planted's) on `pub`, as a camera's encoder node would send it."""
    publish_row(t, pub, rows.stamps_ns[i], rows.frame_ids[i], rows.model_id, rows.vectors[i])


def as_stored(rows: Rows, topic: str = "/visual_features") -> Rows:
    """`rows` as a memory node stores what it received of them: the camera is the features topic they came on."""
    return dataclasses.replace(rows, cameras=[topic] * len(rows.vectors))


def status_where(diag, what: str, pred) -> dict:
    """The first memory-node status on `diag` for which `pred` holds, once one has arrived."""
    got = diag.wait_for(lambda msgs: any(pred(st) for st in memory_status(msgs)), what=what)
    return next(st for st in memory_status(got) if pred(st))


def start_memory_node(t, args: list[str], log_path, children: list, stats=None):
    """A memory node as a child process, with a features publisher and a /diagnostics subscription of `t`'s
    matched to it; returns (node, features publisher, diagnostics inbox, subscription)."""
    from dds_helpers import Inbox, wait_until

    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, VISUAL_FEATURES, QoS

    node = NodeProcess([*args, *(["--stats-json", str(stats)] if stats else [])], log_path=log_path, node="memory")
    children.append(node)
    feats = t.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
    diag = Inbox()
    sub = t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1), diag)
    wait_until(lambda: (feats.matched() and sub.matched()) or not node.alive())
    assert node.alive(), node.log_text()
    # our writer matches the node's reader before that reader has matched our writer: a row sent in between is
    # lost (volatile), so wait until the node's status says it sees a publisher
    status_where(diag, "the node's features subscription matched", lambda st: int(st.get("publishers", 0)) >= 1)
    return node, feats, diag, sub


@pytest.mark.dds
def test_memory_node_writes_batches_refuses_other_models_and_survives_sigkill(dds_domain, tmp_path):
    import json
    import signal
    import time

    from openclaw_vision.ros.cyclone import CycloneTransport

    store = tmp_path / "store"
    rows = planted(20, source="live")
    args = ["--store", str(store), "--transport", "cyclonedds", "--diagnostics-period", "0.2", "--flush-period",
            "0.2", "--batch-rows", "8"]  # fmt: skip
    t = CycloneTransport("test_memory")

    def counted(diag, **want):
        return diag.wait_for(lambda msgs: any(all(s.get(k) == str(v) for k, v in want.items())
                                              for s in memory_status(msgs)), what=f"counts {want}")  # fmt: skip

    nodes: list = []

    def start(log_name: str, stats: str | None = None):
        return start_memory_node(t, args, tmp_path / log_name, nodes, stats)

    def send(feats, i: int, vec: np.ndarray, model: str = rows.model_id) -> None:
        publish_row(t, feats, T0 + i * 1_000_000, rows.frame_ids[i % 2], model, vec)

    try:
        node, feats, diag, sub = start("memory1.log")
        for i in range(20):
            send(feats, i, rows.vectors[i])
        counted(diag, written=20)
        send(feats, 50, rows.vectors[0], model="ViT-B-32@random-seed0")  # another model: refused, counted
        send(feats, 51, np.full(DIM, np.nan, np.float32))  # not a vector: rejected
        counted(diag, refused=1, rejected=1, written=20)
        for i in range(20, 25):  # the last rows, then SIGKILL: at most what was not flushed is lost
            send(feats, i, unit(np.ones(DIM) + i))
        node.send(signal.SIGKILL)
        node.wait(10)
        node.stop()
        with VisualMemory(store) as memory:  # the dead node's lock went with it
            assert 20 <= len(memory) <= 25
            assert memory.model_id == rows.model_id
        sub.close()

        stats = tmp_path / "stats.json"
        node, feats, diag, _ = start("memory2.log", str(stats))

        # the same rows again: nothing added. Sent until counted: the test's writer may still be matched with
        # the killed node's reader (its lease has not run out), so the first sends can go nowhere
        def seen_all(msgs) -> bool:
            return any(int(s.get("skipped", 0)) >= 20 for s in memory_status(msgs))

        deadline = time.monotonic() + 60
        while not seen_all(diag.items):
            assert time.monotonic() < deadline, node.log_text()
            for i in range(20):
                send(feats, i, rows.vectors[i])
            time.sleep(0.5)
        assert node.stop() == 0
        st = json.loads(stats.read_text())
        assert st["written"] == 0 and st["skipped"] == st["received"] >= 20 and st["dropped"] == 0
    finally:
        for node in nodes:
            node.stop()
        t.close()
    live = as_stored(rows)
    with VisualMemory(store) as memory:
        check_store_ranks = memory.search(unit(rows.vectors[7] + 0.1 * rows.vectors[3]), rows.model_id, top_k=3)
        want = exact_top(live, unit(rows.vectors[7] + 0.1 * rows.vectors[3]), 3)
        assert [m.stamp_ns for m in check_store_ranks] == [live.stamps_ns[i] for i in want]
        assert {m.camera for m in check_store_ranks} == {"/visual_features"}


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs: a real filesystem that fills. Mounting needs root (as CI and these machines have);
    elsewhere the test is a skip that says so."""
    import subprocess

    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here to fill a disk: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_memory_node_on_a_full_disk_refuses_rows_with_the_reason_and_keeps_running(dds_domain, small_disk, tmp_path):
    """The store's disk fills under the node: past `min_free_mb` the rows are refused and counted with the
    reason on /diagnostics, the node keeps publishing its counters, stops cleanly, and every row it counted as
    written is in the store. (Without the reserve, Chroma's embedded engine on a really full disk sometimes
    raises "database or disk is full" and sometimes never returns from the write, which froze the node.)"""
    import json

    from dds_helpers import Inbox, wait_until

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, VISUAL_FEATURES, QoS

    store, stats = small_disk / "store", tmp_path / "stats.json"
    node = NodeProcess(["--store", str(store), "--transport", "cyclonedds", "--diagnostics-period", "0.2",
                        "--flush-period", "0.2", "--batch-rows", "50", "--min-free-mb", "6.5",
                        "--stats-json", str(stats)],
                       log_path=tmp_path / "memory.log", node="memory")  # fmt: skip
    t = CycloneTransport("test_memory_full")
    try:
        feats = t.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
        diag = Inbox()
        sub = t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1), diag)
        wait_until(lambda: (feats.matched() and sub.matched()) or not node.alive())
        assert node.alive(), node.log_text()

        def mine(msgs) -> list[tuple[str, dict]]:
            return [(st.message, {kv.key: kv.value for kv in st.values}) for m in msgs for st in m.status
                    if st.name == "memory_node: memory"]  # fmt: skip

        def refused(msgs) -> bool:
            return any(int(v.get("refused", 0)) > 0 for _, v in mine(msgs))

        # ~300 rows fill the 1.5 MiB above the reserve. They go in bursts of 50 until the node reports refusals
        # (8 MiB of rows at most): a fixed burst of 600 once arrived short on a loaded CI machine (DDS keeps the
        # last few samples of a burst the reader has not taken), so the disk never reached the reserve.
        vectors = unit(np.random.default_rng(9).standard_normal((4000, 512)))
        for i, vec in enumerate(vectors):
            publish_row(t, feats, T0 + i * 1_000_000, "cam0_optical", "tiny@seed0", vec)
            if i % 50 == 49 and diag.holds(refused, 0.05):
                break
        got = diag.wait_for(refused, what="refused rows on a full disk")
        message = next(m for m, v in mine(got) if int(v.get("refused", 0)) > 0)
        assert "rows refused" in message and "below min_free_mb 6.5" in message, message
        seen = len(diag.items)
        diag.wait(seen + 3)  # still publishing its counters after the disk filled
        assert node.alive(), node.log_text()
        assert node.stop() == 0
    finally:
        node.stop()
        t.close()
    st = json.loads(stats.read_text())
    # every row the node received is accounted for (DDS may not deliver all 600 sent in a burst on a busy machine)
    assert st["refused"] > 0 and st["written"] > 0
    assert st["written"] + st["refused"] + st["dropped"] + st["rejected"] == st["received"]
    with VisualMemory(store) as memory:
        assert len(memory) == st["written"]


def test_memory_node_on_a_multi_camera_nodes_per_camera_topics(dds_domain, tmp_path):
    """`features_topics`: the node takes each camera's features topic; every row's camera is the topic it came
    on, so a search by camera finds that camera's frames only."""
    from dds_helpers import Inbox, wait_until

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, VISUAL_FEATURES, QoS

    topics = ("/cam0/visual_features", "/cam1/visual_features")
    store = tmp_path / "store"
    node = NodeProcess(["--store", str(store), "--transport", "cyclonedds", "--flush-period", "0.2",
                        "--diagnostics-period", "0.2", "--features-topics", *topics],
                       log_path=tmp_path / "memory.log", node="memory")  # fmt: skip
    t = CycloneTransport("test_memory_cams")
    rows = planted(20)
    try:
        pubs = [t.publisher(topic, VISUAL_FEATURES, DEFAULT) for topic in topics]
        diag = Inbox()
        sub = t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1), diag)
        wait_until(lambda: (all(p.matched() for p in pubs) and sub.matched()) or not node.alive())
        assert node.alive(), node.log_text()
        for i in range(20):  # even rows on cam0's topic, odd ones on cam1's
            publish_planted(t, pubs[i % 2], rows, i)
        diag.wait_for(lambda msgs: any(kv.key == "written" and kv.value == "20" for m in msgs for st in m.status
                                       for kv in st.values), what="20 rows written")  # fmt: skip
        assert node.stop() == 0
    finally:
        node.stop()
        t.close()
    q = rows.vectors[7]
    with VisualMemory(store) as memory:
        assert {m.camera for m in memory.search(q, rows.model_id, top_k=20)} == set(topics)
        got = memory.search(q, rows.model_id, top_k=3, camera="/cam1/visual_features")
        want = exact_top(rows, q, 3, np.arange(20) % 2 == 1)
        assert [m.stamp_ns for m in got] == [rows.stamps_ns[i] for i in want] and got[0].stamp_ns == rows.stamps_ns[7]


def test_memory_node_refuses_to_start_on_a_corrupt_store(tmp_path):
    from openclaw_vision.core import children

    folder = tmp_path / "store"
    folder.mkdir()
    (folder / DB_FILE).write_bytes(b"garbage" * 50)
    done = children.run(children.cli("memory", "--store", str(folder), "--transport", "cyclonedds"), timeout=60)
    assert done.returncode == 2 and "not an SQLite database" in done.tail()
    assert (folder / DB_FILE).read_bytes() == b"garbage" * 50


def _query(t, text: str = "", vector=(), model_id: str = "", top_k: int = 3, since_ns: int = 0, until_ns: int = 0,
           camera: str = "", robot: str = ""):  # fmt: skip
    from openclaw_vision.ros.types import QUERY_MEMORY, REQUEST

    return t.msg(QUERY_MEMORY + REQUEST)(text=text, vector=t.float_array(np.asarray(vector, np.float32)),
                                         model_id=model_id, top_k=top_k, since_ns=since_ns, until_ns=until_ns,
                                         camera=camera, robot=robot)  # fmt: skip


def test_memory_node_answers_vector_and_text_queries_and_refuses_bad_ones(dds_domain, tiny_text_model, tmp_path):
    """QueryMemory on the pip path: the node stores published features and answers by vector (exact ranks,
    stamps, camera, scores best first, a time window) and by text (the planted prompt first); a query of
    another width or model, or with both text and a vector, gets ok=false naming the problem, is counted,
    and the node answers the next one."""
    import json
    import time

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.types import DEFAULT, QUERY_MEMORY, VISUAL_FEATURES
    from openclaw_vision.text.encoder import TextEncoder

    text = TextEncoder(tiny_text_model)
    prompt = text.encode(["a forklift"])
    n = 12
    v = unit(np.random.default_rng(5).standard_normal((n, prompt.dim)))
    v[5] = prompt.vectors[0]  # the frame that is "a forklift"
    stamps = [T0 + i * 1_000_000 for i in range(n)]
    stats = tmp_path / "stats.json"
    node = NodeProcess(["--store", str(tmp_path / "store"), "--transport", "cyclonedds", "--flush-period", "0.2",
                        "--batch-rows", "4", "--text-model", str(tiny_text_model), "--stats-json", str(stats)],
                       log_path=tmp_path / "memory.log", node="memory")  # fmt: skip
    t = CycloneTransport("test_memory_query")
    try:
        feats = t.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
        cli = t.client("/query_memory", QUERY_MEMORY)
        deadline = time.monotonic() + 60
        while not (feats.matched() and cli.ready()):
            assert node.alive() and time.monotonic() < deadline, node.log_text()
            time.sleep(0.05)
        for i in range(n):
            publish_row(t, feats, stamps[i], f"f{i}", prompt.model_id, v[i])
        while len(cli.call(_query(t, vector=v[0], top_k=50), 10).stamps_ns) < n:  # written in batches
            assert time.monotonic() < deadline, node.log_text()
            time.sleep(0.1)

        q = unit(v[7] + 0.3 * v[3] + 0.1 * v[9])
        got = cli.call(_query(t, vector=q, top_k=3), 10)
        order = list(np.argsort(-(v @ q))[:3])
        assert got.ok and got.error == "" and got.model_id == prompt.model_id
        assert list(got.stamps_ns) == [stamps[i] for i in order] and list(got.frame_ids) == [f"f{i}" for i in order]
        assert list(got.cameras) == ["/visual_features"] * 3
        assert np.allclose(list(got.scores), (v @ q)[order], atol=1e-5)
        window = cli.call(_query(t, vector=q, top_k=3, since_ns=stamps[8], until_ns=stamps[10]), 10)
        assert list(window.stamps_ns) == [stamps[i] for i in sorted(range(8, 11), key=lambda i: -(v[i] @ q))]

        found = cli.call(_query(t, text="a forklift", top_k=2), 10)
        assert found.ok and found.stamps_ns[0] == stamps[5] and found.scores[0] == pytest.approx(1.0, abs=1e-4)

        wide = cli.call(_query(t, vector=np.ones(prompt.dim + 1)), 10)
        assert not wide.ok and f"{prompt.dim}-d" in wide.error and f"{prompt.dim + 1}-d" in wide.error
        other = cli.call(_query(t, vector=q, model_id="ViT-B-32@random-seed0"), 10)
        assert not other.ok and "ViT-B-32@random-seed0" in other.error and prompt.model_id in other.error
        both = cli.call(_query(t, text="a door", vector=q), 10)
        assert not both.ok and "not both" in both.error and list(both.stamps_ns) == []
        assert cli.call(_query(t, vector=q, top_k=1), 10).stamps_ns[0] == stamps[order[0]]  # still answering
        assert node.stop() == 0, node.log_text()
        st = json.loads(stats.read_text())
        assert st["queries_refused"] == 3 and st["queries"] >= 8 and st["written"] == n
        assert "query refused" in node.log_text()
    finally:
        node.stop()
        t.close()


def test_memory_node_refuses_a_text_tower_of_another_model_and_text_queries_without_one(
    dds_domain, tiny_text_model, tmp_path
):
    from openclaw_vision.core import children
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.memory_node import MemoryNode
    from openclaw_vision.runtime import config
    from openclaw_vision.text.encoder import TextEncoder

    store = tmp_path / "store"
    dim = TextEncoder(tiny_text_model).embed_dim
    with VisualMemory(store) as memory:
        memory.add(Rows(unit(np.ones((1, dim))), [T0], ["f"], ["/visual_features"], "other@seed1", "x"))
    done = children.run(children.cli("memory", "--store", str(store), "--transport", "cyclonedds", "--text-model",
                                     str(tiny_text_model)), timeout=60)  # fmt: skip
    assert done.returncode == 2 and "other@seed1" in done.tail() and "tiny" in done.tail(), done.tail()

    t = CycloneTransport("test_memory_no_text")
    with VisualMemory(store) as memory:
        node = MemoryNode(config.MemoryConfig(store=str(store)), t, memory)  # no text_model: vectors only
        try:
            refused = node.on_query(_query(t, text="a forklift"))
            assert not refused.ok and "text_model" in refused.error
            answered = node.on_query(_query(t, vector=np.ones(dim), model_id="other@seed1"))
            assert answered.ok and list(answered.stamps_ns) == [T0]
            assert node.counters.snapshot()["queries_refused"] == 1
        finally:
            t.close()
