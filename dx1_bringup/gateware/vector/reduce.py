"""The vector unit's row reducer: RMAX, RSUM and RSUMSQ over every lane of every step of an outer row."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import VectorOp

__all__ = ["RowReducer", "REDUCE_LATENCY"]

#: Cycles from a row's ``last`` step at the input to its ``out_valid``.
REDUCE_LATENCY = 7

_MAX_LANES = 16
_TREE_STAGES = 4  # one adder (or compare) level a stage; 16 lanes take 4 levels, fewer are padded to 4

_CTL = data.StructLayout({"valid": 1, "first": 1, "last": 1, "max": 1, "d_acc": 1})


def _combine(is_max, x, y):
    """``max(x, y)`` or ``x + y mod 2**32``, as int32."""
    return Mux(is_max, Mux(x > y, x, y), (x + y)[:32].as_signed())


class RowReducer(wiring.Component):
    """Reduces the lanes' terms (``VectorLanes.out``) of each outer row to one statistic, on every lane of ``out``.

    ``terms`` of a step with ``valid`` are folded into the row's statistic: the maximum over every lane of every
    step (``vop`` RMAX) or the sum modulo 2**32 as int32 (RSUM; RSUMSQ, whose terms are already ``a * a mod
    2**32``); ``first`` starts a row, ``last`` ends it (both on a one-step row).  ``REDUCE_LATENCY`` cycles after
    the ``last`` step, ``out_valid`` pulses and every lane of ``out`` holds the statistic saturated to int8, or
    int32 when ``d_acc`` (taken with each step; a row's steps share one).  ``out`` then holds until the next row's.

    Stages: 1 the inputs; 2 to 5 the lane tree (a level each, padded for fewer than 16 lanes); 6 the row's
    accumulator; 7 the saturated statistic.  Steps may come back to back, rows too, with idle cycles anywhere.
    """

    def __init__(self, array: int):
        if not isinstance(array, int) or isinstance(array, bool) or not 1 <= array <= _MAX_LANES:
            raise ValueError(f"Row reducer lanes must be an integer from 1 to {_MAX_LANES}, not {array!r}")
        self.array = array
        lanes = data.ArrayLayout(signed(32), array)
        super().__init__({
            "valid": In(1),
            "first": In(1),
            "last": In(1),
            "vop": In(4),
            "d_acc": In(1),
            "terms": In(lanes),
            "out_valid": Out(1),
            "out": Out(lanes),
        })

    def elaborate(self, platform):
        m = Module()
        ctl = [Signal(_CTL, name=f"ctl{stage}") for stage in range(1, REDUCE_LATENCY)]
        m.d.sync += [
            ctl[0].valid.eq(self.valid),
            ctl[0].first.eq(self.first),
            ctl[0].last.eq(self.last),
            ctl[0].max.eq(self.vop == VectorOp.RMAX),
            ctl[0].d_acc.eq(self.d_acc),
        ]
        m.d.sync += [later.eq(earlier) for earlier, later in zip(ctl, ctl[1:], strict=False)]

        # Stage 1: the terms; stages 2 to 5: the tree, a level a stage.
        level = []
        for lane in range(self.array):
            term = Signal(signed(32), name=f"term{lane}", reset_less=True)
            m.d.sync += term.eq(self.terms[lane])
            level.append(term)
        for stage in range(_TREE_STAGES):
            level = [_combine(ctl[stage].max, x, y) for x, y in zip(level[::2], level[1::2], strict=False)] + \
                    level[len(level) // 2 * 2:]
            regs = []
            for i, value in enumerate(level):
                reg = Signal(signed(32), name=f"tree{stage + 2}_{i}", reset_less=True)
                m.d.sync += reg.eq(value)
                regs.append(reg)
            level = regs
        (step,) = level

        # Stage 6: the row's statistic so far.
        row = Signal(signed(32), name="row", reset_less=True)
        step_ctl = ctl[_TREE_STAGES]
        with m.If(step_ctl.valid):
            m.d.sync += row.eq(Mux(step_ctl.first, step, _combine(step_ctl.max, row, step)))

        # Stage 7: saturated to D's lane type, on every lane.
        end = ctl[_TREE_STAGES + 1]
        stat = Signal(signed(32), name="stat")
        fits8 = (row[7:] == 0) | (row[7:] == (1 << 25) - 1)
        m.d.comb += stat.eq(Mux(end.d_acc | fits8, row, Mux(row[-1], -(1 << 7), (1 << 7) - 1)))
        m.d.sync += self.out_valid.eq(end.valid & end.last)
        with m.If(end.valid & end.last):
            m.d.sync += [self.out[lane].eq(stat) for lane in range(self.array)]
        return m
