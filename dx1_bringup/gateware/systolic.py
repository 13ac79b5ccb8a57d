"""The weight-stationary systolic array of a dx1-mini tile."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .pipeline import delay_valid_ctl

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """An ``size`` x ``size`` grid of int8 x int8 -> int32 multiply-accumulate cells.

    Processing element (k, n) holds weight ``B[k][n]`` of the reduction row k and
    output column n, in one of two banks.  Activations enter on the left, one
    row ``A[m][0..size)`` per cycle, and move right; partial sums move down and
    leave at the bottom.  Inputs are skewed and outputs de-skewed inside, so
    row m's result appears on ``out`` exactly ``LATENCY`` cycles after row m
    was on ``a``, all columns in the same cycle.

    Each activation row names the bank of the weights it is multiplied with,
    a cycle ahead: ``next_bank`` is the bank of the row that is on ``a`` in the
    next cycle (whether or not that cycle has a row).  Each element then picks
    its weight into a register the cycle before it multiplies, so the path into
    a multiplier starts at a register rather than at a bank multiplexer.  One
    bank can be loaded while the other is in use.  Loading shifts
    ``w_row`` into row 0 of bank ``w_bank`` and every row of that bank down by
    one; after ``size`` loads, row k holds the ``size - 1 - k``-th row shifted
    in.  A bank must not be loaded while activations that use it are still in
    the array: ``2 * size - 1`` cycles after its last activation row.

    Parameters
    ----------
    size:
        Rows and columns of processing elements.
    ctl_width:
        Width of ``ctl``, a side band delayed along with the data (address and
        flags of the row, for the stage after the array).
    """

    def __init__(self, size: int, ctl_width: int = 1):
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 16:
            raise ValueError(f"Systolic array size must be an integer from 1 to 16, not {size!r}")
        if not isinstance(ctl_width, int) or isinstance(ctl_width, bool) or ctl_width < 1:
            raise ValueError(f"Systolic array ctl width must be a positive integer, not {ctl_width!r}")
        self.size = size
        self.LATENCY = 2 * size - 1
        lanes8 = data.ArrayLayout(signed(8), size)
        lanes32 = data.ArrayLayout(signed(32), size)
        super().__init__({
            "a": In(lanes8),
            "a_valid": In(1),
            "next_bank": In(1),
            "ctl": In(ctl_width),
            "w_row": In(lanes8),
            "w_load": In(1),
            "w_bank": In(1),
            "out": Out(lanes32),
            "out_valid": Out(1),
            "out_ctl": Out(ctl_width),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.size

        # weights[bank][k][col], and what each holds after this cycle's load (if any): a row picks
        # its weight from that, a cycle before it multiplies, so it sees the bank as it stands then.
        weights = [[[Signal(signed(8), name=f"w{b}_{k}_{c}") for c in range(n)] for k in range(n)]
                   for b in range(2)]
        loaded = [[[Signal(signed(8), name=f"w{b}_{k}_{c}_next") for c in range(n)] for k in range(n)]
                  for b in range(2)]
        for b in range(2):
            load = self.w_load & (self.w_bank == b)
            for k in range(n):
                for c in range(n):
                    shifted = self.w_row[c] if k == 0 else weights[b][k - 1][c]
                    m.d.comb += loaded[b][k][c].eq(Mux(load, shifted, weights[b][k][c]))
                    m.d.sync += weights[b][k][c].eq(loaded[b][k][c])

        # Row k of the activations is delayed k cycles before column 0, and its bank with it (the bank
        # a cycle ahead of the row: next_bank delayed k cycles is the bank of column 0's next row).
        a_in = []
        bank_in = []
        for k in range(n):
            a, bank = self.a[k], self.next_bank
            for d in range(k):
                a_d = Signal(signed(8), name=f"skew{k}_{d}")
                bank_d = Signal(name=f"skew_bank{k}_{d}")
                m.d.sync += [a_d.eq(a), bank_d.eq(bank)]
                a, bank = a_d, bank_d
            a_in.append(a)
            bank_in.append(bank)

        psum_bottom = []
        for c in range(n):
            psum = None
            for k in range(n):
                a_reg = Signal(signed(8), name=f"a_{k}_{c}")
                bank_reg = Signal(name=f"bank_{k}_{c}")
                w_reg = Signal(signed(8), name=f"wsel_{k}_{c}")
                psum_reg = Signal(signed(32), name=f"psum_{k}_{c}")
                product = a_in[k] * w_reg
                m.d.sync += [
                    a_reg.eq(a_in[k]),
                    bank_reg.eq(bank_in[k]),
                    w_reg.eq(Mux(bank_in[k], loaded[1][k][c], loaded[0][k][c])),
                    psum_reg.eq(product if psum is None else psum + product),
                ]
                a_in[k], bank_in[k] = a_reg, bank_reg
                psum = psum_reg
            # Column c's sum leaves the array c cycles after column 0's: delay the
            # early columns so that all of row m leaves together.
            for d in range(n - 1 - c):
                psum_d = Signal(signed(32), name=f"deskew{c}_{d}")
                m.d.sync += psum_d.eq(psum)
                psum = psum_d
            psum_bottom.append(psum)
        m.d.comb += [self.out[c].eq(psum_bottom[c]) for c in range(n)]

        valid, ctl = delay_valid_ctl(m, self.a_valid, self.ctl, self.LATENCY, "d")
        m.d.comb += [self.out_valid.eq(valid), self.out_ctl.eq(ctl)]
        return m
