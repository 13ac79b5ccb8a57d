"""What the command processor remembers of a command in flight: its footprint and its completion slot."""

from __future__ import annotations

from amaranth import unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

__all__ = ["RANGE_BITS", "FOOTPRINT_LAYOUT", "SLOT_LAYOUT", "ErrorReportSignature", "conflict"]

RANGE_BITS = 34  # local row arithmetic: 16-bit address + 16-bit x 16-bit products

#: The local rows a command reads and writes: one bounding range [lo, hi) per memory and direction.
FOOTPRINT_LAYOUT = data.StructLayout({
    f"{mem}_{rw}_{end}": unsigned(RANGE_BITS) for mem in ("spm", "acc") for rw in ("r", "w") for end in ("lo", "hi")
})

#: A command in flight in the tile core or the DMA: where its completion goes and what it touches.
#: (Not "index": an Array of these is indexed through an ArrayProxy, whose own ``index`` would win.)
SLOT_LAYOUT = data.StructLayout({
    "ring_index": unsigned(16), "phase": unsigned(1), "tag": unsigned(16), "opcode": unsigned(8),
    "footprint": FOOTPRINT_LAYOUT,
})


class ErrorReportSignature(wiring.Signature):
    """A queue error a part of the command processor found: ``valid`` for one cycle, with its ``code`` and the
    ring ``index`` it concerns (source view)."""

    def __init__(self):
        super().__init__({"valid": Out(1), "code": Out(8), "index": Out(16)})


def _overlap(a_lo, a_hi, b_lo, b_hi):
    """Half-open ranges [a_lo, a_hi) and [b_lo, b_hi) share a row (empty ranges share nothing)."""
    return (a_lo < b_hi) & (b_lo < a_hi)


def conflict(x, y):
    """True when one of the two footprints writes rows the other reads or writes."""
    terms = []
    for mem in ("spm", "acc"):
        xr = (getattr(x, f"{mem}_r_lo"), getattr(x, f"{mem}_r_hi"))
        xw = (getattr(x, f"{mem}_w_lo"), getattr(x, f"{mem}_w_hi"))
        yr = (getattr(y, f"{mem}_r_lo"), getattr(y, f"{mem}_r_hi"))
        yw = (getattr(y, f"{mem}_w_lo"), getattr(y, f"{mem}_w_hi"))
        terms += [_overlap(*xw, *yw), _overlap(*xw, *yr), _overlap(*xr, *yw)]
    result = terms[0]
    for t in terms[1:]:
        result = result | t
    return result
