"""Visual memory: what the robot saw, searchable (rows of /visual_features in a store, top-k by text or vector).

One client interface (`store.VisualMemory`) over one engine, Chroma, in two roles:

- embedded (`PersistentClient` on a folder, the default, in the data home): the robot's own store. Queries
  run on a hot in-memory layer (`hot.HotIndex`: every row the store holds, an int8 scan over sealed blocks
  and float32 rescoring, so float32's ranks and scores), because the engine's per-call overhead and its
  approximate index lose to a scan at robot scale.
- server (`chroma run`, the same PyPI package, reached as `http://HOST:PORT`): the fleet's store. A client
  loads nothing; queries go to the server's index with their filters and its top k are rescored exactly on
  their vectors, so every robot's rows are found by the next query and scores mean the same on both
  paths. A memory node writes to it through a spool on its own disk (`spool.Spool`: store and forward).
  Robots reach it through the ingest (`ingest.Ingest`, a process beside the server): Chroma's server cannot
  take overlapping writes, so the ingest sends them one at a time, merged.

Behind `VisualMemory`, one module a role: `table` (the hot layer's rows, their fields and codes), `engine` (the
collection both roles share: model check, batched write, the engine's search rescored) with `folder` (the
embedded role: lock, SQLite check, load) and `remote` (the server role: connect, timeouts, refusals), `write`
(add, remember, retain), and the leaves `rows` and `errors`.

`bench --mode memory` measures both side by side, and a fleet of robot processes on one server.

Sits above text/ (a query from a text tower) and bags; ros/ and the tools read it.
"""
