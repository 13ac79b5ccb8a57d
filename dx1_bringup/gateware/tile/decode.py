"""The tile core's command decoder: one command held in an input register while the spec's checks are computed."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BITS, COMMANDS, ErrorCode, Opcode, TileConfig
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
    The command stays until ``take``.

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
        a_rows = Signal(32)
        b_rows = Signal(32)
        m.d.sync += [a_rows.eq(g.k_chunks * g.m), b_rows.eq(g.k_chunks * cfg.array)]
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
            with m.Default():
                m.d.comb += status_next.eq(ErrorCode.BAD_OPCODE)
        m.d.sync += self.status.eq(status_next)
        return m
