"""Generator parameters of dx1-mini, checked at construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from .chip_link import ChipLinkConfig

__all__ = ["BUS_BYTES", "PAGE_BYTES", "TileConfig", "SocConfig"]

#: Bytes of one beat of the SoC's AXI4 device-memory bus (64-bit data): the DMA's, the memory's, the host
#: port's and the UART bridge's; device-memory addresses and strides of LOAD, STORE and COPY are multiples of it.
BUS_BYTES = 8
#: AXI's 4 KiB page: no burst crosses a boundary of this many bytes, and device memory's banks take pages of it
#: in turn (page ``p`` is in bank ``p % mem_banks``).
PAGE_BYTES = 4096


def _check_int(owner: str, name: str, value, low: int, high: int, *, power_of_two: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{owner} {name} must be an integer, not {value!r}")
    what = "a power of two" if power_of_two else "an integer"
    if not low <= value <= high or (power_of_two and value & (value - 1)):
        raise ValueError(f"{owner} {name} must be {what} from {low} to {high}, not {value!r}")


@dataclass(frozen=True)
class TileConfig:
    """One compute tile: an ``array`` x ``array`` systolic array and its memories.

    Parameters
    ----------
    array:
        Rows and columns of processing elements; also the lanes of one
        scratchpad row (int8) and one accumulator row (int32).
    spm_rows, acc_rows:
        Depths of the scratchpad and accumulator buffer in rows.
    vector:
        The tile has a vector unit (FEATURES.vector): it runs VECTOR, TABLE and TRANSPOSE; without one they
        complete with BAD_OPCODE.
    """

    array: int = 8
    spm_rows: int = 4096
    acc_rows: int = 1024
    vector: bool = True

    def __post_init__(self):
        _check_int("Tile", "array size", self.array, 2, 16, power_of_two=True)
        _check_int("Tile", "scratchpad rows", self.spm_rows, 4 * self.array, 65536, power_of_two=True)
        _check_int("Tile", "accumulator rows", self.acc_rows, 2 * self.array, 65536, power_of_two=True)
        if not isinstance(self.vector, bool):
            raise TypeError(f"Tile vector must be True or False, not {self.vector!r}")

    @property
    def spm_row_bytes(self) -> int:
        return self.array

    @property
    def acc_row_bytes(self) -> int:
        return 4 * self.array

    @property
    def name(self) -> str:
        return f"a{self.array}_s{self.spm_rows}_c{self.acc_rows}" + ("" if self.vector else "_novector")


@dataclass(frozen=True)
class SocConfig:
    """The whole device: tiles, device memory and the sizes the host can discover.

    ``mem_banks`` is the number of banks of device memory, interleaved in 4 KiB pages (a power of
    two from 1 to 16, each bank at least 4 KiB): bursts to different banks are served at once.
    ``link`` gives the SoC the chip-to-chip link's two ports with those parameters (CAPS.link_ports,
    FEATURES.link, SEND); ``None``, the default, is a single chip without one.
    """

    tiles: int = 2
    tile: TileConfig = field(default_factory=TileConfig)
    mem_bytes: int = 1 << 20
    mem_banks: int = 4
    semaphores: int = 16
    trace_depth: int = 256
    link: ChipLinkConfig | None = None

    def __post_init__(self):
        if not isinstance(self.tile, TileConfig):
            raise TypeError(f"SoC tile must be a TileConfig, not {self.tile!r}")
        _check_int("SoC", "tile count", self.tiles, 1, 8)
        _check_int("SoC", "device memory bytes", self.mem_bytes, 4096, 1 << 31, power_of_two=True)
        _check_int("SoC", "device memory bank count", self.mem_banks, 1, 16, power_of_two=True)
        if self.mem_bytes // self.mem_banks < 4096:
            raise ValueError(f"SoC device memory of {self.mem_bytes} bytes cannot hold {self.mem_banks} banks of "
                             f"at least 4096 bytes each")
        _check_int("SoC", "semaphore count", self.semaphores, 1, 256)
        _check_int("SoC", "trace depth", self.trace_depth, 16, 4096, power_of_two=True)
        if self.link is not None and not isinstance(self.link, ChipLinkConfig):
            raise TypeError(f"SoC link must be a ChipLinkConfig or None, not {self.link!r}")
