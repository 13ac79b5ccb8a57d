# amaranth: UnusedElaboratable=no
"""The link DMA (``LinkEndpoint``: a port, its SEND sender and the lander of the peer's SENDs) on Amaranth's
simulator: two chips' endpoints wired back to back, each on a device memory of its own.

Each SEND is checked against the spec's semantics: WRITE and int32 ADD land byte for byte, the peer's semaphore
gets ``count`` once after the last byte, and the status is the spec's (OK, REMOTE_WINDOW, LINK_DOWN, LINK_CRC).
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Elaboratable, Module
from amaranth.lib import wiring
from amaranth_run import simulate

from dx1_bringup.gateware.link import LinkWire
from dx1_bringup.gateware.link.endpoint import LinkEndpoint
from dx1_bringup.gateware.memory import AxiMemory
from dx1_bringup.spec import ErrorCode
from dx1_bringup.spec.chip_link import ChipLinkConfig, LinkOp, up_wait_cycles

pytestmark = pytest.mark.amaranth_sim

CONFIG = ChipLinkConfig(latency=4, max_payload=64, credits=3, retries=2)
MEM_BYTES = 16384


class _Chips(Elaboratable):
    """Chips 0 and 1: an endpoint and a device memory each, 0's tx to 1's rx and back."""

    def __init__(self, config: ChipLinkConfig = CONFIG):
        self.ends = [LinkEndpoint(config, semaphores=4, mem_bytes=MEM_BYTES) for _ in range(2)]
        self.mems = [AxiMemory(size=MEM_BYTES, ports=2, banks=1) for _ in range(2)]
        self.wires = [LinkWire(config.latency) for _ in range(2)]

    def elaborate(self, platform):
        m = Module()
        for i in range(2):
            end, mem = self.ends[i], self.mems[i]
            m.submodules[f"end{i}"], m.submodules[f"mem{i}"], m.submodules[f"wire{i}"] = end, mem, self.wires[i]
            wiring.connect(m, end.send_bus, mem.s0)
            wiring.connect(m, end.land_bus, mem.s1)
            wiring.connect(m, end.tx, self.wires[i].tx)
            wiring.connect(m, self.wires[i].rx, self.ends[1 - i].rx)
            m.d.comb += end.sem_grant.eq(end.sem_valid)
        return m


class _Bench:
    def __init__(self, chips: _Chips):
        self.chips = chips
        self.signals: list[tuple[int, int, int]] = []  # (chip, sem, delta) for each granted signal

    def word(self, chip: int, i: int):
        return self.chips.mems[chip].bank_modules[0].array.data[i]

    def write(self, ctx, chip: int, addr: int, data: bytes) -> None:
        for i in range(0, len(data), 8):
            ctx.set(self.word(chip, (addr + i) // 8), int.from_bytes(data[i:i + 8], "little"))

    def read(self, ctx, chip: int, addr: int, length: int) -> bytes:
        return b"".join(ctx.get(self.word(chip, (addr + i) // 8)).to_bytes(8, "little") for i in range(0, length, 8))

    async def tick(self, ctx) -> None:
        await ctx.tick()
        for i, end in enumerate(self.chips.ends):
            if ctx.get(end.sem_valid):
                self.signals.append((i, ctx.get(end.sem_index), ctx.get(end.sem_delta)))

    async def come_up(self, ctx) -> None:
        for end in self.chips.ends:
            ctx.set(end.window_base, 0)
            ctx.set(end.window_limit, MEM_BYTES)
        for _ in range(2 * CONFIG.latency + 2):
            await self.tick(ctx)
        assert all(ctx.get(e.up) for e in self.chips.ends)

    async def send(self, ctx, chip: int, *, src: int, dst: int, length: int, op=LinkOp.WRITE, sem=1, count=1,
                   limit: int = 5000, cut_after: int | None = None) -> tuple[int, int]:
        """A SEND from ``chip`` to its peer; returns its status and the cycles from request to status.

        ``cut_after``: once the port has sent that many more frames, the peer forces its port down.
        """
        end = self.chips.ends[chip]
        armed_at = None if cut_after is None else ctx.get(end.tx_frames) + cut_after
        req = self.chips.ends[chip].request
        for name, value in (("src_addr", src), ("dst_addr", dst), ("length", length), ("op", op), ("sem", sem),
                            ("count", count)):
            ctx.set(getattr(req, name), value)
        ctx.set(req.valid, 1)
        while not ctx.get(req.ready):
            await self.tick(ctx)
        await self.tick(ctx)
        ctx.set(req.valid, 0)
        done = self.chips.ends[chip].done
        ctx.set(done.tready, 1)
        for cycles in range(limit):
            if armed_at is not None and ctx.get(end.tx_frames) == armed_at:
                ctx.set(self.chips.ends[1 - chip].force_down, 1)
                armed_at = None
            if ctx.get(done.tvalid):
                status = ctx.get(done.tdata)
                await self.tick(ctx)
                ctx.set(done.tready, 0)
                return status, cycles
            await self.tick(ctx)
        raise AssertionError(f"SEND from chip {chip} not done after {limit} cycles")


def _bytes(seed: int, n: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_write_lands_byte_for_byte_then_signals_once() -> None:
    """600 bytes (ten frames, the last shorter) 0 -> 1 at an unaligned page offset: chip 1's memory holds them, the
    bytes around are untouched, semaphore 2 of chip 1 gets 5 once, after every frame; and back 1 -> 0."""
    chips = _Chips()
    b = _Bench(chips)
    data = _bytes(1, 600)

    async def bench(ctx) -> None:
        await b.come_up(ctx)
        b.write(ctx, 0, 0x100, data)
        status, _ = await b.send(ctx, 0, src=0x100, dst=0xF00, length=600, sem=2, count=5)
        assert status == ErrorCode.OK
        assert b.read(ctx, 1, 0xF00, 600) == data
        assert b.read(ctx, 1, 0xEF8, 8) == bytes(8) and b.read(ctx, 1, 0xF00 + 600, 8) == bytes(8)
        assert b.signals == [(1, 2, 5)]
        assert ctx.get(chips.ends[0].tx_frames) == 10 and ctx.get(chips.ends[1].rx_frames) == 10
        status, _ = await b.send(ctx, 1, src=0xF00, dst=0x2000, length=600, sem=0, count=0)
        assert status == ErrorCode.OK and b.read(ctx, 0, 0x2000, 600) == data
        assert b.signals == [(1, 2, 5)], "count 0 signals nothing"

    simulate(chips, bench)


def test_add_sums_int32_lanes_wrapping() -> None:
    chips = _Chips()
    b = _Bench(chips)
    rng = np.random.default_rng(2)
    x = rng.integers(-2**31, 2**31, 100, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2**31, 2**31, 100, dtype=np.int64).astype(np.int32)

    async def bench(ctx) -> None:
        await b.come_up(ctx)
        b.write(ctx, 0, 0x0, x.tobytes())
        b.write(ctx, 1, 0x1000, y.tobytes())
        status, _ = await b.send(ctx, 0, src=0x0, dst=0x1000, length=400, op=LinkOp.ADD)
        assert status == ErrorCode.OK
        got = np.frombuffer(b.read(ctx, 1, 0x1000, 400), dtype=np.int32)
        assert np.array_equal(got, (x.astype(np.int64) + y).astype(np.int32))

    simulate(chips, bench)


def test_outside_the_peers_window_lands_nothing() -> None:
    """The destination's last 8 bytes are past chip 1's link window: REMOTE_WINDOW, nothing written, no signal."""
    chips = _Chips()
    b = _Bench(chips)

    async def bench(ctx) -> None:
        await b.come_up(ctx)
        ctx.set(chips.ends[1].window_base, 0x1000)
        ctx.set(chips.ends[1].window_limit, 0x2000)
        b.write(ctx, 0, 0x0, _bytes(3, 256))
        status, _ = await b.send(ctx, 0, src=0x0, dst=0x1F08, length=256)
        assert status == ErrorCode.REMOTE_WINDOW
        assert b.read(ctx, 1, 0x1F08, 248) == bytes(248) and b.signals == []
        status, _ = await b.send(ctx, 0, src=0x0, dst=0x1F00, length=256)
        assert status == ErrorCode.OK and b.read(ctx, 1, 0x1F00, 256) == _bytes(3, 256)

    simulate(chips, bench)


def test_a_port_down_at_either_end_completes_link_down() -> None:
    chips = _Chips()
    b = _Bench(chips)

    async def bench(ctx) -> None:
        await b.come_up(ctx)
        ctx.set(chips.ends[1].force_down, 1)
        for _ in range(2 * CONFIG.latency + 2):
            await b.tick(ctx)
        status, cycles = await b.send(ctx, 0, src=0, dst=0, length=64)
        assert status == ErrorCode.LINK_DOWN and up_wait_cycles(CONFIG) <= cycles < up_wait_cycles(CONFIG) + 5
        ctx.set(chips.ends[1].force_down, 0)
        for _ in range(2 * CONFIG.latency + 2):
            await b.tick(ctx)
        assert (await b.send(ctx, 0, src=0, dst=0, length=64))[0] == ErrorCode.OK

    simulate(chips, bench)


@pytest.mark.parametrize("mended", [0, 1])
def test_a_send_right_after_the_link_is_mended_waits_for_the_handshake(mended: int) -> None:
    """Either end mends the link (force_down cleared) and chip 0 sends in the same cycle: the port is still in its
    handshake, and the SEND waits for it to come up instead of completing LINK_DOWN, as the golden model's ports,
    up at once, have it (a board replay found the RTL's LINK_DOWN there)."""
    chips = _Chips()
    b = _Bench(chips)

    async def bench(ctx) -> None:
        await b.come_up(ctx)
        b.write(ctx, 0, 0, _bytes(6, 64))
        ctx.set(chips.ends[mended].force_down, 1)
        for _ in range(up_wait_cycles(CONFIG)):
            await b.tick(ctx)
        ctx.set(chips.ends[mended].force_down, 0)
        assert (await b.send(ctx, 0, src=0, dst=0x800, length=64))[0] == ErrorCode.OK
        assert b.read(ctx, 1, 0x800, 64) == _bytes(6, 64)

    simulate(chips, bench)


def test_crc_errors_within_the_retries_recover_past_them_link_crc() -> None:
    """Two corruptions (retries 2): OK, the bytes land, CRC_ERRORS 2 and RETRIES 2.  Then three: LINK_CRC, only the
    frames before the corrupted one landed, no signal, the injection used up; the next SEND goes through."""
    chips = _Chips()
    b = _Bench(chips)
    data = _bytes(4, 512)
    a, z = chips.ends

    async def bench(ctx) -> None:
        await b.come_up(ctx)
        b.write(ctx, 0, 0, data)
        ctx.set(a.inject, 1)
        ctx.set(a.inject_count, 2)
        await b.tick(ctx)
        ctx.set(a.inject, 0)
        status, _ = await b.send(ctx, 0, src=0, dst=0x1000, length=512)
        assert status == ErrorCode.OK and b.read(ctx, 1, 0x1000, 512) == data
        assert (ctx.get(z.crc_errors), ctx.get(a.retries)) == (2, 2)
        ctx.set(a.inject, 1)
        ctx.set(a.inject_count, CONFIG.retries + 1)
        await b.tick(ctx)
        ctx.set(a.inject, 0)
        status, _ = await b.send(ctx, 0, src=0, dst=0x2000, length=512, sem=3, count=1)
        assert status == ErrorCode.LINK_CRC
        assert b.read(ctx, 1, 0x2000, 512) == bytes(512), "the first frame was the corrupted one: nothing landed"
        assert (ctx.get(z.crc_errors), ctx.get(a.retries), ctx.get(a.inject_left)) == (5, 4, 0)
        assert b.signals == [(1, 1, 1)]
        status, _ = await b.send(ctx, 0, src=0, dst=0x3000, length=512, sem=3, count=1)
        assert status == ErrorCode.OK and b.read(ctx, 1, 0x3000, 512) == data and b.signals[-1] == (1, 3, 1)

    simulate(chips, bench)


@pytest.mark.parametrize("op", [LinkOp.WRITE, LinkOp.ADD])
def test_a_send_cut_short_is_abandoned_by_the_next(op: LinkOp) -> None:
    """Chip 1 forces its port down after 3 of 8 frames: LINK_DOWN, whole frames only landed (ADD: added) and no
    signal; up again, the peer abandons the unfinished SEND when the next one's first frame comes, which lands
    whole and signals."""
    chips = _Chips()
    b = _Bench(chips)
    rng = np.random.default_rng(5)
    x = rng.integers(-2**31, 2**31, 128, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2**31, 2**31, 128, dtype=np.int64).astype(np.int32)
    frame = CONFIG.max_payload // 4  # int32 lanes a frame
    landed = (y.astype(np.int64) + x).astype(np.int32) if op == LinkOp.ADD else x

    async def bench(ctx) -> None:
        await b.come_up(ctx)
        b.write(ctx, 0, 0, x.tobytes())
        b.write(ctx, 1, 0x1000, y.tobytes())
        status, _ = await b.send(ctx, 0, src=0, dst=0x1000, length=512, op=op, cut_after=3)
        assert status == ErrorCode.LINK_DOWN
        got = np.frombuffer(b.read(ctx, 1, 0x1000, 512), dtype=np.int32).reshape(8, frame)
        whole = [np.array_equal(got[k], landed.reshape(8, frame)[k]) for k in range(8)]
        untouched = [np.array_equal(got[k], y.reshape(8, frame)[k]) for k in range(8)]
        assert all(w or u for w, u in zip(whole, untouched, strict=True)) and 1 <= sum(whole) < 8
        assert b.signals == []
        ctx.set(chips.ends[1].force_down, 0)
        for _ in range(2 * CONFIG.latency + 2):
            await b.tick(ctx)
        status, _ = await b.send(ctx, 0, src=0, dst=0x2000, length=512, op=op, sem=0, count=4)
        assert status == ErrorCode.OK
        assert np.array_equal(np.frombuffer(b.read(ctx, 1, 0x2000, 512), dtype=np.int32), x)
        assert b.signals == [(1, 0, 4)]

    simulate(chips, bench)
