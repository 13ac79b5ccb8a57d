"""The sending half of the link DMA: a SEND's bytes read from device memory and cut into DATA frames for a port;
the SEND ends with the peer's DONE, or with LINK_DOWN, LINK_CRC or BUS_ERROR."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec import ErrorCode
from ...spec.chip_link import DATA_HEADER, ChipLinkConfig, FrameKind, up_wait_cycles
from ..axi import AXI4Signature
from ..stream import AXIStreamSignature
from .frame import frame_stream
from .reads import READ_BURST, ReservedReads
from .tx import SEQ_BITS
from .wire import WORD_BITS

__all__ = ["LinkSender", "SEND_REQUEST"]

#: What the command processor's SEND asks of a sender, all in one register word.
SEND_REQUEST = wiring.Signature({
    "valid": Out(1), "ready": In(1),
    "src_addr": Out(32), "dst_addr": Out(32), "length": Out(32), "op": Out(4), "sem": Out(8), "count": Out(16),
})

_DEPTH = 2 * READ_BURST


class _State:
    IDLE, WAIT_UP, HEADER0, HEADER1, PAYLOAD, WAIT_DONE, DRAIN, DONE = range(8)


def _header_word(values: dict, word: int):
    """Word ``word`` of a DATA header with the named fields (the spec's layout), as an Amaranth value."""
    bits = [None] * (2 * WORD_BITS)
    for f in DATA_HEADER:
        value = values.get(f.name, 0)
        for i in range(f.width):
            if hasattr(value, "shape"):
                bits[f.lsb + i] = Value.cast(value)[i] if i < len(Value.cast(value)) else 0
            else:
                bits[f.lsb + i] = (int(value) >> i) & 1
    part = bits[word * WORD_BITS:(word + 1) * WORD_BITS]
    return Cat(*(Const(b, 1) if isinstance(b, int) else b for b in (0 if b is None else b for b in part)))


class LinkSender(wiring.Component):
    """Runs SENDs on one port, one at a time.

    A ``request`` (already checked by the command processor) is taken while idle.  On a
    port that is down it waits up to :func:`~dx1_bringup.spec.up_wait_cycles` for the port to
    come up (a link just mended), and completes LINK_DOWN if it does not.  Then its ``length`` bytes are
    read from ``src_addr`` (bursts issued only with room for them, :class:`~.reads.ReservedReads`)
    and offered to the port as DATA frames of ``max_payload`` bytes (the last shorter):
    ``first`` on the first with the SEND's whole length, ``last`` on the last with the
    semaphore signal, ``dst_addr`` advancing.  The SEND completes (a status byte on ``done``)
    with the peer's DONE for its last frame (OK or REMOTE_WINDOW); with LINK_CRC when the
    port ``failed``; with LINK_DOWN when the port goes down first; with BUS_ERROR after a read
    error (no more frames are offered).  An ended SEND's reads are drained and the port's
    partly stored frame dropped (``abort``) before its status goes out.
    """

    def __init__(self, config: ChipLinkConfig):
        if not isinstance(config, ChipLinkConfig):
            raise TypeError(f"Link sender config must be a ChipLinkConfig, not {config!r}")
        self.config = config
        super().__init__({
            "request": In(SEND_REQUEST), "done": Out(AXIStreamSignature(8)),
            "bus": Out(AXI4Signature()),
            "frames": Out(frame_stream()), "up": In(1), "failed": In(1), "abort": Out(1), "next_seq": In(SEQ_BITS),
            "peer_done": In(1), "peer_done_seq": In(SEQ_BITS), "peer_done_status": In(8),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=WORD_BITS, depth=_DEPTH)
        m.submodules.reads = reads = ReservedReads(_DEPTH)
        m.d.comb += [
            self.bus.arvalid.eq(reads.bus.arvalid), self.bus.araddr.eq(reads.bus.araddr),
            self.bus.arlen.eq(reads.bus.arlen), self.bus.arsize.eq(reads.bus.arsize),
            self.bus.arburst.eq(reads.bus.arburst), self.bus.arid.eq(reads.bus.arid),
            reads.bus.arready.eq(self.bus.arready), self.bus.rready.eq(reads.bus.rready),
            reads.bus.rvalid.eq(self.bus.rvalid), reads.bus.rdata.eq(self.bus.rdata),
            reads.bus.rresp.eq(self.bus.rresp), reads.bus.rlast.eq(self.bus.rlast), reads.bus.rid.eq(self.bus.rid),
        ]
        state = Signal(range(8))
        req = self.request
        src, dst, left, total = Signal(32), Signal(32), Signal(32), Signal(32)
        wait = Signal(range(up_wait_cycles(cfg) + 1))
        op, sem, count = Signal(4), Signal(8), Signal(16)
        first = Signal()
        status = Signal(8)
        last_seq = Signal(SEQ_BITS)
        bus_error = Signal()
        payload = Signal(range(cfg.max_payload + 1))
        words = Signal(range(cfg.max_payload // 8 + 1))
        m.d.comb += [
            payload.eq(Mux(left < cfg.max_payload, left, cfg.max_payload)),
            reads.room.eq(_DEPTH - fifo.r_level), reads.abort.eq(bus_error | (state == _State.DRAIN)),
            fifo.w_data.eq(self.bus.rdata), fifo.w_en.eq(reads.beat & ~bus_error & (state != _State.DRAIN)),
            self.busy.eq(state != _State.IDLE),
        ]
        with m.If(reads.error):
            m.d.sync += bus_error.eq(1)
        last_frame = left == payload
        header = {"kind": FrameKind.DATA, "op": op, "first": first, "last": last_frame, "sem": sem,
                  "payload_bytes": payload, "count": Mux(last_frame, count, 0), "dst_addr": dst,
                  "transfer_bytes": total}
        ending = Signal()

        with m.Switch(state):
            with m.Case(_State.IDLE):
                m.d.comb += req.ready.eq(1)
                with m.If(req.valid):
                    m.d.sync += [src.eq(req.src_addr), dst.eq(req.dst_addr), left.eq(req.length),
                                 total.eq(req.length), op.eq(req.op), sem.eq(req.sem), count.eq(req.count),
                                 first.eq(1), bus_error.eq(0)]
                    with m.If(~self.up):
                        m.d.sync += [wait.eq(up_wait_cycles(cfg) - 1), state.eq(_State.WAIT_UP)]
                    with m.Else():
                        m.d.comb += [reads.start.eq(1), reads.base.eq(req.src_addr), reads.beats.eq(req.length[3:])]
                        m.d.sync += state.eq(_State.HEADER0)
            with m.Case(_State.WAIT_UP):
                with m.If(self.up):
                    m.d.comb += [reads.start.eq(1), reads.base.eq(src), reads.beats.eq(left[3:])]
                    m.d.sync += state.eq(_State.HEADER0)
                with m.Elif(wait == 0):
                    m.d.sync += [status.eq(ErrorCode.LINK_DOWN), state.eq(_State.DONE)]
                with m.Else():
                    m.d.sync += wait.eq(wait - 1)
            with m.Case(_State.HEADER0, _State.HEADER1):
                word = Mux(state == _State.HEADER0, _header_word(header, 0), _header_word(header, 1))
                m.d.comb += [self.frames.valid.eq(1), self.frames.data.eq(word)]
                with m.If(self.frames.ready):
                    m.d.sync += state.eq(Mux(state == _State.HEADER0, _State.HEADER1, _State.PAYLOAD))
                    m.d.sync += words.eq(payload[3:])
            with m.Case(_State.PAYLOAD):
                m.d.comb += [self.frames.valid.eq(fifo.r_rdy), self.frames.data.eq(fifo.r_data),
                             self.frames.last.eq(words == 1), fifo.r_en.eq(self.frames.ready)]
                with m.If(fifo.r_rdy & self.frames.ready):
                    m.d.sync += words.eq(words - 1)
                    with m.If(words == 1):
                        m.d.sync += [dst.eq(dst + payload), left.eq(left - payload), first.eq(0)]
                        with m.If(last_frame):
                            m.d.sync += [last_seq.eq(self.next_seq), state.eq(_State.WAIT_DONE)]
                        with m.Else():
                            m.d.sync += state.eq(_State.HEADER0)
            with m.Case(_State.WAIT_DONE):
                with m.If(self.peer_done & (self.peer_done_seq == last_seq)):
                    m.d.sync += [status.eq(self.peer_done_status), state.eq(_State.DONE)]
            with m.Case(_State.DRAIN):
                m.d.comb += fifo.r_en.eq(1)
                with m.If(reads.done & (fifo.level == 0)):
                    m.d.sync += state.eq(_State.DONE)
            with m.Case(_State.DONE):
                m.d.comb += [self.done.tvalid.eq(1), self.done.tdata.eq(status)]
                with m.If(self.done.tready):
                    m.d.sync += state.eq(_State.IDLE)
        sending = (state == _State.HEADER0) | (state == _State.HEADER1) | (state == _State.PAYLOAD) | \
                  (state == _State.WAIT_DONE)
        with m.If(sending):
            with m.If(~self.up):
                m.d.comb += ending.eq(1)
                m.d.sync += status.eq(ErrorCode.LINK_DOWN)
            with m.Elif(self.failed):
                m.d.comb += ending.eq(1)
                m.d.sync += status.eq(ErrorCode.LINK_CRC)
            with m.Elif(bus_error & (state != _State.WAIT_DONE)):
                m.d.comb += ending.eq(1)
                m.d.sync += status.eq(ErrorCode.BUS_ERROR)
        with m.If(ending):
            m.d.sync += state.eq(_State.DRAIN)
        m.d.comb += self.abort.eq(ending)
        return m
