"""The chip-to-chip link's gateware: the wire, a port's transmitter and receiver, its control frames and the port."""

from .control import ControlQueue
from .crc import WordCrc32, crc32_word_update
from .port import COUNTERS, LinkPort
from .rx import LinkReceiver
from .tx import LinkTransmitter
from .wire import LinkWire, link_wire

__all__ = ["ControlQueue", "WordCrc32", "crc32_word_update", "COUNTERS", "LinkPort", "LinkReceiver",
           "LinkTransmitter", "LinkWire", "link_wire"]
