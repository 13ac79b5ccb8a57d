"""The golden model of a chip's link ports: the LINK register block's state.

Every chip has a LINK block (``spec/registers.py``).  On a chip without a link
(``SocConfig.link is None``) its CAPS, LATENCY, STATUS and counters read 0, and
WINDOW_BASE, WINDOW_LIMIT and CONTROL store what is written and act on nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec import LINK_PORTS, ChipLinkConfig, register_map

__all__ = ["PortCounters", "LinkRegisters"]

_LINK = {r.name: r for r in register_map().block("LINK").spec.registers}
#: The counter registers of each port, in the spec's order.
COUNTERS = ("TX_PACKETS", "RX_PACKETS", "RETRIES", "CRC_ERRORS", "CREDIT_STALLS")


@dataclass
class PortCounters:
    """One port's counters (32-bit, wrapping)."""

    tx_packets: int = 0
    rx_packets: int = 0
    retries: int = 0
    crc_errors: int = 0
    credit_stalls: int = 0


@dataclass
class LinkRegisters:
    """The LINK block of one chip: its parameters, window, per-port controls and counters."""

    config: ChipLinkConfig | None
    window_base: int = 0
    window_limit: int = 0
    force_down: list[bool] = field(default_factory=lambda: [False] * LINK_PORTS)
    corrupt: list[int] = field(default_factory=lambda: [0] * LINK_PORTS)
    counters: list[PortCounters] = field(default_factory=lambda: [PortCounters() for _ in range(LINK_PORTS)])

    def clear_counters(self) -> None:
        self.counters = [PortCounters() for _ in range(LINK_PORTS)]

    def up(self, port: int) -> bool:
        """True when ``port`` has a peer and neither end holds it down (a chip without a link: never)."""
        return False

    def read(self, name: str, index: int | None) -> int:
        """The value of LINK register ``name`` (element ``index`` of an array)."""
        cfg = self.config
        if name == "CAPS":
            if cfg is None:
                return 0
            return _LINK["CAPS"].pack(width=cfg.width, credits=cfg.credits, retries=cfg.retries,
                                      max_payload_log2=cfg.max_payload.bit_length() - 1)
        if name == "LATENCY":
            return 0 if cfg is None else cfg.latency
        if name == "WINDOW_BASE":
            return self.window_base
        if name == "WINDOW_LIMIT":
            return self.window_limit
        if name == "CONTROL":
            return _LINK["CONTROL"].pack(force_down=int(self.force_down[index]), corrupt=self.corrupt[index])
        if name == "STATUS":
            return _LINK["STATUS"].pack(up=int(self.up(index)), busy=0)
        return getattr(self.counters[index], name.lower()) & 0xFFFF_FFFF

    def write(self, name: str, index: int | None, value: int) -> None:
        """A host write of ``value`` (already masked to the register's fields) to LINK register ``name``."""
        if name == "WINDOW_BASE":
            self.window_base = value
        elif name == "WINDOW_LIMIT":
            self.window_limit = value
        elif name == "CONTROL":
            self.force_down[index] = bool(_LINK["CONTROL"].field("force_down").extract(value))
            self.corrupt[index] = _LINK["CONTROL"].field("corrupt").extract(value)
        elif _LINK["CLEAR"].field("counters").extract(value):  # CLEAR
            self.clear_counters()
