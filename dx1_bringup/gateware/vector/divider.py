"""The vector unit's lane divider: RECIP and ISQRT on every lane at once, two restoring iterations a cycle."""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import VectorOp

__all__ = ["LaneDivider", "DIVIDER_STEPS"]

_QUOTIENT_BITS = 32  # RECIP's quotient bits after the saturation check (bits 31..0 of 2**shift / a)
_PER_CYCLE = 2       # restoring iterations a cycle
_ITERATION_CYCLES = _QUOTIENT_BITS // _PER_CYCLE
_ROOT_START = _QUOTIENT_BITS - 16  # ISQRT's 16 iterations are the last 16 (the first see zero pairs)
#: Cycles from ``start`` to ``done``: the operands' latch, the iterations, the saturated result.
DIVIDER_STEPS = 1 + _ITERATION_CYCLES + 1

_INT32_MAX = (1 << 31) - 1


class LaneDivider(wiring.Component):
    """RECIP and ISQRT of ``array`` int32 lanes, as ``model/vector.py`` computes them.

    RECIP: ``floor(2**shift / a)`` for ``a >= 1``, at most ``2**31 - 1``; ``2**31 - 1`` for ``a <= 0``
    (``shift <= 47``).  ISQRT: ``floor(sqrt(a))``, 0 for ``a < 0``.  Either is then saturated to int8, or int32
    when ``d_acc``.

    A ``start`` while not ``busy`` takes ``vop``, ``shift``, ``d_acc`` and ``a``; ``DIVIDER_STEPS`` cycles
    later ``done`` pulses with ``out``, which holds until the next start.  ``busy`` is high from the cycle after
    the start until ``done``, when a new start may come; a start while busy is ignored.

    RECIP is restoring division of the power of two, ``a <= 0`` saturating at once: the remainder starts at
    ``2**shift >> 32`` and 32 iterations give quotient bits 31..0; bit 31 set saturates (when the quotient is
    ``2**32`` or more, the starting remainder is ``>= a``, so the first iteration sets bit 31 too).  ISQRT is
    the digit-by-digit square root: 16 iterations on ``a``'s bit pairs, the last 16 of the same 32 (the first
    16 see zero pairs and leave root and remainder 0).  Each iteration is one compare-subtract per lane on the
    same adder for both vops.
    """

    def __init__(self, array: int):
        if not isinstance(array, int) or isinstance(array, bool) or not 1 <= array <= 16:
            raise ValueError(f"Lane divider lanes must be an integer from 1 to 16, not {array!r}")
        self.array = array
        lanes = data.ArrayLayout(signed(32), array)
        super().__init__({
            "start": In(1),
            "vop": In(4),
            "shift": In(6),
            "d_acc": In(1),
            "a": In(lanes),
            "busy": Out(1),
            "done": Out(1),
            "out": Out(lanes),
        })

    def elaborate(self, platform):
        m = Module()
        take = Signal(name="take")
        m.d.comb += take.eq(self.start & ~self.busy)
        recip = Signal(name="recip")
        shift = Signal(6, name="shift")
        d_acc = Signal(name="d_acc")
        count = Signal(range(_ITERATION_CYCLES), name="count")
        running = Signal(name="running")
        finish = Signal(name="finish")
        m.d.sync += [self.done.eq(finish), finish.eq(0)]
        with m.If(take):
            m.d.sync += [recip.eq(self.vop == VectorOp.RECIP), shift.eq(self.shift), d_acc.eq(self.d_acc),
                         count.eq(0), running.eq(1), self.busy.eq(1)]
        with m.Elif(running):
            m.d.sync += count.eq(count + 1)
            with m.If(count == _ITERATION_CYCLES - 1):
                m.d.sync += [running.eq(0), finish.eq(1)]
        with m.If(finish):
            m.d.sync += self.busy.eq(0)

        # The numerator's one bit (RECIP) and whether ISQRT's pairs have begun, for this cycle's iterations.
        numerator = [Signal(name=f"numerator{j}") for j in range(_PER_CYCLE)]
        for j, bit in enumerate(numerator):
            m.d.comb += bit.eq(shift == _QUOTIENT_BITS - 1 - (_PER_CYCLE * count + j))
        pairs_on = Signal(name="pairs_on")
        m.d.comb += pairs_on.eq(count >= _ROOT_START // _PER_CYCLE)

        high = Signal(unsigned(16), name="high")  # 2**shift >> 32: RECIP's remainder before quotient bit 31
        m.d.comb += high.eq(Mux(self.shift >= 32, Const(1, 16) << (self.shift - 32)[:4], 0))

        for lane in range(self.array):
            a = self.a[lane]
            operand = Signal(unsigned(32), name=f"operand{lane}", reset_less=True)  # RECIP: a; ISQRT: a's pairs
            rem = Signal(unsigned(33), name=f"rem{lane}", reset_less=True)
            root = Signal(unsigned(_QUOTIENT_BITS), name=f"quotient{lane}", reset_less=True)
            saturated = Signal(name=f"saturated{lane}", reset_less=True)
            with m.If(take):
                is_recip = self.vop == VectorOp.RECIP
                m.d.sync += [
                    operand.eq(Mux(a[-1], 0, a)),
                    rem.eq(Mux(is_recip, high, 0)),
                    root.eq(0),
                    saturated.eq(is_recip & (a <= 0)),
                ]
            with m.Elif(running):
                r, q, x = rem, root, operand
                for j in range(_PER_CYCLE):
                    pair = Mux(pairs_on, x[30:32], 0)
                    grown = Mux(recip, (r << 1) | numerator[j], (r << 2) | pair)
                    subtrahend = Mux(recip, operand, (q << 2) | 1)
                    fits = Signal(name=f"fits{lane}_{j}")
                    m.d.comb += fits.eq(grown >= subtrahend)
                    r = Mux(fits, grown - subtrahend, grown)[:33]
                    q = ((q << 1) | fits)[:_QUOTIENT_BITS]
                    x = Mux(pairs_on, x << 2, x)[:32]
                m.d.sync += [rem.eq(r), root.eq(q)]
                with m.If(~recip):
                    m.d.sync += operand.eq(x)
            value = Signal(unsigned(32), name=f"value{lane}")
            m.d.comb += value.eq(Mux(recip & (saturated | root[31]), _INT32_MAX, root))
            with m.If(finish):
                m.d.sync += self.out[lane].eq(Mux(d_acc | (value < 128), value, 127))
        return m
