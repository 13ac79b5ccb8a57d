"""A board of golden-model chips wired in a ring by their link ports (the ``model:chips=N`` device).

Chip ``r``'s port 0 goes to chip ``r + 1``'s port 1 (modulo the chip count), so a ring of one
chip wires its two ports to each other.  A port is up while neither of its two ends holds it
down (LINK.CONTROL ``force_down``).  The chips share one lock: the ranks of a group drive
them from threads of their own, and a SEND on one chip runs commands of another (the WAIT it
releases), so every access to any chip of the board is made under it.
"""

from __future__ import annotations

import dataclasses
import threading

from ..faults import BusErrors, MemoryFaults, UnitStalls
from ..spec import MAX_CHIPS, PORT_NEXT, PORT_PREVIOUS, ChipLinkConfig, SocConfig, peer_rank
from .device import DeviceModel

__all__ = ["ModelBoard"]


class ModelBoard:
    """``chips`` golden-model chips of ``config`` (given the default link when it has none), in a ring.

    Parameters
    ----------
    chips:
        Chips on the board, 1 to :data:`~dx1_bringup.spec.MAX_CHIPS`.
    config:
        Every chip's configuration; ``None`` for the default SoC.  A config without ``link`` gets
        :class:`~dx1_bringup.spec.ChipLinkConfig`'s defaults.
    faults, stalls, bus_errors:
        Faults of chip 0 alone, as :class:`DeviceModel` takes them (the others are good chips).

    Attributes
    ----------
    devices:
        The chips, by rank; each one's GLOBAL.CHIP_ID reads its rank and ``chips``.
    lock:
        Held around every access to any chip (:class:`~dx1_bringup.backends.ModelTransport` takes it).
    """

    def __init__(self, chips: int, config: SocConfig | None = None, *, faults: MemoryFaults | None = None,
                 stalls: UnitStalls | None = None, bus_errors: BusErrors | None = None):
        if isinstance(chips, bool) or not isinstance(chips, int) or not 1 <= chips <= MAX_CHIPS:
            raise ValueError(f"a board holds 1 to {MAX_CHIPS} chips, not {chips!r}")
        config = config or SocConfig()
        if config.link is None:
            config = dataclasses.replace(config, link=ChipLinkConfig())
        self.config = config
        self.lock = threading.RLock()
        self.devices = [DeviceModel(config, **({"faults": faults, "stalls": stalls, "bus_errors": bus_errors}
                                               if rank == 0 else {})) for rank in range(chips)]
        for rank, dev in enumerate(self.devices):
            dev.rank, dev.chips, dev.board = rank, chips, self
            dev.link.wire = lambda port, rank=rank: self.up(rank, port)
        self._running = False

    @property
    def chips(self) -> int:
        return len(self.devices)

    def peer(self, rank: int, port: int) -> tuple[DeviceModel, int]:
        """The chip at the other end of ``port`` of chip ``rank``, and the port it arrives on there."""
        other = PORT_PREVIOUS if port == PORT_NEXT else PORT_NEXT
        return self.devices[peer_rank(rank, self.chips, port)], other

    def up(self, rank: int, port: int) -> bool:
        """True while neither end of ``port`` of chip ``rank`` is held down."""
        peer, other = self.peer(rank, port)
        return not self.devices[rank].link.force_down[port] and not peer.link.force_down[other]

    def run(self) -> None:
        """Run every chip's queues until none can make progress (a chip's SEND may release another's WAIT).

        Called by a chip whose register write published work; a call from inside a run (a SEND that
        signals a peer) leaves the work to the loop already running.
        """
        with self.lock:
            if self._running:
                return
            self._running = True
            try:
                progress = True
                while progress:
                    progress = False
                    for dev in self.devices:
                        progress |= dev.run_queues()
            finally:
                self._running = False
