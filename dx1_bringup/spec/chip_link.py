"""The chip-to-chip link: its parameters, its frames and the timing the golden model gives a SEND.

A chip has :data:`LINK_PORTS` link ports wired in a ring: port 0 goes to the next chip
(rank + 1 modulo the chip count), port 1 to the previous one.  Each port is a pair of
unidirectional streams of ``width`` bytes per cycle with a wire delay of ``latency`` cycles.

Frames
------
Every frame is a header, for a DATA frame a payload, and a trailer, each a whole number of
8-byte little-endian words; a frame occupies ``ceil(bytes / width)`` cycles on the wire (the
unused bytes of its last beat are zero).  The trailer's low 32 bits are the CRC-32
(``zlib.crc32``: IEEE 802.3, reflected, initial value and final XOR ``0xFFFFFFFF``) of every
byte before it; its high 32 bits are zero.

* ``DATA`` (:data:`DATA_HEADER`, :data:`HEADER_BYTES` bytes): at most ``max_payload`` bytes of
  one SEND, written (``op`` WRITE) or int32-added (``op`` ADD) at ``dst_addr`` of the receiver.
  The first frame of a SEND has ``first`` set and gives the SEND's whole length
  (``transfer_bytes``); the last has ``last`` set and carries the semaphore signal.
* ``ACK`` / ``NAK`` / ``DONE`` (:data:`CONTROL_HEADER`, one word): ``ACK seq``: every DATA frame
  up to ``seq`` was received intact and consumed (its buffer is free: one credit back per frame
  acknowledged); ``NAK seq``: a frame failed its CRC, ``seq`` is the one expected next; ``DONE``:
  the SEND whose last frame is ``seq`` finished at the receiver with ``status`` (``OK`` or
  ``REMOTE_WINDOW``), sent after its last byte landed and its semaphore was signalled.

Flow control and retransmission
-------------------------------
A port carries one SEND at a time: the next one's first frame leaves after the previous one
completed (DONE arrived, or it ended with an error).  A SEND's first frame goes alone: the sender
waits for its ACK (or NAK) before it sends the others, so a bad first frame costs no frames
behind it.  The sender keeps every unacknowledged DATA
frame in a replay buffer of ``credits`` frames and sends a frame only while it holds a credit.
Sequence numbers count DATA frames modulo 256 per direction.  The receiver drops a frame with a
bad CRC and every frame after it until the expected one arrives intact, answering the bad one
with NAK; on NAK the sender sends every frame from ``seq`` on again (go-back-N).  When one frame
has gone out ``1 + retries`` times with a bad CRC, its SEND completes ``LINK_CRC``: the sender
drops the rest of that SEND, no DONE comes, nothing is signalled, and what landed stays; the
receiver, which drops a partly received SEND when an intact ``first`` frame arrives, takes the
next SEND's first frame at whatever ``seq`` it has.  The receiver checks the SEND's whole
destination range against its link window (LINK.WINDOW_BASE/WINDOW_LIMIT) on the first frame;
outside it, it acknowledges the frames but writes nothing, signals nothing and answers
``DONE REMOTE_WINDOW``.

Counters (LINK block, per port): TX_PACKETS counts DATA frames sent for the first time,
RX_PACKETS DATA frames accepted (intact and in order), RETRIES NAKs the sender acted on,
CRC_ERRORS DATA frames received with a bad CRC; these four are exact and the same on the golden
model and the gateware.  CREDIT_STALLS (cycles a ready frame waited for a credit) is a timing
figure: the golden model reports its timing model's count.

Fault injection (LINK.CONTROL ``corrupt`` = N, for tests): the first frame of the next SEND on
the port goes out with its CRC inverted, and so do its next N - 1 resends; the field counts down
as they go (what a SEND ending LINK_CRC leaves of it applies to the next SEND).  N <= ``retries``
costs N NAK round trips and the SEND completes OK with RETRIES and CRC_ERRORS up by N; N >
``retries`` completes it LINK_CRC with RETRIES up by ``retries`` and CRC_ERRORS by ``1 + retries``.
Control frames are never corrupted and never resent.  The golden model moves whole frames and
times a SEND with :func:`send_timing`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .sizes import ceil_div

__all__ = [
    "LINK_PORTS", "PORT_NEXT", "PORT_PREVIOUS", "MAX_CHIPS", "FrameKind", "LinkOp", "LINK_OP_DOCS", "LinkField",
    "DATA_HEADER", "CONTROL_HEADER", "HEADER_BYTES", "CONTROL_BYTES", "TRAILER_BYTES", "SEQ_MODULO",
    "ChipLinkConfig", "pack_link_header", "unpack_link_header", "frame_cycles", "control_cycles", "send_frames",
    "SendTiming", "send_timing", "send_cycles", "LINK_BURST", "LINK_PIPELINE", "up_wait_cycles", "peer_rank",
]

#: Link ports of a chip: port 0 to the next chip of the ring, port 1 to the previous one.
LINK_PORTS = 2
PORT_NEXT = 0
PORT_PREVIOUS = 1
#: Chips a board may wire in one ring (CHIP_ID's ``chips`` field allows more; the boards stop here).
MAX_CHIPS = 8
#: Sequence numbers count DATA frames modulo this, separately in each direction.
SEQ_MODULO = 256


class FrameKind(enum.IntEnum):
    """The ``kind`` field of every frame."""

    DATA = 1
    ACK = 2
    NAK = 3
    DONE = 4


class LinkOp(enum.IntEnum):
    """What the receiver does with a SEND's bytes (the SEND command's ``op`` field)."""

    WRITE = 0
    ADD = 1


LINK_OP_DOCS = {
    LinkOp.WRITE: "The bytes overwrite the destination.",
    LinkOp.ADD: "Each 4-byte little-endian int32 lane of the bytes is added to the destination's lane, "
                "wrapping modulo 2^32 (the receiving DMA reads, adds and writes back).",
}


@dataclass(frozen=True)
class LinkField:
    """A bit field of a frame header word sequence (bits of the header read as one little-endian integer)."""

    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def extract(self, word: int) -> int:
        return (word >> self.lsb) & ((1 << self.width) - 1)


#: The DATA frame's header: two little-endian words.
DATA_HEADER = (
    LinkField("kind", 0, 4, "`FrameKind.DATA`."),
    LinkField("op", 4, 4, "`LinkOp` of the SEND."),
    LinkField("first", 8, 1, "The SEND's first frame: the receiver checks the whole destination range."),
    LinkField("last", 9, 1, "The SEND's last frame: the receiver signals the semaphore after it lands."),
    LinkField("seq", 16, 8, "Sequence number of this DATA frame in its direction."),
    LinkField("sem", 24, 8, "Receiver's semaphore to signal after the last frame."),
    LinkField("payload_bytes", 32, 16, "Payload bytes in this frame; a multiple of 8, 8 .. max_payload."),
    LinkField("count", 48, 16, "Amount added to semaphore `sem` after the last frame (0: no signal)."),
    LinkField("dst_addr", 64, 32, "Receiver's device-memory byte address of this frame's first payload byte."),
    LinkField("transfer_bytes", 96, 32, "Bytes of the whole SEND (the same in every frame of it)."),
)
#: ACK, NAK and DONE frames: one little-endian word.
CONTROL_HEADER = (
    LinkField("kind", 0, 4, "`FrameKind.ACK`, `NAK` or `DONE`."),
    LinkField("seq", 16, 8, "ACK: the last frame consumed; NAK: the frame expected next; DONE: the SEND's last "
              "frame."),
    LinkField("status", 24, 8, "DONE: `ErrorCode` OK or REMOTE_WINDOW; 0 in ACK and NAK."),
)
HEADER_BYTES = 16
CONTROL_BYTES = 8
TRAILER_BYTES = 8


def _header(kind: FrameKind) -> tuple[tuple[LinkField, ...], int]:
    return (DATA_HEADER, HEADER_BYTES) if kind == FrameKind.DATA else (CONTROL_HEADER, CONTROL_BYTES)


def pack_link_header(kind: FrameKind, **values: int) -> bytes:
    """The header bytes of a frame of ``kind`` with the named fields set (``kind`` itself is filled in)."""
    fields, size = _header(FrameKind(kind))
    by_name = {f.name: f for f in fields}
    word = 0
    for name, value in {**values, "kind": int(kind)}.items():
        if name not in by_name:
            raise ValueError(f"{FrameKind(kind).name} frame header has no field {name!r}; fields are "
                             f"{sorted(by_name)}")
        f = by_name[name]
        if not 0 <= int(value) < 1 << f.width:
            raise ValueError(f"{FrameKind(kind).name} frame field {name!r} must fit in {f.width} bits unsigned, "
                             f"not {value!r}")
        word |= int(value) << f.lsb
    return word.to_bytes(size, "little")


def unpack_link_header(data: bytes) -> dict[str, int]:
    """Decode a frame header (its kind says which layout)."""
    kind = data[0] & 0xF
    if kind not in FrameKind._value2member_map_:
        raise ValueError(f"frame kind must be one of {[k.value for k in FrameKind]}, not {kind}")
    fields, size = _header(FrameKind(kind))
    if len(data) < size:
        raise ValueError(f"a {FrameKind(kind).name} header is {size} bytes, not {len(data)}")
    word = int.from_bytes(data[:size], "little")
    return {f.name: f.extract(word) for f in fields}


def _check(name: str, value, low: int, high: int, *, power_of_two: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"Link {name} must be an integer, not {value!r}")
    what = "a power of two" if power_of_two else "an integer"
    if not low <= value <= high or (power_of_two and value & (value - 1)):
        raise ValueError(f"Link {name} must be {what} from {low} to {high}, not {value!r}")


@dataclass(frozen=True)
class ChipLinkConfig:
    """Generator parameters of a chip's link ports (both ports alike), read back in LINK.CAPS and LINK.LATENCY.

    Parameters
    ----------
    width:
        Bytes per cycle of each direction of a port: the link's peak.
    latency:
        Cycles from a beat leaving a chip to it reaching the peer (the wire delay, each direction).
    max_payload:
        Largest DATA payload in bytes (a SEND is cut into frames of this many bytes, the last shorter).
    credits:
        DATA frames the receiver buffers; the sender's replay buffer holds as many.
    retries:
        Times a frame is sent again after NAKs before its SEND completes LINK_CRC.
    """

    width: int = 8
    latency: int = 16
    max_payload: int = 256
    credits: int = 4
    retries: int = 3

    def __post_init__(self):
        _check("width", self.width, 8, 64, power_of_two=True)
        _check("latency", self.latency, 1, 4095)
        _check("max_payload", self.max_payload, 8, 4096, power_of_two=True)
        _check("credits", self.credits, 1, 64)
        _check("retries", self.retries, 0, 15)


def frame_cycles(config: ChipLinkConfig, payload_bytes: int) -> int:
    """Cycles a DATA frame with ``payload_bytes`` of payload occupies the wire."""
    return ceil_div(HEADER_BYTES + payload_bytes + TRAILER_BYTES, config.width)


def up_wait_cycles(config: ChipLinkConfig) -> int:
    """Cycles a SEND that finds its port down waits for it to come up before it completes LINK_DOWN.

    A port comes up by a handshake: once neither end forces it down (LINK.CONTROL), each end's signal
    crosses the wire and the peer's echo that it hears it crosses back, so an end is up within two
    latencies (and the registers either side) of the last ``force_down`` cleared.  A SEND started after the
    host mended the link therefore never sees the handshake still under way.
    """
    return 2 * config.latency + 2


def send_frames(config: ChipLinkConfig, length: int) -> list[int]:
    """The payload sizes of the DATA frames a SEND of ``length`` bytes is cut into, in order."""
    full, rest = divmod(length, config.max_payload)
    return [config.max_payload] * full + ([rest] if rest else [])


#: Beats of the link DMA's bursts: the sender's reads of a SEND's bytes and the lander's writes of a frame's.
LINK_BURST = 16

#: The link DMA's pipeline, in cycles, as the gateware runs it (:func:`send_timing` puts them together):
#: the sender's first read beat after the SEND starts; a read burst's gap to the next; a frame fully read into
#: the replay buffer to its first beat on the wire; the first frame's ACK back at the sender to the second
#: frame's first beat; a NAK back to the frame sent again (or, past the retries, to the SEND failing); a bad
#: frame's last beat received to its NAK frame; the
#: receiver copying a kept frame out of its buffer to the ACK frame; a frame's last beat received to its
#: first write (after LINK_BURST beats, or the whole frame if shorter, are copied); a write burst's gap to the
#: next; the last write's response to the DONE frame; an ADD's read of the destination before a frame's first
#: write.
LINK_PIPELINE = {"read_start": 5, "read_gap": 1, "tx_start": 3, "after_ack": 1, "resend": 2, "nak": 1, "ack": 3,
                 "land_start": 5, "write_gap": 2, "done": 5, "add_read": 6}

def control_cycles(config: ChipLinkConfig) -> int:
    """Cycles an ACK, NAK or DONE frame occupies the wire."""
    return ceil_div(CONTROL_BYTES + TRAILER_BYTES, config.width)


@dataclass(frozen=True)
class SendTiming:
    """Cycles after a SEND started: ``landed`` (its last byte is in the peer's memory and the semaphore
    signalled), ``done`` (DONE is back: the SEND completes); ``credit_stalls`` the cycles frames waited for a
    credit."""

    landed: int
    done: int
    credit_stalls: int


def _bursts(beats: int) -> int:
    return ceil_div(beats, LINK_BURST)


def send_timing(config: ChipLinkConfig, length: int, op: LinkOp = LinkOp.WRITE, crc_faults: int = 0) -> SendTiming:
    """The timing of a SEND of ``length`` bytes on an idle, up link, as the link DMA's gateware runs it.

    The sender reads the SEND's bytes in bursts of :data:`LINK_BURST` beats into its replay buffer, a frame
    going out once it is wholly read (store and forward) and its buffer slot free (a slot a credit: frame
    ``i`` waits for frame ``i - credits``'s ACK).  The first frame goes alone and waits for its ACK; each of
    ``crc_faults`` bad transmissions of it costs its frame, the wire, the NAK and the wire back.  The receiver
    copies each kept frame out of its buffer (then ACKs it) into the lander, which writes it in bursts (an ADD
    reads the destination first) once a burst's worth is in; DONE follows the last write's response.  The
    cycles are :data:`LINK_PIPELINE`'s; ``tests/test_chip_link_timing.py`` holds them to the gateware's.
    With more than ``config.retries`` faults the SEND fails LINK_CRC when the last NAK is back: ``landed``
    and ``done`` are both that cycle.
    """
    frames = send_frames(config, length)
    if not frames:
        return SendTiming(0, 0, 0)
    k = LINK_PIPELINE
    wire, control = config.latency, control_cycles(config)
    beats = [ceil_div(p, config.width) for p in frames]
    n = len(frames)
    read_end, tx_end, ack_back = [0] * n, [0] * n, [0] * n
    # The first frame, sent again after each NAK.
    read_end[0] = k["read_start"] + beats[0] + _bursts(beats[0]) - 1
    start = read_end[0] + k["tx_start"]
    for _ in range(min(crc_faults, config.retries + 1)):
        nak_back = start + frame_cycles(config, frames[0]) + wire + k["nak"] + control + wire
        start = nak_back + k["resend"]
    if crc_faults > config.retries:  # the last NAK is back: the SEND fails
        return SendTiming(start, start, 0)
    copied = land_end = 0
    stalls = 0
    for i in range(n):
        if i:
            # Its words go into the replay buffer once a slot is free: frame i - credits acknowledged.
            slot = ack_back[i - config.credits] if i >= config.credits else 0
            stalls += max(0, slot - (read_end[i - 1] + k["read_gap"]))
            read_end[i] = max(read_end[i - 1] + k["read_gap"], slot) + beats[i] + _bursts(beats[i]) - 1
            start = max(tx_end[i - 1], ack_back[0] + k["after_ack"], read_end[i] + k["tx_start"])
        tx_end[i] = start + frame_cycles(config, frames[i])
        received = tx_end[i] + wire
        copied = max(received, copied) + beats[i]
        ack_back[i] = copied + k["ack"] + control + wire
        add = k["add_read"] if op == LinkOp.ADD else 0
        first_write = received + min(beats[i], LINK_BURST) + k["land_start"] + add
        land_start = max(first_write, land_end + k["write_gap"]) if i else first_write
        land_end = land_start + beats[i] + k["write_gap"] * (_bursts(beats[i]) - 1)
    done = land_end + k["done"] + control + wire
    return SendTiming(land_end, done, stalls)


def send_cycles(config: ChipLinkConfig, length: int, op: LinkOp = LinkOp.WRITE, crc_faults: int = 0) -> int:
    """Cycles of a SEND from its start to its completion (:func:`send_timing`'s ``done``)."""
    return send_timing(config, length, op, crc_faults).done


def peer_rank(rank: int, chips: int, port: int) -> int:
    """The rank at the other end of ``port`` of chip ``rank`` in a ring of ``chips``."""
    if port not in (PORT_NEXT, PORT_PREVIOUS):
        raise ValueError(f"link port must be {PORT_NEXT} (next) or {PORT_PREVIOUS} (previous), not {port!r}")
    return (rank + (1 if port == PORT_NEXT else -1)) % chips
