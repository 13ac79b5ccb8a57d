# amaranth: UnusedElaboratable=no
"""The chip-to-chip link's parts (``dx1_bringup.gateware.link``) on Amaranth's simulator: the word CRC, the wire's
delay, and two ports wired back to back (frames checked against the spec's header layout and ``zlib.crc32``;
credits running out; injected CRC errors sent again; past the retry limit; a port forced down; DONE frames).
"""

from __future__ import annotations

import random
import zlib

import pytest
from amaranth import Elaboratable, Module
from amaranth.lib import wiring
from amaranth_run import simulate

from dx1_bringup.gateware.link import ControlQueue, LinkPort, LinkWire, SendRouter, WordCrc32
from dx1_bringup.spec import Opcode, pack_command
from dx1_bringup.spec.chip_link import ChipLinkConfig, FrameKind, LinkOp, pack_link_header, unpack_link_header

pytestmark = pytest.mark.amaranth_sim

CONFIG = ChipLinkConfig(latency=3, max_payload=64, credits=2, retries=2)


def test_word_crc_is_zlibs_over_little_endian_words() -> None:
    """start, then feed, gives zlib.crc32 of the words' bytes; ``next`` is the value after the word on ``data``."""
    dut = WordCrc32(8)
    rng = random.Random(3)
    words = [rng.getrandbits(64) for _ in range(5)]

    async def bench(ctx) -> None:
        for i, w in enumerate(words):
            ctx.set(dut.data, w)
            ctx.set(dut.start if i == 0 else dut.feed, 1)
            expected_next = zlib.crc32(b"".join(x.to_bytes(8, "little") for x in words[:i + 1]))
            assert ctx.get(dut.next) == expected_next
            await ctx.tick()
            ctx.set(dut.start, 0)
            assert ctx.get(dut.value) == expected_next
        ctx.set(dut.feed, 0)
        ctx.set(dut.restart, 1)
        await ctx.tick()
        assert ctx.get(dut.value) == 0

    simulate(dut, bench)


def test_wire_delays_by_its_latency_and_a_cut_drops_everything() -> None:
    dut = LinkWire(4)

    async def bench(ctx) -> None:
        ctx.set(dut.tx.up, 1)
        ctx.set(dut.tx.valid, 1)
        ctx.set(dut.tx.first, 1)
        ctx.set(dut.tx.data, 0x1234)
        await ctx.tick()
        ctx.set(dut.tx.valid, 0)
        seen = []
        for _ in range(6):
            seen.append((ctx.get(dut.rx.valid), ctx.get(dut.rx.first), ctx.get(dut.rx.data)))
            await ctx.tick()
        assert seen.index((1, 1, 0x1234)) == 3, "four cycles: the beat is on rx in the fourth cycle after tx"
        assert ctx.get(dut.rx.up) == 1
        ctx.set(dut.cut, 1)
        ctx.set(dut.tx.valid, 1)
        for _ in range(5):
            await ctx.tick()
        assert (ctx.get(dut.rx.up), ctx.get(dut.rx.valid)) == (0, 0)

    simulate(dut, bench)


def test_control_queue_sends_nak_then_the_newest_ack_then_done() -> None:
    """Two ACKs and a NAK asked for while the transmitter is busy, and a DONE: NAK first, then only the newer ACK
    (ACKs are cumulative), then DONE with its status; the DONE register is not ready while it holds one."""
    dut = ControlQueue()

    async def bench(ctx) -> None:
        for req, seq_port, seq in ((dut.ack_req, dut.ack_seq, 3), (dut.ack_req, dut.ack_seq, 5),
                                   (dut.nak_req, dut.nak_seq, 6)):
            ctx.set(req, 1)
            ctx.set(seq_port, seq)
            await ctx.tick()
            ctx.set(req, 0)
        ctx.set(dut.done_valid, 1)
        ctx.set(dut.done_seq, 9)
        ctx.set(dut.done_status, 0x10)
        await ctx.tick()
        ctx.set(dut.done_valid, 0)
        assert not ctx.get(dut.done_ready)
        sent = []
        ctx.set(dut.ctrl.ready, 1)
        for _ in range(5):
            if ctx.get(dut.ctrl.valid):
                sent.append(unpack_link_header(ctx.get(dut.ctrl.data).to_bytes(8, "little")))
            await ctx.tick()
        assert [(h["kind"], h["seq"], h["status"]) for h in sent] == [
            (FrameKind.NAK, 6, 0), (FrameKind.ACK, 5, 0), (FrameKind.DONE, 9, 0x10)]
        assert ctx.get(dut.done_ready)

    simulate(dut, bench)


