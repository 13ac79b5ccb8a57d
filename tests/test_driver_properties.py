"""Property tests of the driver's own bookkeeping: the allocator, and a queue's ring wrap, tags and phase bits.

Hypothesis draws operation sequences and shrinks a failing one to a minimal example.  The example
counts are small so that ``make test`` stays quick; raise them with ``--hypothesis-profile=long``
(registered below) when changing this code.
"""

from __future__ import annotations

import pytest
from dx1_driver import Allocator, Device, OutOfDeviceMemory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from dx1_bringup.backends import ModelTransport
from dx1_bringup.spec import ErrorCode, Opcode, pack_command

settings.register_profile("long", max_examples=2000, stateful_step_count=200)

BASE, SIZE, ALIGNMENT = 0x1000, 1 << 14, 16


def _round(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


class AllocatorMachine(RuleBasedStateMachine):
    """Random alloc/free sequences against the set of live blocks."""

    blocks = Bundle("blocks")

    def __init__(self) -> None:
        super().__init__()
        self.allocator = Allocator(BASE, SIZE, alignment=ALIGNMENT)
        self.live: dict[int, int] = {}  # address -> rounded size

    def gaps(self) -> list[tuple[int, int]]:
        """The free ranges [start, end) between live blocks, from the live set alone."""
        gaps, at = [], BASE
        for addr in sorted(self.live):
            if addr > at:
                gaps.append((at, addr))
            at = addr + self.live[addr]
        if at < BASE + SIZE:
            gaps.append((at, BASE + SIZE))
        return gaps

    @rule(target=blocks, n=st.integers(1, SIZE // 3), align=st.sampled_from([None, 16, 64, 256, 4096]))
    def alloc(self, n: int, align: int | None):
        need, want = _round(n), align or ALIGNMENT
        try:
            addr = self.allocator.alloc(n, align)
        except OutOfDeviceMemory:
            # Only when truly full: no free gap holds an aligned block of that size.
            for start, end in self.gaps():
                first = -(-start // want) * want
                assert first + need > end, f"refused {n} bytes aligned to {want}, but [{start:#x}, {end:#x}) fits"
            return None
        assert addr % want == 0, f"{addr:#x} is not aligned to {want}"
        assert BASE <= addr and addr + need <= BASE + SIZE
        for other, size in self.live.items():
            assert addr + need <= other or other + size <= addr, f"{addr:#x}+{need} overlaps {other:#x}+{size}"
        self.live[addr] = need
        return addr

    @precondition(lambda self: self.live)
    @rule(addr=consumes(blocks))
    def free(self, addr: int | None):
        if addr is None:
            return
        self.allocator.free(addr)
        del self.live[addr]
        with pytest.raises(ValueError, match="not allocated"):
            self.allocator.free(addr)

    @invariant()
    def bookkeeping_agrees(self):
        assert self.allocator.used == sum(self.live.values())
        # Coalescing: the largest free block is the largest gap between live blocks (no gap is split).
        assert self.allocator.largest_free == max((e - s for s, e in self.gaps()), default=0)

    def teardown(self):
        for addr in list(self.live):
            self.allocator.free(addr)
        assert self.allocator.largest_free == SIZE and self.allocator.used == 0


AllocatorMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_allocator_properties = AllocatorMachine.TestCase


# -- a queue's ring: wrap, tags, phase bits -------------------------------------------------------------

#: A plan step: submit this many commands (positive), wait for this many of the oldest (negative; clipped to what
#: is outstanding), or wait by tag for the outstanding completions a mask picks (a tuple).
step = st.one_of(st.integers(1, 20), st.integers(-20, -1), st.tuples(st.just("tags"), st.integers(0, 255)))


def _command(i: int, tag: int) -> tuple[bytes, int, int]:
    """Command ``i`` with ``tag``, its opcode byte and its status: every seventh has an undefined opcode."""
    if i % 7 == 6:
        return pack_command(Opcode.NOP, tag=tag, raw=0xEE), 0xEE, ErrorCode.BAD_OPCODE
    opcode = Opcode.NOP if i % 2 else Opcode.FENCE
    return pack_command(opcode, tag=tag), opcode, ErrorCode.OK


@pytest.mark.parametrize("ring_log2", [1, 2, 4])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(step, min_size=1, max_size=30), tags=st.integers(1, 40), first=st.integers(0, 0xFFFF))
def test_queue_delivers_every_completion_once_in_order(ring_log2: int, plan: list, tags: int, first: int) -> None:
    """Random submit and wait sizes over many ring wraps: each completion arrives once, at its ring index, with
    its command's tag, opcode and status; a wait by tags takes the oldest outstanding completion of each tag.

    ``tags`` distinct tags are reused in turn, so waits by tag meet duplicates.
    """
    dev = Device(ModelTransport())
    q = dev.queue(0, ring_log2=ring_log2)
    entries = 1 << ring_log2
    outstanding: list[tuple[int, int, int, int]] = []  # (ring index, tag, opcode, status), oldest first
    sent = 0
    for action in plan:
        if isinstance(action, int) and action > 0:
            batch = [_command(sent + k, (first + (sent + k) % tags) & 0xFFFF) for k in range(action)]
            returned = q.submit([cmd for cmd, _op, _st in batch])
            assert returned == [(first + (sent + k) % tags) & 0xFFFF for k in range(action)]
            outstanding += [((sent + k) % entries, int.from_bytes(cmd[2:4], "little"), op, st_)
                            for k, (cmd, op, st_) in enumerate(batch)]
            sent += action
            continue
        if isinstance(action, int):
            n = min(-action, len(outstanding))
            got = q.wait(n, check=False)
            expected, outstanding = outstanding[:n], outstanding[n:]
        else:
            asked = [e[1] for k, e in enumerate(outstanding) if action[1] >> (k % 8) & 1]
            taken: list[int] = []
            for tag in asked:
                taken.append(next(k for k, e in enumerate(outstanding) if e[1] == tag and k not in taken))
            got = q.wait(asked, check=False)
            expected = [outstanding[k] for k in sorted(taken)]
            outstanding = [e for k, e in enumerate(outstanding) if k not in taken]
        assert [(c.index, c.tag, c.opcode, c.status) for c in got] == expected
        assert q.outstanding == len(outstanding)
    rest = q.wait(check=False)
    assert [(c.index, c.tag, c.opcode, c.status) for c in rest] == outstanding
    assert q.outstanding == 0 and q.poll() == 0
