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

The roles: `BlockAllocator` (free blocks and reference counts) and `PrefixIndex` (chained hashes of
full blocks) in kv_blocks.py; here `BlockManager` (each sequence's block table, admission, fork and
copy-on-write) over them, and `PagedKVPool` (the K/V storage the tables point into).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import OpenclawError
from .kv_blocks import Block, BlockAllocator, PrefixIndex, chain_hash

__all__ = ["DEFAULT_BLOCK_SIZE", "Block", "BlockManager", "OutOfBlocks", "PagedKVPool", "chain_hash"]

DEFAULT_BLOCK_SIZE = 16


class OutOfBlocks(OpenclawError, RuntimeError):
    """Not enough free KV blocks for a new request; running requests are unaffected."""


@dataclass
class _Seq:
    keys: list[Hashable]
    table: list[int] = field(default_factory=list)


class BlockManager:
    """Sequences' block tables and their admission, over a BlockAllocator and a PrefixIndex (kv_blocks.py).

    The manager decides which blocks a sequence holds and refuses a request before changing anything;
    the allocator counts holders and the index finds full blocks again. `_index` is the one hook a
    backend without content reuse overrides (llamacpp.py).
    """

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self.prefixes = PrefixIndex(self.allocator.blocks, block_size)
        # the roles' own containers (not copies) under the names callers and tests read; never rebound
        self.blocks: list[Block] = self.allocator.blocks
        self.free_ids: deque[int] = self.allocator.free_ids
        self.used_ids: set[int] = self.allocator.used_ids
        self.by_hash: dict[int, int] = self.prefixes.by_hash
        self.seqs: dict[Hashable, _Seq] = {}
        self.pending_copies: list[tuple[int, int]] = []  # (src, dst) K/V block copies to apply

    # --- queries ------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.allocator.num_free

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

    # --- blocks for new content ---------------------------------------------------------------
    def _fresh(self) -> Block:
        """A free block for new content: its old indexed content is forgotten."""
        block = self.allocator.take()
        self.prefixes.forget(block)
        return block

    def _index(self, block: Block, previous: int | None, keys: Sequence[Hashable]) -> int | None:
        """Make a full block findable by content (overridden to do nothing where blocks are never reused)."""
        return self.prefixes.index(block, previous, keys)

    # --- sequence operations -----------------------------------------------------------------
    def allocate(self, seq_id: Hashable, keys: Sequence[Hashable]) -> int:
        """Give a new sequence blocks for all its keys; returns how many leading positions are cached.

        Full leading blocks the prefix index finds (all but the last position's) are shared, not recomputed.
        """
        if seq_id in self.seqs:
            raise ValueError(f"sequence {seq_id!r} already exists")
        keys = list(keys)
        if not keys:
            raise ValueError("a sequence needs at least one position")
        bs = self.block_size
        n_blocks = self.blocks_for(len(keys))
        hits = self.prefixes.lookup(keys)
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        needed = n_blocks - len(hits)
        if needed + revived > self.num_free:
            raise OutOfBlocks(
                f"request needs {needed} new KV blocks ({len(keys)} positions, {len(hits)} blocks shared) "
                f"but only {self.num_free - revived} are free of {len(self.blocks)}"
            )
        seq = _Seq(keys)
        for b in hits:
            self.allocator.hold(b)
            seq.table.append(b)
        for i in range(len(hits), n_blocks):
            block = self._fresh()
            seq.table.append(block.id)
            chunk = keys[i * bs : (i + 1) * bs]
            if len(chunk) == bs:
                self._index(block, self.prefixes.previous(seq.table, i), chunk)
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
                self.allocator.release(current.id)
                seq.table[index] = copy.id
        seq.keys.append(key)
        if offset == self.block_size - 1:  # the block is now full: index it
            block = self.blocks[seq.table[index]]
            self.prefixes.forget(block)
            self._index(block, self.prefixes.previous(seq.table, index), seq.keys[index * self.block_size :])
        return seq.table[index], offset

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """The child starts as the parent (same blocks, shared until either writes)."""
        if child_id in self.seqs:
            raise ValueError(f"sequence {child_id!r} already exists")
        parent = self.seqs[parent_id]
        for b in parent.table:
            self.allocator.hold(b)
        self.seqs[child_id] = _Seq(list(parent.keys), list(parent.table))

    def free(self, seq_id: Hashable) -> None:
        """End (or cancel) a sequence: each of its blocks loses one reference."""
        seq = self.seqs.pop(seq_id)
        for b in reversed(seq.table):
            self.allocator.release(b)

    def take_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies

    # --- invariants ---------------------------------------------------------------------------
    def check(self) -> None:
        """I1 and I4 by the roles that own them; I2 and I3 here, where the block tables are."""
        self.allocator.check()
        refs: dict[int, int] = {}
        for seq_id, seq in self.seqs.items():
            assert len(set(seq.table)) == len(seq.table), f"{seq_id!r} holds a block twice"
            assert len(seq.table) == self.blocks_for(len(seq.keys)), f"{seq_id!r} table/length mismatch"
            for b in seq.table:
                refs[b] = refs.get(b, 0) + 1
        for block in self.blocks:
            assert block.ref_count == refs.get(block.id, 0), f"block {block.id} ref_count {block.ref_count}"
        self.prefixes.check()


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
