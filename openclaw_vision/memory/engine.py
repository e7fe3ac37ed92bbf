"""What the two engines a store runs on share: Chroma's collection of one model's rows, its model id and width,
the batched write and the engine's own query (its index's top k rescored exactly).

`Engine` is the base of `folder.Folder` (the embedded store: the robot's folder) and `remote.Server` (a client
of the fleet's server); each says how a call reaches its collection (`call`, `put`) and how the collection is
made. Written once here, the query and the model check behave the same on both, so a score or a refusal means
the same whichever store answered."""

from __future__ import annotations

import json

import numpy as np

from .errors import StoreMismatch
from .rows import Match, source_of

#: the one collection a store keeps its rows in
COLLECTION = "visual_memory"
#: the engine's own index (the fallback query path, and a fleet server's): cheap to build, because building it
#: is what limits Chroma's insert rate (measured here at 10k rows, 240-row batches: ~630 rows/s with its
#: defaults, ~1200 with these); queries run on the exact hot layer anyway
HNSW = {"space": "ip", "ef_construction": 40, "max_neighbors": 8, "ef_search": 64}
#: a server collection's index: the server path answers every query from it, so it is built and searched for
#: recall (recall@10 is a goal: bench --mode memory's fleet section). Measured on the bench's camera walks with its
#: text-like queries (far from every row: consecutive frames are near-duplicates, and a graph of them is easy to
#: get lost in): at 100k rows `ef_search` decided it (M 16, ef_construction 128: 0.912 at 128, 0.988 at 1000, the
#: same P50); at 1M rows the graph's degree did too: M 16 / 128 / 1000 gave 0.669, M 32 / 256 / 2000 0.838; M 48 /
#: 400 then 0.930 at ef_search 4000, 0.955 at 6000, 0.970 at 10000 (P50 9.4 / 10.5 / 12.6 ms, P99 18.4 / 23.0 /
#: 26.4; one fill, 200 queries). The misses are whole queries lost in another part of the graph (0 of 10: 13 of
#: 200 at 4000, 5 at 10000), not near-ties: within 1 % of the exact 10th distance the same runs found 0.95 / 0.965
#: / 0.98. Chroma reads these when a collection is made; a server collection made before keeps its own, except
#: ef_search, which `collection.modify(configuration={"hnsw": {"ef_search": N}})` changes from the server's next
#: start (it loads the index then). The server's writes run in its own process, beside many robots', where the
#: embedded store's insert rate is the robot's own
SERVER_HNSW = {"space": "ip", "ef_construction": 400, "max_neighbors": 48, "ef_search": 10000}


def settings():
    """chromadb's client settings (no telemetry), the same for the embedded client and the server's."""
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)


def where(since_ns: int | None, until_ns: int | None, camera: str | None, robot: str | None) -> dict | None:
    """The filters as the engine's `where` (None: no filter)."""
    clauses: list[dict] = []
    if since_ns is not None:
        clauses.append({"stamp_ns": {"$gte": int(since_ns)}})
    if until_ns is not None:
        clauses.append({"stamp_ns": {"$lte": int(until_ns)}})
    if camera is not None:
        clauses.append({"camera": camera})
    if robot is not None:
        clauses.append({"robot": robot})
    return None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}


class Engine:
    """One store's collection (None until some rows made it) and the model it holds. `refused`: vectors and
    queries of another model or width refused so far."""

    #: the collection's index settings
    hnsw: dict = HNSW

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.client = None
        self.collection = None
        self.model_id: str | None = None
        self.dim: int | None = None
        self.refused = 0

    def call(self, what: str, fn):
        """`fn(collection)`; None when there is no collection yet. `what` names the call in an error."""
        raise NotImplementedError

    def put(self, part: dict) -> None:
        """One engine batch of rows (ids, embeddings, metadatas) into the collection."""
        raise NotImplementedError

    def refresh(self) -> None:
        """Look again for a collection another writer made (a server's; a folder has one writer)."""

    def close(self) -> None:
        """Let go of what the engine holds (a folder's lock)."""

    def read_model(self) -> None:
        meta = (self.collection.metadata or {}) if self.collection is not None else {}
        if "model_id" in meta:
            self.model_id, self.dim = meta["model_id"], int(meta["dim"])

    def make(self, model_id: str, dim: int):
        """The collection (got, or created with this model id and width: the first rows' fix the store's)."""
        return self.client.get_or_create_collection(
            COLLECTION, configuration={"hnsw": dict(self.hnsw)}, metadata={"model_id": model_id, "dim": dim},
            embedding_function=None,
        )  # fmt: skip

    def check_model(self, model_id: str, dim: int, what: str = "vectors") -> None:
        """Refuse `what` of another model id or width than the store's, naming both (no call to a server: a
        server client knows its store's model once some robot made the collection, `refresh`)."""
        if self.model_id is None:
            return
        if model_id != self.model_id or dim != self.dim:
            self.refused += 1
            raise StoreMismatch(
                f"{self.spec} holds {self.dim}-d vectors of model {self.model_id!r}, but these {what} are {dim}-d "
                f"from model {model_id!r}: embeddings of different models are not comparable "
                "(use another --store for another model)"
            )

    def write(self, ids: list[str], vectors: np.ndarray, metas: list[dict]) -> None:
        """Rows into the collection in batches of the engine's largest (it caps a call's size)."""
        step = self.client.get_max_batch_size()
        for s in range(0, len(ids), step):
            self.put({"ids": ids[s : s + step], "embeddings": vectors[s : s + step], "metadatas": metas[s : s + step]})

    def nearest(self, vector, top_k, since_ns, until_ns, camera, robot) -> list[Match]:
        """The engine's index asked for the `top_k` rows within the filters; those rescored exactly on their
        stored vectors (the same float32 inner product as the hot layer, so a score means the same on both
        paths), best first. Asking the index for more than k adds nothing: its distances are exact on what it
        finds, so the best k of more candidates are its best k; what it misses, its search (`ef_search`) missed."""
        filters = where(since_ns, until_ns, camera, robot)

        def ask(c):
            return c.query(query_embeddings=vector[None], n_results=top_k, where=filters,
                           include=["embeddings", "metadatas"])  # fmt: skip

        got = self.call("a query", ask)
        if got is None or not got["ids"] or not got["ids"][0]:
            return []
        scores = np.asarray(got["embeddings"][0], np.float32) @ vector
        out = []
        for rid, m, s in zip(got["ids"][0], got["metadatas"][0], scores.tolist(), strict=True):
            labels = json.loads(m["labels"]) if m.get("labels") else None
            robot_name = m.get("robot", "")
            out.append(Match(int(m["stamp_ns"]), m["camera"], m["frame_id"], float(s), source_of(rid, robot_name),
                             labels, robot_name))  # fmt: skip
        out.sort(key=lambda m: (-m.score, m.stamp_ns))
        return out[:top_k]
