"""The post-op unit: bias, ReLU, requantisation and int8 saturation of accumulator rows."""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..spec import POSTOP_MAX_SHIFT
from .pipeline import delay_valid_ctl

__all__ = ["PostOp"]

MAX_SHIFT = POSTOP_MAX_SHIFT


def _saturate(m: Module, value, width: int, name: str) -> Signal:
    low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
    out = Signal(signed(width), name=name)
    m.d.comb += out.eq(Mux(value > high, high, Mux(value < low, low, value)))
    return out


class PostOp(wiring.Component):
    """Requantises one accumulator row a cycle, in a five-stage pipeline.

    Per lane, as the spec (and :func:`dx1_bringup.model.tile.requantize`) defines it:
    ``x = sat32(acc + bias)``; ``x = max(x, 0)`` when ``relu``; ``p = x * mult``;
    ``y = (p + 2**(shift-1) - (p < 0)) >> shift`` for ``shift > 0`` (half away
    from zero), ``y = p`` for ``shift == 0``; ``out = sat8(y)``.  Each stage
    does one of: the bias add, the saturation and ReLU, the product, the
    rounding add, the shift and saturation; so no stage has more than one
    carry chain or multiplier on its path.

    ``bias``, ``mult``, ``shift`` and ``relu`` must stay still while rows are in
    the pipeline.  ``out`` follows ``row`` by ``LATENCY`` cycles, with ``ctl``
    (the row's destination) alongside.  No back-pressure: the pipeline always moves.
    """

    LATENCY = 5

    def __init__(self, lanes: int, ctl_width: int = 1):
        if not isinstance(lanes, int) or isinstance(lanes, bool) or not 1 <= lanes <= 16:
            raise ValueError(f"Post-op lanes must be an integer from 1 to 16, not {lanes!r}")
        if not isinstance(ctl_width, int) or isinstance(ctl_width, bool) or ctl_width < 1:
            raise ValueError(f"Post-op ctl width must be a positive integer, not {ctl_width!r}")
        self.lanes = lanes
        super().__init__({
            "row": In(data.ArrayLayout(signed(32), lanes)),
            "row_valid": In(1),
            "ctl": In(ctl_width),
            "bias": In(data.ArrayLayout(signed(32), lanes)),
            "mult": In(unsigned(16)),
            "shift": In(range(MAX_SHIFT + 1)),
            "relu": In(1),
            "out": Out(data.ArrayLayout(signed(8), lanes)),
            "out_valid": Out(1),
            "out_ctl": Out(ctl_width),
        })

    def elaborate(self, platform):
        m = Module()
        half = Signal(unsigned(MAX_SHIFT), name="half")
        m.d.sync += half.eq((Const(1, MAX_SHIFT + 1) << self.shift) >> 1)

        for lane in range(self.lanes):
            # Stage 1: the bias add (33 bits: it cannot overflow).
            s1 = Signal(signed(33), name=f"s{lane}")
            m.d.sync += s1.eq(self.row[lane] + self.bias[lane])
            # Stage 2: int32 saturation and ReLU.
            x = _saturate(m, s1, 32, f"sum{lane}")
            x2 = Signal(signed(32), name=f"x{lane}")
            m.d.sync += x2.eq(Mux(self.relu & x[-1], 0, x))
            # Stage 3: the exact product (|p| < 2**47).
            p3 = Signal(signed(49), name=f"p{lane}")
            m.d.sync += p3.eq(x2 * self.mult)
            # Stage 4: the rounding add.
            q4 = Signal(signed(50), name=f"q{lane}")
            m.d.sync += q4.eq(p3 + half - (p3[-1] & (self.shift != 0)))
            # Stage 5: the shift and int8 saturation.
            y = Signal(signed(50), name=f"y{lane}")
            m.d.comb += y.eq(q4 >> self.shift)
            out = _saturate(m, y, 8, f"sat{lane}")
            m.d.sync += self.out[lane].eq(out)

        valid, ctl = delay_valid_ctl(m, self.row_valid, self.ctl, self.LATENCY, "s")
        m.d.comb += [self.out_valid.eq(valid), self.out_ctl.eq(ctl)]
        return m
