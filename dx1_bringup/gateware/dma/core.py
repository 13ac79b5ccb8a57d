"""The per-tile DMA engine: LOAD, STORE and COPY between device memory (AXI4) and a tile's memories, composed
of its read and write engines, its LOAD and STORE paths and the data FIFO between them."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out, connect, flipped
from amaranth.utils import exact_log2

from ...spec import COMMAND_BITS, COMMANDS, ErrorCode, Opcode, TileConfig
from ..axi import RESP_OKAY, AXI4Signature, join_channels
from ..layouts import HEADER_LAYOUT, command_layout
from ..stream import AXIStreamSignature
from ..tile import local_ports
from .load import LoadEngine
from .params import BEAT_BYTES, DATA_DEPTH
from .read import ReadEngine
from .store import StoreEngine
from .write import WriteEngine

__all__ = ["Dma"]

# LOAD and STORE share one encoding of their fields, so one view decodes both.
assert COMMANDS[Opcode.LOAD].fields == COMMANDS[Opcode.STORE].fields
assert COMMANDS[Opcode.LOAD].flags == COMMANDS[Opcode.STORE].flags


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
    256 beats that never cross a 4 KiB page; a read burst is issued only while
    fewer than four are open (so up to five are in flight), and write beats
    stream back to back.  Once a write burst's address
    is out, its data never waits for the bus: a STORE's comes from the tile
    core, and a COPY sends a write burst (at most :data:`~.params.COPY_BURST` beats)
    only when all its data has been read into the data FIFO.  A memory that
    serves a write burst from its address to its last beat (:class:`~dx1_bringup.gateware.memory.AxiMemory`)
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
        spm_beats, acc_beats = 8 * n // 64, 32 * n // 64

        # ---- command: taken into a register, started from it -------------------------------------
        state = Signal(range(3))
        held = Signal()
        command = Signal(COMMAND_BITS)
        start = Signal()
        with m.If(self.cmd.tvalid & self.cmd.tready):
            m.d.sync += [held.eq(1), command.eq(self.cmd.tdata)]
        with m.Elif(start):
            m.d.sync += held.eq(0)
        hdr = data.View(HEADER_LAYOUT, command)
        mv = data.View(command_layout(Opcode.LOAD), command)
        cp = data.View(command_layout(Opcode.COPY), command)
        cmd_acc = mv.flags[COMMANDS[Opcode.LOAD].flag_bit("acc")]

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
            self.cmd.tready.eq(~held),
            start.eq(held & (state == _State.IDLE)),
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

        # ---- parts: data FIFO (read beats or split local rows -> write beats or local rows) ---------
        m.submodules.data_fifo = dfifo = SyncFIFOBuffered(width=64 + 1, depth=DATA_DEPTH)
        m.submodules.reader = reader = ReadEngine(self.addr_width, self.id_width)
        m.submodules.writer = writer = WriteEngine(self.addr_width, self.id_width)
        m.submodules.loader = loader = LoadEngine(n)
        m.submodules.storer = storer = StoreEngine(n)
        join_channels(m, self.axi, read=reader.bus, write=writer.bus)
        d_beat = dfifo.r_data[:64]
        d_err = dfifo.r_data[64]

        # Both bus engines: LOAD reads, STORE writes, COPY does both.
        for engine, opcode, copy_addr in ((reader, Opcode.LOAD, cp.src_addr), (writer, Opcode.STORE, cp.dst_addr)):
            m.d.comb += [
                engine.start.eq(start & ((hdr.opcode == opcode) | start_copy)),
                engine.base.eq(Mux(start_copy, copy_addr, mv.mem_addr)),
                engine.stride.eq(Mux(start_copy, 0, mv.mem_stride)),
                engine.segments.eq(Mux(start_copy, 1, mv.rows)),
                engine.seg_beats.eq(Mux(start_copy, copy_beats, move_beats)),
                engine.hold.eq(self.hold), engine.abort.eq(self.abort),
            ]
        m.d.comb += [
            reader.take.eq((dfifo.w_rdy & ~is_store) | self.abort),
            writer.is_copy.eq(is_copy), writer.is_load.eq(is_load), writer.copy_beat.eq(reader.beat),
            writer.rd_err.eq(rd_err), writer.fifo_data.eq(d_beat), writer.fifo_err.eq(d_err),
            writer.fifo_ready.eq(dfifo.r_rdy),
            self.bytes_read.eq(reader.bytes_read), self.bytes_written.eq(writer.bytes_written),
        ]

        # Both local paths: LOAD writes rows, STORE reads them.
        for path in (loader, storer):
            m.d.comb += [
                path.start.eq(start), path.local_addr.eq(mv.local_addr), path.acc.eq(acc),
                path.rows.eq(rows), path.cols.eq(cols), path.row_stride.eq(row_stride), path.col_stride.eq(col_stride),
            ]
        m.d.comb += [
            loader.run.eq((state == _State.RUN) & is_load), loader.rd_err.eq(rd_err),
            loader.fifo_data.eq(d_beat), loader.fifo_err.eq(d_err), loader.fifo_ready.eq(dfifo.r_rdy),
            storer.request.eq(hdr.opcode == Opcode.STORE), storer.is_store.eq(is_store),
            storer.fifo_ready.eq(dfifo.w_rdy),
        ]
        for port in ("spm_wr", "acc_wr"):
            connect(m, flipped(getattr(self, port)), getattr(loader, port))
        for port in ("spm_rreq", "acc_rreq", "spm_rresp", "acc_rresp"):
            connect(m, flipped(getattr(self, port)), getattr(storer, port))

        # ---- data FIFO ports, errors -----------------------------------------------------------
        m.d.comb += dfifo.r_en.eq(writer.fifo_take | loader.fifo_take)
        with m.If(is_store):
            m.d.comb += [dfifo.w_data.eq(Cat(storer.beat, 0)), dfifo.w_en.eq(storer.push & ~self.abort)]
        with m.Else():
            m.d.comb += [dfifo.w_data.eq(Cat(self.axi.rdata, self.axi.rresp != RESP_OKAY)),
                         dfifo.w_en.eq(reader.beat & ~self.abort)]
        with m.If(writer.read_error | loader.read_error):
            m.d.sync += rd_err.eq(1)
        with m.If(writer.error):
            m.d.sync += wr_err.eq(1)

        # ---- completion ------------------------------------------------------------------------
        finished = Signal()
        m.d.comb += [
            finished.eq(Mux(is_load, loader.done & reader.done, writer.done & reader.done)),
            self.done.tvalid.eq(state == _State.DONE),
            self.quiet.eq(reader.quiet & writer.quiet),
        ]
        with m.If((state == _State.RUN) & finished):
            m.d.sync += [state.eq(_State.DONE),
                         self.done.tdata.eq(Mux(rd_err | wr_err, ErrorCode.BUS_ERROR, ErrorCode.OK))]
        with m.If((state == _State.DONE) & self.done.tready):
            m.d.sync += state.eq(_State.IDLE)
        return m
