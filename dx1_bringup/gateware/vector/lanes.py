"""The vector unit's elementwise datapath: every lane of one step a cycle, through one multiplier a lane."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...spec import TABLE_ENTRIES, VECTOR_MAX_SHIFT, VectorOp

__all__ = ["VectorLanes", "LANES_LATENCY"]

#: Cycles from a step's ``valid`` to its ``out_valid``.
LANES_LATENCY = 11

_INTERVALS = TABLE_ENTRIES - 1  # 256: a LUT lane hits when 0 <= i < 256
_INDEX_BITS = 8
_FRAC_BITS = 16  # TABLE_MAX_SHIFT: LUT's fraction f < 2**16
_OPERAND = signed(33)  # a multiplier operand: a 33-bit ADD/SUB result, b, 2**shift (SHL, shift <= 31)
_PRODUCT = signed(64)  # |a * b|, |a * 2**31| <= 2**62

#: What travels down the pipeline beside a step's lanes.
_CTL = data.StructLayout({
    "valid": 1,
    "lut": 1,      # the step is a LUT: table read, interpolation, hit/underflow/overflow counts
    "raw": 1,      # RMAX, RSUM, RSUMSQ: out is the product's low 32 bits, unsaturated
    "clamp": 1,    # CLAMP: stage 1 takes max(a, imm), stage 2 min(., imm2)
    "d_acc": 1,    # saturate to int32 (else int8)
    "shift": unsigned(6),  # the rounding right shift of MUL, SHR and LUT; 0 for every other vop
})


def _stage(m: Module, value, shape, name: str) -> Signal:
    """A pipeline register: ``value`` one cycle later (data only: no reset)."""
    reg = Signal(shape, name=name, reset_less=True)
    m.d.sync += reg.eq(value)
    return reg


def _count(m: Module, bits: list, width: int, name: str) -> Signal:
    """The number of set bits among ``bits``."""
    total = Signal(range(width + 1), name=name)
    m.d.comb += total.eq(sum(bits[1:], bits[0]))
    return total


class VectorLanes(wiring.Component):
    """The vector unit's lanes: one step (``array`` lanes of A, B) in a cycle, out ``LANES_LATENCY`` cycles later.

    Per lane, as ``model/vector.py`` computes it: ADD, SUB, MUL (``round_shift(a * b, shift)``), MAX, MIN,
    SHR (``round_shift(a, shift)``), SHL (``a * 2**shift``), CLAMP (``min(max(a, imm), imm2)``), MOV and LUT
    (the table at ``a - imm``, interpolated) are exact and then saturated to int8, or int32 when ``d_acc``.
    For the reductions ``out`` is the reducer's term: ``a`` for RMAX and RSUM, ``a * a mod 2**32`` for
    RSUMSQ, unsaturated.  RECIP and ISQRT are the divider's: ``out`` is then meaningless.

    Every vop goes through the lane's one multiplier as ``x * y``: ``x`` is ``a`` or the
    ADD/SUB/MAX/MIN/CLAMP result, ``y`` is ``b`` (MUL), ``a`` (RSUMSQ), ``2**shift`` (SHL) or 1; LUT's
    interpolation ``(T[i+1] - T[i]) * f`` uses it three stages later than the others' operands, which wait in
    registers for it.  Then the rounding add, the right shift, LUT's ``+ T[i]`` and the saturation.  The
    multiplier is four 17x17-bit products (one MULT18X18D each on ECP5) in one stage and their sum in the next.

    Stages: 1 the inputs (the rows as the memories give them); 2 the ALU (ADD, SUB, MAX, MIN, CLAMP's low
    bound, and LUT's ``u = a - imm``); 3 CLAMP's high bound, LUT's ``u >> shift``; 4 LUT's index, fraction and
    outcome, the table's read address; 5 the table's ``T[i]``, ``T[i+1]``, the multiplier's operands; 6 the
    partial products; 7 the product; 8 the rounding add (one adder: the bias for ``p < 0`` is chosen, not
    subtracted, and registered beside the product); 9 the shift; 10 ``+ T[i]``; 11 the saturation.  A stage is
    one carry chain or a few LUT levels, for the ECP5's 50 MHz.

    The table: per lane two 256-entry memories ``L[j] = T[j]`` and ``H[j] = T[j+1]``, so that a lane reads
    both ends of its interval in one cycle; ``table_we`` writes entry ``table_index`` of every lane's copy
    (``L[j]`` and ``H[j-1]`` at once).  A step must not be in stages 1-4 while the table is written (its
    read is then undefined); reset clears nothing in the table.

    ``hits``, ``underflows`` and ``overflows`` count the step's lanes by LUT outcome, with ``out_valid``;
    they are 0 for any other vop.  No back-pressure: the pipeline always moves; ``vop``, ``shift``, ``imm``,
    ``imm2`` and ``d_acc`` are taken with each step, so they may change from one step to the next.
    """

    def __init__(self, array: int):
        if not isinstance(array, int) or isinstance(array, bool) or not 1 <= array <= 16:
            raise ValueError(f"Vector lanes must be an integer from 1 to 16, not {array!r}")
        self.array = array
        lanes = data.ArrayLayout(signed(32), array)
        super().__init__({
            "valid": In(1),
            "vop": In(4),
            "shift": In(6),
            "imm": In(signed(32)),
            "imm2": In(signed(32)),
            "d_acc": In(1),
            "a": In(lanes),
            "b": In(lanes),
            "table_we": In(1),
            "table_index": In(range(TABLE_ENTRIES)),
            "table_data": In(signed(16)),
            "out_valid": Out(1),
            "out": Out(lanes),
            "hits": Out(range(array + 1)),
            "underflows": Out(range(array + 1)),
            "overflows": Out(range(array + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        # Stage 1: the step's inputs as they come (the rows straight off the memories), and its control, decoded
        # once for all lanes.
        vop = _stage(m, self.vop, 4, "vop1")
        shift = _stage(m, self.shift, 6, "shift1")
        imm = _stage(m, self.imm, signed(32), "imm1")
        imm2 = _stage(m, self.imm2, signed(32), "imm2_1")
        ctl1 = Signal(_CTL, name="ctl1")
        m.d.sync += [
            ctl1.valid.eq(self.valid),
            ctl1.lut.eq(self.vop == VectorOp.LUT),
            ctl1.raw.eq((self.vop == VectorOp.RMAX) | (self.vop == VectorOp.RSUM) | (self.vop == VectorOp.RSUMSQ)),
            ctl1.clamp.eq(self.vop == VectorOp.CLAMP),
            ctl1.d_acc.eq(self.d_acc),
            ctl1.shift.eq(Mux((self.vop == VectorOp.MUL) | (self.vop == VectorOp.SHR) | (self.vop == VectorOp.LUT),
                              self.shift, 0)),
        ]
        ctls = [ctl1]
        for stage in range(2, LANES_LATENCY + 1):
            ctls.append(Signal(_CTL, name=f"ctl{stage}"))
            m.d.sync += ctls[-1].eq(ctls[-2])
        # ctlK describes the step whose stage-K registers are loaded; stage K+1's logic reads it.
        _, ctl2, ctl3, ctl4, _, ctl6, _, ctl8, ctl9, ctl10, ctl11 = ctls
        m.d.comb += self.out_valid.eq(ctl11.valid)

        shl_y = Signal(_OPERAND, name="shl_y")
        m.d.comb += shl_y.eq(Const(1, _OPERAND) << shift[:5])
        imm2_2 = _stage(m, imm2, signed(32), "imm2_2")
        # round_shift's bias: 2**(shift-1) for p >= 0, 2**(shift-1) - 1 for p < 0, 0 for shift 0; registered
        # beside stage 7, so that stage 8 is the one add.
        bias = (Const(1, VECTOR_MAX_SHIFT + 1) << ctl6.shift) >> 1
        half = _stage(m, bias, unsigned(VECTOR_MAX_SHIFT), "half")
        half_neg = _stage(m, Mux(ctl6.shift == 0, 0, bias - 1), unsigned(VECTOR_MAX_SHIFT), "half_neg")
        # LUT's fraction mask, 2**shift - 1, beside stage 2.
        mask = _stage(m, (Const(1, _FRAC_BITS + 1) << ctl1.shift) - 1, _FRAC_BITS, "mask2")

        outcomes = {"hit": [], "under": [], "over": []}
        for lane in range(self.array):
            a = _stage(m, self.a[lane], signed(32), f"a1_{lane}")
            b = _stage(m, self.b[lane], signed(32), f"b1_{lane}")
            # Stage 2: the ALU; LUT's u = a - imm (33 bits, exact).
            alu = Signal(_OPERAND, name=f"alu{lane}")
            with m.Switch(vop):
                with m.Case(VectorOp.ADD):
                    m.d.comb += alu.eq(a + b)
                with m.Case(VectorOp.SUB):
                    m.d.comb += alu.eq(a - b)
                with m.Case(VectorOp.MAX):
                    m.d.comb += alu.eq(Mux(a > b, a, b))
                with m.Case(VectorOp.MIN):
                    m.d.comb += alu.eq(Mux(a < b, a, b))
                with m.Case(VectorOp.CLAMP):
                    m.d.comb += alu.eq(Mux(a < imm, imm, a))
                with m.Case(VectorOp.LUT):
                    m.d.comb += alu.eq(a - imm)
                with m.Default():
                    m.d.comb += alu.eq(a)
            y = Signal(_OPERAND, name=f"y{lane}")
            with m.Switch(vop):
                with m.Case(VectorOp.MUL):
                    m.d.comb += y.eq(b)
                with m.Case(VectorOp.RSUMSQ):
                    m.d.comb += y.eq(a)
                with m.Case(VectorOp.SHL):
                    m.d.comb += y.eq(shl_y)
                with m.Default():
                    m.d.comb += y.eq(1)
            x2 = _stage(m, alu, _OPERAND, f"x2_{lane}")
            y2 = _stage(m, y, _OPERAND, f"y2_{lane}")

            # Stage 3: CLAMP's high bound; LUT's i = u >> shift (floor), u's fraction bits and sign.
            x3 = _stage(m, Mux(ctl2.clamp & (x2 > imm2_2), imm2_2, x2), _OPERAND, f"x3_{lane}")
            y3 = _stage(m, y2, _OPERAND, f"y3_{lane}")
            scaled = _stage(m, x2 >> ctl2.shift, signed(33), f"scaled3_{lane}")
            frac_bits = _stage(m, x2[:_FRAC_BITS] & mask, _FRAC_BITS, f"frac3_{lane}")
            under = _stage(m, x2[-1], 1, f"under3_{lane}")

            # Stage 4: LUT's outcome, f = u - (i << shift) and the table's read address.
            over = Signal(name=f"over{lane}")
            m.d.comb += over.eq(~under & (scaled[_INDEX_BITS:] != 0))
            index = Signal(_INDEX_BITS, name=f"index{lane}")
            m.d.comb += index.eq(Mux(over, _INTERVALS - 1, Mux(under, 0, scaled[:_INDEX_BITS])))
            lows, highs = self._table(m, lane, index)
            x4 = _stage(m, x3, _OPERAND, f"x4_{lane}")
            y4 = _stage(m, y3, _OPERAND, f"y4_{lane}")
            f4 = _stage(m, Mux(under | over, 0, frac_bits), _FRAC_BITS, f"f4_{lane}")
            over4 = _stage(m, over, 1, f"over4_{lane}")
            for name, bit in (("hit", ~under & ~over), ("under", under), ("over", over)):
                outcomes[name].append(_stage(m, bit & ctl3.lut, 1, f"{name}4_{lane}"))

            # Stage 5: the interval's ends; the multiplier's operands; the LUT's base T[i] (T[256] on overflow).
            diff = Signal(signed(17), name=f"diff{lane}")
            m.d.comb += diff.eq(highs - lows)
            x5 = _stage(m, Mux(ctl4.lut, diff, x4), _OPERAND, f"x5_{lane}")
            y5 = _stage(m, Mux(ctl4.lut, f4, y4), _OPERAND, f"y5_{lane}")
            base = _stage(m, Mux(ctl4.lut, Mux(over4, highs, lows), 0), signed(16), f"base5_{lane}")

            # Stages 6, 7: four 17x17-bit partial products, then their sum.
            xl, xh = x5[:16], x5[16:].as_signed()
            yl, yh = y5[:16], y5[16:].as_signed()
            ll = _stage(m, xl * yl, unsigned(32), f"ll{lane}")
            lh = _stage(m, xl * yh, signed(34), f"lh{lane}")
            hl = _stage(m, xh * yl, signed(34), f"hl{lane}")
            hh = _stage(m, xh * yh, signed(34), f"hh{lane}")
            p7 = _stage(m, Cat(ll, hh) + ((lh + hl) << 16), _PRODUCT, f"p7_{lane}")

            # Stage 8: the rounding add, half away from zero.
            q8 = _stage(m, p7 + Mux(p7[-1], half_neg, half), _PRODUCT, f"q8_{lane}")

            # Stage 9: the shift.
            r9 = _stage(m, q8 >> ctl8.shift, _PRODUCT, f"r9_{lane}")

            # Stage 10: + T[i] (LUT: |round_shift(diff * f, shift)| <= 2**16); stage 11: the saturation.
            for stage in range(6, 10):
                base = _stage(m, base, signed(16), f"base{stage}_{lane}")
            value = _stage(m, Mux(ctl9.lut, r9[:20].as_signed() + base, r9), _PRODUCT, f"value10_{lane}")
            m.d.sync += self.out[lane].eq(Mux(ctl10.raw, value[:32], self._saturate(m, value, ctl10.d_acc, lane)))

        for name, port in (("hit", self.hits), ("under", self.underflows), ("over", self.overflows)):
            count = _count(m, outcomes[name], self.array, f"{name}s")
            for stage in range(5, LANES_LATENCY + 1):
                count = _stage(m, count, range(self.array + 1), f"{name}s{stage}")
            m.d.comb += port.eq(count)
        return m

    def _table(self, m: Module, lane: int, index: Signal) -> tuple[Signal, Signal]:
        """Lane ``lane``'s two copies of the table, read at ``index``: ``(T[index], T[index+1])`` a cycle later."""
        ports = []
        for name, offset in (("low", 0), ("high", 1)):
            memory = Memory(shape=signed(16), depth=_INTERVALS, init=[])
            m.submodules[f"table_{name}{lane}"] = memory
            write = memory.write_port()
            entry = self.table_index - offset
            fits = entry < _INTERVALS
            if offset:  # entry 0 has no interval below it (and an unsigned index is never below 0: no test then)
                fits &= self.table_index >= offset
            m.d.comb += [
                write.addr.eq(entry[:_INDEX_BITS]),
                write.data.eq(self.table_data),
                write.en.eq(self.table_we & fits),
            ]
            read = memory.read_port()
            m.d.comb += read.addr.eq(index)
            ports.append(read.data)
        return ports[0], ports[1]

    @staticmethod
    def _saturate(m: Module, value: Signal, d_acc, lane: int) -> Signal:
        """``value`` saturated to int32 when ``d_acc``, else int8."""
        out = Signal(signed(32), name=f"sat{lane}")
        top = value[-1]
        fits32 = (value[31:] == 0) | (value[31:] == (1 << (len(value) - 31)) - 1)
        fits8 = (value[7:] == 0) | (value[7:] == (1 << (len(value) - 7)) - 1)
        with m.If(d_acc):
            m.d.comb += out.eq(Mux(fits32, value[:32], Mux(top, -(1 << 31), (1 << 31) - 1)))
        with m.Else():
            m.d.comb += out.eq(Mux(fits8, value[:8].as_signed(), Mux(top, -(1 << 7), (1 << 7) - 1)))
        return out
