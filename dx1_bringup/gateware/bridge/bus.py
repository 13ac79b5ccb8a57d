"""The bridge's two bus masters (registers over AXI4-Lite, device memory over AXI4), shared by its frame engines."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import BUS_BYTES, MEM_BASE, REG_BYTES
from ..axi import BURST_INCR, RESP_OKAY, AXI4LiteSignature, AXI4Signature

__all__ = ["BEAT_BITS", "BUS_PORT", "MEM_BIT", "REG_BITS", "BusMasters"]

BEAT_BITS = exact_log2(BUS_BYTES)   # byte-lane bits of a device-memory address
REG_BITS = exact_log2(REG_BYTES)    # address bits of the register port
MEM_BIT = exact_log2(MEM_BASE)      # device memory is the top half of the address space: this bit decodes it

#: The bus masters as a frame engine sees them (flipped).  Requests are one-cycle strobes with their fields, and
#: all of them are ORed over the engines, so an engine drives a field only in the cycle it makes its request.
BUS_PORT = wiring.Signature({
    # register port: a write (address and data) or a read, then its response
    "reg_write": In(1), "reg_read": In(1), "reg_addr": In(REG_BITS), "reg_wdata": In(32),
    "reg_b_wait": In(1), "reg_r_wait": In(1),               # ready for the response, once the request is taken
    "reg_b_done": Out(1), "reg_b_err": Out(1),
    "reg_r_done": Out(1), "reg_r_err": Out(1), "reg_rdata": Out(32),
    # device-memory port: INCR bursts of mem_len + 1 beats at mem_addr
    "mem_write": In(1), "mem_read": In(1), "mem_addr": In(31), "mem_len": In(8),
    "mem_beat": In(1),          # with mem_write: one beat, held until taken (mem_wdata, mem_wstrb)
    "mem_stream": In(1),        # a write beat offered this cycle (mem_wdata, mem_wstrb, mem_wlast)
    "mem_wdata": In(8 * BUS_BYTES), "mem_wstrb": In(BUS_BYTES), "mem_wlast": In(1),
    "mem_wready": Out(1),
    "mem_b_wait": In(1), "mem_r_wait": In(1),
    "mem_b_done": Out(1), "mem_b_err": Out(1),
    "mem_r_done": Out(1), "mem_r_err": Out(1), "mem_rlast": Out(1), "mem_rdata": Out(8 * BUS_BYTES),
})


class BusMasters(wiring.Component):
    """The register port ``regs`` (AXI4-Lite) and the device-memory port ``mem`` (AXI4) behind ``requests``.

    A request strobe sets its channel's valid (and address, data) from the
    next cycle until the slave takes it, so every AXI output comes straight
    from a register or from ``mem_stream``'s beat.  A response is accepted
    while its ``*_wait`` is high and the request's address (and, for a write,
    its data) has been taken; ``*_done`` marks the cycle it is, and ``*_err``
    says it was not OKAY.  Register writes have all byte strobes; memory beats
    are whole bus words, ids 0.
    """

    def __init__(self):
        super().__init__({
            "requests": Out(BUS_PORT),
            "regs": Out(AXI4LiteSignature(addr_width=REG_BITS)),
            "mem": Out(AXI4Signature(data_width=8 * BUS_BYTES, id_width=4)),
        })

    def elaborate(self, platform):
        m = Module()
        req, regs, mem = self.requests, self.regs, self.mem
        m.d.comb += [
            mem.awid.eq(0), mem.arid.eq(0), mem.awsize.eq(BEAT_BITS), mem.arsize.eq(BEAT_BITS),
            mem.awburst.eq(BURST_INCR), mem.arburst.eq(BURST_INCR),
            regs.wstrb.eq(0xF),
        ]
        # The single beat of a one-word write comes from registers; a burst's beats come from the requester.
        mw_valid = Signal()
        mw_data = Signal(8 * BUS_BYTES)
        mw_strb = Signal(BUS_BYTES)
        m.d.comb += [
            mem.wvalid.eq(req.mem_stream | mw_valid),
            mem.wdata.eq(Mux(req.mem_stream, req.mem_wdata, mw_data)),
            mem.wstrb.eq(Mux(req.mem_stream, req.mem_wstrb, mw_strb)),
            mem.wlast.eq(~req.mem_stream | req.mem_wlast),
            req.mem_wready.eq(mem.wready),
        ]
        with m.If(mem.wvalid & mem.wready):
            m.d.sync += mw_valid.eq(0)
        with m.If(regs.wvalid & regs.wready):
            m.d.sync += regs.wvalid.eq(0)
        for ch in (regs, mem):
            with m.If(ch.awvalid & ch.awready):
                m.d.sync += ch.awvalid.eq(0)
            with m.If(ch.arvalid & ch.arready):
                m.d.sync += ch.arvalid.eq(0)

        with m.If(req.reg_write):
            m.d.sync += [regs.awvalid.eq(1), regs.wvalid.eq(1), regs.awaddr.eq(req.reg_addr),
                         regs.wdata.eq(req.reg_wdata)]
        with m.If(req.reg_read):
            m.d.sync += [regs.arvalid.eq(1), regs.araddr.eq(req.reg_addr)]
        with m.If(req.mem_write):
            m.d.sync += [mem.awvalid.eq(1), mem.awaddr.eq(req.mem_addr), mem.awlen.eq(req.mem_len)]
        with m.If(req.mem_beat):
            m.d.sync += [mw_valid.eq(1), mw_data.eq(req.mem_wdata), mw_strb.eq(req.mem_wstrb)]
        with m.If(req.mem_read):
            m.d.sync += [mem.arvalid.eq(1), mem.araddr.eq(req.mem_addr), mem.arlen.eq(req.mem_len)]

        m.d.comb += [
            regs.bready.eq(req.reg_b_wait & ~regs.awvalid & ~regs.wvalid),
            regs.rready.eq(req.reg_r_wait & ~regs.arvalid),
            mem.bready.eq(req.mem_b_wait & ~mem.awvalid & ~mw_valid),
            mem.rready.eq(req.mem_r_wait & ~mem.arvalid),
            req.reg_b_done.eq(regs.bvalid & regs.bready), req.reg_b_err.eq(regs.bresp != RESP_OKAY),
            req.reg_r_done.eq(regs.rvalid & regs.rready), req.reg_r_err.eq(regs.rresp != RESP_OKAY),
            req.reg_rdata.eq(regs.rdata),
            req.mem_b_done.eq(mem.bvalid & mem.bready), req.mem_b_err.eq(mem.bresp != RESP_OKAY),
            req.mem_r_done.eq(mem.rvalid & mem.rready), req.mem_r_err.eq(mem.rresp != RESP_OKAY),
            req.mem_rlast.eq(mem.rlast), req.mem_rdata.eq(mem.rdata),
        ]
        return m
