"""Which sequences run in the next step: iteration-level continuous batching (Orca, vLLM) and a static baseline.

Every step the :class:`Scheduler` builds one batch under a token budget:

1. **Decode** every running sequence (one token each), oldest first.  A sequence whose next token needs a
   block (a new one, or a copy of a shared one) when none is free preempts the newest running sequence.
   With ``preemption="recompute"`` that one frees its blocks and goes back to the front of the waiting queue
   to be *recomputed* later from its prompt and the tokens it has so far (the prefix cache often makes that
   cheap); with ``preemption="swap"`` its blocks are copied to host memory (vLLM's swap-out) and it waits in
   the swapped queue, its computed positions kept; when the host blocks are full it is recomputed instead.
2. **Swap in** swapped sequences (first swapped back first) while their blocks, and one for the next token,
   fit: each decodes in the same step.  Nothing new is admitted while any is swapped out.
3. **Prefill** waiting sequences in arrival order (FIFO: the head blocks the rest) while the budget, the
   batch size limit and the free blocks allow.

Steps 2 and 3 are skipped in a step that preempted something.

:class:`StaticScheduler` is the request-level baseline (FasterTransformer before Orca): it forms a new
batch only when the previous one has entirely finished, from the requests waiting then, prefills it (in
token-budget-sized steps) before any of it decodes, and reserves every sequence's blocks for its whole
possible length up front.  As FasterTransformer runs a batch (``static``), a sequence that has ended keeps
its slot and its blocks until the batch ends: every decode step computes it again (its last position, whose
keys and values it rewrites unchanged) and drops the result, so a step costs the whole batch's slots however
many still generate (unless a sequence of the batch needs their blocks: then the ended ones free theirs and
stop).  ``static-compact`` is the same batching with ended sequences leaving the batch at once (their blocks
freed, no step spent on them): request-level batching at its most favourable.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .sequence import Sequence, SequenceStatus

__all__ = ["BATCHING", "ScheduledBatch", "ScheduledSeq", "Scheduler", "StaticScheduler"]

#: The ways of batching: iteration-level, and the request-level baseline with and without ended sequences' slots.
BATCHING = ("continuous", "static", "static-compact")


@dataclass(frozen=True)
class ScheduledSeq:
    """Compute ``count`` tokens of ``seq`` from position ``start`` (a prefill if more than one, or the first)."""

    seq: Sequence
    start: int
    count: int

    @property
    def is_prefill(self) -> bool:
        return self.start < self.seq.num_prompt_tokens or self.count > 1


@dataclass
class ScheduledBatch:
    """One step: what to compute, what was preempted to make room, and the block moves to do first, in this
    order: ``swap_out`` (device block, host block), ``swap_in`` (host block, device block), ``copies``
    (device to device, copy-on-write).  ``padding`` is computed with ``items`` and its results dropped: the
    slots of ended sequences that a static batch still runs."""

    items: list[ScheduledSeq] = field(default_factory=list)
    padding: list[ScheduledSeq] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)
    swap_in: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(item.count for item in self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


class Scheduler:
    """Continuous batching over a :class:`~.block_manager.BlockManager`.

    Parameters
    ----------
    blocks:
        The KV cache's block manager.
    max_num_seqs:
        Sequences in one batch at most.
    max_num_batched_tokens:
        The token budget of one step (prefill tokens plus one per decoding sequence).
    max_model_len:
        The model's context: a sequence never holds more tokens.
    preemption:
        ``recompute`` or ``swap`` (to the block manager's host blocks).

    Raises
    ------
    ValueError
        A limit is not a positive integer, the budget cannot hold one whole context, or ``preemption`` is
        neither way (or ``swap`` with no host blocks).
    """

    def __init__(self, blocks: BlockManager, *, max_num_seqs: int = 16, max_num_batched_tokens: int = 512,
                 max_model_len: int = 128, preemption: str = "recompute"):
        for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens),
                            ("max_model_len", max_model_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if max_num_batched_tokens < max_model_len:
            raise ValueError(f"max_num_batched_tokens ({max_num_batched_tokens}) must be at least max_model_len "
                             f"({max_model_len}), or a long prompt could never be prefilled")
        if preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', not {preemption!r}")
        if preemption == "swap" and blocks.num_host_blocks == 0:
            raise ValueError("preemption by swap needs host blocks (num_host_blocks), and the block manager has none")
        self.blocks, self.preemption = blocks, preemption
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.swapped: deque[Sequence] = deque()
        #: Preemptions, and of them those that swapped out; sequences swapped back in.
        self.preemptions = 0
        self.swap_outs = 0
        self.swap_ins = 0

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence (last in FIFO order)."""
        if len(seq) > self.max_model_len:
            raise ValueError(f"a sequence of {len(seq)} tokens does not fit the context of {self.max_model_len}")
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """A sequence forked from a running one (parallel sampling): it runs from the next step on."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a sequence (``reason``: ``stop``, ``length`` or ``abort``) and free its blocks at once."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.SWAPPED:
            self.swapped.remove(seq)
            self.blocks.free_host(seq)
        self.blocks.deallocate(seq)
        seq.status, seq.finish_reason = SequenceStatus.FINISHED, reason

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        self.running.remove(seq)
        seq.preemptions += 1
        self.preemptions += 1
        batch.preempted.append(seq)
        if self.preemption == "swap" and self.blocks.can_swap_out(seq):
            batch.swap_out += self.blocks.swap_out(seq)
            seq.status = SequenceStatus.SWAPPED
            self.swap_outs += 1
            self.swapped.appendleft(seq)  # of one step's, the oldest (preempted last) comes back first
            return
        self.blocks.deallocate(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)

    def _swap_in(self, batch: ScheduledBatch) -> None:
        while (self.swapped and len(batch.items) < self.max_num_seqs
               and batch.num_tokens < self.max_num_batched_tokens and self.blocks.can_swap_in(self.swapped[0])):
            seq = self.swapped.popleft()
            batch.swap_in += self.blocks.swap_in(seq)
            seq.status = SequenceStatus.RUNNING
            self.swap_ins += 1
            self.running.append(seq)
            batch.copies += self.blocks.append_slot(seq)
            batch.items.append(ScheduledSeq(seq, len(seq) - 1, 1))

    def _decode(self, batch: ScheduledBatch) -> None:
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            while not self.blocks.can_append(seq) and seq in self.running:
                self._preempt(self.running[-1], batch)
            if seq not in self.running:
                break
            batch.copies += self.blocks.append_slot(seq)
            batch.items.append(ScheduledSeq(seq, len(seq) - 1, 1))
            i += 1

    def _admit(self, seq: Sequence, batch: ScheduledBatch, budget: int, reserve: int | None) -> bool:
        hits = self.blocks.cached_prefix(seq) if reserve is None else []
        count = len(seq) - len(hits) * self.blocks.block_size
        if count > budget or not self.blocks.can_allocate(seq, reserve):
            return False
        self.blocks.allocate(seq, reserve)
        self.waiting.popleft()
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        batch.items.append(ScheduledSeq(seq, seq.num_computed_tokens, len(seq) - seq.num_computed_tokens))
        return True

    def schedule(self) -> ScheduledBatch:
        """The next step's batch (empty when nothing can run)."""
        batch = ScheduledBatch()
        self._decode(batch)
        if not batch.preempted:
            self._swap_in(batch)
            while self.waiting and not self.swapped and len(batch.items) < self.max_num_seqs:
                if not self._admit(self.waiting[0], batch, self.max_num_batched_tokens - batch.num_tokens, None):
                    break
        return batch


class StaticScheduler(Scheduler):
    """Request-level batching: a batch is formed only when the last one has finished, from the requests waiting
    then (FIFO, up to ``max_num_seqs``, while their blocks fit), each sequence's blocks reserved for its longest
    possible length (prompt plus ``max_tokens``, at most the context).  Its prompts are prefilled in as many
    steps as the token budget needs, with no decoding meanwhile (one context pass, cut to what a step holds);
    then the whole batch decodes until its last sequence ends, and requests that arrive in the meantime wait."""

    def __init__(self, blocks: BlockManager, *, padded: bool = True, **kwargs):
        super().__init__(blocks, **kwargs)
        self.padded = padded
        #: The batch being formed: the sequences chosen for it that are still to be prefilled.
        self._forming: list[Sequence] = []
        #: Sequences of the batch that have ended and still hold their slot and blocks (``padded``).
        self.ended: list[Sequence] = []

    def _batch_over(self) -> bool:
        return not (self._forming or self.running or self.swapped)

    def _free_ended(self) -> None:
        for seq in self.ended:
            self.blocks.deallocate(seq)
        self.ended = []

    # Ended sequences pad the batch with compute, never with memory that a sequence of it needs to go on: they
    # free their blocks before anything is preempted, and while anything waits swapped out.
    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        if self.ended:
            self._free_ended()
            return
        super()._preempt(seq, batch)

    def _decode(self, batch: ScheduledBatch) -> None:
        if self.swapped:
            self._free_ended()
        super()._decode(batch)

    def finish(self, seq: Sequence, reason: str) -> None:
        """As :meth:`Scheduler.finish`; in a padded batch a sequence that ends (not aborted) keeps its slot and
        blocks until the batch's last sequence ends, when all of them are freed."""
        if self.padded and reason != "abort" and seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, reason
            self.ended.append(seq)
        else:
            super().finish(seq, reason)
        if self._batch_over():
            self._free_ended()

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        if self._batch_over():  # (a batch whose last running sequence was preempted ends here)
            self._free_ended()
            self._forming = list(self.waiting)[:self.max_num_seqs]
        self._forming = [seq for seq in self._forming if seq.status is SequenceStatus.WAITING]
        while self._forming and self.waiting and self.waiting[0] is self._forming[0]:
            seq = self.waiting[0]
            reserve = min(self.max_model_len, len(seq) + seq.params.max_tokens - seq.num_completion_tokens)
            if not self._admit(seq, batch, self.max_num_batched_tokens - batch.num_tokens, max(reserve, len(seq))):
                if not batch.items and not self.blocks.can_allocate(seq, max(reserve, len(seq))):
                    self._forming = []  # no room for its reservation: the batch is what has been admitted
                break
            self._forming.pop(0)
        if not batch and not self._forming:
            self._decode(batch)
            if not batch.preempted:
                self._swap_in(batch)
            if batch:
                batch.padding = [ScheduledSeq(seq, seq.num_computed_tokens - 1, 1) for seq in self.ended]
        return batch
