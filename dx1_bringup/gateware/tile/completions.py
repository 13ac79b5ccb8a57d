"""The tile core's completions: an in-order FIFO of (tag, status, opcode), and the credits that keep room in it."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..layouts import DONE_LAYOUT
from ..stream import AXIStreamSignature

__all__ = ["COMPLETION", "DONE_DEPTH", "Completions"]

#: Completions the core can hold; it accepts no command that would not have room for its own.
DONE_DEPTH = 8

#: One completion, as its writer drives it: a cycle of ``valid`` with the entry's fields.
COMPLETION = wiring.Signature({
    "valid": Out(1),
    "tag": Out(DONE_LAYOUT["tag"].shape),
    "status": Out(DONE_LAYOUT["status"].shape),
    "opcode": Out(DONE_LAYOUT["opcode"].shape),
})


class Completions(wiring.Component):
    """Completions from four writers, in the order they come, on ``done`` (DONE_LAYOUT words).

    The writers are the command issue (errors and NOPs), the GEMM result
    writer, the post-op sequencer and the vector unit; the core never lets two complete in one
    cycle (if they did, the later in that list would win).  ``reserve`` says a
    command was taken, so a completion will follow: ``credit`` is high while
    fewer than :data:`DONE_DEPTH` completions are promised or waiting, and
    ``pending`` while any are.
    """

    def __init__(self):
        super().__init__({
            "issue": In(COMPLETION),
            "gemm": In(COMPLETION),
            "postop": In(COMPLETION),
            "vector": In(COMPLETION),
            "done": Out(AXIStreamSignature(32)),
            "reserve": In(1),
            "credit": Out(1),
            "pending": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.done_fifo = fifo = SyncFIFOBuffered(width=32, depth=DONE_DEPTH)
        entry = data.View(DONE_LAYOUT, fifo.w_data)
        m.d.comb += [self.done.tdata.eq(fifo.r_data), self.done.tvalid.eq(fifo.r_rdy), fifo.r_en.eq(self.done.tready)]
        for writer in (self.issue, self.gemm, self.postop, self.vector):
            with m.If(writer.valid):
                m.d.comb += [fifo.w_en.eq(1), entry.tag.eq(writer.tag), entry.status.eq(writer.status),
                             entry.opcode.eq(writer.opcode)]

        outstanding = Signal(range(DONE_DEPTH + 1))
        popped = Signal()
        m.d.comb += [
            popped.eq(self.done.tvalid & self.done.tready),
            self.pending.eq(outstanding != 0),
            self.credit.eq(outstanding < DONE_DEPTH),
        ]
        m.d.sync += outstanding.eq(outstanding + self.reserve - popped)
        return m
