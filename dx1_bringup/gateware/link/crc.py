"""CRC-32 (``zlib.crc32``) over a whole link word a cycle: the bridge's byte network widened to ``nbytes`` bytes."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..bridge.crc import crc32_matrix

__all__ = ["crc32_word_update", "WordCrc32"]


def crc32_word_update(crc, word, nbytes: int):
    """The CRC-32 register after the ``nbytes`` bytes of ``word`` (little-endian: bits [7:0] first), as an
    Amaranth XOR network; ``crc`` is the register (the complement of the running ``zlib.crc32``)."""
    return Cat(*((crc & crc_mask).xor() ^ (word & word_mask).xor()
                 for crc_mask, word_mask in crc32_matrix(nbytes)))


class WordCrc32(wiring.Component):
    """The running CRC-32 of a packet, fed one ``nbytes``-byte word a cycle.

    ``value`` is ``zlib.crc32`` of the words fed since the last ``start`` (which
    begins a new CRC with ``data``) or ``restart`` (0).  ``start``, ``feed`` and
    ``restart`` act on the next clock edge, in that priority; ``next`` is what
    ``value`` will be after a ``start`` or ``feed`` of ``data`` (so a packet's
    last word and its CRC can leave in the same cycle).

    Parameters
    ----------
    nbytes:
        Bytes of one word (the link's width).
    """

    def __init__(self, nbytes: int):
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
            raise TypeError(f"CRC word bytes must be a positive integer, not {nbytes!r}")
        self.nbytes = nbytes
        super().__init__({
            "data": In(8 * nbytes), "start": In(1), "feed": In(1), "restart": In(1),
            "value": Out(32), "next": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        crc = Signal(32, init=0xFFFF_FFFF)
        base = Signal(32)
        following = Signal(32)
        m.d.comb += [
            base.eq(self.start.as_unsigned().replicate(32) | crc),
            following.eq(crc32_word_update(base, self.data, self.nbytes)),
            self.value.eq(~crc), self.next.eq(~following),
        ]
        with m.If(self.start | self.feed):
            m.d.sync += crc.eq(following)
        with m.Elif(self.restart):
            m.d.sync += crc.eq(Const(0xFFFF_FFFF, 32))
        return m
