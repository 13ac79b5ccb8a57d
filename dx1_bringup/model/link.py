"""The golden model of a chip's link ports: the LINK register block's state and the SEND command.

Every chip has a LINK block (``spec/registers.py``).  On a chip without a link
(``SocConfig.link is None``) its CAPS, LATENCY, STATUS and counters read 0, and
WINDOW_BASE, WINDOW_LIMIT and CONTROL store what is written and act on nothing.
A SEND (:func:`execute_send`) moves its frames whole and at once into the peer the
board (:class:`~dx1_bringup.model.board.ModelBoard`) wires to the port, with the
spec's outcomes (``spec/chip_link.py``) and exact counters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..perfmodel import COSTS
from ..spec import (
    BUS_BYTES,
    LINK_PORTS,
    ChipLinkConfig,
    ErrorCode,
    LinkOp,
    SocConfig,
    register_map,
    send_frames,
    send_timing,
    up_wait_cycles,
)

__all__ = ["PortCounters", "LinkRegisters", "send_status", "execute_send"]

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
    #: Whether a port is up, given by the board that wires the chip (``None``: no board, every port down).
    wire: Callable[[int], bool] | None = None

    def clear_counters(self) -> None:
        self.counters = [PortCounters() for _ in range(LINK_PORTS)]

    def up(self, port: int) -> bool:
        """True when ``port`` has a peer and neither end holds it down (a chip without a board: never)."""
        return self.config is not None and self.wire is not None and self.wire(port)

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


class Window(Protocol):
    """The sending queue's DMA window (a :class:`~dx1_bringup.model.registers.QueueState`)."""

    dma_base: int
    dma_limit: int


class Chip(Protocol):
    """What a SEND uses of a chip (a :class:`~dx1_bringup.model.device.DeviceModel`)."""

    config: SocConfig
    mem: bytearray
    link: LinkRegisters
    rank: int
    board: Any  # the ModelBoard, which imports the device model
    cycles: int

    def _bus_error(self, addr: int, length: int) -> bool: ...
    def _load(self, addr: int, length: int) -> bytes: ...
    def _store(self, addr: int, data: bytes) -> None: ...
    def signal_remote(self, sem: int, count: int, landed: int) -> None: ...


def send_status(dev: Chip, q: Window, f: dict[str, int]) -> ErrorCode:
    """SEND's field checks after the reserved bits, in CHECK_ORDER."""
    src, dst, length = f["src_addr"], f["dst_addr"], f["length"]
    if length == 0:
        return ErrorCode.BAD_DIMENSION
    if f["op"] not in LinkOp._value2member_map_ or f["port"] >= LINK_PORTS:
        return ErrorCode.BAD_FIELD
    if f["sem"] >= dev.config.semaphores:
        return ErrorCode.SEM_RANGE
    if src % BUS_BYTES or dst % BUS_BYTES or length % BUS_BYTES:
        return ErrorCode.MISALIGNED
    if not (q.dma_base <= src and src + length <= q.dma_limit and src + length <= len(dev.mem)):
        return ErrorCode.DMA_WINDOW
    return ErrorCode.OK


def execute_send(dev: Chip, q: Window, f: dict[str, int]) -> tuple[ErrorCode, int]:
    """Run a SEND of chip ``dev`` from queue ``q``: (status, cycles), the peer's memory, semaphore and counters.

    The frames move whole and at once; :func:`~dx1_bringup.spec.send_timing` gives the cycles, and the
    peer's semaphore records when the data landed (a WAIT it releases completes no earlier).
    """
    status = send_status(dev, q, f)
    if status != ErrorCode.OK:
        return status, COSTS.sync_cycles
    src, dst, length, port = f["src_addr"], f["dst_addr"], f["length"], f["port"]
    if dev._bus_error(src, length):
        return ErrorCode.BUS_ERROR, 1
    cfg, mine = dev.config.link, dev.link
    board = dev.board
    if board is None or not board.up(dev.rank, port):
        # The model's ports come up at once; the gateware's SEND waits out a mended port's handshake first.
        return ErrorCode.LINK_DOWN, COSTS.sync_cycles + up_wait_cycles(cfg)
    peer, peer_port = board.peer(dev.rank, port)
    theirs = peer.link
    frames = send_frames(cfg, length)
    tx, rx = mine.counters[port], theirs.counters[peer_port]
    bad = min(mine.corrupt[port], cfg.retries + 1)
    mine.corrupt[port] -= bad
    tx.tx_packets += 1
    tx.retries += min(bad, cfg.retries)
    rx.crc_errors += bad
    if bad > cfg.retries:
        # The last bad transmission's NAK ends it: as long as a one-frame SEND that failed every time.
        return ErrorCode.LINK_CRC, send_timing(cfg, frames[0], LinkOp(f["op"]), crc_faults=cfg.retries).landed
    tx.tx_packets += len(frames) - 1
    rx.rx_packets += len(frames)
    timing = send_timing(cfg, length, LinkOp(f["op"]), crc_faults=bad)
    tx.credit_stalls += timing.credit_stalls
    if not (theirs.window_base <= dst and dst + length <= theirs.window_limit and dst + length <= len(peer.mem)):
        return ErrorCode.REMOTE_WINDOW, timing.done
    data = dev._load(src, length)
    if f["op"] == LinkOp.ADD:
        data = np.add(np.frombuffer(peer._load(dst, length), "<i4"), np.frombuffer(data, "<i4"),
                      dtype="<i4").tobytes()
    peer._store(dst, data)
    if f["count"]:
        peer.signal_remote(f["sem"], f["count"], dev.cycles + timing.landed)
    return ErrorCode.OK, timing.done
