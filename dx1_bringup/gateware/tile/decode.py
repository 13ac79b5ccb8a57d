"""The tile core's command decoder: one command held in an input register while the spec's checks are computed."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import (
    COMMAND_BITS,
    COMMANDS,
    VECTOR_OPS,
    ErrorCode,
    Opcode,
    TileConfig,
    VectorOp,
    table_rows,
    vector_reserved_mask,
)
from ..layouts import HEADER_LAYOUT, command_layout
from ..postop import MAX_SHIFT
from ..stream import AXIStreamSignature

__all__ = ["DECODE_STAGES", "CommandDecoder"]

#: Registered decode steps between taking a command and dispatching it: products, then the checks.
DECODE_STAGES = 2


def _first_failing(checks: list[tuple[object, ErrorCode]]):
    """Status of the first true condition in ``checks`` (spec order), else OK."""
    status = ErrorCode.OK
    for cond, code in reversed(checks):
        status = Mux(cond, code, status)
    return status


class CommandDecoder(wiring.Component):
    """Takes a command from ``cmd`` into ``command`` and checks its fields against the tile's sizes.

    ``cmd.tready`` is low while a command is held (``holding``).
    :data:`DECODE_STAGES` cycles after it was taken, ``decoded`` rises with
    ``status``: the error code of the first check that fails in the spec's
    order (reserved bits, dimensions, fields, scratchpad range, accumulator
    range), ``BAD_OPCODE`` for an opcode the core does not execute, else OK.
    The command stays until ``take``.  With the vector unit (``config.vector``)
    VECTOR, TABLE and TRANSPOSE are checked as ``model.vector.check_vector_command``
    does; without it they are ``BAD_OPCODE``.  The row products of the range
    checks are registered in the first step; GEMM, VECTOR and TRANSPOSE share
    their multipliers.

    Parameters
    ----------
    config:
        The tile's sizes.
    """

    def __init__(self, config: TileConfig):
        self.config = config
        super().__init__({
            "cmd": In(AXIStreamSignature(COMMAND_BITS)),
            "command": Out(COMMAND_BITS),
            "holding": Out(1),
            "decoded": Out(1),
            "status": Out(8),
            "take": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        cmd = self.command
        stage = Signal(range(DECODE_STAGES + 1))
        m.d.comb += [self.cmd.tready.eq(~self.holding), self.decoded.eq(self.holding & (stage == DECODE_STAGES))]
        with m.If(self.cmd.tvalid & self.cmd.tready):
            m.d.sync += [cmd.eq(self.cmd.tdata), self.holding.eq(1), stage.eq(0)]
        with m.Elif(self.take):
            m.d.sync += self.holding.eq(0)
        with m.Elif(self.holding & (stage != DECODE_STAGES)):
            m.d.sync += stage.eq(stage + 1)

        hdr = data.View(HEADER_LAYOUT, cmd)
        g = data.View(command_layout(Opcode.GEMM), cmd)
        p = data.View(command_layout(Opcode.POSTOP), cmd)
        post_spec = COMMANDS[Opcode.POSTOP]

        def reserved(op):
            return (cmd & COMMANDS[op].reserved_mask) != 0

        # Step 1: the products (registered); step 2: the checks (registered into `status`).
        v = data.View(command_layout(Opcode.VECTOR), cmd)
        t = data.View(command_layout(Opcode.TRANSPOSE), cmd)
        is_gemm, is_transpose = hdr.opcode == Opcode.GEMM, hdr.opcode == Opcode.TRANSPOSE
        a_rows = Signal(32)
        b_rows = Signal(32)
        m.d.sync += b_rows.eq(g.k_chunks * cfg.array)
        if cfg.vector:
            # VECTOR: the last outer row's and column's offsets; TRANSPOSE: the last block's.
            b_last = Signal(32)
            col_last = Signal(32)
            d_last = Signal(32)
            m.d.sync += [
                a_rows.eq(Mux(is_gemm, g.k_chunks, v.rows - 1) * Mux(is_gemm, g.m, v.a_row_stride)),
                b_last.eq(Mux(is_transpose, t.blocks - 1, v.rows - 1) * Mux(is_transpose, t.src_stride,
                                                                             v.b_row_stride)),
                col_last.eq(Mux(is_transpose, t.blocks - 1, v.cols - 1) * Mux(is_transpose, t.dst_stride,
                                                                              v.b_col_stride)),
                d_last.eq((v.rows - 1) * v.d_row_stride),
            ]
        else:
            m.d.sync += a_rows.eq(g.k_chunks * g.m)
        p_bias = p.flags[post_spec.flag_bit("bias")]
        status_next = Signal(8)
        with m.Switch(hdr.opcode):
            with m.Case(Opcode.NOP):
                m.d.comb += status_next.eq(_first_failing([(reserved(Opcode.NOP), ErrorCode.RESERVED_BITS)]))
            with m.Case(Opcode.GEMM):
                m.d.comb += status_next.eq(_first_failing([
                    (reserved(Opcode.GEMM), ErrorCode.RESERVED_BITS),
                    ((g.m == 0) | (g.k_chunks == 0), ErrorCode.BAD_DIMENSION),
                    ((g.a_addr + a_rows > cfg.spm_rows) | (g.b_addr + b_rows > cfg.spm_rows), ErrorCode.SPM_RANGE),
                    (g.c_addr + g.m > cfg.acc_rows, ErrorCode.ACC_RANGE),
                ]))
            with m.Case(Opcode.POSTOP):
                m.d.comb += status_next.eq(_first_failing([
                    (reserved(Opcode.POSTOP), ErrorCode.RESERVED_BITS),
                    (p.rows == 0, ErrorCode.BAD_DIMENSION),
                    (p.shift > MAX_SHIFT, ErrorCode.BAD_FIELD),
                    (p.dst_addr + p.rows > cfg.spm_rows, ErrorCode.SPM_RANGE),
                    ((p.src_addr + p.rows > cfg.acc_rows)
                     | (p_bias & (p.bias_addr >= cfg.acc_rows)), ErrorCode.ACC_RANGE),
                ]))
            if cfg.vector:
                with m.Case(Opcode.VECTOR):
                    m.d.comb += status_next.eq(self._vector_status(m, cmd, a_rows, b_last, col_last, d_last))
                with m.Case(Opcode.TABLE):
                    m.d.comb += status_next.eq(_first_failing([
                        (reserved(Opcode.TABLE), ErrorCode.RESERVED_BITS),
                        (t.src_addr + table_rows(cfg.array) > cfg.spm_rows, ErrorCode.SPM_RANGE),
                    ]))
                with m.Case(Opcode.TRANSPOSE):
                    m.d.comb += status_next.eq(_first_failing([
                        (reserved(Opcode.TRANSPOSE), ErrorCode.RESERVED_BITS),
                        (t.blocks == 0, ErrorCode.BAD_DIMENSION),
                        ((t.src_addr + b_last + cfg.array > cfg.spm_rows)
                         | (t.dst_addr + col_last + cfg.array > cfg.spm_rows), ErrorCode.SPM_RANGE),
                    ]))
            with m.Default():
                m.d.comb += status_next.eq(ErrorCode.BAD_OPCODE)
        m.d.sync += self.status.eq(status_next)
        return m

    def _vector_status(self, m: Module, cmd: Signal, a_off, b_off, b_col_off, d_off):
        """A VECTOR command's status from its registered row offsets: the vop's reserved mask, the dimensions,
        the vop, shift and immediates, then the last local row of every operand it uses."""
        cfg = self.config
        spec = COMMANDS[Opcode.VECTOR]
        v = data.View(command_layout(Opcode.VECTOR), cmd)
        reserved, bad_field, uses_b, reduce = Signal(), Signal(), Signal(), Signal()
        with m.Switch(v.vop):
            for op, op_spec in VECTOR_OPS.items():
                with m.Case(op):
                    bad = v.shift > (op_spec.max_shift or 0)
                    if op == VectorOp.CLAMP:
                        bad |= v.imm.as_signed() > v.imm2.as_signed()
                    m.d.comb += [reserved.eq((cmd & vector_reserved_mask(op)) != 0), bad_field.eq(bad),
                                 uses_b.eq(op_spec.uses_b), reduce.eq(op_spec.kind == "reduce")]
            with m.Default():
                m.d.comb += [reserved.eq((cmd & spec.reserved_mask) != 0), bad_field.eq(1)]
        col = v.cols - 1
        operands = [  # (in the accumulator buffer, last local row, used)
            (v.flags[spec.flag_bit("a_acc")], v.a_addr + a_off + col, 1),
            (v.flags[spec.flag_bit("b_acc")], v.b_addr + b_off + b_col_off, uses_b),
            (v.flags[spec.flag_bit("d_acc")], v.d_addr + d_off + Mux(reduce, 0, col), 1),
        ]
        spm_bad = 0
        acc_bad = 0
        for acc, last, used in operands:
            spm_bad |= used & ~acc & (last >= cfg.spm_rows)
            acc_bad |= used & acc & (last >= cfg.acc_rows)
        return _first_failing([
            (reserved, ErrorCode.RESERVED_BITS),
            ((v.rows == 0) | (v.cols == 0), ErrorCode.BAD_DIMENSION),
            (bad_field, ErrorCode.BAD_FIELD),
            (spm_bad, ErrorCode.SPM_RANGE),
            (acc_bad, ErrorCode.ACC_RANGE),
        ])