class _Pair(Elaboratable):
    """Ports a and b of two chips, a's tx to b's rx and back, each wire ``config.latency`` cycles long."""

    def __init__(self, config: ChipLinkConfig = CONFIG):
        self.a, self.b = LinkPort(config), LinkPort(config)
        self.ab, self.ba = LinkWire(config.latency), LinkWire(config.latency)

    def elaborate(self, platform):
        m = Module()
        m.submodules.a, m.submodules.b, m.submodules.ab, m.submodules.ba = self.a, self.b, self.ab, self.ba
        wiring.connect(m, self.a.tx, self.ab.tx)
        wiring.connect(m, self.ab.rx, self.b.rx)
        wiring.connect(m, self.b.tx, self.ba.tx)
        wiring.connect(m, self.ba.rx, self.a.rx)
        return m


def _frame(seq_hint: int, payload: list[int], *, first: bool = False, last: bool = False) -> list[int]:
    """A DATA frame's words as the DMA offers them (``seq`` is the transmitter's to fill; here a marker in dst)."""
    header = pack_link_header(FrameKind.DATA, op=LinkOp.WRITE, first=int(first), last=int(last), sem=1, count=1,
                              payload_bytes=8 * len(payload), dst_addr=0x100 * seq_hint, transfer_bytes=4096)
    return [int.from_bytes(header[:8], "little"), int.from_bytes(header[8:], "little"), *payload]


