# generated from dx1_bringup/spec by `make rtl`; do not edit
"""DX-1 host links, spec version 1.4: the UART bridge and the simulator socket.

Standalone (standard library only), like ``regs``.  Frame and request layouts are :mod:`struct`
formats with the names of their fields in ``*_FIELDS``; the UART bridge is big-endian, the simulator
socket little-endian.  CRC-32 is ``zlib.crc32``; a burst header's CRC covers the header, a payload's
CRC the payload, a register frame's CRC every byte before it, command byte included.
"""

import enum

#: Byte order of the UART bridge's fields.
LINK_BYTE_ORDER = "big"
#: Byte order of the simulator socket's fields.
SIM_BYTE_ORDER = "little"


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


class FrameStatus(enum.IntEnum):
    """The status byte that answers a burst or a CRC register frame."""

    ACK = 0x00
    NAK_CRC = 0x01
    NAK_RANGE = 0x02
    BUS_ERROR = 0x03


class SimOp(enum.IntEnum):
    """Request op codes of the simulator socket."""

    CLOSE = 0x00
    READ32 = 0x01
    WRITE32 = 0x02
    READ_BLOCK = 0x03
    WRITE_BLOCK = 0x04
    WAIT_IRQ = 0x05
    CYCLES = 0x06
    STALL = 0x07
    BUDGET = 0x08
    CUT = 0x09


class SimStatus(enum.IntEnum):
    """Response status codes of the simulator socket."""

    OK = 0x00
    BUS_ERROR = 0x01
    BAD_REQUEST = 0x02
    STUCK = 0x03


FRAME_DOCS: dict[FrameCommand, str] = {
    FrameCommand.UARTBONE_WRITE: (
        "`cmd, n, word_addr[4], n words[4 each]`: write n words at consecutive addresses; no answer."
    ),
    FrameCommand.UARTBONE_READ: (
        "`cmd, n, word_addr[4]`: read n words at consecutive addresses, answered by the n words."
    ),
    FrameCommand.UARTBONE_WRITE_FIXED: "As UARTBONE_WRITE, every word to the same address.",
    FrameCommand.UARTBONE_READ_FIXED: "As UARTBONE_READ, every word from the same address.",
    FrameCommand.BURST_WRITE: (
        "`cmd, byte_addr[4], length[4], crc[4], payload, crc[4]`: write device memory once both CRCs check; answered "
        "by one status byte."
    ),
    FrameCommand.BURST_READ: (
        "`cmd, byte_addr[4], length[4], crc[4]`: read device memory; answered by a status byte and, on ACK, the "
        "payload and its CRC."
    ),
    FrameCommand.REG_WRITE: (
        "`cmd, byte_addr[4], n, n words[4 each], crc[4]`: write registers once the CRC checks; answered by one status "
        "byte."
    ),
    FrameCommand.REG_READ: (
        "`cmd, byte_addr[4], n, crc[4]`: read registers; answered by a status byte and, on ACK, the n words and their "
        "CRC."
    ),
}

FRAME_STATUS_DOCS: dict[FrameStatus, str] = {
    FrameStatus.ACK: "Done.",
    FrameStatus.NAK_CRC: (
        "A header, payload or frame CRC was wrong: nothing was written, and the bridge ignores the line until it has "
        "been quiet for TIMEOUT_BITS bit times."
    ),
    FrameStatus.NAK_RANGE: "Address or length refused: nothing was done.",
    FrameStatus.BUS_ERROR: (
        "The AXI bus answered an error (a write: every word was tried, the refused ones not written)."
    ),
}

