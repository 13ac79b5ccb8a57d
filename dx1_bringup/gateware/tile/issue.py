"""The tile core's command issue: one decoded command a cycle at most, to the GEMM queues, the post-op or done."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BITS, ErrorCode, Opcode
from ..layouts import HEADER_LAYOUT
from .completions import COMPLETION

__all__ = ["GEMM_QUEUE_DEPTH", "VECTOR_OPCODES", "CommandIssue"]

#: The commands the vector unit runs.
VECTOR_OPCODES = (Opcode.VECTOR, Opcode.TABLE, Opcode.TRANSPOSE)

#: GEMM commands queued ahead of the weight loader and the activation streamer.
GEMM_QUEUE_DEPTH = 4


class CommandIssue(wiring.Component):
    """Issues the decoded ``command`` (with its ``status``) when the core can take it, keeping completions in order.

    Nothing is taken without a completion ``credit``.  A failing command or a
    NOP completes at once (on ``done``), but only once the core is idle (no
    GEMM in flight, no post-op), so it cannot overtake them.  A GEMM is pushed
    to both GEMM queues (``gemm``) when both have room (``queues_ready``) and
    no post-op runs; a POSTOP starts (``postop``) once the core is idle, since
    one writes what the other reads.  A VECTOR, TABLE or TRANSPOSE starts
    (``vector``) once the core is idle too, and while it runs (``vector_busy``)
    nothing else is issued.  ``take`` marks the cycle a command goes.
    GEMMs in flight are counted from ``gemm`` to ``gemm_done``.
    """

    def __init__(self):
        super().__init__({
            "decoded": In(1),
            "command": In(COMMAND_BITS),
            "status": In(8),
            "credit": In(1),
            "queues_ready": In(1),
            "postop_busy": In(1),
            "vector_busy": In(1),
            "gemm_done": In(1),
            "take": Out(1),
            "done": Out(COMPLETION),
            "gemm": Out(1),
            "postop": Out(1),
            "vector": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        hdr = data.View(HEADER_LAYOUT, self.command)
        gemm_inflight = Signal(range(2 * GEMM_QUEUE_DEPTH + 2))
        m.d.sync += gemm_inflight.eq(gemm_inflight + self.gemm - self.gemm_done)
        idle = Signal()
        m.d.comb += idle.eq((gemm_inflight == 0) & ~self.postop_busy & ~self.vector_busy)
        with m.If(self.decoded & self.credit):
            with m.If((self.status != ErrorCode.OK) | (hdr.opcode == Opcode.NOP)):
                with m.If(idle):
                    m.d.comb += [
                        self.take.eq(1), self.done.valid.eq(1),
                        self.done.tag.eq(hdr.tag), self.done.status.eq(self.status), self.done.opcode.eq(hdr.opcode),
                    ]
            with m.Elif(hdr.opcode == Opcode.GEMM):
                with m.If(~self.postop_busy & ~self.vector_busy & self.queues_ready):
                    m.d.comb += [self.take.eq(1), self.gemm.eq(1)]
            with m.Elif(hdr.opcode.matches(*VECTOR_OPCODES)):
                with m.If(idle):
                    m.d.comb += [self.take.eq(1), self.vector.eq(1)]
            with m.Else():  # POSTOP
                with m.If(idle):
                    m.d.comb += [self.take.eq(1), self.postop.eq(1)]
        return m
