"""Where the UVM tests put rings, completion queues and data in device memory (one region set per queue)."""

from __future__ import annotations

from dataclasses import dataclass

from dx1_bringup.spec import COMMAND_BYTES, COMPLETION_BYTES, SocConfig

__all__ = ["Layout", "LAYOUT"]


@dataclass(frozen=True)
class Layout:
    config: SocConfig = SocConfig()
    ring_log2: int = 6
    in_bytes: int = 0x4000     # read-only source data (LOAD and COPY sources)
    out_offset: int = 0x8000   # STORE and COPY destinations, from the window base
    out_bytes: int = 0x8000
    window_bytes: int = 0x40000

    @property
    def entries(self) -> int:
        return 1 << self.ring_log2

    def ring_base(self, q: int) -> int:
        return 0x2000 * q

    def cq_base(self, q: int) -> int:
        return 0x2000 * q + 0x1000

    def ring_slot(self, q: int, index: int) -> int:
        return self.ring_base(q) + COMMAND_BYTES * index

    def cq_slot(self, q: int, index: int) -> int:
        return self.cq_base(q) + COMPLETION_BYTES * index

    def win_base(self, q: int) -> int:
        return 0x10000 + self.window_bytes * q

    def win_limit(self, q: int) -> int:
        return self.win_base(q) + self.window_bytes

    def in_base(self, q: int) -> int:
        return self.win_base(q)

    def out_base(self, q: int) -> int:
        return self.win_base(q) + self.out_offset

    def checked_regions(self, q: int) -> list[tuple[int, int]]:
        """(address, bytes) compared with the model at the end: outputs and guards around the window."""
        return [(self.out_base(q), self.out_bytes), (self.win_base(q) - 0x100, 0x100),
                (self.win_limit(q) - 0x100, 0x200)]


LAYOUT = Layout()
