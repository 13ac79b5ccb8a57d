"""Where random command streams put rings, completion queues and data in device memory (one region set per queue).

The pyuvm environment programs the rings itself at :meth:`Layout.ring_base` and :meth:`Layout.cq_base`;
the fuzzer lets the driver allocate them (from address 0, below every window).  Each queue's DMA window
holds its input area (sources), its output area (destinations) and room around them; after the last
window, :meth:`Layout.dump_base` is where the fuzzer stores each tile's scratchpad and accumulator
buffer at the end.
"""

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

    def windows_end(self) -> int:
        """The first byte after every queue's window."""
        return self.win_limit(self.config.tiles - 1)

    def dump_bytes(self) -> int:
        """Bytes of one tile's dump: its whole scratchpad, then its whole accumulator buffer."""
        tile = self.config.tile
        return tile.spm_rows * tile.spm_row_bytes + tile.acc_rows * tile.acc_row_bytes

    def dump_base(self, q: int) -> int:
        """Where tile ``q``'s scratchpad (then its accumulator buffer) is stored at the end of a fuzz run."""
        return self.windows_end() + self.dump_bytes() * q

    def check(self) -> None:
        """Refuse a layout whose windows and dump areas do not fit the device memory.

        Raises
        ------
        ValueError
            The last dump area ends past the device memory.
        """
        end = self.dump_base(self.config.tiles)
        if end > self.config.mem_bytes:
            raise ValueError(f"the layout needs 0x{end:x} bytes of device memory (windows and dump areas), the "
                             f"device has 0x{self.config.mem_bytes:x}")

    def checked_regions(self, q: int) -> list[tuple[int, int]]:
        """(address, bytes) compared with the model at the end: outputs and guards around the window."""
        return [(self.out_base(q), self.out_bytes), (self.win_base(q) - 0x100, 0x100),
                (self.win_limit(q) - 0x100, 0x200)]


LAYOUT = Layout()
