"""A queue's ring pointers and its error latch."""

from __future__ import annotations

from amaranth import Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import ErrorCode
from .slots import ErrorReportSignature

__all__ = ["RingPointers", "ErrorLatch"]


class RingPointers(wiring.Component):
    """HEAD, TAIL and the phase bit of one command ring, and the doorbell checks.

    * ``ring_reset`` empties the ring: HEAD = TAIL = 0, phase 1.
    * A ``doorbell`` moves TAIL to ``doorbell_index``, unless RING_LOG2 is out of 1..16 (``BAD_FIELD``), the
      index is past the ring (``DOORBELL_RANGE``) or TAIL would overtake HEAD (``RING_OVERFLOW``); then TAIL
      stays and ``error`` reports the code with the doorbell's index.
    * ``advance`` (a command was fetched) moves HEAD on by one, and flips ``phase`` when it wraps.

    ``mask`` is the ring size minus one and ``entries_ok`` says RING_LOG2 is legal, for the other parts.
    """

    def __init__(self):
        super().__init__({
            "ring_log2": In(5), "ring_reset": In(1), "doorbell": In(1), "doorbell_index": In(16), "advance": In(1),
            "head": Out(16), "tail": Out(16), "phase": Out(1, init=1), "mask": Out(16), "entries_ok": Out(1),
            "error": Out(ErrorReportSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        head, tail, phase, mask = self.head, self.tail, self.phase, self.mask
        m.d.comb += [self.entries_ok.eq((self.ring_log2 >= 1) & (self.ring_log2 <= 16)),
                     mask.eq((Const(1, 17) << self.ring_log2) - 1)]

        with m.If(self.ring_reset):  # RING_LOG2 written: a new, empty ring
            m.d.sync += [head.eq(0), tail.eq(0), phase.eq(1)]
        with m.If(self.doorbell):
            pending_before = (tail - head) & mask
            pending_after = (self.doorbell_index - head) & mask
            m.d.comb += self.error.index.eq(self.doorbell_index)
            with m.If(~self.entries_ok):
                m.d.comb += [self.error.valid.eq(1), self.error.code.eq(ErrorCode.BAD_FIELD)]
            with m.Elif(self.doorbell_index > mask):
                m.d.comb += [self.error.valid.eq(1), self.error.code.eq(ErrorCode.DOORBELL_RANGE)]
            with m.Elif(pending_after < pending_before):
                m.d.comb += [self.error.valid.eq(1), self.error.code.eq(ErrorCode.RING_OVERFLOW)]
            with m.Else():
                m.d.sync += tail.eq(self.doorbell_index)
        with m.If(self.advance):
            m.d.sync += head.eq((head + 1) & mask)
            with m.If(((head + 1) & mask) == 0):
                m.d.sync += phase.eq(~phase)
        return m


class ErrorLatch(wiring.Component):
    """The queue's ERROR register and its halt: the first cycle of any error report halts the queue.

    ``reports`` error sources, in rising priority (when two report in one cycle, the later one's code and
    index are kept).  ``resume`` clears ``halted``; ``irq_error`` pulses with every report.

    Parameters
    ----------
    reports:
        How many sources report errors (ports ``report0`` ...).
    """

    def __init__(self, reports: int):
        if not isinstance(reports, int) or isinstance(reports, bool) or reports < 1:
            raise ValueError(f"Error latch reports must be a positive integer, not {reports!r}")
        self.reports = reports
        super().__init__({
            **{f"report{i}": In(ErrorReportSignature()) for i in range(reports)},
            "resume": In(1), "halted": Out(1), "code": Out(8), "index": Out(16), "irq_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        with m.If(self.resume):
            m.d.sync += self.halted.eq(0)
        raised = Signal()
        for i in range(self.reports):
            report = getattr(self, f"report{i}")
            with m.If(report.valid):
                m.d.sync += [self.halted.eq(1), self.code.eq(report.code), self.index.eq(report.index)]
                m.d.comb += raised.eq(1)
        m.d.comb += self.irq_error.eq(raised)
        return m
