"""The chip-to-chip link's gateware: the wire, a port's transmitter and receiver, its control frames, the port,
the link DMA (sender, lander) and the endpoint that joins them, and the router of a tile's SENDs."""

from .control import ControlQueue
from .crc import WordCrc32, crc32_word_update
from .endpoint import LinkEndpoint
from .lander import LinkLander
from .port import COUNTERS, LinkPort
from .route import SendRouter
from .rx import LinkReceiver
from .sender import SEND_REQUEST, LinkSender
from .tx import LinkTransmitter
from .wire import LinkWire, link_wire

__all__ = ["ControlQueue", "WordCrc32", "crc32_word_update", "LinkEndpoint", "LinkLander", "COUNTERS", "LinkPort",
           "SendRouter", "LinkReceiver", "SEND_REQUEST", "LinkSender", "LinkTransmitter", "LinkWire", "link_wire"]