class _Run:
    """Drives a :class:`_Pair`: a's frames in, b's frames consumed, every beat of both wires recorded."""

    def __init__(self, pair: _Pair, frames: list[list[int]]):
        self.pair, self.queue = pair, [list(f) for f in frames]
        self.word = 0
        self.received: list[tuple[dict, list[int]]] = []
        self.beats_ab: list[tuple[int, int]] = []
        self.beats_ba: list[tuple[int, int]] = []
        self.consuming = True
        self.cycle = 0

    async def step(self, ctx) -> None:
        a, b = self.pair.a, self.pair.b
        ctx.set(a.frames.valid, 0)
        if self.consuming and ctx.get(b.frame_valid):
            # Read the oldest kept frame's payload (a cycle a word), then free its buffer.
            header = unpack_link_header(ctx.get(b.header).to_bytes(16, "little"))
            payload = []
            for i in range(header["payload_bytes"] // 8):
                ctx.set(b.pay_addr, i)
                await ctx.tick()
                self._record(ctx)
                payload.append(ctx.get(b.pay_data))
            self.received.append((header, payload))
            ctx.set(b.consume, 1)
        offering = bool(self.queue)
        ctx.set(a.frames.valid, offering)
        if offering:
            frame = self.queue[0]
            ctx.set(a.frames.data, frame[self.word])
            ctx.set(a.frames.last, self.word == len(frame) - 1)
        taken = offering and ctx.get(a.frames.ready)
        await ctx.tick()
        self._record(ctx)
        ctx.set(b.consume, 0)
        if taken:
            self.word += 1
            if self.word == len(self.queue[0]):
                self.queue.pop(0)
                self.word = 0

    def _record(self, ctx) -> None:
        self.cycle += 1
        for wire, beats in ((self.pair.ab.tx, self.beats_ab), (self.pair.ba.tx, self.beats_ba)):
            if ctx.get(wire.valid):
                beats.append((ctx.get(wire.first), ctx.get(wire.data)))

    async def come_up(self, ctx) -> None:
        """Step until both ends see the other's signal-detect (a port drops what it is offered while down)."""
        await self.until(ctx, lambda: ctx.get(self.pair.a.up) and ctx.get(self.pair.b.up), limit=50)

    async def until(self, ctx, done, limit: int = 3000) -> None:
        for _ in range(limit):
            if done():
                return
            await self.step(ctx)
        raise AssertionError(f"not done after {limit} steps")


def _frames_on(beats: list[tuple[int, int]]) -> list[list[int]]:
    frames: list[list[int]] = []
    for first, word in beats:
        if first:
            frames.append([])
        frames[-1].append(word)
    return frames


def _header(frame: list[int]) -> dict[str, int]:
    return unpack_link_header(b"".join(w.to_bytes(8, "little") for w in frame[:2]))


def _crc_ok(frame: list[int]) -> bool:
    return frame[-1] == zlib.crc32(b"".join(w.to_bytes(8, "little") for w in frame[:-1]))


def test_frames_arrive_in_order_with_their_crc_and_are_acknowledged() -> None:
    """Five frames a -> b: b keeps them in order with seq 0..4; every frame on both wires ends in zlib's CRC of its
    words; b answers with ACKs (credits back) and a ends idle with every counter as many as the frames."""
    pair = _Pair()
    rng = random.Random(1)
    sent = [_frame(i, [rng.getrandbits(64) for _ in range(1 + i % 8)], first=i == 0, last=i == 4) for i in range(5)]
    run = _Run(pair, [])

    async def bench(ctx) -> None:
        await run.come_up(ctx)
        run.queue.extend(sent)
        await run.until(ctx, lambda: len(run.received) == 5 and ctx.get(pair.a.idle))
        for _ in range(20):
            await run.step(ctx)
        assert [h["seq"] for h, _ in run.received] == [0, 1, 2, 3, 4]
        assert [p for _, p in run.received] == [f[2:] for f in sent]
        assert [h["dst_addr"] for h, _ in run.received] == [0x100 * i for i in range(5)]
        data = _frames_on(run.beats_ab)
        assert len(data) == 5 and all(_crc_ok(f) for f in data)
        assert [_header(f)["kind"] for f in data] == [FrameKind.DATA] * 5
        assert all(len(f) == 2 + len(s) - 2 + 1 for f, s in zip(data, sent, strict=True))
        control = _frames_on(run.beats_ba)
        assert control and all(len(f) == 2 and _crc_ok(f) for f in control)
        acks = [_header(f) for f in control]
        assert {h["kind"] for h in acks} == {FrameKind.ACK} and acks[-1]["seq"] == 4
        counts = {n: ctx.get(getattr(pair.a, n)) for n in ("tx_frames", "retries")}
        assert counts == {"tx_frames": 5, "retries": 0}
        assert ctx.get(pair.b.rx_frames) == 5 and ctx.get(pair.b.crc_errors) == 0

    simulate(pair, bench)


def test_credits_run_out_while_the_receiver_keeps_its_buffers() -> None:
    """With b consuming nothing, a sends exactly ``credits`` frames and counts credit stalls; once b consumes, the
    rest follow."""
    pair = _Pair()
    sent = [_frame(i, [i] * 8) for i in range(5)]
    run = _Run(pair, [])
    run.consuming = False

    async def bench(ctx) -> None:
        await run.come_up(ctx)
        run.queue.extend(sent)
        for _ in range(200):
            await run.step(ctx)
        assert len(_frames_on(run.beats_ab)) == CONFIG.credits
        stalls = ctx.get(pair.a.credit_stalls)
        assert stalls > 100
        run.consuming = True
        await run.until(ctx, lambda: len(run.received) == 5)
        assert [p[0] for _, p in run.received] == [0, 1, 2, 3, 4]
        assert len(_frames_on(run.beats_ab)) == 5, "nothing was sent again"

    simulate(pair, bench)


def test_injected_crc_errors_are_naked_and_sent_again() -> None:
    """Two corrupted sendings of frame 1, the next SEND's first frame (within the retry limit of 2): b counts two CRC
    errors and NAKs them, a acts on both NAKs (RETRIES 2) sending frame 1 again, alone (a first frame goes alone:
    frames 2 and 3 go once it is acknowledged, so nothing else is sent twice), and b keeps each frame once, in order;
    the injection has counted down to 0."""
    pair = _Pair()
    sent = [_frame(i, [100 + i] * 4, first=i in (0, 1)) for i in range(4)]
    run = _Run(pair, [])

    async def bench(ctx) -> None:
        await run.come_up(ctx)
        run.queue.extend(sent[:1])
        await run.until(ctx, lambda: len(run.received) == 1)
        ctx.set(pair.a.inject, 1)
        ctx.set(pair.a.inject_count, 2)
        await run.step(ctx)
        ctx.set(pair.a.inject, 0)
        run.queue.extend(sent[1:])
        await run.until(ctx, lambda: len(run.received) == 4 and ctx.get(pair.a.idle))
        assert [h["seq"] for h, _ in run.received] == [0, 1, 2, 3]
        assert [p[0] for _, p in run.received] == [100, 101, 102, 103]
        assert ctx.get(pair.b.crc_errors) == 2
        assert ctx.get(pair.a.retries) == 2 and ctx.get(pair.a.tx_frames) == 4
        assert not ctx.get(pair.a.failed) and ctx.get(pair.a.inject_left) == 0
        data = _frames_on(run.beats_ab)
        bad = [f for f in data if not _crc_ok(f)]
        assert len(bad) == 2 and {_header(f)["seq"] for f in bad} == {1}
        assert [_header(f)["seq"] for f in data] == [0, 1, 1, 1, 2, 3]
        naks = [_header(f) for f in _frames_on(run.beats_ba)]
        assert [h["seq"] for h in naks if h["kind"] == FrameKind.NAK] == [1, 1]

    simulate(pair, bench)


def test_past_the_retry_limit_the_port_fails_and_drops_the_frames() -> None:
    """Frame 0 corrupted 1 + retries times: a raises ``failed``, drops it and the frames behind it (b keeps none), takes
    and drops words offered meanwhile; ``abort`` clears it, and the next SEND's first frame goes through."""
    pair = _Pair()
    run = _Run(pair, [])

    async def bench(ctx) -> None:
        await run.come_up(ctx)
        ctx.set(pair.a.inject, 1)
        ctx.set(pair.a.inject_count, CONFIG.retries + 1)
        await run.step(ctx)
        ctx.set(pair.a.inject, 0)
        run.queue.extend(_frame(i, [7] * 8, first=i == 0) for i in range(2))
        await run.until(ctx, lambda: ctx.get(pair.a.failed))
        assert ctx.get(pair.b.crc_errors) == CONFIG.retries + 1
        await run.until(ctx, lambda: not run.queue)
        for _ in range(60):
            await run.step(ctx)
        assert run.received == [] and ctx.get(pair.a.failed) and ctx.get(pair.a.idle)
        assert ctx.get(pair.a.retries) == CONFIG.retries and ctx.get(pair.a.inject_left) == 0
        ctx.set(pair.a.abort, 1)
        await run.step(ctx)
        ctx.set(pair.a.abort, 0)
        assert not ctx.get(pair.a.failed)
        run.queue.append(_frame(9, [9] * 2, first=True, last=True))
        await run.until(ctx, lambda: len(run.received) == 1)
        header, payload = run.received[0]
        assert (header["dst_addr"], payload) == (0x900, [9, 9])

    simulate(pair, bench)


def test_a_port_forced_down_takes_both_ends_down_and_sends_nothing() -> None:
    """Forcing b down: both ends report down within the wire's latency, nothing goes on either wire, and a drops what
    it is offered; released, both come up and frames flow again."""
    pair = _Pair()
    run = _Run(pair, [])

    async def bench(ctx) -> None:
        for _ in range(10):
            await run.step(ctx)
        assert ctx.get(pair.a.up) and ctx.get(pair.b.up)
        ctx.set(pair.b.force_down, 1)
        for _ in range(2 * CONFIG.latency + 2):
            await run.step(ctx)
        assert not ctx.get(pair.a.up) and not ctx.get(pair.b.up)
        before = len(run.beats_ab)
        run.queue.extend(_frame(i, [i] * 8) for i in range(3))
        await run.until(ctx, lambda: not run.queue)
        for _ in range(30):
            await run.step(ctx)
        assert len(run.beats_ab) == before and run.received == [] and ctx.get(pair.a.idle)
        ctx.set(pair.b.force_down, 0)
        for _ in range(2 * CONFIG.latency + 2):
            await run.step(ctx)
        assert ctx.get(pair.a.up) and ctx.get(pair.b.up)
        run.queue.append(_frame(5, [5], first=True))
        await run.until(ctx, lambda: len(run.received) == 1)

    simulate(pair, bench)


def test_done_frames_reach_the_senders_dma() -> None:
    """b's DMA sends DONE(seq 7, status 0x21): a sees it once with both fields."""
    pair = _Pair()
    seen = []

    async def bench(ctx) -> None:
        ctx.set(pair.b.done_req_valid, 1)
        ctx.set(pair.b.done_req_seq, 7)
        ctx.set(pair.b.done_req_status, 0x21)
        assert ctx.get(pair.b.done_req_ready)
        await ctx.tick()
        ctx.set(pair.b.done_req_valid, 0)
        for _ in range(30):
            if ctx.get(pair.a.done):
                seen.append((ctx.get(pair.a.done_seq), ctx.get(pair.a.done_status)))
            await ctx.tick()
        assert seen == [(7, 0x21)]

    simulate(pair, bench)


def test_a_first_frame_goes_alone_until_acknowledged() -> None:
    """With b consuming nothing, a sends a SEND's first frame and nothing after it, though credits remain; once b
    consumes (ACK), the rest follow."""
    pair = _Pair(ChipLinkConfig(latency=3, max_payload=64, credits=4, retries=2))
    run = _Run(pair, [])
    run.consuming = False

    async def bench(ctx) -> None:
        await run.come_up(ctx)
        run.queue.extend(_frame(i, [i] * 8, first=i == 0) for i in range(3))
        for _ in range(150):
            await run.step(ctx)
        assert [_header(f)["seq"] for f in _frames_on(run.beats_ab)] == [0]
        run.consuming = True
        await run.until(ctx, lambda: len(run.received) == 3)
        assert [_header(f)["seq"] for f in _frames_on(run.beats_ab)] == [0, 1, 2]

    simulate(pair, bench)


def test_a_wire_cut_in_one_direction_takes_both_ends_down() -> None:
    """Cutting only the wire from a to b: b loses a's signal, stops saying it hears a, and a goes down too; mended,
    both come up again (a round trip: each end must hear that it is heard)."""
    pair = _Pair()
    run = _Run(pair, [])

    async def bench(ctx) -> None:
        await run.come_up(ctx)
        ctx.set(pair.ab.cut, 1)
        for _ in range(2 * CONFIG.latency + 2):
            await run.step(ctx)
        assert not ctx.get(pair.a.up) and not ctx.get(pair.b.up)
        ctx.set(pair.ab.cut, 0)
        await run.come_up(ctx)
        run.queue.append(_frame(1, [1], first=True))
        await run.until(ctx, lambda: len(run.received) == 1)

    simulate(pair, bench)


def test_send_router_ready_names_the_taker_without_waiting_for_valid() -> None:
    """``cmd.tready`` follows the command's taker (the DMA, or the SEND's port while no DMA command is pending)
    whatever ``cmd.tvalid``; a SEND goes to its port, waits there until its status is back, and holds the next
    command until then."""
    dut = SendRouter()
    send1 = int.from_bytes(pack_command(Opcode.SEND, op=LinkOp.ADD, port=1, src_addr=0x40, dst_addr=0x80,
                                        length=16, sem=2, count=3), "little")
    copy = int.from_bytes(pack_command(Opcode.COPY, src_addr=0, dst_addr=0x100, length=8), "little")

    async def bench(ctx) -> None:
        ctx.set(dut.cmd.tdata, copy)
        ctx.set(dut.dma_cmd.tready, 1)
        assert (ctx.get(dut.cmd.tready), ctx.get(dut.dma_cmd.tvalid)) == (1, 0)  # ready before valid
        ctx.set(dut.dma_cmd.tready, 0)
        assert ctx.get(dut.cmd.tready) == 0
        ctx.set(dut.cmd.tdata, send1)
        ctx.set(dut.send0.ready, 1)
        assert ctx.get(dut.cmd.tready) == 0  # port 0 is free, but the SEND names port 1
        ctx.set(dut.send1.ready, 1)
        assert (ctx.get(dut.cmd.tready), ctx.get(dut.send1.valid)) == (1, 0)
        ctx.set(dut.cmd.tvalid, 1)
        assert (ctx.get(dut.send0.valid), ctx.get(dut.send1.valid), ctx.get(dut.dma_cmd.tvalid)) == (0, 1, 0)
        assert (ctx.get(dut.send1.src_addr), ctx.get(dut.send1.length), ctx.get(dut.send1.count)) == (0x40, 16, 3)
        await ctx.tick()
        ctx.set(dut.cmd.tdata, copy)
        ctx.set(dut.dma_cmd.tready, 1)
        assert (ctx.get(dut.sending), ctx.get(dut.cmd.tready), ctx.get(dut.dma_cmd.tvalid)) == (1, 0, 0)
        ctx.set(dut.send_done, 1)
        ctx.set(dut.send_status, 0x21)
        await ctx.tick()
        ctx.set(dut.send_done, 0)
        ctx.set(dut.done.tready, 1)
        assert (ctx.get(dut.done.tvalid), ctx.get(dut.done.tdata)) == (1, 0x21)
        await ctx.tick()
        assert (ctx.get(dut.sending), ctx.get(dut.cmd.tready), ctx.get(dut.dma_cmd.tvalid)) == (0, 1, 1)

    simulate(dut, bench)
