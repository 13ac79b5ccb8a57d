"""The outside's access to the tile core's memories, served behind the compute pipeline."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..stream import AXIStreamSignature

__all__ = ["ADDR_BITS", "READ_QUEUE_DEPTH", "ReadServer", "WriteServer"]

ADDR_BITS = 16  # width of every row-address field in the spec
#: Outstanding external reads per memory.
READ_QUEUE_DEPTH = 4


class WriteServer(wiring.Component):
    """Writes a stream of ``{addr[15:0], data}`` words to a memory write port while ``grant`` is high.

    ``addr``, ``data`` and ``en`` are driven only in the cycle a word is taken.

    Parameters
    ----------
    data_bits:
        Width of a row.
    """

    def __init__(self, data_bits: int):
        self.data_bits = data_bits
        super().__init__({
            "req": In(AXIStreamSignature(ADDR_BITS + data_bits)),
            "grant": In(1),
            "addr": Out(ADDR_BITS), "data": Out(data_bits), "en": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        req = self.req
        m.d.comb += req.tready.eq(self.grant)
        with m.If(req.tvalid & self.grant):
            m.d.comb += [self.addr.eq(req.tdata[self.data_bits:]), self.data.eq(req.tdata[:self.data_bits]),
                         self.en.eq(1)]
        return m


class ReadServer(wiring.Component):
    """Serves a stream of row addresses from a memory read port while ``grant`` is high, answering in order.

    ``addr`` is driven only in the cycle a request is taken; the row
    (``data``, a cycle later) queues in a :data:`READ_QUEUE_DEPTH`-row FIFO.
    A request is only taken while there is room for its answer, so
    back-pressure on ``resp`` never loses data.

    Parameters
    ----------
    data_bits:
        Width of a row.
    """

    def __init__(self, data_bits: int):
        super().__init__({
            "req": In(AXIStreamSignature(ADDR_BITS)),
            "resp": Out(AXIStreamSignature(data_bits)),
            "grant": In(1),
            "addr": Out(ADDR_BITS), "data": In(data_bits),
        })

    def elaborate(self, platform):
        m = Module()
        req, resp = self.req, self.resp
        m.submodules.fifo = fifo = SyncFIFO(width=len(self.data), depth=READ_QUEUE_DEPTH)
        pending = Signal()
        m.d.comb += req.tready.eq(self.grant & (fifo.level + pending < READ_QUEUE_DEPTH))
        with m.If(req.tvalid & req.tready):
            m.d.comb += self.addr.eq(req.tdata)
        m.d.sync += pending.eq(req.tvalid & req.tready)
        m.d.comb += [
            fifo.w_data.eq(self.data), fifo.w_en.eq(pending),
            resp.tdata.eq(fifo.r_data), resp.tvalid.eq(fifo.r_rdy), fifo.r_en.eq(resp.tready),
        ]
        return m
