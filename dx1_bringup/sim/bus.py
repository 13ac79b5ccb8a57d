"""Bus-model helpers shared by the cocotb testbenches."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["refuse_accesses"]


def refuse_accesses(ram, refused: Callable[[int, int], bool]) -> None:
    """Make cocotbext-axi's ``AxiRam`` answer with an error response where ``refused(address, length)``.

    The RAM turns the ``OSError`` raised here into SLVERR on the bus, as a device would for an
    address it does not decode; every other access is served as before.
    """
    read, write = ram.read_if._read, ram.write_if._write

    def check(address: int, length: int) -> None:
        if refused(address, length):
            raise OSError(f"address {address:#x} is refused")

    async def checked_read(address, length):
        check(address, length)
        return await read(address, length)

    async def checked_write(address, data):
        check(address, len(data))
        return await write(address, data)

    ram.read_if._read = checked_read
    ram.write_if._write = checked_write
