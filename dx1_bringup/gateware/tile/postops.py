"""The tile core's post-op sequencer: a POSTOP's accumulator rows through the requantiser into the scratchpad."""

from __future__ import annotations

from amaranth import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import COMMAND_BITS, COMMANDS, ErrorCode, Opcode, TileConfig
from ..layouts import command_layout
from ..postop import PostOp
from .completions import COMPLETION

__all__ = ["PostOpSequencer"]


class PostOpSequencer(wiring.Component):
    """Runs one POSTOP ``command`` from ``start`` until ``busy`` falls, its completion on ``done``.

    At ``start`` the settings are latched and, with the ``bias`` flag, the
    bias row is read (the read port is the sequencer's that cycle and the next,
    ``acc_use``).  Then a row a cycle is read from ``src_addr`` on
    (``acc_addr``, ``acc_data`` a cycle later) into a :class:`~..postop.PostOp`,
    whose requantised rows are written to the scratchpad from ``dst_addr`` on
    (``spm_*``, ``writing``); the last one ends the command.

    Parameters
    ----------
    config:
        The tile's sizes.
    """

    def __init__(self, config: TileConfig):
        self.config = config
        n = config.array
        spm_bits, acc_bits = exact_log2(config.spm_rows), exact_log2(config.acc_rows)
        super().__init__({
            "start": In(1), "command": In(COMMAND_BITS), "busy": Out(1),
            "acc_use": Out(1), "acc_addr": Out(acc_bits), "acc_data": In(32 * n),
            "writing": Out(1), "spm_addr": Out(spm_bits), "spm_data": Out(8 * n),
            "done": Out(COMPLETION),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.array
        spm_bits = len(self.spm_addr)
        post_ctl = data.StructLayout({"dst": unsigned(spm_bits), "last": 1})
        m.submodules.postop = postop = PostOp(n, ctl_width=post_ctl.size)
        p = data.View(command_layout(Opcode.POSTOP), self.command)
        post_spec = COMMANDS[Opcode.POSTOP]
        p_bias = p.flags[post_spec.flag_bit("bias")]

        src = Signal.like(self.acc_addr)
        dst = Signal(spm_bits)
        left = Signal(16)
        tag = Signal(16)
        bias_pending = Signal()
        reading = Signal()
        bias = Signal.like(postop.bias)
        m.d.comb += self.acc_use.eq(self.start | bias_pending | reading)
        with m.If(self.start):
            m.d.sync += [
                self.busy.eq(1), src.eq(p.src_addr), dst.eq(p.dst_addr), left.eq(p.rows),
                tag.eq(p.tag), bias_pending.eq(p_bias), bias.eq(0),
                postop.mult.eq(p.mult), postop.shift.eq(p.shift),
                postop.relu.eq(p.flags[post_spec.flag_bit("relu")]),
            ]
            with m.If(p_bias):
                m.d.comb += self.acc_addr.eq(p.bias_addr)
        with m.Elif(bias_pending):
            m.d.sync += [bias.eq(self.acc_data), bias_pending.eq(0)]
        with m.Elif(self.busy & (left != 0)):
            m.d.comb += [reading.eq(1), self.acc_addr.eq(src)]
            m.d.sync += [src.eq(src + 1), dst.eq(dst + 1), left.eq(left - 1)]
        row_valid = Signal()
        row_ctl = Signal(post_ctl)
        m.d.sync += [row_valid.eq(reading), row_ctl.dst.eq(dst), row_ctl.last.eq(left == 1)]
        m.d.comb += [
            postop.bias.eq(bias), postop.row.eq(self.acc_data), postop.row_valid.eq(row_valid),
            postop.ctl.eq(row_ctl),
        ]
        out = data.View(post_ctl, postop.out_ctl)
        m.d.comb += self.writing.eq(postop.out_valid)
        with m.If(postop.out_valid):
            m.d.comb += [self.spm_addr.eq(out.dst), self.spm_data.eq(postop.out)]
            with m.If(out.last):
                m.d.sync += self.busy.eq(0)
                m.d.comb += [self.done.valid.eq(1), self.done.tag.eq(tag), self.done.status.eq(ErrorCode.OK),
                             self.done.opcode.eq(Opcode.POSTOP)]
        return m
