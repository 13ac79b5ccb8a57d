"""The link's CRC-32 (``zlib.crc32``): a one-byte XOR network, and the register a frame is checked with."""

from __future__ import annotations

from functools import cache

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import CRC_POLY

__all__ = ["CRC_PORT", "Crc32", "crc32_update", "crc32_matrix"]


@cache
def crc32_matrix(nbytes: int = 1) -> tuple[tuple[int, int], ...]:
    """For each bit of the CRC-32 register after ``nbytes`` more bytes (byte 0 first, each LSB first), the register
    bits and input bits it is the XOR of (as masks).

    The CRC is linear: run the bitwise algorithm on each unit vector (register
    bit j, or input bit j) alone and record which output bits it reaches.
    """
    def step(crc: int, data: int) -> int:
        for i in range(8 * nbytes):
            crc = (crc >> 1) ^ (CRC_POLY if (crc ^ (data >> i)) & 1 else 0)
        return crc
    rows = [[0, 0] for _ in range(32)]
    for j in range(32):
        out = step(1 << j, 0)
        for i in range(32):
            if out >> i & 1:
                rows[i][0] |= 1 << j
    for j in range(8 * nbytes):
        out = step(0, 1 << j)
        for i in range(32):
            if out >> i & 1:
                rows[i][1] |= 1 << j
    return tuple((r[0], r[1]) for r in rows)


_CRC32_ROWS = crc32_matrix()


def crc32_update(crc, byte):
    """The CRC-32 register after one more byte (LSB first), as an Amaranth expression (an XOR network)."""
    bits = []
    for crc_mask, byte_mask in _CRC32_ROWS:
        bits.append((crc & crc_mask).xor() ^ (byte & byte_mask).xor())
    return Cat(*bits)


#: The CRC register as its users see it (flipped): at most one operation a cycle, ``value`` the running CRC.
CRC_PORT = wiring.Signature({
    "data": In(8),      # the byte that ``start`` or ``feed`` adds
    "start": In(1),     # a new CRC of ``data`` alone (a frame's first byte)
    "feed": In(1),      # add ``data``
    "restart": In(1),   # a new, empty CRC
    "shift": In(1),     # drop ``value``'s top byte (it has been sent), most significant first
    "value": Out(32),
})


class Crc32(wiring.Component):
    """The running CRC-32 of a frame, fed a byte a cycle and sent a byte at a time.

    ``value`` is ``zlib.crc32`` of the bytes fed since the last ``start`` or
    ``restart`` (0 after a ``restart``); the register holds its complement, as
    the bitwise algorithm does.  ``start``, ``feed``, ``restart`` and ``shift``
    act on the next clock edge, in that priority; with none, the CRC holds.
    ``shift`` moves ``value`` up a byte (zeros in), so ``value[24:]`` is always
    the next CRC byte to send, most significant first, as the link sends it.
    """

    def __init__(self):
        super().__init__(CRC_PORT)

    def elaborate(self, platform):
        m = Module()
        crc = Signal(32, init=0xFFFF_FFFF)
        m.d.comb += self.value.eq(~crc)
        with m.If(self.start):
            m.d.sync += crc.eq(crc32_update(Const(0xFFFF_FFFF, 32), self.data))
        with m.Elif(self.feed):
            m.d.sync += crc.eq(crc32_update(crc, self.data))
        with m.Elif(self.restart):
            m.d.sync += crc.eq(0xFFFF_FFFF)
        with m.Elif(self.shift):
            m.d.sync += crc.eq(crc << 8 | 0xFF)
        return m
