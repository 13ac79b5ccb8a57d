"""The UART bridge's frames, built as the bridge expects them (the wire format is ``docs/link.md``).

Every command byte, header layout, byte order and CRC rule comes from the
generated :mod:`.link`; this module only puts them together.  CRC-32 is
:func:`zlib.crc32`: a burst header's CRC covers its 9 bytes, a payload's CRC the
payload, a register frame's CRC every byte before it, command byte included.
"""

from __future__ import annotations

import struct
import zlib

from . import link
from .link import FrameCommand

__all__ = [
    "BURST_FRAME_HEADER_BYTES", "crc_bytes", "crc_ok", "pack_words", "unpack_words", "burst_header",
    "burst_write_frame", "burst_read_frame", "reg_write_frame", "reg_read_frame", "uartbone_read_frame",
    "uartbone_write_frame",
]

_UARTBONE = struct.Struct(link.UARTBONE_HEADER)
_BURST = struct.Struct(link.BURST_HEADER)
_REG = struct.Struct(link.REG_HEADER)
#: Bytes of a burst header on the line: the header and its CRC.
BURST_FRAME_HEADER_BYTES = _BURST.size + link.CRC_BYTES


def crc_bytes(data: bytes) -> bytes:
    """The CRC-32 of ``data`` as it goes on the line."""
    return zlib.crc32(data).to_bytes(link.CRC_BYTES, link.LINK_BYTE_ORDER)


def crc_ok(body: bytes) -> bool:
    """Whether ``body`` ends with the CRC-32 of the bytes before it."""
    return len(body) >= link.CRC_BYTES and crc_bytes(body[:-link.CRC_BYTES]) == body[-link.CRC_BYTES:]


def pack_words(words: list[int]) -> bytes:
    """Register words as they go on the line."""
    return b"".join(w.to_bytes(link.WORD_BYTES, link.LINK_BYTE_ORDER) for w in words)


def unpack_words(data: bytes) -> list[int]:
    """Register words from the line; ``len(data)`` must be a multiple of the word size."""
    if len(data) % link.WORD_BYTES:
        raise ValueError(f"register words are {link.WORD_BYTES} bytes each, not a part of one: {len(data)} bytes")
    return [int.from_bytes(data[i:i + link.WORD_BYTES], link.LINK_BYTE_ORDER)
            for i in range(0, len(data), link.WORD_BYTES)]


def burst_header(cmd: int, byte_addr: int, length: int) -> bytes:
    """The header of a CRC burst: command, address, length and the CRC-32 of those bytes."""
    head = _BURST.pack(cmd, byte_addr, length)
    return head + crc_bytes(head)


def burst_write_frame(byte_addr: int, data: bytes) -> bytes:
    """A whole CRC burst write: header, payload and the payload's CRC-32 (answered by one status byte)."""
    return burst_header(FrameCommand.BURST_WRITE, byte_addr, len(data)) + data + crc_bytes(data)


def burst_read_frame(byte_addr: int, length: int) -> bytes:
    """A CRC burst read (answered by a status byte, then on ACK ``length`` bytes and their CRC-32)."""
    return burst_header(FrameCommand.BURST_READ, byte_addr, length)


def reg_write_frame(byte_addr: int, words: list[int]) -> bytes:
    """A CRC register write of ``words`` to ``byte_addr`` (answered by one status byte)."""
    frame = _REG.pack(FrameCommand.REG_WRITE, byte_addr, len(words)) + pack_words(words)
    return frame + crc_bytes(frame)


def reg_read_frame(byte_addr: int, n: int) -> bytes:
    """A CRC register read of ``n`` words (answered by a status byte, then on ACK the words and their CRC)."""
    frame = _REG.pack(FrameCommand.REG_READ, byte_addr, n)
    return frame + crc_bytes(frame)


def uartbone_read_frame(byte_addr: int, n: int) -> bytes:
    """A UARTBone read of ``n`` words from ``byte_addr`` (answered by the ``n`` words)."""
    return _UARTBONE.pack(FrameCommand.UARTBONE_READ, n, byte_addr // link.WORD_BYTES)


def uartbone_write_frame(byte_addr: int, words: list[int]) -> bytes:
    """A UARTBone write of ``words`` to ``byte_addr`` (no answer)."""
    return _UARTBONE.pack(FrameCommand.UARTBONE_WRITE, len(words), byte_addr // link.WORD_BYTES) + pack_words(words)
