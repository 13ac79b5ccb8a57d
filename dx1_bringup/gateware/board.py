"""The dx1-mini board: the SoC behind the UART bridge, as an FPGA prototype is reached over a cable."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec import SocConfig
from .bridge import UartBridge
from .soc import Dx1Soc

__all__ = ["Dx1Board"]


class Dx1Board(wiring.Component):
    """The SoC with its register and memory ports driven by a :class:`UartBridge`.

    Pins: ``uart_rx`` (from the host), ``uart_tx`` (to the host), ``irq`` (for an LED).
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
        super().__init__({"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1), "irq": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.soc = soc = Dx1Soc(self.config)
        m.submodules.bridge = bridge = UartBridge(self.clk_freq, self.baud)
        wiring.connect(m, bridge.regs, soc.regs)
        wiring.connect(m, bridge.mem, soc.mem)
        m.d.comb += [bridge.rx.eq(self.uart_rx), self.uart_tx.eq(bridge.tx), self.irq.eq(soc.irq)]
        return m
