"""Visual memory: what the robot saw, searchable (rows of /visual_features in a store, top-k by text or vector).

One client interface (`store.VisualMemory`) over one engine, Chroma, in both of its forms: embedded
(`PersistentClient` on a folder, the default, in the data home) and a server (`chroma run`, the same PyPI
package, reached as `http://HOST:PORT`). Queries run on a hot in-memory layer (`hot.HotIndex`: every row
the store holds, an int8 scan over sealed blocks and float32 rescoring, so float32's ranks and scores)
because the engine's per-call overhead and its approximate index lose to a scan at robot scale; the
engine is the persistence and the fleet-wide copy. `bench --mode memory` measures both side by side.

Sits above text/ (a query from a text tower) and bags; ros/ and the tools read it.
"""