SIM_OP_DOCS: dict[SimOp, str] = {
    SimOp.CLOSE: "End the connection; n = 1 also stops the server. Answered with OK and no data.",
    SimOp.READ32: "Read the register at addr; answers its 4 bytes, little-endian.",
    SimOp.WRITE32: "Write n to the register at addr; answers no data.",
    SimOp.READ_BLOCK: "Read n bytes of device memory at addr (n at most SIM_MAX_BLOCK); answers them.",
    SimOp.WRITE_BLOCK: "Write the n bytes that follow the request to device memory at addr; answers no data.",
    SimOp.WAIT_IRQ: "Run until the interrupt line is high or n cycles pass; answers one byte, 1 if it is high.",
    SimOp.CYCLES: "Answers the simulated cycle count as 8 bytes, little-endian.",
    SimOp.STALL: (
        "Drive the SoC's test-only stall_units input with n (bits from dx1_bringup.spec.stall) until the next STALL; "
        "answers no data."
    ),
    SimOp.BUDGET: (
        "Set the cycle budget of every later request to n cycles, whatever its size (n = 0: back to SIM_REQUEST_CYCLES "
        "plus SIM_CYCLES_PER_BYTE a byte); answers no data.  A test hook: a small budget makes an ordinary request "
        "answer STUCK."
    ),
    SimOp.CUT: (
        "On a board of chips (sim:chips=N): cut (n = 1) or mend (n = 0) the wire leaving link port addr of this "
        "socket's chip, as a broken cable (both ends of the link go down); answers no data.  A single SoC answers "
        "BAD_REQUEST."
    ),
}

SIM_STATUS_DOCS: dict[SimStatus, str] = {
    SimStatus.OK: "Done; the data follows.",
    SimStatus.BUS_ERROR: "The AXI bus answered an error; no data.",
    SimStatus.BAD_REQUEST: "Unknown op; the data is a message.",
    SimStatus.STUCK: (
        "The bus transaction did not finish within its cycle budget (the device is stuck); the data is a message "
        "naming the host-port AXI channels left waiting (valid without ready) and each queue's STATUS, HEAD and TAIL.  "
        "The transaction is abandoned."
    ),
}

#: UARTBone frame header (then, for a write, the words).
UARTBONE_HEADER = ">BBI"
UARTBONE_HEADER_FIELDS = ("cmd", "n", "word_addr")

#: Burst header, followed on the line by the CRC-32 of these bytes.
BURST_HEADER = ">BII"
BURST_HEADER_FIELDS = ("cmd", "byte_addr", "length")

#: CRC register frame header; the frame's CRC-32 covers it too.
REG_HEADER = ">BIB"
REG_HEADER_FIELDS = ("cmd", "byte_addr", "n")

#: Simulator request (then, for WRITE_BLOCK, n bytes).
SIM_REQUEST = "<BII"
SIM_REQUEST_FIELDS = ("op", "addr", "n")

#: Simulator response (then length bytes).
SIM_RESPONSE = "<BI"
SIM_RESPONSE_FIELDS = ("status", "length")

#: Largest n of one UARTBone frame (n is one byte).
UARTBONE_MAX_WORDS = 255
#: Largest n of one CRC register frame (n is one byte; the words wait in the burst buffer).
REG_MAX_WORDS = 255
#: Largest length of one burst: the bridge's block-RAM buffer.
BURST_MAX_PAYLOAD = 4096
#: What a UARTBone read answers for a word that is unmapped or got an AXI error.
AXI_ERROR_WORD = 0xffffffff
#: Byte address of register offset 0.
REG_BASE = 0x0
#: Size of the register space: the SoC's AXI4-Lite port has 16 address bits.
REG_BYTES = 0x10000
#: Byte address of device-memory offset 0.
MEM_BASE = 0x80000000
#: Bytes the bridge's receive FIFO holds while it sends an answer (it takes none meanwhile).
BRIDGE_RX_FIFO = 16
#: Bit times without a byte after which the bridge drops a partial frame.
TIMEOUT_BITS = 1000
#: CRC-32 polynomial, reflected (zlib.crc32).
CRC_POLY = 0xedb88320
#: Bytes of a CRC-32 on the line (big-endian, like every field).
CRC_BYTES = 4
#: Bytes of a register word on the line (big-endian).
WORD_BYTES = 4
#: Simulated cycles one interrupt wait of the driver may run before it looks again.
SIM_IRQ_WAIT_CYCLES = 20000
#: Largest memory block of one request.
SIM_MAX_BLOCK = 0x100000
#: Simulated cycles a register or memory request may take, plus SIM_CYCLES_PER_BYTE a byte moved, before the server
#: answers STUCK.
SIM_REQUEST_CYCLES = 200000
#: Simulated cycles of a request's budget for each byte it moves.
SIM_CYCLES_PER_BYTE = 16
