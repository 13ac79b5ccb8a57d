"""A tile's vector unit: the VECTOR, TABLE and TRANSPOSE commands on the tile core's memory ports."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BITS, COMMANDS, VECTOR_OPS, ErrorCode, Opcode, TileConfig
from ..layouts import HEADER_LAYOUT, command_layout
from ..pipeline import delay_valid_ctl
from ..tile.completions import COMPLETION
from .divider import LaneDivider
from .lanes import LANES_LATENCY, VectorLanes
from .reduce import REDUCE_LATENCY, RowReducer
from .sequencer import SERIAL_VOPS, VectorSequencer, step_layout
from .table_loader import TableLoader
from .transpose import TransposeBuffer
from .transposer import TransposeSequencer

__all__ = ["VectorUnit", "HAZARD_DEPTH"]

#: Destination rows in flight between their step's reads and their write: the read, the lanes, the reducer,
#: and the write's cycle; with fewer the sequencer would stall one-step rows of a reduction.
HAZARD_DEPTH = 1 + LANES_LATENCY + REDUCE_LATENCY + 1


class VectorUnit(wiring.Component):
    """Runs one VECTOR, TABLE or TRANSPOSE ``command`` from ``start``; its completion on ``done``.

    The unit owns, while ``busy``, the tile core's A read ports (``spm_a_*`` on the scratchpad, ``acc_a_*``
    on the accumulator buffer), the B read ports when it drives their ``*_use`` (shared with the outside),
    and the write ports when it drives ``*_w_en``; every address is zero when unused, so the core may OR it
    with the other users'.  Read data arrives the cycle after the address.

    * VECTOR: a :class:`~.sequencer.VectorSequencer` walks the steps; each step's A and B rows (int8 lanes
      sign-extended, or int32) go through the :class:`~.lanes.VectorLanes` (``LANES_LATENCY`` cycles), a
      reduction's through the :class:`~.reduce.RowReducer` too, RECIP and ISQRT through the
      :class:`~.divider.LaneDivider`, one step at a time; the results (saturated to D's lane type by those
      parts) are written.
    * TABLE: the :class:`~.table_loader.TableLoader` feeds the lanes' table port an entry a cycle.
    * TRANSPOSE: the :class:`~.transposer.TransposeSequencer` moves each block through a
      :class:`~.transpose.TransposeBuffer`.

    ``hits``, ``underflows`` and ``overflows`` count LUT lanes, ``busy_cycles`` the cycles the unit was busy;
    ``progress`` is high in the cycle after one the unit read or wrote a row or a table entry in (registered: it
    goes to the command processor's watchdog, across the die).

    Parameters
    ----------
    config:
        The tile's sizes.
    """

    def __init__(self, config: TileConfig):
        if not isinstance(config, TileConfig):
            raise TypeError(f"Vector unit config must be a TileConfig, not {config!r}")
        self.config = config
        n = config.array
        super().__init__({
            "start": In(1), "command": In(COMMAND_BITS), "busy": Out(1), "done": Out(COMPLETION),
            "spm_a_addr": Out(16), "spm_a_data": In(8 * n),
            "acc_a_addr": Out(16), "acc_a_data": In(32 * n),
            "spm_b_use": Out(1), "spm_b_addr": Out(16), "spm_b_data": In(8 * n),
            "acc_b_use": Out(1), "acc_b_addr": Out(16), "acc_b_data": In(32 * n),
            "spm_w_en": Out(1), "spm_w_addr": Out(16), "spm_w_data": Out(8 * n),
            "acc_w_en": Out(1), "acc_w_addr": Out(16), "acc_w_data": Out(32 * n),
            "hits": Out(32), "underflows": Out(32), "overflows": Out(32), "busy_cycles": Out(32),
            "progress": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.array
        lanes32 = data.ArrayLayout(signed(32), n)
        m.submodules.sequencer = seq = VectorSequencer(HAZARD_DEPTH)
        m.submodules.lanes = lanes = VectorLanes(n)
        m.submodules.reducer = reducer = RowReducer(n)
        m.submodules.divider = divider = LaneDivider(n)
        m.submodules.table_loader = table = TableLoader(n)
        m.submodules.transpose_buffer = tbuf = TransposeBuffer(n)
        m.submodules.transposer = tseq = TransposeSequencer(n, read_latency=0)  # the buffer shows the column read

        hdr = data.View(HEADER_LAYOUT, self.command)
        v_start = Signal()
        m.d.comb += [
            v_start.eq(self.start & (hdr.opcode == Opcode.VECTOR)),
            seq.start.eq(v_start), seq.command.eq(self.command),
            table.start.eq(self.start & (hdr.opcode == Opcode.TABLE)),
            table.src_addr.eq(data.View(command_layout(Opcode.TABLE), self.command).src_addr),
            tseq.start.eq(self.start & (hdr.opcode == Opcode.TRANSPOSE)), tseq.command.eq(self.command),
        ]

        # The command's settings, latched at its start.
        v = data.View(command_layout(Opcode.VECTOR), self.command)
        vspec = COMMANDS[Opcode.VECTOR]
        vop, shift, imm, imm2 = Signal(8), Signal(6), Signal(32), Signal(32)
        d_acc, serial = Signal(), Signal()
        tag, opcode = Signal(16), Signal(8)
        with m.If(self.start):
            m.d.sync += [vop.eq(v.vop), shift.eq(v.shift), imm.eq(v.imm), imm2.eq(v.imm2),
                         d_acc.eq(v.flags[vspec.flag_bit("d_acc")]),
                         serial.eq(Cat(v.vop == op for op in SERIAL_VOPS).any()),
                         tag.eq(hdr.tag), opcode.eq(hdr.opcode)]
        m.d.comb += self.busy.eq(seq.busy | table.busy | tseq.busy)

        # ---- reads: A on the A ports, B on the B ports; the rows a cycle later, as int32 lanes ----------------
        a_on_acc, b_on_acc = seq.a_acc, seq.b_acc
        with m.If(seq.a_use & a_on_acc):
            m.d.comb += self.acc_a_addr.eq(seq.a_addr)
        with m.If(seq.a_use & ~a_on_acc):
            m.d.comb += self.spm_a_addr.eq(seq.a_addr)
        with m.If(table.spm_use):
            m.d.comb += self.spm_a_addr.eq(table.spm_addr)
        with m.If(tseq.spm_read):
            m.d.comb += self.spm_a_addr.eq(tseq.spm_addr)
        m.d.comb += [self.acc_b_use.eq(seq.b_use & b_on_acc), self.spm_b_use.eq(seq.b_use & ~b_on_acc)]
        with m.If(self.acc_b_use):
            m.d.comb += self.acc_b_addr.eq(seq.b_addr)
        with m.If(self.spm_b_use):
            m.d.comb += self.spm_b_addr.eq(seq.b_addr)

        def operand(on_acc, spm_row, acc_row):
            row = Signal(lanes32)
            spm = data.View(data.ArrayLayout(signed(8), n), spm_row)
            acc = data.View(lanes32, acc_row)
            m.d.comb += [row[i].eq(Mux(on_acc, acc[i], spm[i])) for i in range(n)]
            return row

        a_row = operand(a_on_acc, self.spm_a_data, self.acc_a_data)
        b_row = operand(b_on_acc, self.spm_b_data, self.acc_b_data)

        # ---- VECTOR: lanes (and reducer), or the divider one step at a time ----------------------------------
        step = seq.step
        lanes_step = Signal()
        m.d.comb += [
            lanes_step.eq(step.valid & ~serial),
            lanes.valid.eq(lanes_step), lanes.vop.eq(vop), lanes.a.eq(a_row), lanes.b.eq(b_row),
            lanes.shift.eq(shift), lanes.imm.eq(imm), lanes.imm2.eq(imm2), lanes.d_acc.eq(d_acc),
            table.spm_data.eq(self.spm_a_data), lanes.table_we.eq(table.table_we),
            lanes.table_index.eq(table.table_index), lanes.table_data.eq(table.table_data),
        ]
        out_valid, out_ctl = delay_valid_ctl(m, lanes_step, step.as_value(), LANES_LATENCY, "lanes")
        out_step = data.View(step_layout(), out_ctl)
        # A reduction's steps go on to the reducer; its D row (and whether it ends the command) comes with the
        # statistic.
        is_reduce = Signal()
        m.d.comb += [
            is_reduce.eq(Cat(vop == op for op, spec in VECTOR_OPS.items() if spec.kind == "reduce").any()),
            reducer.valid.eq(out_valid & is_reduce), reducer.first.eq(out_step.first),
            reducer.last.eq(out_step.last), reducer.vop.eq(vop), reducer.d_acc.eq(d_acc),
            reducer.terms.eq(lanes.out),
        ]
        _, reduce_ctl = delay_valid_ctl(m, out_valid & out_step.last, Cat(out_step.d_addr, out_step.end),
                                        REDUCE_LATENCY, "reduce")
        # RECIP and ISQRT: the divider takes the step's A row a cycle after it came off the memory (registered
        # first: the divider's saturation check on it would follow the block RAM's clock-to-out); its ctl waits
        # beside it.
        div_ctl = Signal(step_layout())
        div_start = Signal()
        div_a = Signal(lanes32, reset_less=True)
        m.d.sync += [div_start.eq(step.valid & serial), div_a.eq(a_row)]
        with m.If(step.valid & serial):
            m.d.sync += div_ctl.eq(step)
        m.d.comb += [divider.start.eq(div_start), divider.a.eq(div_a), divider.vop.eq(vop),
                     divider.shift.eq(shift), divider.d_acc.eq(d_acc)]

        # ---- writes: one D row a cycle at most, saturated to D's lane type -----------------------------------
        w_valid, w_addr, w_end = Signal(), Signal(16), Signal()
        w_row = Signal(lanes32)
        with m.If(divider.done):
            m.d.comb += [w_valid.eq(1), w_addr.eq(div_ctl.d_addr), w_end.eq(div_ctl.end), w_row.eq(divider.out)]
        with m.Elif(reducer.out_valid):
            m.d.comb += [w_valid.eq(1), w_addr.eq(reduce_ctl[:16]), w_end.eq(reduce_ctl[16]),
                         w_row.eq(reducer.out)]
        with m.Elif(out_valid & ~is_reduce):
            m.d.comb += [w_valid.eq(1), w_addr.eq(out_step.d_addr), w_end.eq(out_step.end), w_row.eq(lanes.out)]
        m.d.comb += seq.written.eq(w_valid)
        spm_w = Cat(w_row[i][:8] for i in range(n))
        with m.If(w_valid & d_acc):
            m.d.comb += [self.acc_w_en.eq(1), self.acc_w_addr.eq(w_addr), self.acc_w_data.eq(w_row.as_value())]
        with m.If(w_valid & ~d_acc):
            m.d.comb += [self.spm_w_en.eq(1), self.spm_w_addr.eq(w_addr), self.spm_w_data.eq(spm_w)]
        m.d.comb += [tbuf.load.eq(tseq.load), tbuf.row.eq(self.spm_a_data), tbuf.read.eq(tseq.read)]
        with m.If(tseq.w_en):
            m.d.comb += [self.spm_w_en.eq(1), self.spm_w_addr.eq(tseq.w_addr), self.spm_w_data.eq(tbuf.col)]

        # ---- completion and counters --------------------------------------------------------------------
        finished = Signal()
        m.d.comb += [
            finished.eq((w_valid & w_end) | table.done | tseq.done),
            self.done.valid.eq(finished), self.done.tag.eq(tag), self.done.status.eq(ErrorCode.OK),
            self.done.opcode.eq(opcode),
        ]
        m.d.sync += self.progress.eq(seq.a_read | table.table_we | tseq.spm_read | self.spm_w_en | self.acc_w_en)
        with m.If(self.busy):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
        with m.If(out_valid):
            m.d.sync += [self.hits.eq(self.hits + lanes.hits), self.underflows.eq(self.underflows + lanes.underflows),
                         self.overflows.eq(self.overflows + lanes.overflows)]
        return m
