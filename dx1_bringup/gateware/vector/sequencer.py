"""The VECTOR command's step sequencer: the local rows of every step in the spec's order, with the
in-command read-after-write hazard stall."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BITS, COMMANDS, VECTOR_OPS, Opcode, VectorOp
from ..layouts import command_layout

__all__ = ["HazardQueue", "VectorSequencer", "step_layout", "SERIAL_VOPS"]

#: Vops whose steps run one at a time (the iterative divider takes one row).
SERIAL_VOPS = (VectorOp.RECIP, VectorOp.ISQRT)


def step_layout() -> data.StructLayout:
    """One step as it leaves the sequencer, beside its operand rows: where its result goes and where it sits."""
    return data.StructLayout({
        "valid": 1,
        "first": 1,     # first column of an outer row (a reduction starts)
        "last": 1,      # last column of an outer row (a reduction ends and writes D)
        "end": 1,       # last step of the command
        "d_addr": 16, "d_acc": 1,
    })


class HazardQueue(wiring.Component):
    """The destination rows of steps issued but not yet written, in order, searched at once.

    ``push`` (with ``push_acc``, ``push_addr``) enters a row; ``pop`` removes the oldest (the write that
    happens this cycle: it is still searched, since a read in the cycle of a write sees the old row).
    ``a_hit`` / ``b_hit`` say whether the row ``a_acc``/``a_addr`` (``b_*``) is among those waiting;
    ``empty`` and ``room`` describe the queue.

    Parameters
    ----------
    depth:
        Rows it holds: at least the steps in flight between a read and its write, or the sequencer stalls.
    """

    def __init__(self, depth: int):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"Hazard queue depth must be a positive integer, not {depth!r}")
        self.depth = depth
        super().__init__({
            "push": In(1), "push_acc": In(1), "push_addr": In(16),
            "pop": In(1),
            "a_acc": In(1), "a_addr": In(16), "a_hit": Out(1),
            "b_acc": In(1), "b_addr": In(16), "b_hit": Out(1),
            "empty": Out(1), "room": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.depth
        valid = [Signal(name=f"valid{i}") for i in range(n)]
        acc = [Signal(name=f"acc{i}") for i in range(n)]
        addr = [Signal(16, name=f"addr{i}") for i in range(n)]
        head = Signal(range(n))
        tail = Signal(range(n))
        count = Signal(range(n + 1))
        m.d.comb += [self.empty.eq(count == 0), self.room.eq(count != n)]
        m.d.sync += count.eq(count + self.push - self.pop)
        with m.If(self.push):
            m.d.sync += tail.eq(0 if n == 1 else (tail + 1) % n)
        with m.If(self.pop):
            m.d.sync += head.eq(0 if n == 1 else (head + 1) % n)
        for i in range(n):
            with m.If(self.pop & (head == i)):
                m.d.sync += valid[i].eq(0)
            with m.If(self.push & (tail == i)):
                m.d.sync += [valid[i].eq(1), acc[i].eq(self.push_acc), addr[i].eq(self.push_addr)]
        a_hit = 0
        b_hit = 0
        for i in range(n):
            a_hit |= valid[i] & (acc[i] == self.a_acc) & (addr[i] == self.a_addr)
            b_hit |= valid[i] & (acc[i] == self.b_acc) & (addr[i] == self.b_addr)
        m.d.comb += [self.a_hit.eq(a_hit), self.b_hit.eq(b_hit)]
        return m


class VectorSequencer(wiring.Component):
    """Walks one VECTOR ``command`` from ``start``: one step a cycle, outer row by outer row, column by column.

    Step (r, c) reads A's local row ``a_addr + r*a_row_stride + c`` (``a_read``, ``a_addr``, ``a_acc``) and,
    for a binary vop, B's ``b_addr + r*b_row_stride + c*b_col_stride`` (``b_read``, ...).  The addresses are on
    the read ports (``a_use``, ``b_use``) from the first step's cycle to the last's, stalled or not, so that
    the ports' address does not wait for the hazard search (``a_read`` and ``b_read`` do).  A cycle later, with
    the rows on the read ports, ``step`` describes it: D's row ``d_addr + r*d_row_stride`` (``+ c`` for an
    elementwise vop), the first/last column of its outer row and the command's end.  Every step of an
    elementwise vop and the last of each outer row of a reduction writes D; those rows wait in a
    :class:`HazardQueue` until the unit reports the write (``written``), and a step whose A or B row is among
    them waits (a read sees every earlier write of the command).  RECIP and ISQRT steps run one at a time.
    ``busy`` is high from ``start`` until the last step's write.

    Parameters
    ----------
    depth:
        Steps that may be in flight between their reads and their writes.
    """

    def __init__(self, depth: int):
        self.depth = depth
        super().__init__({
            "start": In(1), "command": In(COMMAND_BITS), "busy": Out(1),
            "a_use": Out(1), "a_read": Out(1), "a_addr": Out(16), "a_acc": Out(1),
            "b_use": Out(1), "b_read": Out(1), "b_addr": Out(16), "b_acc": Out(1),
            "step": Out(step_layout()),
            "written": In(1),
            "stalled": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.hazards = hazards = HazardQueue(self.depth)
        spec = COMMANDS[Opcode.VECTOR]
        v = data.View(command_layout(Opcode.VECTOR), self.command)

        uses_b, reduce, serial = Signal(), Signal(), Signal()
        d_acc = Signal()
        rows_left = Signal(16)
        cols = Signal(16)
        col = Signal(16)
        a_row, a_cur, a_rs = Signal(16), Signal(16), Signal(16)
        b_row, b_cur, b_rs, b_cs = Signal(16), Signal(16), Signal(16), Signal(16)
        d_row, d_cur, d_rs = Signal(16), Signal(16), Signal(16)
        issuing = Signal()  # steps remain to be issued
        ends = Signal()     # the end step has been issued; busy until its write

        def kinds(op_set):
            hit = 0
            for op in op_set:
                hit |= v.vop == op
            return hit

        with m.If(self.start):
            m.d.sync += [
                self.busy.eq(1), issuing.eq(1), ends.eq(0),
                uses_b.eq(kinds(o for o, s in VECTOR_OPS.items() if s.uses_b)),
                reduce.eq(kinds(o for o, s in VECTOR_OPS.items() if s.kind == "reduce")),
                serial.eq(kinds(SERIAL_VOPS)),
                self.a_acc.eq(v.flags[spec.flag_bit("a_acc")]), self.b_acc.eq(v.flags[spec.flag_bit("b_acc")]),
                d_acc.eq(v.flags[spec.flag_bit("d_acc")]),
                rows_left.eq(v.rows), cols.eq(v.cols), col.eq(0),
                a_row.eq(v.a_addr), a_cur.eq(v.a_addr), a_rs.eq(v.a_row_stride),
                b_row.eq(v.b_addr), b_cur.eq(v.b_addr), b_rs.eq(v.b_row_stride), b_cs.eq(v.b_col_stride),
                d_row.eq(v.d_addr), d_cur.eq(v.d_addr), d_rs.eq(v.d_row_stride),
            ]

        m.d.comb += [
            self.a_addr.eq(a_cur), self.b_addr.eq(b_cur),
            hazards.a_acc.eq(self.a_acc), hazards.a_addr.eq(a_cur),
            hazards.b_acc.eq(self.b_acc), hazards.b_addr.eq(b_cur),
        ]
        last_col = Signal()
        writes = Signal()
        go = Signal()
        m.d.comb += [
            last_col.eq(col == cols - 1),
            writes.eq(~reduce | last_col),
            self.stalled.eq(issuing & ~go),
            go.eq(issuing & ~hazards.a_hit & ~(uses_b & hazards.b_hit) & hazards.room
                  & ~(serial & ~hazards.empty)),
            self.a_use.eq(issuing), self.b_use.eq(issuing & uses_b),
            self.a_read.eq(go), self.b_read.eq(go & uses_b),
            hazards.push.eq(go & writes), hazards.push_acc.eq(d_acc), hazards.push_addr.eq(d_cur),
            hazards.pop.eq(self.written),
        ]
        with m.If(go):
            m.d.sync += [col.eq(col + 1), a_cur.eq(a_cur + 1), b_cur.eq(b_cur + b_cs)]
            with m.If(~reduce):
                m.d.sync += d_cur.eq(d_cur + 1)
            with m.If(last_col):
                m.d.sync += [
                    col.eq(0), rows_left.eq(rows_left - 1),
                    a_row.eq(a_row + a_rs), a_cur.eq(a_row + a_rs),
                    b_row.eq(b_row + b_rs), b_cur.eq(b_row + b_rs),
                    d_row.eq(d_row + d_rs), d_cur.eq(d_row + d_rs),
                ]
                with m.If(rows_left == 1):
                    m.d.sync += [issuing.eq(0), ends.eq(1)]
        m.d.sync += [
            self.step.valid.eq(go), self.step.first.eq(col == 0), self.step.last.eq(last_col),
            self.step.end.eq(last_col & (rows_left == 1)), self.step.d_addr.eq(d_cur), self.step.d_acc.eq(d_acc),
        ]
        with m.If(ends & hazards.empty & ~self.start):
            m.d.sync += [self.busy.eq(0), ends.eq(0)]
        return m
