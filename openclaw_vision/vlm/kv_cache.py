"""Paged KV cache: a block allocator with reference counts, prefix discovery and copy-on-write.

A sequence's K/V rows live in fixed-size blocks named by its block table; position p is in
block `table[p // block_size]` at offset `p % block_size`. Several questions about one frame
share the blocks holding the image-and-system prefix, so it is computed (prefilled) once:

- `fork(parent, child)` gives the child the parent's table (every reference count + 1);
  the first write a child makes into a block it shares is copied first (copy-on-write), so
  the parent and other children never see it.
- A block that fills up gets a chained hash (previous block's hash + this block's keys); a new
  sequence whose leading keys match finds those blocks again (`allocate` returns how many
  positions are already computed), even after their last owner ended, until they are reused.

Invariants (checked by `check()`, and by hypothesis tests after every operation):
  I1  every block is either free or used, never both, and free + used = total;
  I2  a used block's ref_count = the number of live block tables holding it (≥ 1); a free
      block's ref_count is 0, so no block is owned after its last sequence ends or is cancelled;
  I3  a table holds no block twice, and covers exactly its sequence's length;
  I4  the hash index only names full blocks whose keys are the ones hashed.
Running out of blocks raises OutOfBlocks before anything changes; other sequences are untouched.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import OpenclawError

DEFAULT_BLOCK_SIZE = 16


class OutOfBlocks(OpenclawError, RuntimeError):
    """Not enough free KV blocks for a new request; running requests are unaffected."""


@dataclass
class Block:
    id: int
    ref_count: int = 0
    hash: int | None = None  # set while the block is full and indexed
    keys: tuple = ()


@dataclass
class _Seq:
    keys: list[Hashable]
    table: list[int] = field(default_factory=list)


def chain_hash(previous: int | None, keys: Sequence[Hashable]) -> int:
    return hash((previous, tuple(keys)))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_ids: deque[int] = deque(range(num_blocks))
        self.used_ids: set[int] = set()
        self.by_hash: dict[int, int] = {}
        self.seqs: dict[Hashable, _Seq] = {}
        self.pending_copies: list[tuple[int, int]] = []  # (src, dst) K/V block copies to apply

    # --- queries ------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def table(self, seq_id: Hashable) -> list[int]:
        return list(self.seqs[seq_id].table)

    def length(self, seq_id: Hashable) -> int:
        return len(self.seqs[seq_id].keys)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def slots(self, seq_id: Hashable, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(block ids, offsets) of positions [start, end) of a sequence."""
        table = np.asarray(self.seqs[seq_id].table, np.int64)
        pos = np.arange(start, end)
        return table[pos // self.block_size], pos % self.block_size

    # --- block transitions --------------------------------------------------------------------
    def _take_free(self, block_id: int | None = None) -> Block:
        if block_id is None:
            block_id = self.free_ids.popleft()
        else:
            self.free_ids.remove(block_id)
        block = self.blocks[block_id]
        assert block.ref_count == 0, f"free block {block_id} has ref_count {block.ref_count}"
        self.used_ids.add(block_id)
        block.ref_count = 1
        return block

    def _forget_hash(self, block: Block) -> None:
        if block.hash is not None and self.by_hash.get(block.hash) == block.id:
            del self.by_hash[block.hash]
        block.hash, block.keys = None, ()

    def _fresh(self) -> Block:
        """A free block for new content: its old indexed content is forgotten."""
        block = self._take_free()
        self._forget_hash(block)
        return block

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        assert block.ref_count > 0, f"releasing block {block_id} with ref_count 0"
        block.ref_count -= 1
        if block.ref_count == 0:
            self.used_ids.remove(block_id)
            self.free_ids.append(block_id)  # keeps its hash: a later identical prefix can revive it

    def _index(self, block: Block, previous: int | None, keys: Sequence[Hashable]) -> int:
        block.hash, block.keys = chain_hash(previous, keys), tuple(keys)
        self.by_hash[block.hash] = block.id
        return block.hash

    def _previous_hash(self, table: list[int], index: int) -> int | None:
        return self.blocks[table[index - 1]].hash if index > 0 else None

    # --- sequence operations -----------------------------------------------------------------
    def allocate(self, seq_id: Hashable, keys: Sequence[Hashable]) -> int:
        """Give a new sequence blocks for all its keys; returns how many leading positions are cached.

        Full leading blocks whose chained hash is indexed (and whose keys match) are shared, not
        recomputed. The block holding the last position is never taken from the index: its
        logits are needed, so it is computed.
        """
        if seq_id in self.seqs:
            raise ValueError(f"sequence {seq_id!r} already exists")
        keys = list(keys)
        if not keys:
            raise ValueError("a sequence needs at least one position")
        bs = self.block_size
        n_blocks = self.blocks_for(len(keys))
        hits: list[int] = []
        previous = None
        for i in range(n_blocks):
            chunk = keys[i * bs : (i + 1) * bs]
            if len(chunk) < bs or (i + 1) * bs >= len(keys):
                break
            h = chain_hash(previous, chunk)
            hit = self.by_hash.get(h)
            if hit is None or self.blocks[hit].keys != tuple(chunk):
                break
            hits.append(hit)
            previous = h
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        needed = n_blocks - len(hits)
        if needed + revived > self.num_free:
            raise OutOfBlocks(
                f"request needs {needed} new KV blocks ({len(keys)} positions, {len(hits)} blocks shared) "
                f"but only {self.num_free - revived} are free of {len(self.blocks)}"
            )
        seq = _Seq(keys)
        for b in hits:
            if self.blocks[b].ref_count == 0:
                self._take_free(b)
            else:
                self.blocks[b].ref_count += 1
            seq.table.append(b)
        for i in range(len(hits), n_blocks):
            block = self._fresh()
            seq.table.append(block.id)
            chunk = keys[i * bs : (i + 1) * bs]
            if len(chunk) == bs:
                previous = self._index(block, self._previous_hash(seq.table, i), chunk)
        self.seqs[seq_id] = seq
        return len(hits) * bs

    def append(self, seq_id: Hashable, key: Hashable) -> tuple[int, int]:
        """Add one position to a sequence; returns its (block, offset). Copies a shared block first."""
        seq = self.seqs[seq_id]
        pos = len(seq.keys)
        index, offset = divmod(pos, self.block_size)
        if offset == 0:  # needs a new block
            if not self.free_ids:
                raise OutOfBlocks(f"no free KV block for position {pos} of sequence {seq_id!r}")
            seq.table.append(self._fresh().id)
        else:
            current = self.blocks[seq.table[index]]
            if current.ref_count > 1:  # shared with the parent or siblings: copy on write
                if not self.free_ids:
                    raise OutOfBlocks(f"no free KV block to copy shared block {current.id} for {seq_id!r}")
                copy = self._fresh()
                self.pending_copies.append((current.id, copy.id))
                self._release(current.id)
                seq.table[index] = copy.id
        seq.keys.append(key)
        if offset == self.block_size - 1:  # the block is now full: index it
            block = self.blocks[seq.table[index]]
            self._forget_hash(block)
            self._index(block, self._previous_hash(seq.table, index), seq.keys[index * self.block_size :])
        return seq.table[index], offset

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """The child starts as the parent (same blocks, shared until either writes)."""
        if child_id in self.seqs:
            raise ValueError(f"sequence {child_id!r} already exists")
        parent = self.seqs[parent_id]
        for b in parent.table:
            self.blocks[b].ref_count += 1
        self.seqs[child_id] = _Seq(list(parent.keys), list(parent.table))

    def free(self, seq_id: Hashable) -> None:
        """End (or cancel) a sequence: each of its blocks loses one reference."""
        seq = self.seqs.pop(seq_id)
        for b in reversed(seq.table):
            self._release(b)

    def take_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies

    # --- invariants ---------------------------------------------------------------------------
    def check(self) -> None:
        free, used = set(self.free_ids), self.used_ids
        assert len(free) == len(self.free_ids), "a block is free twice"
        assert not free & used, f"blocks both free and used: {sorted(free & used)}"
        assert len(free) + len(used) == len(self.blocks), "free + used != total"
        refs: dict[int, int] = {}
        for seq_id, seq in self.seqs.items():
            assert len(set(seq.table)) == len(seq.table), f"{seq_id!r} holds a block twice"
            assert len(seq.table) == self.blocks_for(len(seq.keys)), f"{seq_id!r} table/length mismatch"
            for b in seq.table:
                refs[b] = refs.get(b, 0) + 1
        for block in self.blocks:
            assert block.ref_count == refs.get(block.id, 0), f"block {block.id} ref_count {block.ref_count}"
            assert (block.id in used) == (block.ref_count > 0), f"block {block.id} used/ref_count disagree"
        for h, b in self.by_hash.items():
            assert self.blocks[b].hash == h and len(self.blocks[b].keys) == self.block_size, f"stale hash of {b}"


class PagedKVPool:
    """The K/V storage the block tables point into: (layers, blocks, block_size, kv_heads, head_dim) each."""

    def __init__(self, layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int, xp=np,
                 dtype=np.float32) -> None:  # fmt: skip
        self.xp = xp
        shape = (layers, num_blocks, block_size, kv_heads, head_dim)
        self.k = xp.zeros(shape, dtype)
        self.v = xp.zeros(shape, dtype)
        self.block_size = block_size

    @property
    def nbytes(self) -> int:
        return int(self.k.nbytes + self.v.nbytes)

    def write(self, layer: int, blocks, offsets, k, v) -> None:
        self.k[layer, blocks, offsets] = k
        self.v[layer, blocks, offsets] = v

    def gather(self, layer: int, table, length: int):
        """Contiguous (length, kv_heads, head_dim) K and V of one sequence."""
        k = self.k[layer, table].reshape(-1, *self.k.shape[3:])[:length]
        v = self.v[layer, table].reshape(-1, *self.v.shape[3:])[:length]
        return k, v

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        for src, dst in copies:
            self.k[:, dst] = self.k[:, src]
            self.v[:, dst] = self.v[:, src]
