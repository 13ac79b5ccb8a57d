"""AXI4 and AXI4-Lite signatures, named as cocotbext-axi expects (``<prefix>_awaddr`` ...).

A component with a master port declares ``Out(AXI4Signature(...))``, one with a
slave port ``In(AXI4Signature(...))``.  Amaranth flattens a port ``mem`` to
Verilog names ``mem__awaddr`` and so on, which cocotbext-axi finds with
``AxiBus.from_prefix(dut, "mem_")``.
"""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec import BUS_BYTES, PAGE_BYTES

__all__ = ["AXI4Signature", "AXI4LiteSignature", "BURST_INCR", "MAX_BURST", "PAGE_BYTES", "RESP_OKAY", "RESP_SLVERR",
           "RESP_DECERR", "join_channels"]

BURST_INCR = 0b01
#: Most beats of one INCR burst (AXI4).
MAX_BURST = 256
RESP_OKAY = 0b00
RESP_SLVERR = 0b10
RESP_DECERR = 0b11


def _check(owner: str, name: str, value, allowed) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise ValueError(f"{owner} {name} must be one of {sorted(allowed)}, not {value!r}")


class AXI4Signature(wiring.Signature):
    """AXI4 with the signals dx1-mini uses: ids, INCR bursts, byte strobes and responses (master view).

    Parameters
    ----------
    addr_width, data_width, id_width:
        Address, data and ID widths in bits; the data width defaults to the SoC's bus width.
    """

    def __init__(self, *, addr_width: int = 32, data_width: int = 8 * BUS_BYTES, id_width: int = 4):
        _check("AXI4", "address width", addr_width, range(12, 65))
        _check("AXI4", "data width", data_width, (32, 64, 128, 256))
        _check("AXI4", "id width", id_width, range(1, 17))
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__({
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
            "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1), "wvalid": Out(1),
            "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
            "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1), "rvalid": In(1),
            "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AXI4Signature) and
                (other.addr_width, other.data_width, other.id_width) ==
                (self.addr_width, self.data_width, self.id_width))

    def __repr__(self):
        return f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, id_width={self.id_width})"


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite, 32-bit data (master view)."""

    def __init__(self, *, addr_width: int = 16):
        _check("AXI4-Lite", "address width", addr_width, range(4, 33))
        self.addr_width = addr_width
        super().__init__({
            "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(32), "wstrb": Out(4), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
            "rdata": In(32), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return isinstance(other, AXI4LiteSignature) and other.addr_width == self.addr_width

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width})"


def join_channels(m, bus, *, read, write) -> None:
    """Drive the AXI4 master port ``bus`` from two masters: its read channels from ``read``, its write channels
    from ``write``.

    The three ports have the same :class:`AXI4Signature`; ``read``'s write channels and ``write``'s read
    channels are left unconnected (a unit that only reads and a unit that only writes share one port).
    """
    for name, member in bus.signature.members.items():
        source = read if name.startswith(("ar", "r")) else write
        if member.flow == Out:
            m.d.comb += getattr(bus, name).eq(getattr(source, name))
        else:
            m.d.comb += getattr(source, name).eq(getattr(bus, name))
