"""The driver's link constants: ``drivers/dx1_driver/link.py``.

The generated module imports only the standard library, like ``regs.py``: the
UART bridge's frame commands, status codes, header layouts (as :mod:`struct`
formats with their field names) and limits, and the simulator socket's op
codes, status codes, request and response layouts and limits, all from
:mod:`dx1_bringup.spec.link`.
"""

from __future__ import annotations

from ..spec import (
    AXI_ERROR_WORD,
    BRIDGE_RX_FIFO,
    BURST_HEADER,
    BURST_MAX_PAYLOAD,
    CRC_BYTES,
    CRC_POLY,
    FRAME_DOCS,
    FRAME_STATUS_DOCS,
    LINK_BYTE_ORDER,
    LINK_LIMIT_DOCS,
    MEM_BASE,
    REG_BASE,
    REG_BYTES,
    REG_HEADER,
    REG_MAX_WORDS,
    SIM_BYTE_ORDER,
    SIM_CYCLES_PER_BYTE,
    SIM_IRQ_WAIT_CYCLES,
    SIM_LIMIT_DOCS,
    SIM_MAX_BLOCK,
    SIM_OP_DOCS,
    SIM_REQUEST,
    SIM_REQUEST_CYCLES,
    SIM_RESPONSE,
    SIM_STATUS_DOCS,
    SPEC_VERSION,
    TIMEOUT_BITS,
    UARTBONE_HEADER,
    UARTBONE_MAX_WORDS,
    WORD_BYTES,
    FrameCommand,
    FrameStatus,
    SimOp,
    SimStatus,
    SocConfig,
    WireField,
    struct_format,
)
from .common import NOTICE, version_text, wrap
from .py_accessors import _LINE, _dict, _enum, _str, module_text

__all__ = ["render", "LIMITS", "LAYOUTS"]

#: Every limit of both protocols: name -> (value, how to print it).
LIMITS: dict[str, tuple[int, str]] = {
    "UARTBONE_MAX_WORDS": (UARTBONE_MAX_WORDS, "d"),
    "REG_MAX_WORDS": (REG_MAX_WORDS, "d"),
    "BURST_MAX_PAYLOAD": (BURST_MAX_PAYLOAD, "d"),
    "AXI_ERROR_WORD": (AXI_ERROR_WORD, "x"),
    "REG_BASE": (REG_BASE, "x"),
    "REG_BYTES": (REG_BYTES, "x"),
    "MEM_BASE": (MEM_BASE, "x"),
    "BRIDGE_RX_FIFO": (BRIDGE_RX_FIFO, "d"),
    "TIMEOUT_BITS": (TIMEOUT_BITS, "d"),
    "CRC_POLY": (CRC_POLY, "x"),
    "CRC_BYTES": (CRC_BYTES, "d"),
    "WORD_BYTES": (WORD_BYTES, "d"),
    "SIM_IRQ_WAIT_CYCLES": (SIM_IRQ_WAIT_CYCLES, "d"),
    "SIM_MAX_BLOCK": (SIM_MAX_BLOCK, "x"),
    "SIM_REQUEST_CYCLES": (SIM_REQUEST_CYCLES, "d"),
    "SIM_CYCLES_PER_BYTE": (SIM_CYCLES_PER_BYTE, "d"),
}

_LIMIT_DOCS = {**LINK_LIMIT_DOCS, **SIM_LIMIT_DOCS}

#: Every header layout: name -> (byte order, fields, doc).
LAYOUTS: dict[str, tuple[str, tuple[WireField, ...], str]] = {
    "UARTBONE_HEADER": (LINK_BYTE_ORDER, UARTBONE_HEADER, "UARTBone frame header (then, for a write, the words)."),
    "BURST_HEADER": (LINK_BYTE_ORDER, BURST_HEADER, "Burst header, followed on the line by the CRC-32 of these bytes."),
    "REG_HEADER": (LINK_BYTE_ORDER, REG_HEADER, "CRC register frame header; the frame's CRC-32 covers it too."),
    "SIM_REQUEST": (SIM_BYTE_ORDER, SIM_REQUEST, "Simulator request (then, for WRITE_BLOCK, n bytes)."),
    "SIM_RESPONSE": (SIM_BYTE_ORDER, SIM_RESPONSE, "Simulator response (then length bytes)."),
}


def _literal(value: int, style: str) -> str:
    return f"0x{value:x}" if style == "x" else str(value)


def render(_config: SocConfig) -> str:
    """Render ``drivers/dx1_driver/link.py`` (the links do not depend on the configuration).

    Returns
    -------
    str
        The module's source.

    Raises
    ------
    ValueError
        When a spec doc gives a line longer than the project's line length.
    """
    doc = (f"DX-1 host links, spec version {version_text(SPEC_VERSION)}: the UART bridge and the simulator socket.\n\n"
           "Standalone (standard library only), like ``regs``.  Frame and request layouts are :mod:`struct`\n"
           "formats with the names of their fields in ``*_FIELDS``; the UART bridge is big-endian, the simulator\n"
           "socket little-endian.  CRC-32 is ``zlib.crc32``; a burst header's CRC covers the header, a payload's\n"
           "CRC the payload, a register frame's CRC every byte before it, command byte included.\n")
    out = [f"# {NOTICE}", f'"""{doc}"""', "", "import enum", "", "#: Byte order of the UART bridge's fields.",
           f"LINK_BYTE_ORDER = {_str(LINK_BYTE_ORDER)}", "#: Byte order of the simulator socket's fields.",
           f"SIM_BYTE_ORDER = {_str(SIM_BYTE_ORDER)}"]
    out += _enum("FrameCommand", "The first byte of every frame the host sends to the UART bridge.",
                 [(c.name, c.value) for c in FrameCommand], 2)
    out += _enum("FrameStatus", "The status byte that answers a burst or a CRC register frame.",
                 [(s.name, s.value) for s in FrameStatus], 2)
    out += _enum("SimOp", "Request op codes of the simulator socket.", [(o.name, o.value) for o in SimOp], 2)
    out += _enum("SimStatus", "Response status codes of the simulator socket.",
                 [(s.name, s.value) for s in SimStatus], 2)
    out += ["", ""]
    out += _dict("FRAME_DOCS", "dict[FrameCommand, str]",
                 [(f"FrameCommand.{c.name}", _str(FRAME_DOCS[c])) for c in FrameCommand])
    out += [""]
    out += _dict("FRAME_STATUS_DOCS", "dict[FrameStatus, str]",
                 [(f"FrameStatus.{s.name}", _str(FRAME_STATUS_DOCS[s])) for s in FrameStatus])
    out += [""]
    out += _dict("SIM_OP_DOCS", "dict[SimOp, str]", [(f"SimOp.{o.name}", _str(SIM_OP_DOCS[o])) for o in SimOp])
    out += [""]
    out += _dict("SIM_STATUS_DOCS", "dict[SimStatus, str]",
                 [(f"SimStatus.{s.name}", _str(SIM_STATUS_DOCS[s])) for s in SimStatus])
    for name, (order, fields, text) in LAYOUTS.items():
        out += ["", *(f"#: {line}" for line in wrap(text, _LINE - 3))]
        out.append(f"{name} = {_str(struct_format(order, fields))}")
        names = [_str(f.name) for f in fields]
        out.append(f"{name}_FIELDS = ({', '.join(names)}{',' if len(names) == 1 else ''})")
    out.append("")
    for name, (value, style) in LIMITS.items():
        out += [*(f"#: {line}" for line in wrap(_LIMIT_DOCS[name], _LINE - 3)), f"{name} = {_literal(value, style)}"]
    return module_text(out)
