"""A board of chips in a ring: N SoCs with the link, each one's port 0 (next) wired to the next chip's port 1.

:class:`RingChip` is one chip of it, the SoC with the wire into each of its link ports; :class:`ChipRing`
wires N of them into the ring (Amaranth's simulator runs it, :mod:`dx1_bringup.sim.amaranth_board`), and the
native board server (``sim:chips=N``) runs N instances of one Verilator model of a :class:`RingChip`, wired
the same way in C++.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import MAX_CHIPS, PORT_NEXT, PORT_PREVIOUS, STALL_UNITS, SocConfig
from ..axi import AXI4LiteSignature, AXI4Signature
from ..link import LinkWire, link_wire
from ..regfile import ADDR_WIDTH
from .top import Dx1Soc

__all__ = ["RingChip", "ChipRing", "ring_peer"]


def ring_peer(chip: int, port: int, chips: int) -> tuple[int, int]:
    """The chip and the port at the far end of the wire leaving link ``port`` of ``chip`` in a ring of ``chips``:
    port 0 (PORT_NEXT) of chip i goes to port 1 (PORT_PREVIOUS) of chip i + 1, port 1 to port 0 of chip i - 1."""
    if port == PORT_NEXT:
        return (chip + 1) % chips, PORT_PREVIOUS
    return (chip - 1) % chips, PORT_NEXT


class RingChip(wiring.Component):
    """A :class:`Dx1Soc` of ``config`` (which has a link) with its test-only ``stall_units``, and a
    :class:`LinkWire` of the link's latency in front of each link port's receiver.

    Ports: the SoC's ``regs``, ``mem``, ``irq``, ``stall_units`` and ``chip_id``; ``link{p}_tx``, what link
    port p sends (into the peer's wire); ``link{p}_peer``, what the peer's port sends into the wire to port p;
    ``cut`` bit p cuts that wire.  The wires' inputs feed their first registers only, so nothing this chip
    shows depends on its ``link{p}_peer`` or ``cut`` before the next clock edge: chips can be evaluated one
    after another each cycle, each one's ``link{p}_tx`` handed to its peer before the edge.
    """

    def __init__(self, config: SocConfig):
        if not isinstance(config, SocConfig) or config.link is None:
            raise TypeError(f"A chip of a ring needs a SocConfig with a link, not {config!r}")
        self.config = config
        ports = {"regs": In(AXI4LiteSignature(addr_width=ADDR_WIDTH)), "mem": In(AXI4Signature(id_width=4)),
                 "irq": Out(1), "stall_units": In(len(STALL_UNITS) * config.tiles), "chip_id": In(16),
                 "cut": In(2)}
        for p in (PORT_NEXT, PORT_PREVIOUS):
            ports[f"link{p}_tx"], ports[f"link{p}_peer"] = Out(link_wire()), In(link_wire())
        super().__init__(ports)
        self.soc = Dx1Soc(config, stall_port=True)  # for simulation backdoors

    def elaborate(self, platform):
        m = Module()
        m.submodules.soc = soc = self.soc
        wiring.connect(m, wiring.flipped(self.regs), soc.regs)
        wiring.connect(m, wiring.flipped(self.mem), soc.mem)
        m.d.comb += [self.irq.eq(soc.irq), soc.chip_id.eq(self.chip_id), soc.stall_units.eq(self.stall_units)]
        for p in (PORT_NEXT, PORT_PREVIOUS):
            m.submodules[f"wire{p}"] = wire = LinkWire(self.config.link.latency)
            wiring.connect(m, getattr(soc, f"link{p}_tx"), wiring.flipped(getattr(self, f"link{p}_tx")))
            wiring.connect(m, wiring.flipped(getattr(self, f"link{p}_peer")), wire.tx)
            wiring.connect(m, wire.rx, getattr(soc, f"link{p}_rx"))
            m.d.comb += wire.cut.eq(self.cut[p])
        return m


class ChipRing(wiring.Component):
    """``chips`` :class:`RingChip` of one ``config`` (which has a link) in a ring, for simulation.

    Chip i's host ports are ``chip{i}_regs``, ``chip{i}_mem``, ``chip{i}_irq`` and its test-only unit stalls
    ``chip{i}_stall_units`` (:mod:`dx1_bringup.spec.stall`, as the SoC's ``stall_units``); its GLOBAL.CHIP_ID
    reads rank i of ``chips``.  Its port 0 (PORT_NEXT) drives a wire of the link's latency into chip
    i + 1's port 1 (PORT_PREVIOUS), and chip i + 1's port 1 a wire back (:func:`ring_peer`); ``cut`` bit
    ``2i + d`` cuts the wire from chip i's port d (a cut link: both ends go down).  With two chips each pair of
    ports is its own link, so the ring has two links between the same chips, as the model's has.
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
        self.ring_chips = [RingChip(config) for _ in range(chips)]
        self.socs = [chip.soc for chip in self.ring_chips]  # for simulation backdoors

    def elaborate(self, platform):
        m = Module()
        n = self.chips
        for i, chip in enumerate(self.ring_chips):
            m.submodules[f"chip{i}"] = chip
            wiring.connect(m, wiring.flipped(getattr(self, f"chip{i}_regs")), chip.regs)
            wiring.connect(m, wiring.flipped(getattr(self, f"chip{i}_mem")), chip.mem)
            m.d.comb += [getattr(self, f"chip{i}_irq").eq(chip.irq), chip.chip_id.eq(i | n << 8),
                         chip.stall_units.eq(getattr(self, f"chip{i}_stall_units"))]
        for i, chip in enumerate(self.ring_chips):
            for port in (PORT_NEXT, PORT_PREVIOUS):
                peer, peer_port = ring_peer(i, port, n)
                far = self.ring_chips[peer]
                wiring.connect(m, getattr(chip, f"link{port}_tx"), getattr(far, f"link{peer_port}_peer"))
                m.d.comb += far.cut[peer_port].eq(self.cut[2 * i + port])
        return m
