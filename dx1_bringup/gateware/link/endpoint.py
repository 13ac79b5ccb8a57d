"""A link port with its DMA: the port, the sender of its SENDs and the lander of its peer's."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ...spec.chip_link import ChipLinkConfig
from ..axi import AXI4Signature
from ..stream import AXIStreamSignature
from .lander import LinkLander
from .port import COUNTERS, LinkPort
from .sender import SEND_REQUEST, LinkSender
from .wire import link_wire

__all__ = ["LinkEndpoint"]


class LinkEndpoint(wiring.Component):
    """One link port of a chip and its two DMA halves, each on its own AXI master into device memory.

    ``request``/``done``: SENDs on this port and their status bytes (:class:`~.sender.LinkSender`);
    ``send_bus`` carries their reads.  ``land_bus`` carries the peer's SENDs into memory
    (:class:`~.lander.LinkLander`, inside ``window_base`` .. ``window_limit``), ``sem_*`` their
    semaphore signals.  ``tx``/``rx``, ``force_down``, ``up``, ``inject``/``inject_count``/``inject_left``,
    ``clear`` and the counters are the port's (:class:`~.port.LinkPort`); ``busy`` while a SEND runs.
    """

    def __init__(self, config: ChipLinkConfig, semaphores: int, mem_bytes: int):
        if not isinstance(config, ChipLinkConfig):
            raise TypeError(f"Link endpoint config must be a ChipLinkConfig, not {config!r}")
        self.config = config
        self._port = LinkPort(config)
        self._sender = LinkSender(config)
        self._lander = LinkLander(config, semaphores, mem_bytes)
        lander = self._lander.signature.members
        super().__init__({
            "tx": Out(link_wire()), "rx": In(link_wire()), "force_down": In(1), "up": Out(1),
            "request": In(SEND_REQUEST), "done": Out(AXIStreamSignature(8)), "busy": Out(1),
            "send_bus": Out(AXI4Signature()), "land_bus": Out(AXI4Signature()),
            "window_base": In(32), "window_limit": In(32),
            "sem_valid": Out(1), "sem_index": lander["sem_index"], "sem_delta": lander["sem_delta"],
            "sem_grant": In(1),
            "inject": In(1), "inject_count": In(8), "inject_left": Out(8),
            "clear": In(1), **{name: Out(32) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.port = port = self._port
        m.submodules.sender = sender = self._sender
        m.submodules.lander = lander = self._lander
        connect(m, port.tx, flipped(self.tx))
        connect(m, flipped(self.rx), port.rx)
        connect(m, flipped(self.request), sender.request)
        connect(m, sender.done, flipped(self.done))
        connect(m, sender.bus, flipped(self.send_bus))
        connect(m, lander.bus, flipped(self.land_bus))
        connect(m, sender.frames, port.frames)
        m.d.comb += [
            port.force_down.eq(self.force_down), self.up.eq(port.up),
            sender.up.eq(port.up), sender.failed.eq(port.failed), port.abort.eq(sender.abort),
            sender.next_seq.eq(port.next_seq), sender.peer_done.eq(port.done),
            sender.peer_done_seq.eq(port.done_seq), sender.peer_done_status.eq(port.done_status),
            lander.frame_valid.eq(port.frame_valid), lander.header.eq(port.header), port.pay_addr.eq(lander.pay_addr),
            lander.pay_data.eq(port.pay_data), port.consume.eq(lander.consume),
            port.done_req_valid.eq(lander.done_valid), port.done_req_seq.eq(lander.done_seq),
            port.done_req_status.eq(lander.done_status), lander.done_ready.eq(port.done_req_ready),
            lander.window_base.eq(self.window_base), lander.window_limit.eq(self.window_limit),
            self.sem_valid.eq(lander.sem_valid), self.sem_index.eq(lander.sem_index),
            self.sem_delta.eq(lander.sem_delta), lander.sem_grant.eq(self.sem_grant),
            port.inject.eq(self.inject), port.inject_count.eq(self.inject_count), self.inject_left.eq(port.inject_left),
            port.clear.eq(self.clear), *(getattr(self, n).eq(getattr(port, n)) for n in COUNTERS),
            self.busy.eq(sender.busy),
        ]
        return m
