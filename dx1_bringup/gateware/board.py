"""The dx1-mini board: the SoC behind the UART bridge, as an FPGA prototype is reached over a cable."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec import LINK_PORTS, SocConfig
from .bridge import UartBridge
from .link import link_wire
from .soc import Dx1Soc

__all__ = ["Dx1Board"]


class Dx1Board(wiring.Component):
    """The SoC with its register and memory ports driven by a :class:`UartBridge`.

    Pins: ``uart_rx`` (from the host), ``uart_tx`` (to the host), ``irq`` (for an LED).  With
    ``config.link`` also the SoC's link ports ``link{p}_tx``/``link{p}_rx`` and its ``chip_id`` straps.
    This is what an FPGA top instantiates and what the simulated board runs in Verilator.

    Parameters
    ----------
    config:
        The SoC's configuration.
    clk_freq, baud:
        System clock in Hz and UART line rate in baud.
    """

    def __init__(self, config: SocConfig | None = None, *, clk_freq: int = 50_000_000, baud: int = 3_000_000):
        self.config = config or SocConfig()
        self.clk_freq, self.baud = clk_freq, baud
        ports = {"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1), "irq": Out(1)}
        if self.config.link is not None:
            for p in range(LINK_PORTS):
                ports[f"link{p}_tx"], ports[f"link{p}_rx"] = Out(link_wire()), In(link_wire())
            ports["chip_id"] = In(16)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.soc = soc = Dx1Soc(self.config)
        m.submodules.bridge = bridge = UartBridge(self.clk_freq, self.baud)
        wiring.connect(m, bridge.regs, soc.regs)
        wiring.connect(m, bridge.mem, soc.mem)
        m.d.comb += [bridge.rx.eq(self.uart_rx), self.uart_tx.eq(bridge.tx), self.irq.eq(soc.irq)]
        if self.config.link is not None:
            for p in range(LINK_PORTS):
                wiring.connect(m, getattr(soc, f"link{p}_tx"), wiring.flipped(getattr(self, f"link{p}_tx")))
                wiring.connect(m, wiring.flipped(getattr(self, f"link{p}_rx")), getattr(soc, f"link{p}_rx"))
            m.d.comb += soc.chip_id.eq(self.chip_id)
        return m
