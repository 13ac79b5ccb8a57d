"""The block manager and the schedulers, with no device: property tests over random request schedules.

A simulated model run writes each computed token into a model of the KV blocks' contents (applying the
step's copy-on-write copies first), so the tests see whether every sequence's blocks really hold its tokens:
prefix caching and copy-on-write are checked by what they must preserve, not by how they work.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dx1_bringup.serving.block_manager import BlockManager
from dx1_bringup.serving.scheduler import Scheduler, StaticScheduler
from dx1_bringup.serving.sequence import SamplingParams, Sequence, SequenceStatus


def _check_refs(bm: BlockManager, live: list[Sequence], swapped=()) -> None:
    counts = Counter(b for seq in live for b in seq.block_table)
    assert [counts.get(b, 0) for b in range(bm.num_blocks)] == bm.ref_counts
    assert bm.num_free == sum(1 for c in bm.ref_counts if c == 0)
    held = [h for seq in swapped for h in seq.host_table]
    assert len(set(held)) == len(held) and len(held) + bm.num_free_host == bm.num_host_blocks
    assert all(not seq.block_table for seq in swapped)


def simulate(requests, *, block_size, num_blocks, static=False, budget=64, max_seqs=4, aborts=(), seed=0,
             host_blocks=None):
    """Run every request to its end on a fake model; return (scheduler, finished sequences, steps).

    ``requests``: (arrival step, prompt tokens, max_tokens, n); ``static``: False (continuous), ``"padded"``
    or ``"compact"``; ``host_blocks``: preemption by swap to that many host blocks (``None``: by recompute).
    Each step asserts the invariants.
    """
    rng = random.Random(seed)
    bm = BlockManager(num_blocks, block_size, num_host_blocks=host_blocks or 0)
    limits = dict(max_num_seqs=max_seqs, max_num_batched_tokens=budget, max_model_len=32,
                  preemption="recompute" if host_blocks is None else "swap")
    sched = StaticScheduler(bm, padded=static == "padded", **limits) if static else Scheduler(bm, **limits)
    contents: dict[int, dict[int, int]] = {}
    host: dict[int, dict[int, int]] = {}
    pending = sorted(requests, key=lambda r: r[0])
    groups: dict[int, int] = {}  # parent seq id -> samples still to fork
    every: list[Sequence] = []
    step = 0
    while pending or sched.has_unfinished:
        while pending and pending[0][0] <= step:
            _, prompt, max_tokens, n = pending.pop(0)
            seq = Sequence(list(prompt), SamplingParams(max_tokens=max_tokens))
            groups[seq.seq_id] = n - 1
            sched.add(seq)
            every.append(seq)
        for victim in [s for s in sched.running + list(sched.swapped) if (s.seq_id % 7, step) in aborts]:
            sched.finish(victim, "abort")
        batch = sched.schedule()
        assert batch.num_tokens <= budget
        ended = sched.ended if static else []
        assert not batch.padding or (static == "padded" and [item.seq for item in batch.padding] == ended)
        live = sched.running + ended
        _check_refs(bm, live, sched.swapped)
        for seq in sched.swapped:  # a swapped sequence keeps its computed positions (and static its reservation)
            assert seq.num_computed_tokens == len(seq) - 1
            assert static or len(seq.host_table) <= seq.num_blocks(block_size)
        # The runner's order: swap-outs, swap-ins, then copy-on-write copies.
        for dev_block, host_block in batch.swap_out:
            host[host_block] = dict(contents.get(dev_block, {}))
        for host_block, dev_block in batch.swap_in:
            contents[dev_block] = dict(host[host_block])
        for src, dst in batch.copies:
            contents[dst] = dict(contents.get(src, {}))
        for item in batch.items:
            seq = item.seq
            assert item.start == seq.num_computed_tokens and item.start + item.count == len(seq)
            assert len(seq.block_table) >= seq.num_blocks(block_size)
            assert static or len(seq.block_table) == seq.num_blocks(block_size)
            for pos in range(item.start, item.start + item.count):
                block = seq.block_table[pos // block_size]
                # Every other holder of a block written to expects the same token in that slot.
                for other in live:
                    for i, b in enumerate(other.block_table):
                        there = i * block_size + pos % block_size
                        if b == block and other is not seq and there < len(other):
                            assert other.token_ids[there] == seq.token_ids[pos], \
                                "a shared block was written with another sequence's token"
                contents.setdefault(block, {})[pos % block_size] = seq.token_ids[pos]
        for item in batch.padding:  # an ended sequence's slot rewrites its last computed position unchanged
            seq, pos = item.seq, item.start
            assert (item.count, pos) == (1, seq.num_computed_tokens - 1)
            assert contents[seq.block_table[pos // block_size]][pos % block_size] == seq.token_ids[pos]
        # Within a step every write precedes every read (the runner writes a layer's keys and values before
        # any attention reads them), so a sequence may use what another one computes in the same step.
        for item in batch.items:
            seq = item.seq
            for pos in range(len(seq)):
                assert contents[seq.block_table[pos // block_size]][pos % block_size] == seq.token_ids[pos]
        for item in batch.items:
            seq = item.seq
            seq.num_computed_tokens = len(seq)
            forks = groups.pop(seq.seq_id, 0)
            for _ in range(forks):
                child = Sequence(list(seq.token_ids), seq.params, num_prompt_tokens=seq.num_prompt_tokens)
                bm.fork(seq, child)
                sched.add_running(child)
                every.append(child)
                child.token_ids.append(rng.randrange(3))
                if child.num_completion_tokens >= child.params.max_tokens or len(child) >= 32:
                    sched.finish(child, "length")
            seq.token_ids.append(rng.randrange(3))
            if seq.num_completion_tokens >= seq.params.max_tokens or len(seq) >= 32:
                sched.finish(seq, "length")
        for child in sched.running:
            if child.num_computed_tokens == len(child):  # a fork's first token is also sampled this step
                raise AssertionError("a running sequence has no token to compute")
        _check_refs(bm, sched.running + (sched.ended if static else []), sched.swapped)
        step += 1
        assert step < 2000, "the schedule made no progress"
    assert bm.num_free == num_blocks and not any(bm.ref_counts), "a block leaked"
    assert bm.num_free_host == bm.num_host_blocks, "a host block leaked"
    return sched, every, step


#: A prompt that many requests start with, so that the prefix cache gets hits.
SHARED = [1, 2, 0, 1, 2, 2, 0, 1, 0, 0, 2, 1, 1, 0, 2, 0, 1, 2, 2, 1]
requests = st.lists(
    st.tuples(st.integers(0, 20),
              st.one_of(st.lists(st.integers(0, 2), min_size=1, max_size=20),
                        st.integers(1, 20).map(lambda k: SHARED[:k])),
              st.integers(1, 12), st.integers(1, 3)),
    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(requests, st.sampled_from([1, 2, 4, 16]), st.integers(0, 20), st.sampled_from([False, "padded", "compact"]),
       st.sets(st.tuples(st.integers(0, 6), st.integers(0, 30)), max_size=4), st.sampled_from([None, 1, 4, 64]))
def test_random_schedules_leak_nothing_and_keep_every_sequence_in_its_blocks(reqs, block_size, spare, static, aborts,
                                                                             host_blocks):
    """Any arrivals, prompts with shared prefixes, n > 1, aborts, a tight cache, preemption by recompute or by swap
    (with host blocks too few or enough): refs stay exact (device and host), contents right, no token lost."""
    num_blocks = 3 * (-(-32 // block_size)) + spare  # a fork group of 3 at full length fits
    sched, every, _ = simulate(reqs, block_size=block_size, num_blocks=num_blocks, static=static, aborts=aborts,
                               host_blocks=host_blocks)
    assert all(seq.status is SequenceStatus.FINISHED for seq in every)
    assert all(seq.finish_reason == "abort" or seq.num_completion_tokens == min(seq.params.max_tokens,
                                                                                  32 - seq.num_prompt_tokens)
               for seq in every if seq.finish_reason != "abort")


def test_a_tight_cache_preempts_the_newest_and_recomputes_it():
    reqs = [(0, [0] * 10 + [i], 20, 1) for i in range(3)]
    sched, every, _ = simulate(reqs, block_size=4, num_blocks=10, max_seqs=3, budget=64)
    assert sched.preemptions > 0
    assert every[0].preemptions == 0  # the oldest is never the victim while a newer one runs
    assert all(seq.num_completion_tokens == 20 for seq in every)


def test_a_tight_cache_swaps_the_newest_out_and_back_in_with_its_computed_positions():
    reqs = [(0, [0] * 10 + [i], 20, 1) for i in range(3)]
    sched, every, _ = simulate(reqs, block_size=4, num_blocks=10, max_seqs=3, budget=64, host_blocks=16)
    assert sched.swap_outs > 0 and sched.swap_ins == sched.swap_outs
    assert sched.preemptions == sched.swap_outs  # enough host blocks: nothing was recomputed
    assert all(seq.num_completion_tokens == 20 for seq in every)
    assert sched.blocks.swap_in_hits > 0  # the shared prompt blocks came back shared, not copied


def test_a_swap_in_shares_the_blocks_another_sequence_still_holds_and_copies_only_the_rest():
    bm = BlockManager(8, 4, num_host_blocks=8)
    parent = Sequence(list(range(9)))  # two full blocks and one token
    bm.allocate(parent)
    parent.num_computed_tokens = 9
    child = Sequence(list(range(9)))
    bm.fork(parent, child)
    child.token_ids.append(42)
    bm.append_slot(child)  # the shared partial block copied for the child
    child.num_computed_tokens = 10
    child.token_ids.append(43)
    shared, own = parent.block_table[:2], child.block_table[2]
    out = bm.swap_out(child)
    assert [d for d, _ in out] == [*shared, own]
    assert bm.ref_counts[shared[0]] == bm.ref_counts[shared[1]] == 1
    back = bm.swap_in(child)
    assert child.block_table[:2] == shared and bm.ref_counts[shared[0]] == bm.ref_counts[shared[1]] == 2
    assert len(back) == 1 and back[0][1] == child.block_table[2] and bm.swap_in_hits == 2
    assert bm.num_free_host == 8


def test_with_the_host_blocks_full_a_swap_falls_back_to_recompute():
    reqs = [(0, [0] * 10 + [i], 20, 1) for i in range(3)]
    sched, every, _ = simulate(reqs, block_size=4, num_blocks=10, max_seqs=3, budget=64, host_blocks=1)
    assert sched.swap_outs == 0 < sched.preemptions
    assert all(seq.num_completion_tokens == 20 for seq in every)


def test_swapping_needs_host_blocks():
    with pytest.raises(ValueError, match=r"preemption by swap needs host blocks \(num_host_blocks\), and the block "
                                         r"manager has none"):
        Scheduler(BlockManager(8, 4), max_model_len=32, max_num_batched_tokens=64, preemption="swap")
    with pytest.raises(ValueError, match="preemption must be 'recompute' or 'swap', not 'evict'"):
        Scheduler(BlockManager(8, 4), max_model_len=32, max_num_batched_tokens=64, preemption="evict")


def test_a_shared_prompt_is_served_from_the_prefix_cache():
    prompt = [1, 2, 0, 1, 2, 2, 0, 1, 0]
    bm = BlockManager(8, 4)
    a, b = Sequence(prompt), Sequence(prompt + [2, 2])
    bm.allocate(a)
    bm.allocate(b)
    assert a.block_table[:2] == b.block_table[:2] and b.num_cached_tokens == 8
    assert bm.ref_counts[a.block_table[0]] == 2 and bm.prefix_hits == 2
    bm.deallocate(a)
    bm.deallocate(b)
    c = Sequence(prompt)
    bm.allocate(c)  # the freed blocks still hold the prefix
    assert c.num_cached_tokens == 8 and bm.prefix_hits == 4


def test_the_last_token_is_never_a_cache_hit():
    bm = BlockManager(4, 4)
    a = Sequence([1, 2, 3, 4])
    bm.allocate(a)
    b = Sequence([1, 2, 3, 4])
    assert bm.cached_prefix(b) == []


def test_a_hash_collision_is_a_miss():
    bm = BlockManager(8, 2, hash_fn=lambda previous, tokens: 0)
    a = Sequence([1, 1, 5])
    bm.allocate(a)
    b = Sequence([2, 2, 5])
    assert bm.cached_prefix(b) == []
    bm.allocate(b)
    assert b.num_cached_tokens == 0 and set(a.block_table).isdisjoint(b.block_table)


def test_appending_to_a_shared_block_copies_it():
    bm = BlockManager(4, 4)
    parent = Sequence([1, 2, 3])
    bm.allocate(parent)
    child = Sequence([1, 2, 3])
    bm.fork(parent, child)
    parent.token_ids.append(7)
    child.token_ids.append(8)
    assert bm.append_slot(parent) != []
    assert bm.append_slot(child) == []  # the last holder keeps the original
    assert parent.block_table != child.block_table and bm.ref_counts.count(1) == 2


def test_static_batching_waits_for_the_whole_batch():
    bm = BlockManager(64, 4)
    sched = StaticScheduler(bm, max_num_seqs=2, max_num_batched_tokens=64, max_model_len=32)
    for n in (1, 5, 1):
        sched.add(Sequence([0, 1], SamplingParams(max_tokens=n)))
    first = sched.schedule()
    assert len(first.items) == 2
    assert bm.num_used == 1 + 2  # 2 + max_tokens positions reserved: 3 and 7, in blocks of 4
    first.items[0].seq.token_ids.append(0)
    sched.finish(first.items[0].seq, "length")
    assert [item.seq for item in sched.schedule().items] == [first.items[1].seq]  # the third one still waits


@pytest.mark.parametrize("padded", [True, False])
def test_a_static_batch_runs_its_ended_slots_until_its_longest_sequence_ends(padded):
    bm = BlockManager(64, 4)
    sched = StaticScheduler(bm, max_num_seqs=2, max_num_batched_tokens=64, max_model_len=32, padded=padded)
    short, long = (Sequence([0, 1], SamplingParams(max_tokens=n)) for n in (1, 3))
    sched.add(short)
    sched.add(long)
    assert len(sched.schedule().items) == 2
    for seq in (short, long):
        seq.num_computed_tokens = 2
        seq.token_ids.append(0)
    sched.finish(short, "length")
    held = bm.num_used
    for _ in range(2):  # the long one's two decode steps
        batch = sched.schedule()
        assert [item.seq for item in batch.items] == [long]
        if padded:  # the short one's slot: its last computed position again, its blocks still held
            assert [(item.seq, item.start, item.count) for item in batch.padding] == [(short, 1, 1)]
            assert bm.num_used == held and short.block_table
        else:
            assert batch.padding == [] and not short.block_table
        long.num_computed_tokens = len(long)
        long.token_ids.append(0)
    sched.finish(long, "length")
    assert bm.num_used == 0 and not sched.ended and not sched.has_unfinished


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_blocks": 0}, "num_blocks must be a positive integer, not 0"),
    ({"num_blocks": 4, "block_size": True}, "block_size must be a positive integer, not True"),
])
def test_bad_block_manager_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BlockManager(**kwargs)


def test_a_budget_below_the_context_is_refused():
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(16\) must be at least max_model_len \(32\)"):
        Scheduler(BlockManager(4), max_num_batched_tokens=16, max_model_len=32)


def test_a_padded_static_batch_gives_up_its_ended_slots_before_it_preempts():
    """Ended sequences holding blocks must not starve the batch: forks that need copy-on-write blocks in a full
    cache (found by the property test above: the schedule made no progress)."""
    reqs = [(0, [1], 1, 1), (0, SHARED[:5], 12, 3), (0, [1], 1, 1), (0, [1], 4, 2)]
    sched, every, _ = simulate(reqs, block_size=16, num_blocks=6, static="padded", host_blocks=4)
    assert all(seq.status is SequenceStatus.FINISHED for seq in every) and not sched.ended
