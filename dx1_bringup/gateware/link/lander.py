"""The receiving half of the link DMA: DATA frames a port kept, written or int32-added into device memory inside the
link window, then the semaphore signal and the DONE frame of each SEND."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec import ErrorCode
from ...spec.chip_link import ChipLinkConfig, LinkOp
from ..axi import AXI4Signature
from ..dma.params import DATA_DEPTH
from ..dma.write import WriteEngine
from .frame import data_field
from .reads import ReservedReads
from .tx import SEQ_BITS
from .wire import WORD_BITS

__all__ = ["LinkLander"]


class _State:
    IDLE, DECIDE, COPY, FINISH, SIGNAL, DONE, ABANDON = range(7)


class LinkLander(wiring.Component):
    """Lands the frames a port kept, in order, a SEND at a time.

    A SEND's ``first`` frame checks its whole destination (``dst_addr`` .. ``+ transfer_bytes``)
    against the link window (``window_base`` .. ``window_limit``) and the memory's size; a SEND outside lands
    nothing and is answered DONE REMOTE_WINDOW at its last frame.  Inside, each frame's payload
    goes out as write bursts at its ``dst_addr``, each burst's address only once its beats are
    in the data FIFO, as a COPY's (:class:`~dx1_bringup.gateware.dma.write.WriteEngine`); the
    next frame starts as soon as the last burst of this one is issued, so frames stream through.
    For ADD the SEND's whole destination is read ahead from its first frame on (bursts with room
    reserved in the read FIFO, :class:`~.reads.ReservedReads`) and each int32 lane of the payload
    added to it, wrapping.
    A frame's buffer is freed (``consume``: the port's ACK) as soon as its payload is in the
    data FIFO; every kept frame lands whole.  After a SEND's last write is answered the
    semaphore ``sem`` gets ``count`` (the SoC's semaphore arbiter: ``sem_*``; none when ``count``
    is 0 or ``sem`` is past the semaphores), then DONE goes back with OK (BUS_ERROR if a burst
    had an error response).  A ``first`` frame while a SEND is unfinished (its sender gave up)
    ends that one silently once its frames have landed.  A frame of no SEND is dropped.
    """

    def __init__(self, config: ChipLinkConfig, semaphores: int, mem_bytes: int):
        if not isinstance(config, ChipLinkConfig):
            raise TypeError(f"Link lander config must be a ChipLinkConfig, not {config!r}")
        self.config, self.semaphores, self.mem_bytes = config, semaphores, mem_bytes
        word_bits = max(1, (config.max_payload // 8 - 1).bit_length())
        super().__init__({
            "bus": Out(AXI4Signature()),
            "frame_valid": In(1), "header": In(2 * WORD_BITS), "pay_addr": Out(word_bits), "pay_data": In(WORD_BITS),
            "consume": Out(1),
            "done_valid": Out(1), "done_seq": Out(SEQ_BITS), "done_status": Out(8), "done_ready": In(1),
            "window_base": In(32), "window_limit": In(32),
            "sem_valid": Out(1), "sem_index": Out(max(1, (semaphores - 1).bit_length())), "sem_delta": Out(signed(18)),
            "sem_grant": In(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=WORD_BITS, depth=DATA_DEPTH)
        m.submodules.read_fifo = rfifo = SyncFIFOBuffered(width=WORD_BITS, depth=DATA_DEPTH)
        m.submodules.reads = reads = ReservedReads(DATA_DEPTH)
        m.submodules.writer = writer = WriteEngine(segmented=False)
        bus = self.bus
        for name in ("arvalid", "araddr", "arlen", "arsize", "arburst", "arid", "rready"):
            m.d.comb += getattr(bus, name).eq(getattr(reads.bus, name))
        for name in ("arready", "rvalid", "rdata", "rresp", "rlast", "rid"):
            m.d.comb += getattr(reads.bus, name).eq(getattr(bus, name))
        for name in ("awvalid", "awaddr", "awlen", "awsize", "awburst", "awid", "wdata", "wstrb", "wlast", "wvalid",
                     "bready"):
            m.d.comb += getattr(bus, name).eq(getattr(writer.bus, name))
        for name in ("awready", "wready", "bvalid", "bresp", "bid"):
            m.d.comb += getattr(writer.bus, name).eq(getattr(bus, name))

        hdr = self.header
        state = Signal(range(7))
        op, first, last = Signal(4), Signal(), Signal()
        seq, sem, count = Signal(SEQ_BITS), Signal(8), Signal(16)
        words = Signal(range(self.config.max_payload // 8 + 1))
        in_send, send_ok, bus_error = Signal(), Signal(), Signal()
        window_ok = Signal()
        end = Signal(33)
        dst, total = data_field(hdr, "dst_addr"), data_field(hdr, "transfer_bytes")
        m.d.comb += [end.eq(dst + total), window_ok.eq((dst >= self.window_base) & (end <= self.window_limit)
                                      & (end <= self.mem_bytes))]
        frame_words = data_field(hdr, "payload_bytes")[3:]

        # Payload words: pay_data is word idx (its address went out the cycle before); ``advance`` takes it,
        # and the next address goes out with it.
        idx = Signal(range(self.config.max_payload // 8 + 1))
        advance = Signal()
        m.d.comb += self.pay_addr.eq(Mux(advance, idx + 1, idx))
        with m.If(advance):
            m.d.sync += idx.eq(idx + 1)
        is_add = op == LinkOp.ADD
        summed = Cat(*((self.pay_data[32 * i:32 * i + 32] + rfifo.r_data[32 * i:32 * i + 32])[:32]
                       for i in range(WORD_BITS // 32)))
        m.d.comb += [
            reads.room.eq(DATA_DEPTH - rfifo.level), reads.base.eq(dst), reads.beats.eq(total[3:]),
            reads.abort.eq(state == _State.ABANDON),
            rfifo.w_data.eq(bus.rdata), rfifo.w_en.eq(reads.beat),
            writer.base.eq(dst), writer.seg_beats.eq(frame_words),
            writer.is_copy.eq(1), writer.copy_beat.eq(fifo.w_en & fifo.w_rdy),
            fifo.r_en.eq(writer.fifo_take),
            writer.fifo_data.eq(fifo.r_data), writer.fifo_ready.eq(fifo.r_rdy),
            fifo.w_data.eq(Mux(is_add, summed, self.pay_data)),
            self.busy.eq(state != _State.IDLE),
        ]
        with m.If(reads.error | writer.error):
            m.d.sync += bus_error.eq(1)

        with m.Switch(state):
            with m.Case(_State.IDLE):
                with m.If(self.frame_valid):
                    m.d.sync += [
                        op.eq(Mux(data_field(hdr, "first"), data_field(hdr, "op"), op)),
                        first.eq(data_field(hdr, "first")), last.eq(data_field(hdr, "last")),
                        seq.eq(data_field(hdr, "seq")), sem.eq(data_field(hdr, "sem")),
                        count.eq(data_field(hdr, "count")), words.eq(data_field(hdr, "payload_bytes")[3:]),
                        idx.eq(0), state.eq(_State.DECIDE),
                    ]
            with m.Case(_State.DECIDE):
                # A frame's bursts start once the last frame's are all issued (their data is in the FIFO).  An ADD
                # reads its whole destination ahead from its first frame on (frames follow each other in it).
                start = writer.issued
                with m.If(first & in_send):
                    m.d.sync += state.eq(_State.ABANDON)
                with m.Elif(first):
                    with m.If(~window_ok):
                        m.d.comb += self.consume.eq(1)
                        m.d.sync += [in_send.eq(1), send_ok.eq(0), state.eq(Mux(last, _State.DONE, _State.IDLE))]
                    with m.Elif(start):
                        m.d.comb += [writer.start.eq(1), reads.start.eq(data_field(hdr, "op") == LinkOp.ADD)]
                        m.d.sync += [in_send.eq(1), send_ok.eq(1), bus_error.eq(0), op.eq(data_field(hdr, "op")),
                                     state.eq(_State.COPY)]
                with m.Elif(~in_send | ~send_ok):
                    m.d.comb += self.consume.eq(1)
                    m.d.sync += state.eq(Mux(in_send & last, _State.DONE, _State.IDLE))
                with m.Elif(start):
                    m.d.comb += writer.start.eq(1)
                    m.d.sync += state.eq(_State.COPY)
            with m.Case(_State.COPY):
                with m.If(is_add):
                    m.d.comb += [advance.eq(rfifo.r_rdy & fifo.w_rdy), rfifo.r_en.eq(fifo.w_rdy)]
                with m.Else():
                    m.d.comb += advance.eq(fifo.w_rdy)
                m.d.comb += fifo.w_en.eq(advance)
                with m.If(advance & (idx + 1 == words)):
                    m.d.comb += self.consume.eq(1)
                    m.d.sync += state.eq(Mux(last, _State.FINISH, _State.IDLE))
            with m.Case(_State.FINISH):
                with m.If(writer.done & reads.done):
                    with m.If((count != 0) & (sem < self.semaphores)):
                        m.d.sync += state.eq(_State.SIGNAL)
                    with m.Else():
                        m.d.sync += state.eq(_State.DONE)
            with m.Case(_State.SIGNAL):
                m.d.comb += self.sem_valid.eq(1)
                with m.If(self.sem_grant):
                    m.d.sync += state.eq(_State.DONE)
            with m.Case(_State.DONE):
                m.d.comb += self.done_valid.eq(1)
                with m.If(self.done_ready):
                    m.d.sync += [state.eq(_State.IDLE), in_send.eq(0)]
            with m.Case(_State.ABANDON):
                # The unfinished SEND's kept frames land and its reads ahead are dropped; then the new SEND's first
                # frame is decided afresh.
                m.d.comb += rfifo.r_en.eq(1)
                with m.If(writer.done & reads.done & (rfifo.level == 0)):
                    m.d.sync += [in_send.eq(0), state.eq(_State.DECIDE)]
        m.d.comb += [
            self.sem_index.eq(sem), self.sem_delta.eq(count), self.done_seq.eq(seq),
            self.done_status.eq(Mux(~send_ok, ErrorCode.REMOTE_WINDOW,
                                    Mux(bus_error, ErrorCode.BUS_ERROR, ErrorCode.OK))),
        ]
        return m
