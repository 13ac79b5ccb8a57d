"""The paged KV cache's bookkeeping: fixed-size blocks, a free list, reference counts, prefix caching, copy-on-write.

Device memory for keys and values is cut into ``num_blocks`` blocks of ``block_size`` token positions
(PagedAttention).  A sequence holds a block table: block ``i`` of the table keeps positions
``[i * block_size, (i + 1) * block_size)``, so only a sequence's last block can have unused slots.

* **Reference counts.**  A block may sit in several tables (a shared prompt prefix, or the ``n`` samples of
  one request after :meth:`BlockManager.fork`); it returns to the free list when its count reaches 0.
* **Prefix caching.**  A full block is known by a chained hash of its tokens and of every block before it.
  A freed block keeps its hash and contents until it is reused for something else (the free list is
  least-recently-freed first), so a later sequence with the same prefix takes the block back instead of
  recomputing it.  A hit is verified against the stored tokens, so a hash collision is a miss, never a
  wrong cache entry.
* **Copy-on-write.**  Appending to a block whose count is above 1 first copies it into a fresh block: the
  caller (the model runner) does the copies :meth:`BlockManager.append_slot` returns before the step runs.
* **Swapping.**  ``num_host_blocks`` blocks of host memory take a preempted sequence's blocks
  (:meth:`BlockManager.swap_out`, vLLM's swap-out) and give them back to device blocks later
  (:meth:`BlockManager.swap_in`); the caller moves the data.  A block shared with another sequence is
  copied to the host like any other (the other keeps the device block); at swap-in each full block is first
  looked up in the prefix cache, so one that another sequence still holds (or a freed block not yet reused)
  is shared again and not copied back: sharing survives the swap wherever the block survived on the device.

Nothing here touches a device: the block ids are turned into addresses by the model runner.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from ..spec import ceil_div
from .sequence import Sequence

__all__ = ["BlockManager", "chained_hash"]


def chained_hash(previous: int | None, tokens: tuple[int, ...]) -> int:
    """The prefix-cache key of a full block: its tokens and the key of the block before it (``None`` for the first)."""
    return hash((previous, tokens))


class BlockManager:
    """Allocates KV-cache blocks to sequences.

    Parameters
    ----------
    num_blocks:
        Blocks in the cache (at least 1).
    block_size:
        Token positions per block (at least 1; 16 by default, as vLLM).
    prefix_caching:
        Reuse full blocks of an identical prefix (on by default).
    hash_fn:
        The chained hash of a full block (:func:`chained_hash`); tests give a colliding one.
    num_host_blocks:
        Blocks of host memory for swapped-out sequences (0: no swapping).

    Raises
    ------
    ValueError
        ``num_blocks`` or ``block_size`` is not a positive integer, or ``num_host_blocks`` a negative one.
    """

    def __init__(self, num_blocks: int, block_size: int = 16, *, prefix_caching: bool = True,
                 hash_fn: Callable[[int | None, tuple[int, ...]], Hashable] = chained_hash, num_host_blocks: int = 0):
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if isinstance(num_host_blocks, bool) or not isinstance(num_host_blocks, int) or num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be a non-negative integer, not {num_host_blocks!r}")
        self.num_host_blocks = num_host_blocks
        #: Free host blocks (swap space).
        self._free_host: list[int] = list(range(num_host_blocks - 1, -1, -1))
        self.num_blocks, self.block_size, self.prefix_caching = num_blocks, block_size, prefix_caching
        self._hash = hash_fn
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[Hashable | None] = [None] * num_blocks
        self.block_tokens: list[tuple[int, ...] | None] = [None] * num_blocks
        self._by_hash: dict[Hashable, int] = {}
        #: Free block ids, least recently freed first (the first to be reused for new contents).
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        #: Full blocks looked up in the prefix cache, and how many were found.
        self.prefix_queries = 0
        self.prefix_hits = 0
        #: Blocks a swap-in found on the device (shared again, not copied back from host memory).
        self.swap_in_hits = 0

    # -- state -----------------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    # -- prefix cache ----------------------------------------------------------------------------

    def _hashes(self, seq: Sequence, count: int) -> list[Hashable]:
        """The chained hashes of the sequence's first ``count`` blocks (all full)."""
        hashes: list[Hashable] = []
        previous = None
        for i in range(count):
            previous = self._hash(previous, tuple(seq.block_tokens(i, self.block_size)))
            hashes.append(previous)
        return hashes

    def cached_prefix(self, seq: Sequence) -> list[int]:
        """The blocks of the prefix cache that hold the sequence's leading full blocks, verified against the tokens.

        A block containing the sequence's last token is never a hit: that token is computed again, since
        its logits pick the next token.
        """
        if not self.prefix_caching:
            return []
        usable = (len(seq) - 1) // self.block_size
        hits = []
        for i, h in enumerate(self._hashes(seq, usable)):
            block = self._by_hash.get(h)
            if block is None or self.block_tokens[block] != tuple(seq.block_tokens(i, self.block_size)):
                break
            hits.append(block)
        return hits

    def _register(self, block: int, h: Hashable, tokens: tuple[int, ...]) -> None:
        self.block_hash[block], self.block_tokens[block] = h, tokens
        self._by_hash.setdefault(h, block)

    def _take_free(self) -> int:
        """A free block for new contents: the least recently freed, its old prefix-cache entry dropped."""
        block, _ = self._free.popitem(last=False)
        old = self.block_hash[block]
        if old is not None and self._by_hash.get(old) == block:
            del self._by_hash[old]
        self.block_hash[block] = self.block_tokens[block] = None
        self.ref_counts[block] = 1
        return block

    # -- sequences -------------------------------------------------------------------------------

    def blocks_needed(self, seq: Sequence, tokens: int | None = None) -> int:
        """Free blocks :meth:`allocate` would take for ``seq`` (holding ``tokens`` positions, default its length)."""
        total = ceil_div(len(seq) if tokens is None else tokens, self.block_size)
        hits = self.cached_prefix(seq) if tokens is None else []
        # A hit on a block in use costs nothing; a hit on a freed block takes it off the free list.
        return total - sum(1 for b in hits if self.ref_counts[b] > 0)

    def can_allocate(self, seq: Sequence, tokens: int | None = None) -> bool:
        return self.blocks_needed(seq, tokens) <= self.num_free

    def allocate(self, seq: Sequence, tokens: int | None = None) -> None:
        """Give ``seq`` a block table for its tokens, reusing cached prefix blocks.

        With ``tokens`` (static batching's reservation), blocks for that many positions are taken at once
        and the prefix cache is not used.  Sets ``seq.num_computed_tokens`` and ``seq.num_cached_tokens`` to
        the positions found in the cache.

        Raises
        ------
        ValueError
            The sequence already has blocks, ``tokens`` is shorter than it, or there are not enough free blocks.
        """
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has {len(seq.block_table)} blocks")
        if tokens is not None and tokens < len(seq):
            raise ValueError(f"a reservation of {tokens} positions cannot hold a sequence of {len(seq)} tokens")
        if not self.can_allocate(seq, tokens):
            raise ValueError(f"sequence {seq.seq_id} needs {self.blocks_needed(seq, tokens)} free blocks; "
                             f"{self.num_free} are free")
        hits = self.cached_prefix(seq) if tokens is None else []
        if tokens is None and self.prefix_caching:
            self.prefix_queries += (len(seq) - 1) // self.block_size
            self.prefix_hits += len(hits)
        for block in hits:
            if self.ref_counts[block] == 0:
                del self._free[block]
            self.ref_counts[block] += 1
        table = list(hits)
        full = len(seq) // self.block_size
        hashes = self._hashes(seq, full) if self.prefix_caching else []
        for i in range(len(hits), ceil_div(len(seq) if tokens is None else tokens, self.block_size)):
            block = self._take_free()
            if i < full and self.prefix_caching:
                self._register(block, hashes[i], tuple(seq.block_tokens(i, self.block_size)))
            table.append(block)
        seq.block_table = table
        seq.num_cached_tokens = seq.num_computed_tokens = len(hits) * self.block_size

    def deallocate(self, seq: Sequence) -> None:
        """Drop the sequence's references; blocks that nobody holds go back to the free list (last block first)."""
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] < 0:
                raise AssertionError(f"block {block} was freed more often than it was taken")
            if self.ref_counts[block] == 0:
                self._free[block] = None
        seq.block_table = []
        seq.num_computed_tokens = seq.num_cached_tokens = 0

    def can_append(self, seq: Sequence) -> bool:
        """Whether :meth:`append_slot` can make room for the sequence's last token (a new block, or a copy)."""
        last = (len(seq) - 1) // self.block_size
        if last >= len(seq.block_table):
            return self.num_free >= 1
        if self.ref_counts[seq.block_table[last]] > 1:
            return self.num_free >= 1
        return True

    def append_slot(self, seq: Sequence) -> list[tuple[int, int]]:
        """Make the block of the sequence's last token exist and belong to it alone; returns ``(src, dst)`` copies.

        A shared block is copied (copy-on-write) before the token is written into it.  When the token fills
        its block, the block enters the prefix cache.

        Raises
        ------
        ValueError
            No free block is left (check :meth:`can_append` first).
        """
        if not self.can_append(seq):
            raise ValueError(f"sequence {seq.seq_id} needs a free block to append to; none is free")
        last = (len(seq) - 1) // self.block_size
        copies = []
        if last >= len(seq.block_table):
            seq.block_table.append(self._take_free())
        elif self.ref_counts[seq.block_table[last]] > 1:
            src = seq.block_table[last]
            self.ref_counts[src] -= 1
            dst = self._take_free()
            seq.block_table[last] = dst
            copies.append((src, dst))
        if self.prefix_caching and len(seq) % self.block_size == 0:
            previous = self.block_hash[seq.block_table[last - 1]] if last else None
            tokens = tuple(seq.block_tokens(last, self.block_size))
            self._register(seq.block_table[last], self._hash(previous, tokens), tokens)
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Let ``child`` share every block of ``parent`` (parallel sampling); the first append copies the last one."""
        if child.block_table:
            raise ValueError(f"sequence {child.seq_id} already has blocks")
        for block in parent.block_table:
            self.ref_counts[block] += 1
        child.block_table = list(parent.block_table)
        child.num_computed_tokens = parent.num_computed_tokens

    # -- swapping to host memory -----------------------------------------------------------------

    @property
    def num_free_host(self) -> int:
        return len(self._free_host)

    def can_swap_out(self, seq: Sequence) -> bool:
        return bool(seq.block_table) and len(seq.block_table) <= len(self._free_host)

    def swap_out(self, seq: Sequence) -> list[tuple[int, int]]:
        """Give the sequence host blocks for its device blocks; returns the ``(device, host)`` copies to make
        before any device block is reused.  Its device references are dropped as by :meth:`deallocate` (a
        block another sequence holds stays theirs); its computed positions are kept.

        Raises
        ------
        ValueError
            Too few free host blocks (check :meth:`can_swap_out` first).
        """
        if not self.can_swap_out(seq):
            raise ValueError(f"sequence {seq.seq_id} has {len(seq.block_table)} blocks to swap out; "
                             f"{len(self._free_host)} host blocks are free")
        pairs = [(block, self._free_host.pop()) for block in seq.block_table]
        computed = seq.num_computed_tokens
        self.deallocate(seq)
        seq.host_table, seq.num_computed_tokens = [host for _, host in pairs], computed
        return pairs

    def can_swap_in(self, seq: Sequence) -> bool:
        """Whether the sequence's host blocks, and a block for its next token, fit the free device blocks."""
        return len(seq.host_table) + 1 <= self.num_free

    def swap_in(self, seq: Sequence) -> list[tuple[int, int]]:
        """Device blocks for the sequence's host blocks; returns the ``(host, device)`` copies to make before
        the step runs.  A full computed block whose chained hash and tokens the prefix cache holds takes that
        device block (shared, no copy); the others get fresh blocks and re-enter the prefix cache.

        Raises
        ------
        ValueError
            The sequence is not swapped out, or too few device blocks are free.
        """
        if seq.block_table or not seq.host_table:
            raise ValueError(f"sequence {seq.seq_id} is not swapped out")
        if len(seq.host_table) > self.num_free:
            raise ValueError(f"sequence {seq.seq_id} needs {len(seq.host_table)} free blocks to swap in; "
                             f"{self.num_free} are free")
        full = seq.num_computed_tokens // self.block_size if self.prefix_caching else 0
        hashes = self._hashes(seq, full)
        table, pairs = [], []
        for i, host in enumerate(seq.host_table):
            tokens = tuple(seq.block_tokens(i, self.block_size)) if i < full else None
            block = self._by_hash.get(hashes[i]) if i < full else None
            if block is not None and self.block_tokens[block] == tokens:
                if self.ref_counts[block] == 0:
                    del self._free[block]
                self.ref_counts[block] += 1
                self.swap_in_hits += 1
            else:
                block = self._take_free()
                pairs.append((host, block))
                if tokens is not None:
                    self._register(block, hashes[i], tokens)
            table.append(block)
        self.free_host(seq)
        seq.block_table = table
        return pairs

    def free_host(self, seq: Sequence) -> None:
        """Return the sequence's host blocks (swapped in, or ended while swapped out)."""
        self._free_host.extend(reversed(seq.host_table))
        seq.host_table = []
