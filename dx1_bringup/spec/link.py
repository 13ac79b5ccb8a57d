"""The host links: the UART bridge's frames and the simulator's socket protocol.

Both are wire formats between the host and something that reaches the SoC's
two host ports (the AXI4-Lite register port and the AXI4 device-memory port),
so, like the register map, they are written here once: the gateware bridge,
the driver's generated ``link`` module, the Python bridge model, the simulator
servers, the testbenches and ``docs/link.md`` all take them from this module.

UART bridge
-----------
Three framings share one 8N1 line; every multi-byte field is big-endian.

* *UARTBone* (wire-compatible with LiteX's ``UARTBone``): ``cmd, n, word_addr``
  then, for a write, ``n`` words; a write has no answer, a read is answered by
  ``n`` words.  ``word_addr`` is the byte address divided by 4.  A read of an
  unmapped address or one that got an AXI error answers :data:`AXI_ERROR_WORD`.
* *Burst* (device memory, byte-exact): a 13-byte header (:data:`BURST_HEADER`
  and the CRC-32 of those 9 bytes); a write follows it with the payload and
  the payload's CRC-32 and is answered by one status byte; a read is answered
  by a status byte and, on ``ACK``, the payload and its CRC-32.
* *Register frame* (register space, CRC-checked): :data:`REG_HEADER`, for a
  write ``n`` words, then one CRC-32 over every byte before it, command byte
  included; a write is answered by a status byte, a read by a status byte and,
  on ``ACK``, the ``n`` words and their CRC-32.

CRC-32 is ``zlib.crc32`` (IEEE 802.3, reflected polynomial :data:`CRC_POLY`,
initial value and final XOR ``0xFFFFFFFF``).  Write commands are odd and read
commands even (the bridge tells them apart by bit 0); of the UARTBone commands,
the two fixed-address ones are those whose bits [1:0] are 00 or 11.

Simulator socket
----------------
One little-endian request at a time: :data:`SIM_REQUEST` then, for
``WRITE_BLOCK``, ``n`` bytes; the answer is :data:`SIM_RESPONSE` then
``length`` bytes.

A board of several chips in one simulator (``sim:chips=N``) listens on one
socket a chip, so the protocol carries no chip selector: the server writes
the N ports, space-separated in rank order, to its port file, and a request
on chip r's socket acts on chip r.  The board has one clock: a request on
any chip's socket advances every chip (a register access or an interrupt
wait runs them all; one connection's request is served at a time, whichever
socket it came on).  ``CYCLES`` answers the board's count; ``CUT`` exists
only there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "FrameCommand", "FrameStatus", "FRAME_DOCS", "FRAME_STATUS_DOCS", "WireField", "struct_format", "LINK_BYTE_ORDER",
    "SIM_BYTE_ORDER",
    "UARTBONE_HEADER", "BURST_HEADER", "REG_HEADER", "CRC_BYTES", "WORD_BYTES", "UARTBONE_MAX_WORDS",
    "REG_MAX_WORDS", "BURST_MAX_PAYLOAD", "AXI_ERROR_WORD", "REG_BASE", "REG_BYTES", "MEM_BASE",
    "BRIDGE_RX_FIFO", "TIMEOUT_BITS", "CRC_POLY", "LINK_LIMIT_DOCS",
    "SimOp", "SimStatus", "SIM_OP_DOCS", "SIM_STATUS_DOCS", "SIM_REQUEST", "SIM_RESPONSE", "SIM_IRQ_WAIT_CYCLES",
    "SIM_MAX_BLOCK", "SIM_REQUEST_CYCLES", "SIM_CYCLES_PER_BYTE", "SIM_LIMIT_DOCS",
]


@dataclass(frozen=True)
class WireField:
    """One fixed-size field of a wire header.

    Attributes
    ----------
    name:
        The field's name, as the docs and the frame builders call it.
    code:
        Its :mod:`struct` code: ``"B"`` one byte, ``"I"`` four bytes.
    doc:
        What it holds.
    """

    name: str
    code: str
    doc: str


def struct_format(byte_order: str, fields: tuple[WireField, ...]) -> str:
    """The :mod:`struct` format of ``fields`` in ``byte_order`` (``"big"`` or ``"little"``, as for ``int.to_bytes``)."""
    return {"big": ">", "little": "<"}[byte_order] + "".join(f.code for f in fields)


# ---- the UART bridge --------------------------------------------------------------------------------------

#: Byte order of every multi-byte field of the UART bridge's frames (headers, words, CRCs).
LINK_BYTE_ORDER = "big"


class FrameCommand(enum.IntEnum):
    """The first byte of every frame the host sends to the UART bridge."""

    UARTBONE_WRITE = 0x01
    UARTBONE_READ = 0x02
    UARTBONE_WRITE_FIXED = 0x03
    UARTBONE_READ_FIXED = 0x04
    BURST_WRITE = 0x81
    BURST_READ = 0x82
    REG_WRITE = 0x83
    REG_READ = 0x84


FRAME_DOCS = {
    FrameCommand.UARTBONE_WRITE: "`cmd, n, word_addr[4], n words[4 each]`: write n words at consecutive "
                                 "addresses; no answer.",
    FrameCommand.UARTBONE_READ: "`cmd, n, word_addr[4]`: read n words at consecutive addresses, answered by "
                                "the n words.",
    FrameCommand.UARTBONE_WRITE_FIXED: "As UARTBONE_WRITE, every word to the same address.",
    FrameCommand.UARTBONE_READ_FIXED: "As UARTBONE_READ, every word from the same address.",
    FrameCommand.BURST_WRITE: "`cmd, byte_addr[4], length[4], crc[4], payload, crc[4]`: write device memory "
                              "once both CRCs check; answered by one status byte.",
    FrameCommand.BURST_READ: "`cmd, byte_addr[4], length[4], crc[4]`: read device memory; answered by a "
                             "status byte and, on ACK, the payload and its CRC.",
    FrameCommand.REG_WRITE: "`cmd, byte_addr[4], n, n words[4 each], crc[4]`: write registers once the CRC "
                            "checks; answered by one status byte.",
    FrameCommand.REG_READ: "`cmd, byte_addr[4], n, crc[4]`: read registers; answered by a status byte and, on "
                           "ACK, the n words and their CRC.",
}


class FrameStatus(enum.IntEnum):
    """The status byte that answers a burst or a CRC register frame."""

    ACK = 0x00
    NAK_CRC = 0x01
    NAK_RANGE = 0x02
    BUS_ERROR = 0x03


FRAME_STATUS_DOCS = {
    FrameStatus.ACK: "Done.",
    FrameStatus.NAK_CRC: "A header, payload or frame CRC was wrong: nothing was written, and the bridge ignores "
                         "the line until it has been quiet for TIMEOUT_BITS bit times.",
    FrameStatus.NAK_RANGE: "Address or length refused: nothing was done.",
    FrameStatus.BUS_ERROR: "The AXI bus answered an error (a write: every word was tried, the refused ones not "
                           "written).",
}

#: UARTBone header: the byte address divided by 4 in ``word_addr``.
UARTBONE_HEADER = (
    WireField("cmd", "B", "FrameCommand.UARTBONE_*."),
    WireField("n", "B", "Words, 1 to UARTBONE_MAX_WORDS (0 means 256 to the bridge; LiteX never sends it)."),
    WireField("word_addr", "I", "Byte address of the first word, divided by 4."),
)
#: Burst header, followed by the CRC-32 of these 9 bytes.
BURST_HEADER = (
    WireField("cmd", "B", "FrameCommand.BURST_WRITE or BURST_READ."),
    WireField("byte_addr", "I", "MEM_BASE + the device-memory offset of the first byte (any alignment)."),
    WireField("length", "I", "Payload bytes, 1 to BURST_MAX_PAYLOAD."),
)
#: CRC register frame header; the frame's CRC-32 covers it too.
REG_HEADER = (
    WireField("cmd", "B", "FrameCommand.REG_WRITE or REG_READ."),
    WireField("byte_addr", "I", "REG_BASE + the word-aligned register offset of the first word."),
    WireField("n", "B", "Words, 1 to REG_MAX_WORDS (0 is refused)."),
)
CRC_BYTES = 4
WORD_BYTES = 4
UARTBONE_MAX_WORDS = 255
REG_MAX_WORDS = 255
BURST_MAX_PAYLOAD = 4096
AXI_ERROR_WORD = 0xFFFF_FFFF
REG_BASE = 0x0000_0000
REG_BYTES = 0x1_0000
MEM_BASE = 0x8000_0000
BRIDGE_RX_FIFO = 16
TIMEOUT_BITS = 1000
CRC_POLY = 0xEDB8_8320

LINK_LIMIT_DOCS = {
    "UARTBONE_MAX_WORDS": "Largest n of one UARTBone frame (n is one byte).",
    "REG_MAX_WORDS": "Largest n of one CRC register frame (n is one byte; the words wait in the burst buffer).",
    "BURST_MAX_PAYLOAD": "Largest length of one burst: the bridge's block-RAM buffer.",
    "AXI_ERROR_WORD": "What a UARTBone read answers for a word that is unmapped or got an AXI error.",
    "REG_BASE": "Byte address of register offset 0.",
    "REG_BYTES": "Size of the register space: the SoC's AXI4-Lite port has 16 address bits.",
    "MEM_BASE": "Byte address of device-memory offset 0.",
    "BRIDGE_RX_FIFO": "Bytes the bridge's receive FIFO holds while it sends an answer (it takes none meanwhile).",
    "TIMEOUT_BITS": "Bit times without a byte after which the bridge drops a partial frame.",
    "CRC_POLY": "CRC-32 polynomial, reflected (zlib.crc32).",
    "CRC_BYTES": "Bytes of a CRC-32 on the line (big-endian, like every field).",
    "WORD_BYTES": "Bytes of a register word on the line (big-endian).",
}


# ---- the simulator socket ----------------------------------------------------------------------------------

#: Byte order of every field of the simulator socket, and of the register values and cycle counts it carries.
SIM_BYTE_ORDER = "little"


class SimOp(enum.IntEnum):
    """Request op codes of the simulator socket."""

    CLOSE = 0
    READ32 = 1
    WRITE32 = 2
    READ_BLOCK = 3
    WRITE_BLOCK = 4
    WAIT_IRQ = 5
    CYCLES = 6
    STALL = 7
    BUDGET = 8
    CUT = 9


SIM_OP_DOCS = {
    SimOp.CLOSE: "End the connection; n = 1 also stops the server. Answered with OK and no data.",
    SimOp.READ32: "Read the register at addr; answers its 4 bytes, little-endian.",
    SimOp.WRITE32: "Write n to the register at addr; answers no data.",
    SimOp.READ_BLOCK: "Read n bytes of device memory at addr (n at most SIM_MAX_BLOCK); answers them.",
    SimOp.WRITE_BLOCK: "Write the n bytes that follow the request to device memory at addr; answers no data.",
    SimOp.WAIT_IRQ: "Run until the interrupt line is high or n cycles pass; answers one byte, 1 if it is high.",
    SimOp.CYCLES: "Answers the simulated cycle count as 8 bytes, little-endian.",
    SimOp.STALL: ("Drive the SoC's test-only stall_units input with n (bits from dx1_bringup.spec.stall) until the "
                  "next STALL; answers no data."),
    SimOp.BUDGET: ("Set the cycle budget of every later request to n cycles, whatever its size (n = 0: back to "
                   "SIM_REQUEST_CYCLES plus SIM_CYCLES_PER_BYTE a byte); answers no data.  A test hook: a small "
                   "budget makes an ordinary request answer STUCK."),
    SimOp.CUT: ("On a board of chips (sim:chips=N): cut (n = 1) or mend (n = 0) the wire leaving link port addr of "
                "this socket's chip, as a broken cable (both ends of the link go down); answers no data.  A "
                "single SoC answers BAD_REQUEST."),
}


class SimStatus(enum.IntEnum):
    """Response status codes of the simulator socket."""

    OK = 0
    BUS_ERROR = 1
    BAD_REQUEST = 2
    STUCK = 3


SIM_STATUS_DOCS = {
    SimStatus.OK: "Done; the data follows.",
    SimStatus.BUS_ERROR: "The AXI bus answered an error; no data.",
    SimStatus.BAD_REQUEST: "Unknown op; the data is a message.",
    SimStatus.STUCK: ("The bus transaction did not finish within its cycle budget (the device is stuck); the data is "
                      "a message naming the host-port AXI channels left waiting (valid without ready) and each "
                      "queue's STATUS, HEAD and TAIL.  The transaction is abandoned."),
}

#: Simulator request, little-endian, followed by ``n`` bytes for WRITE_BLOCK.
SIM_REQUEST = (
    WireField("op", "B", "SimOp."),
    WireField("addr", "I", "Register or device-memory byte address."),
    WireField("n", "I", "Value, length or cycle budget, by op."),
)
#: Simulator response, little-endian, followed by ``length`` bytes.
SIM_RESPONSE = (
    WireField("status", "B", "SimStatus."),
    WireField("length", "I", "Bytes of data that follow."),
)
SIM_IRQ_WAIT_CYCLES = 20_000
SIM_MAX_BLOCK = 1 << 20
SIM_REQUEST_CYCLES = 200_000
SIM_CYCLES_PER_BYTE = 16

SIM_LIMIT_DOCS = {
    "SIM_IRQ_WAIT_CYCLES": "Simulated cycles one interrupt wait of the driver may run before it looks again.",
    "SIM_MAX_BLOCK": "Largest memory block of one request.",
    "SIM_REQUEST_CYCLES": ("Simulated cycles a register or memory request may take, plus SIM_CYCLES_PER_BYTE a "
                           "byte moved, before the server answers STUCK."),
    "SIM_CYCLES_PER_BYTE": "Simulated cycles of a request's budget for each byte it moves.",
}
