"""A board of chips in a ring: N SoCs with the link, each one's port 0 (next) wired to the next chip's port 1."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import MAX_CHIPS, PORT_NEXT, PORT_PREVIOUS, STALL_UNITS, SocConfig
from ..axi import AXI4LiteSignature, AXI4Signature
from ..link import LinkWire
from ..regfile import ADDR_WIDTH
from .top import Dx1Soc

__all__ = ["ChipRing"]


class ChipRing(wiring.Component):
    """``chips`` :class:`Dx1Soc` of one ``config`` (which has a link) in a ring, for simulation.

    Chip i's host ports are ``chip{i}_regs``, ``chip{i}_mem``, ``chip{i}_irq`` and its test-only unit stalls
    ``chip{i}_stall_units`` (:mod:`dx1_bringup.spec.stall`, as the SoC's ``stall_units``); its GLOBAL.CHIP_ID
    reads rank i of ``chips``.  Its port 0 (PORT_NEXT) drives a wire of the link's latency into chip
    i + 1's port 1 (PORT_PREVIOUS), and chip i + 1's port 1 a wire back; ``cut`` bit ``2i + d`` cuts
    the wire from chip i's port d (a cut link: both ends go down).  With two chips each pair of ports
    is its own link, so the ring has two links between the same chips, as the model's has.
    """

    def __init__(self, config: SocConfig, chips: int):
        if not isinstance(config, SocConfig) or config.link is None:
            raise TypeError(f"A chip ring needs a SocConfig with a link, not {config!r}")
        if not isinstance(chips, int) or isinstance(chips, bool) or not 2 <= chips <= MAX_CHIPS:
            raise ValueError(f"A chip ring has 2 to {MAX_CHIPS} chips, not {chips!r}")
        self.config, self.chips = config, chips
        ports = {"cut": In(2 * chips)}
        for i in range(chips):
            ports[f"chip{i}_regs"] = In(AXI4LiteSignature(addr_width=ADDR_WIDTH))
            ports[f"chip{i}_mem"] = In(AXI4Signature(id_width=4))
            ports[f"chip{i}_irq"] = Out(1)
            ports[f"chip{i}_stall_units"] = In(len(STALL_UNITS) * config.tiles)
        super().__init__(ports)
        self.socs = [Dx1Soc(config, stall_port=True) for _ in range(chips)]  # for simulation backdoors

    def elaborate(self, platform):
        m = Module()
        n = self.chips
        for i, soc in enumerate(self.socs):
            m.submodules[f"chip{i}"] = soc
            wiring.connect(m, wiring.flipped(getattr(self, f"chip{i}_regs")), soc.regs)
            wiring.connect(m, wiring.flipped(getattr(self, f"chip{i}_mem")), soc.mem)
            m.d.comb += [getattr(self, f"chip{i}_irq").eq(soc.irq), soc.chip_id.eq(i | n << 8),
                         soc.stall_units.eq(getattr(self, f"chip{i}_stall_units"))]
        for i, soc in enumerate(self.socs):
            for port, peer, peer_port in ((PORT_NEXT, (i + 1) % n, PORT_PREVIOUS), (PORT_PREVIOUS, (i - 1) % n,
                                                                                    PORT_NEXT)):
                m.submodules[f"wire{i}_{port}"] = wire = LinkWire(self.config.link.latency)
                wiring.connect(m, getattr(soc, f"link{port}_tx"), wire.tx)
                wiring.connect(m, wire.rx, getattr(self.socs[peer], f"link{peer_port}_rx"))
                m.d.comb += wire.cut.eq(self.cut[2 * i + port])
        return m
