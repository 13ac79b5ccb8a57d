"""The per-tile DMA engine: LOAD, STORE and COPY between device memory (AXI4) and a tile's memories."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out, connect, flipped
from amaranth.utils import exact_log2

from ..spec import BUS_BYTES, COMMAND_BITS, COMMANDS, ErrorCode, Opcode, TileConfig
from .axi import BURST_INCR, MAX_BURST, PAGE_BYTES, RESP_OKAY, AXI4Signature
from .layouts import HEADER_LAYOUT, command_layout
from .stream import AXIStreamSignature
from .tile import ADDR_BITS, LOCAL_PORTS, TileCore, local_ports

__all__ = ["Dma", "DmaTile"]

BEAT_BYTES = BUS_BYTES  # one AXI data beat
MAX_READS = 4           # read bursts in flight
DATA_DEPTH = 32         # beats between the read side and the write side
#: Longest write burst of a COPY.  Its address goes out only once all its beats are in the data FIFO;
#: half the FIFO, so the next burst's data arrives while this one is written.
COPY_BURST = DATA_DEPTH // 2
WLEN_DEPTH = 4          # write bursts whose address is out and whose data is not finished

# LOAD and STORE share one encoding of their fields, so one view decodes both.
assert COMMANDS[Opcode.LOAD].fields == COMMANDS[Opcode.STORE].fields
assert COMMANDS[Opcode.LOAD].flags == COMMANDS[Opcode.STORE].flags


def _burst_generator(m: Module, name: str, addr_width: int, *, start, base, stride, segments, seg_beats,
                     valid, addr_o, len_o, ready, allow, max_beats=MAX_BURST):
    """Cut ``segments`` runs of ``seg_beats`` beats, ``stride`` bytes apart, into legal AXI bursts.

    A burst is at most ``max_beats`` (at most 256) beats and never crosses a 4 KiB page.  ``valid``,
    ``addr_o`` and ``len_o`` are registers (the address channel's outputs):
    the next burst is loaded when the slot is empty or being taken, and
    ``allow`` is high.  Returns ``(active, issue, beats)``: still cutting,
    a burst is loaded this cycle, and its length in beats.
    """
    active = Signal(name=f"{name}_active")
    addr = Signal(addr_width, name=f"{name}_addr")
    seg_base = Signal(addr_width, name=f"{name}_seg_base")
    stride_r = Signal(addr_width, name=f"{name}_stride")
    seg_left = Signal(30, name=f"{name}_seg_left")
    seg_beats_r = Signal(30, name=f"{name}_seg_beats")
    segs_left = Signal(16, name=f"{name}_segs_left")
    to_page = Signal(range(PAGE_BYTES // BEAT_BYTES + 1), name=f"{name}_to_page")
    capped = Signal(range(MAX_BURST + 1), name=f"{name}_capped")
    beats = Signal(range(MAX_BURST + 1), name=f"{name}_beats")
    issue = Signal(name=f"{name}_issue")
    page_bits = exact_log2(PAGE_BYTES)
    beat_bits = exact_log2(BEAT_BYTES)
    m.d.comb += [
        to_page.eq(PAGE_BYTES // BEAT_BYTES - addr[beat_bits:page_bits]),
        capped.eq(Mux(seg_left < max_beats, seg_left, max_beats)),
        beats.eq(Mux(to_page < capped, to_page, capped)),
        issue.eq(active & (~valid | ready) & allow),
    ]
    with m.If(valid & ready):
        m.d.sync += valid.eq(0)
    with m.If(issue):
        m.d.sync += [
            valid.eq(1), addr_o.eq(addr), len_o.eq(beats - 1),
            addr.eq(addr + (beats << beat_bits)), seg_left.eq(seg_left - beats),
        ]
        with m.If(seg_left == beats):
            with m.If(segs_left == 1):
                m.d.sync += active.eq(0)
            with m.Else():
                m.d.sync += [
                    seg_base.eq(seg_base + stride_r), addr.eq(seg_base + stride_r),
                    seg_left.eq(seg_beats_r), segs_left.eq(segs_left - 1),
                ]
    with m.If(start):
        m.d.sync += [
            active.eq(1), addr.eq(base), seg_base.eq(base), stride_r.eq(stride),
            seg_left.eq(seg_beats), seg_beats_r.eq(seg_beats), segs_left.eq(segments),
        ]
    return active, issue, beats


class _Walker:
    """Local row addresses of a move, in command order: ``local_addr + r*row_stride + c*col_stride``."""

    def __init__(self, name: str):
        self.base = Signal(ADDR_BITS, name=f"{name}_base")
        self.addr = Signal(ADDR_BITS, name=f"{name}_addr")
        self.r = Signal(16, name=f"{name}_r")
        self.c = Signal(16, name=f"{name}_c")
        self.last = Signal(name=f"{name}_last")

    def elaborate(self, m: Module, rows, cols) -> None:
        m.d.comb += self.last.eq((self.r + 1 == rows) & (self.c + 1 == cols))

    def start(self, m: Module, local_addr) -> None:
        m.d.sync += [self.base.eq(local_addr), self.addr.eq(local_addr), self.r.eq(0), self.c.eq(0)]

    def advance(self, m: Module, cols, row_stride, col_stride) -> None:
        with m.If(self.c + 1 == cols):
            m.d.sync += [self.c.eq(0), self.r.eq(self.r + 1), self.base.eq(self.base + row_stride),
                         self.addr.eq(self.base + row_stride)]
        with m.Else():
            m.d.sync += [self.c.eq(self.c + 1), self.addr.eq(self.addr + col_stride)]


class _State:
    IDLE, RUN, DONE = range(3)


class Dma(wiring.Component):
    """Executes LOAD, STORE and COPY commands, one at a time, in order.

    Commands arrive on ``cmd`` already checked by the command processor; each
    leaves one status byte on ``done`` (``OK``, or ``BUS_ERROR`` when any beat
    had an error response).  After a read error nothing more of the command is
    written: LOAD drops the rest of its local rows, COPY sends the rest of its
    write beats with null strobes.  After a write error the command still runs
    to its end so that the bus protocol stays correct.

    Device memory is reached through ``axi`` with 64-bit INCR bursts of at most
    256 beats that never cross a 4 KiB page; up to four read bursts are in
    flight, and write beats stream back to back.  Once a write burst's address
    is out, its data never waits for the bus: a STORE's comes from the tile
    core, and a COPY sends a write burst (at most :data:`COPY_BURST` beats)
    only when all its data has been read into the data FIFO.  A memory that
    serves a write burst from its address to its last beat (:class:`~.memory.AxiMemory`)
    therefore never waits on this DMA's reads, and two COPYs sharing one
    memory cannot deadlock.  Every AXI output comes from a
    register or a FIFO, so no ready reaches a valid combinationally.  One ID (0)
    is used, so responses come back in order.

    The ``spm_*`` and ``acc_*`` streams are the master side of a
    :class:`~.tile.TileCore`'s memory ports.

    ``hold`` (a test input: the SoC's ``stall_units``) stops the DMA from
    issuing new bursts; bursts already issued finish.  ``abort`` cancels the
    command legally: no new burst is issued, the read beats of open read
    bursts are taken and dropped, open write bursts get their remaining beats
    with null strobes, and ``quiet`` rises once no burst is open or waiting
    for its address handshake; then the DMA may be reset without breaking the
    bus protocol (the command's state itself is not cleaned up: reset it).

    Parameters
    ----------
    config:
        The tile's sizes; the array size must be a multiple of 8 so that a
        scratchpad row is whole bus beats.
    addr_width, id_width:
        AXI address and ID widths.
    """

    def __init__(self, config: TileConfig, addr_width: int = 32, id_width: int = 4):
        if not isinstance(config, TileConfig):
            raise TypeError(f"DMA config must be a TileConfig, not {config!r}")
        if config.array % BEAT_BYTES:
            raise ValueError(f"The DMA needs an array size that is a multiple of {BEAT_BYTES} (a scratchpad row of "
                             f"whole {8 * BEAT_BYTES}-bit beats), not {config.array}")
        self.config = config
        self.addr_width = addr_width
        self.id_width = id_width
        n = config.array
        super().__init__({
            "cmd": In(AXIStreamSignature(COMMAND_BITS)),
            "done": Out(AXIStreamSignature(8)),
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=8 * BEAT_BYTES, id_width=id_width)),
            **{name: member.flip() for name, member in local_ports(n).items()},
            "bytes_read": Out(32),
            "bytes_written": Out(32),
            "busy": Out(1),
            "hold": In(1),
            "abort": In(1),
            "quiet": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.array
        axi = self.axi
        spm_beats, acc_beats = 8 * n // 64, 32 * n // 64

        # ---- command ---------------------------------------------------------------------------
        hdr = data.View(HEADER_LAYOUT, self.cmd.tdata)
        mv = data.View(command_layout(Opcode.LOAD), self.cmd.tdata)
        cp = data.View(command_layout(Opcode.COPY), self.cmd.tdata)
        cmd_acc = mv.flags[COMMANDS[Opcode.LOAD].flag_bit("acc")]

        state = Signal(range(3))
        start = Signal()
        is_load = Signal()
        is_store = Signal()
        is_copy = Signal()
        acc = Signal()
        rows = Signal(16)
        cols = Signal(16)
        row_stride = Signal(16)
        col_stride = Signal(16)
        rd_err = Signal()
        wr_err = Signal()
        m.d.comb += [
            self.cmd.tready.eq(state == _State.IDLE),
            start.eq(self.cmd.tvalid & self.cmd.tready),
            self.busy.eq(state != _State.IDLE),
        ]
        with m.If(start):
            m.d.sync += [
                state.eq(_State.RUN),
                is_load.eq(hdr.opcode == Opcode.LOAD), is_store.eq(hdr.opcode == Opcode.STORE),
                is_copy.eq(hdr.opcode == Opcode.COPY),
                acc.eq(cmd_acc), rows.eq(mv.rows), cols.eq(mv.cols),
                row_stride.eq(mv.local_row_stride), col_stride.eq(mv.local_col_stride),
                rd_err.eq(0), wr_err.eq(0),
            ]
        start_copy = Signal()
        move_beats = Signal(30)
        m.d.comb += [
            start_copy.eq(hdr.opcode == Opcode.COPY),
            move_beats.eq(Mux(cmd_acc, mv.cols << exact_log2(acc_beats), mv.cols << exact_log2(spm_beats))),
        ]
        copy_beats = cp.length >> exact_log2(BEAT_BYTES)

        # ---- data FIFO: read beats (R or split local rows) -> write beats (W or local rows) ------
        m.submodules.data_fifo = dfifo = SyncFIFOBuffered(width=64 + 1, depth=DATA_DEPTH)
        d_beat = dfifo.r_data[:64]
        d_err = dfifo.r_data[64]

        # ---- read address channel --------------------------------------------------------------
        reads_out = Signal(range(MAX_READS + 1))
        ar_active, _, _ = _burst_generator(
            m, "ar", self.addr_width,
            start=start & ((hdr.opcode == Opcode.LOAD) | start_copy),
            base=Mux(start_copy, cp.src_addr, mv.mem_addr), stride=Mux(start_copy, 0, mv.mem_stride),
            segments=Mux(start_copy, 1, mv.rows), seg_beats=Mux(start_copy, copy_beats, move_beats),
            valid=axi.arvalid, addr_o=axi.araddr, len_o=axi.arlen, ready=axi.arready,
            allow=(reads_out < MAX_READS) & ~self.hold & ~self.abort)
        r_hs = Signal()
        ar_hs = Signal()
        m.d.comb += [
            axi.arid.eq(0), axi.arsize.eq(exact_log2(BEAT_BYTES)), axi.arburst.eq(BURST_INCR),
            ar_hs.eq(axi.arvalid & axi.arready),
            r_hs.eq(axi.rvalid & axi.rready),
        ]
        m.d.sync += reads_out.eq(reads_out + ar_hs - (r_hs & axi.rlast))
        with m.If(r_hs):
            m.d.sync += self.bytes_read.eq(self.bytes_read + BEAT_BYTES)

        # ---- write address channel -------------------------------------------------------------
        # The memory's write channel serves a burst from its address to its last beat.  A COPY's data
        # comes from the memory's read channel, so a COPY burst whose address went out before its data
        # was read would hold the write channel while it waits for the read channel, which another
        # master may hold while it waits for the write channel (the other tile's COPY, its data FIFO
        # full): a deadlock.  So a COPY burst's address waits until all its beats are in the data FIFO
        # and claimed by no earlier burst; then its write beats depend on nothing but this FIFO.  A
        # STORE's data comes from the tile core, which never waits for the bus.
        m.submodules.wlen_fifo = wlen_fifo = SyncFIFOBuffered(width=8, depth=WLEN_DEPTH)
        writes_out = Signal(16)
        unclaimed = Signal(range(DATA_DEPTH + 1))  # COPY beats in the data FIFO that no issued burst claims
        aw_allow = Signal()
        aw_active, aw_issue, aw_beats = _burst_generator(
            m, "aw", self.addr_width,
            start=start & ((hdr.opcode == Opcode.STORE) | start_copy),
            base=Mux(start_copy, cp.dst_addr, mv.mem_addr), stride=Mux(start_copy, 0, mv.mem_stride),
            segments=Mux(start_copy, 1, mv.rows), seg_beats=Mux(start_copy, copy_beats, move_beats),
            valid=axi.awvalid, addr_o=axi.awaddr, len_o=axi.awlen, ready=axi.awready,
            allow=aw_allow & ~self.hold & ~self.abort, max_beats=Mux(is_copy, COPY_BURST, MAX_BURST))
        m.d.comb += aw_allow.eq(wlen_fifo.w_rdy & (~is_copy | (unclaimed >= aw_beats)))
        m.d.sync += unclaimed.eq(unclaimed + (is_copy & r_hs) - Mux(is_copy & aw_issue, aw_beats, 0))
        with m.If(start):
            m.d.sync += unclaimed.eq(0)
        aw_hs = Signal()
        b_hs = Signal()
        m.d.comb += [
            axi.awid.eq(0), axi.awsize.eq(exact_log2(BEAT_BYTES)), axi.awburst.eq(BURST_INCR),
            wlen_fifo.w_en.eq(aw_issue), wlen_fifo.w_data.eq(aw_beats - 1),
            aw_hs.eq(axi.awvalid & axi.awready),
            axi.bready.eq(1),
            b_hs.eq(axi.bvalid & axi.bready),
        ]
        m.d.sync += writes_out.eq(writes_out + aw_hs - b_hs)
        with m.If(b_hs & (axi.bresp != RESP_OKAY)):
            m.d.sync += wr_err.eq(1)

        # ---- write data channel: FIFO beats, burst lengths from the address side ---------------
        w_cur = Signal()
        w_len = Signal(8)
        w_cnt = Signal(8)
        w_hs = Signal()
        w_bad = Signal()
        m.d.comb += [
            axi.wvalid.eq(w_cur & (dfifo.r_rdy | self.abort) & ~is_load),
            axi.wdata.eq(d_beat),
            w_bad.eq(d_err | rd_err | self.abort),
            axi.wstrb.eq(Mux(w_bad, 0, 0xFF)),
            axi.wlast.eq(w_cnt == w_len),
            w_hs.eq(axi.wvalid & axi.wready),
        ]
        with m.If(w_hs):
            m.d.comb += dfifo.r_en.eq(1)
            m.d.sync += w_cnt.eq(w_cnt + 1)
            with m.If(d_err):
                m.d.sync += rd_err.eq(1)
            with m.If(~w_bad):
                m.d.sync += self.bytes_written.eq(self.bytes_written + BEAT_BYTES)
        with m.If(~w_cur | (w_hs & axi.wlast)):
            m.d.comb += wlen_fifo.r_en.eq(1)
            m.d.sync += [w_cur.eq(wlen_fifo.r_rdy), w_len.eq(wlen_fifo.r_data), w_cnt.eq(0)]

        # ---- LOAD: beats -> local rows ---------------------------------------------------------
        wr_valid = Signal()
        wr_addr = Signal(ADDR_BITS)
        wr_data = Signal(32 * n)
        wr_ready = Signal()
        m.d.comb += [
            wr_ready.eq(Mux(acc, self.acc_wr.tready, self.spm_wr.tready)),
            self.spm_wr.tvalid.eq(wr_valid & ~acc), self.spm_wr.tdata.eq(Cat(wr_data[:8 * n], wr_addr)),
            self.acc_wr.tvalid.eq(wr_valid & acc), self.acc_wr.tdata.eq(Cat(wr_data, wr_addr)),
        ]
        lw = _Walker("ldw")
        lw.elaborate(m, rows, cols)
        lw_done = Signal()
        asm = Signal(32 * n)
        assembled = Signal(32 * n)
        a_cnt = Signal(range(acc_beats))
        a_last = Signal()
        pop = Signal()
        m.d.comb += [
            assembled.eq(asm), assembled.word_select(a_cnt, 64).eq(d_beat),
            a_last.eq(a_cnt == Mux(acc, acc_beats - 1, spm_beats - 1)),
            pop.eq((state == _State.RUN) & is_load & ~lw_done & dfifo.r_rdy & (~a_last | ~wr_valid | wr_ready)),
        ]
        with m.If(wr_valid & wr_ready):
            m.d.sync += wr_valid.eq(0)
        with m.If(pop):
            m.d.comb += dfifo.r_en.eq(1)
            with m.If(d_err):
                m.d.sync += rd_err.eq(1)
            with m.If(a_last):
                m.d.sync += a_cnt.eq(0)
                with m.If(~d_err & ~rd_err):
                    m.d.sync += [wr_valid.eq(1), wr_data.eq(assembled), wr_addr.eq(lw.addr)]
                lw.advance(m, cols, row_stride, col_stride)
                with m.If(lw.last):
                    m.d.sync += lw_done.eq(1)
            with m.Else():
                m.d.sync += [a_cnt.eq(a_cnt + 1), asm.eq(assembled)]

        # ---- STORE: local row requests, rows -> beats -------------------------------------------
        rq_valid = Signal()
        rq_addr = Signal(ADDR_BITS)
        rq_ready = Signal()
        rq_active = Signal()
        rw = _Walker("rqw")
        rw.elaborate(m, rows, cols)
        m.d.comb += [
            rq_ready.eq(Mux(acc, self.acc_rreq.tready, self.spm_rreq.tready)),
            self.spm_rreq.tvalid.eq(rq_valid & ~acc), self.spm_rreq.tdata.eq(rq_addr),
            self.acc_rreq.tvalid.eq(rq_valid & acc), self.acc_rreq.tdata.eq(rq_addr),
        ]
        with m.If(rq_valid & rq_ready):
            m.d.sync += rq_valid.eq(0)
        with m.If(rq_active & (~rq_valid | rq_ready)):
            m.d.sync += [rq_valid.eq(1), rq_addr.eq(rw.addr)]
            rw.advance(m, cols, row_stride, col_stride)
            with m.If(rw.last):
                m.d.sync += rq_active.eq(0)

        sp_buf = Signal(32 * n)
        sp_cnt = Signal(range(acc_beats + 1))
        sp_push = Signal()
        sp_take = Signal()
        resp_valid = Signal()
        resp_data = Signal(32 * n)
        m.d.comb += [
            resp_valid.eq(Mux(acc, self.acc_rresp.tvalid, self.spm_rresp.tvalid)),
            resp_data.eq(Mux(acc, self.acc_rresp.tdata, self.spm_rresp.tdata)),
            sp_push.eq((sp_cnt != 0) & dfifo.w_rdy),
            sp_take.eq(is_store & ((sp_cnt == 0) | ((sp_cnt == 1) & sp_push))),
            self.acc_rresp.tready.eq(sp_take & acc),
            self.spm_rresp.tready.eq(sp_take & ~acc),
        ]
        with m.If(sp_push):
            m.d.sync += [sp_buf.eq(sp_buf >> 64), sp_cnt.eq(sp_cnt - 1)]
        with m.If(sp_take & resp_valid):
            m.d.sync += [sp_buf.eq(resp_data), sp_cnt.eq(Mux(acc, acc_beats, spm_beats))]

        # ---- data FIFO input -------------------------------------------------------------------
        m.d.comb += axi.rready.eq((dfifo.w_rdy & ~is_store) | self.abort)
        with m.If(is_store):
            m.d.comb += [dfifo.w_data.eq(Cat(sp_buf[:64], 0)), dfifo.w_en.eq(sp_push & ~self.abort)]
        with m.Else():
            m.d.comb += [dfifo.w_data.eq(Cat(axi.rdata, axi.rresp != RESP_OKAY)), dfifo.w_en.eq(r_hs & ~self.abort)]

        # ---- start and completion --------------------------------------------------------------
        with m.If(start):
            lw.start(m, mv.local_addr)
            rw.start(m, mv.local_addr)
            m.d.sync += [lw_done.eq(0), a_cnt.eq(0), rq_active.eq(hdr.opcode == Opcode.STORE), sp_cnt.eq(0)]

        reads_done = Signal()
        writes_done = Signal()
        finished = Signal()
        m.d.comb += [
            reads_done.eq(~ar_active & ~axi.arvalid & (reads_out == 0)),
            writes_done.eq(~aw_active & ~axi.awvalid & (writes_out == 0) & ~w_cur & ~wlen_fifo.r_rdy),
            finished.eq(Mux(is_load, lw_done & ~wr_valid & reads_done, writes_done & reads_done)),
            self.done.tvalid.eq(state == _State.DONE),
            self.quiet.eq(~axi.arvalid & (reads_out == 0) & ~axi.awvalid & (writes_out == 0) & ~w_cur
                          & ~wlen_fifo.r_rdy),
        ]
        with m.If((state == _State.RUN) & finished):
            m.d.sync += [state.eq(_State.DONE),
                         self.done.tdata.eq(Mux(rd_err | wr_err, ErrorCode.BUS_ERROR, ErrorCode.OK))]
        with m.If((state == _State.DONE) & self.done.tready):
            m.d.sync += state.eq(_State.IDLE)
        return m


class DmaTile(wiring.Component):
    """A test top: a :class:`Dma` wired to a :class:`~.tile.TileCore`.

    ``axi`` is the DMA's memory port, ``dma_cmd``/``dma_done`` its command and
    status streams, and ``tile_cmd``/``tile_done`` the tile core's (so a test
    can also run GEMMs and post-ops on what the DMA moved).
    """

    def __init__(self, config: TileConfig, addr_width: int = 32, id_width: int = 4):
        self.config = config
        self.dma = Dma(config, addr_width=addr_width, id_width=id_width)
        super().__init__({
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=8 * BEAT_BYTES, id_width=id_width)),
            "dma_cmd": In(AXIStreamSignature(COMMAND_BITS)),
            "dma_done": Out(AXIStreamSignature(8)),
            "tile_cmd": In(AXIStreamSignature(COMMAND_BITS)),
            "tile_done": Out(AXIStreamSignature(32)),
            "dma_busy": Out(1),
            "dma_bytes_read": Out(32),
            "dma_bytes_written": Out(32),
            "tile_busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.dma = dma = self.dma
        m.submodules.tile = tile = TileCore(self.config)
        connect(m, flipped(self.axi), dma.axi)
        connect(m, flipped(self.dma_cmd), dma.cmd)
        connect(m, flipped(self.dma_done), dma.done)
        connect(m, flipped(self.tile_cmd), tile.cmd)
        connect(m, flipped(self.tile_done), tile.done)
        for name in LOCAL_PORTS:
            connect(m, getattr(dma, name), getattr(tile, name))
        m.d.comb += [
            self.dma_busy.eq(dma.busy), self.dma_bytes_read.eq(dma.bytes_read),
            self.dma_bytes_written.eq(dma.bytes_written), self.tile_busy.eq(tile.busy),
        ]
        return m
