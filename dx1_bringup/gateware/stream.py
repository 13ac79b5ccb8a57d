"""Valid/ready streams named as AXI4-Stream, so cocotbext-axi's models can drive them."""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXIStreamSignature"]


class AXIStreamSignature(wiring.Signature):
    """An AXI4-Stream channel with only ``tdata``, ``tvalid`` and ``tready``.

    Parameters
    ----------
    width:
        Width of ``tdata`` in bits.
    """

    def __init__(self, width: int):
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise TypeError(f"Stream width must be a positive integer, not {width!r}")
        self.width = width
        super().__init__({"tdata": Out(width), "tvalid": Out(1), "tready": In(1)})

    def __eq__(self, other):
        return isinstance(other, AXIStreamSignature) and other.width == self.width

    def __repr__(self):
        return f"AXIStreamSignature({self.width})"
