"""The two block-level roles under the paged KV cache's BlockManager (kv_cache.py).

`BlockAllocator` owns which blocks are free and how many block tables hold each used one: every
ownership transition happens there, once, and asserts its invariant (a block is freed only at
ref_count 0). `PrefixIndex` finds full blocks again by content (a chained hash), so a shared prefix is
discovered rather than declared. Both act on blocks only; which sequence holds which block, and
whether a request fits, is the BlockManager's business. Kept apart so that each stays small enough to
check by reading.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass
class Block:
    id: int
    ref_count: int = 0
    hash: int | None = None  # set while the block is full and indexed
    keys: tuple = ()


def chain_hash(previous: int | None, keys: Sequence[Hashable]) -> int:
    """A full block's hash names its whole prefix: the previous block's hash and this block's keys."""
    return hash((previous, tuple(keys)))


class BlockAllocator:
    """The free deque, the used set and the reference counts (invariants I1 and the free half of I2).

    A freed block keeps its hash and keys: the prefix index may revive it until it is taken for new
    content. Callers check `num_free` before taking: taking from an empty pool is a bug, not a refusal.
    """

    def __init__(self, num_blocks: int) -> None:
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_ids: deque[int] = deque(range(num_blocks))
        self.used_ids: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def take(self, block_id: int | None = None) -> Block:
        """A free block (the oldest freed, or `block_id`) becomes used with one holder."""
        if block_id is None:
            block_id = self.free_ids.popleft()
        else:
            self.free_ids.remove(block_id)
        block = self.blocks[block_id]
        assert block.ref_count == 0, f"free block {block_id} has ref_count {block.ref_count}"
        self.used_ids.add(block_id)
        block.ref_count = 1
        return block

    def hold(self, block_id: int) -> None:
        """One more block table holds this block: a cached free one is revived, a used one shared."""
        if self.blocks[block_id].ref_count == 0:
            self.take(block_id)
        else:
            self.blocks[block_id].ref_count += 1

    def release(self, block_id: int) -> None:
        """One block table fewer holds this block; at none it is free again (hash kept for revival)."""
        block = self.blocks[block_id]
        assert block.ref_count > 0, f"releasing block {block_id} with ref_count 0"
        block.ref_count -= 1
        if block.ref_count == 0:
            self.used_ids.remove(block_id)
            self.free_ids.append(block_id)  # keeps its hash: a later identical prefix can revive it

    def check(self) -> None:
        free, used = set(self.free_ids), self.used_ids
        assert len(free) == len(self.free_ids), "a block is free twice"
        assert not free & used, f"blocks both free and used: {sorted(free & used)}"
        assert len(free) + len(used) == len(self.blocks), "free + used != total"
        for block in self.blocks:
            assert (block.id in used) == (block.ref_count > 0), f"block {block.id} used/ref_count disagree"


class PrefixIndex:
    """Chained hash → id of the full block holding those keys (invariant I4).

    It reads the allocator's blocks (the same list) and writes only their hash and keys; an entry is
    dropped when its block is taken for new content, not when the block is freed.
    """

    def __init__(self, blocks: Sequence[Block], block_size: int) -> None:
        self.blocks = blocks
        self.block_size = block_size
        self.by_hash: dict[int, int] = {}

    def lookup(self, keys: Sequence[Hashable]) -> list[int]:
        """Ids of the indexed full blocks that hold `keys`' leading positions, in order.

        The block holding the last position is never returned: its logits are needed, so it is computed.
        """
        bs = self.block_size
        hits: list[int] = []
        previous = None
        for i in range(-(-len(keys) // bs)):
            chunk = keys[i * bs : (i + 1) * bs]
            if len(chunk) < bs or (i + 1) * bs >= len(keys):
                break
            h = chain_hash(previous, chunk)
            hit = self.by_hash.get(h)
            if hit is None or self.blocks[hit].keys != tuple(chunk):
                break
            hits.append(hit)
            previous = h
        return hits

    def previous(self, table: Sequence[int], index: int) -> int | None:
        """The hash the block at `index` of a table chains from (None for the first block)."""
        return self.blocks[table[index - 1]].hash if index > 0 else None

    def index(self, block: Block, previous: int | None, keys: Sequence[Hashable]) -> int:
        block.hash, block.keys = chain_hash(previous, keys), tuple(keys)
        self.by_hash[block.hash] = block.id
        return block.hash

    def forget(self, block: Block) -> None:
        """The block is about to hold other keys: it no longer answers for its old ones."""
        if block.hash is not None and self.by_hash.get(block.hash) == block.id:
            del self.by_hash[block.hash]
        block.hash, block.keys = None, ()

    def check(self) -> None:
        for h, b in self.by_hash.items():
            block = self.blocks[b]
            assert block.hash == h and len(block.keys) == self.block_size, f"stale hash of {b}"
