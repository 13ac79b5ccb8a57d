"""The spec's frame header fields as slices of gateware values, and the frame streams between a port and its DMA."""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, Const, Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec.chip_link import CONTROL_HEADER, DATA_HEADER, ChipLinkConfig, FrameKind, LinkField
from .wire import WORD_BITS

__all__ = ["data_field", "control_field", "control_word", "frame_stream", "payload_words", "FrameBuffer",
           "frame_buffer"]


def _slice(value, fields: tuple[LinkField, ...], name: str):
    for f in fields:
        if f.name == name:
            return value[f.lsb:f.lsb + f.width]
    raise ValueError(f"frame header has no field {name!r}")


def data_field(header, name: str):
    """Field ``name`` of a DATA header (its two words as one 128-bit value, word 0 low)."""
    return _slice(header, DATA_HEADER, name)


def control_field(word, name: str):
    """Field ``name`` of a control (ACK, NAK, DONE) header word."""
    return _slice(word, CONTROL_HEADER, name)


def control_word(kind: FrameKind, seq, status=0):
    """The header word of a control frame of ``kind`` (fields placed by the spec's layout)."""
    bits = [None] * WORD_BITS
    values = {"kind": Const(int(kind), 4), "seq": seq, "status": status}
    for f in CONTROL_HEADER:
        value = values[f.name]
        value = value if hasattr(value, "shape") else Const(value, f.width)
        for i in range(f.width):
            bits[f.lsb + i] = value[i]
    return Cat(*(Const(0, 1) if b is None else b for b in bits))


def payload_words(header):
    """Payload words (8 bytes each) of the DATA frame whose header is ``header``."""
    return data_field(header, "payload_bytes")[3:]


def frame_stream() -> wiring.Signature:
    """A stream of DATA frames' words (header words, then payload), ``last`` on each frame's last word."""
    return wiring.Signature({"data": Out(WORD_BITS), "last": Out(1), "valid": Out(1), "ready": In(1)})


@dataclass(frozen=True)
class FrameBuffer:
    """A frame slot a credit: ``headers`` holds two words a slot, ``payloads`` ``slot_words`` a slot."""

    slots: int
    slot_words: int
    slot_bits: int
    word_bits: int
    headers: Memory
    payloads: Memory


def frame_buffer(m: Module, config: ChipLinkConfig) -> FrameBuffer:
    """The transmitter's (or receiver's) frame buffer, added to ``m`` as submodules ``headers`` and ``payloads``."""
    slots, slot_words = config.credits, config.max_payload // 8
    m.submodules.headers = headers = Memory(shape=WORD_BITS, depth=2 * slots, init=[])
    m.submodules.payloads = payloads = Memory(shape=WORD_BITS, depth=slots * slot_words, init=[])
    return FrameBuffer(slots, slot_words, max(1, (slots - 1).bit_length()), exact_log2(slot_words), headers, payloads)
