"""Markdown references for readers: ``docs/registers.md`` and ``docs/commands.md``.

Tables are GitHub-flavoured Markdown.  Spec docs are plain text with code in
backticks, so :func:`_md` escapes what Markdown would otherwise read as markup
(``k*m`` in a formula is not emphasis) outside the code spans.
"""

from __future__ import annotations

import dataclasses

from ..spec import (
    BLOCK_ALIGN,
    CHECK_ORDER,
    COMMAND_BYTES,
    COMMANDS,
    COMPLETION,
    COMPLETION_BYTES,
    ERROR_DOCS,
    FRAME_DOCS,
    FRAME_STATUS_DOCS,
    HEADER,
    LINK_LIMIT_DOCS,
    MAGIC,
    SIM_LIMIT_DOCS,
    SIM_OP_DOCS,
    SIM_STATUS_DOCS,
    SPEC_HISTORY,
    SPEC_VERSION,
    VERSIONS_EXPLAINED,
    Access,
    Command,
    ErrorCode,
    Field,
    Register,
    SocConfig,
    WireField,
    register_map,
)
from .common import BLOCK_WALK, NOTICE, BlockLayout, bit_range, block_layouts, version_text
from .py_link import LAYOUTS, LIMITS

__all__ = ["render_registers", "render_commands", "render_link"]

_ACCESS = {
    Access.RO: "read only; writes get SLVERR",
    Access.RW: "read and write",
    Access.WO: "write only; reads get SLVERR",
    Access.W1C: "read; writing 1 to a bit clears it",
}


def _md(text: str) -> str:
    """Escape Markdown markup in ``text``, leaving `code spans` as they are (bar the table-breaking ``|``)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        for char, escaped in (("\\", "\\\\"), ("*", "\\*"), ("<", "&lt;")):
            parts[i] = parts[i].replace(char, escaped)
    return "`".join(parts).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _flat(prefix: str, values: dict[str, object]) -> list[tuple[str, str]]:
    """Flatten the nested config dict into ``tile.array``-style parameter names."""
    rows = []
    for name, value in values.items():
        if isinstance(value, dict):
            rows += _flat(f"{prefix}{name}.", value)
        else:
            big = isinstance(value, int) and value >= 4096
            rows.append((f"`{prefix}{name}`", f"{value} (`{value:#x}`)" if big else f"{value}"))
    return rows


def _reset(reg: Register, value: int, digits: int) -> str:
    # The spec gives read-only registers no reset of their own (field resets default to 0), yet they read
    # identity, capabilities, state or counters: printing 0 would contradict their description.
    return "—" if reg.access is Access.RO else f"`0x{value:0{digits}x}`"


def _register_rows(layout: BlockLayout) -> list[tuple[str, ...]]:
    rows = []
    for reg, offset in layout.registers:
        if reg.array:
            where = f"`0x{offset:02x}` .. `0x{offset + 4 * (reg.count - 1):02x}`"
            name = f"{reg.name}0 .. {reg.name}{reg.count - 1}"
        else:
            where, name = f"`0x{offset:02x}`", reg.name
        rows.append((where, name, f"`{reg.access.value}`", _reset(reg, reg.reset, 8), _md(reg.doc)))
    return rows


def _block_section(layout: BlockLayout) -> list[str]:
    spec = layout.spec
    per = f"one per tile, {layout.stride:#x} bytes apart" if spec.per_tile else "one per device"
    out = ["", f"## {layout.name} block", "",
           f"ID `0x{spec.type.value:08x}`, version {version_text(spec.version)}, {per}. {_md(spec.doc)}", ""]
    out += _table(("Offset", "Register", "Access", "Reset", "Description"), _register_rows(layout))
    for reg, _offset in layout.registers:
        if reg.fields:
            out += ["", f"### {layout.name}.{reg.name} fields", ""]
            out += _table(("Bits", "Field", "Reset", "Description"),
                          [(bit_range(f.lsb, f.width), f"`{f.name}`", _reset(reg, f.reset, 1), _md(f.doc))
                           for f in reg.fields])
    return out


def render_registers(config: SocConfig) -> str:
    """Render ``docs/registers.md``: the block-walk rule, the placed blocks, every block's registers.

    Parameters
    ----------
    config:
        The configuration whose block placement is shown.

    Returns
    -------
    str
        The Markdown text.
    """
    rmap = register_map(config)
    out = [f"<!-- {NOTICE} -->", "", "# dx1-mini register reference", "",
           f"Spec version {version_text(SPEC_VERSION)} (`0x{SPEC_VERSION:08x}`). The GLOBAL block's MAGIC register "
           f"reads `0x{MAGIC:08x}` (\"DX11\").", "", _md(VERSIONS_EXPLAINED), ""]
    out += _table(("Spec version", "What changed"), [(version_text(v), _md(text)) for v, text in SPEC_HISTORY])
    out += ["", "## Finding the blocks", "", _md(BLOCK_WALK), "",
            "Access types:", "", *(f"- `{a.value}`: {text}." for a, text in _ACCESS.items()), "",
            "Reset is the value after reset. Read-only registers show \"—\": they read what the hardware supplies "
            "(identity, capabilities, state, counters), as their descriptions say.", "", "## Placed blocks", "",
            f"For this configuration (register space `{rmap.size:#x}` bytes, blocks aligned to `{BLOCK_ALIGN:#x}`):",
            ""]
    out += _table(("Parameter", "Value"), _flat("", dataclasses.asdict(config)))
    out.append("")
    out += _table(("Block", "Base", "NEXT", "ID"),
                  [(b.name, f"`0x{b.base:04x}`", f"`0x{b.next:04x}`", f"`0x{b.spec.type.value:08x}`")
                   for b in rmap.blocks])
    for layout in block_layouts(rmap):
        out += _block_section(layout)
    out += ["", "## Error codes", "",
            "Completion status codes and queue error codes (the QUEUE block's ERROR register).", ""]
    out += _table(("Code", "Name", "Description"),
                  [(f"`0x{code.value:02x}`", f"`{code.name}`", _md(ERROR_DOCS[code])) for code in ErrorCode])
    return "\n".join(out) + "\n"


def _ranges(mask: int) -> list[tuple[int, int]]:
    """The runs of set bits of ``mask`` as ``(lsb, width)``, lowest first."""
    runs = []
    bit = 0
    while mask >> bit:
        if mask >> bit & 1:
            width = 1
            while mask >> (bit + width) & 1:
                width += 1
            runs.append((bit, width))
            bit += width
        else:
            bit += 1
    return runs


def _field_table(fields: tuple[Field, ...]) -> list[str]:
    return _table(("Bits", "Field", "Description"),
                  [(bit_range(f.lsb, f.width), f"`{f.name}`", _md(f.doc)) for f in fields])


def _command_section(cmd: Command) -> list[str]:
    out = ["", f"### {cmd.opcode.name} (`0x{cmd.opcode.value:02x}`)", "", _md(cmd.doc), ""]
    out += _field_table(cmd.all_fields)
    reserved = ", ".join(bit_range(lsb, width) for lsb, width in _ranges(cmd.reserved_mask))
    out += ["", f"Reserved, must be 0: {reserved}."]
    if cmd.flags:
        flags_lsb = HEADER[1].lsb
        out += ["", "Flags:", ""]
        out += _table(("Flag bit", "Command bit", "Flag", "Description"),
                      [(str(bit), str(flags_lsb + bit), f"`{name}`", _md(doc)) for name, bit, doc in cmd.flags])
    return out


def render_commands() -> str:
    """Render ``docs/commands.md``: the encoding rule, the header, every opcode, completions, check order.

    Returns
    -------
    str
        The Markdown text.
    """
    out = [f"<!-- {NOTICE} -->", "", "# dx1-mini command reference", "", "## Encoding", "",
           f"A command is {COMMAND_BYTES} bytes, read as one little-endian integer: byte 0 holds bits [7:0], "
           f"byte {COMMAND_BYTES - 1} bits [{COMMAND_BYTES * 8 - 1}:{COMMAND_BYTES * 8 - 8}]. A field at "
           "`[msb:lsb]` occupies those bits of the integer. Every bit that no field of the opcode names is "
           "reserved and must be 0, and so is every flag bit the opcode does not define: the device refuses "
           "such a command with `RESERVED_BITS`. No field straddles a 64-bit word, so a host can also build a "
           f"command as {COMMAND_BYTES // 8} little-endian 64-bit words.", "",
           "## Common header", "", "Every command starts with these fields.", ""]
    out += _field_table(HEADER)
    out += ["", "## Opcodes", ""]
    out += _table(("Opcode", "Name", "Flags"),
                  [(f"`0x{op.value:02x}`", op.name, ", ".join(f"`{name}`" for name, _, _ in cmd.flags) or "—")
                   for op, cmd in COMMANDS.items()])
    for cmd in COMMANDS.values():
        out += _command_section(cmd)
    out += ["", "## Completion entry", "",
            f"The device writes one {COMPLETION_BYTES}-byte entry per command to the completion ring, read as "
            "one little-endian integer.", ""]
    out += _field_table(COMPLETION)
    out += ["", "## Check order", "",
            "The device checks a command in this order; the first check that fails gives the completion's "
            "status, so the golden model and the gateware report the same error for a command that is wrong "
            "in more than one way.", ""]
    out += [f"{i}. `{code.name}`: {_md(ERROR_DOCS[code])}" for i, code in enumerate(CHECK_ORDER, 1)]
    others = [f"`{code.name}`" for code in ErrorCode if code not in CHECK_ORDER and code is not ErrorCode.OK]
    if others:
        listed = ", ".join(others[:-1]) + " or " + others[-1] if len(others) > 1 else others[0]
        out += ["", f"The check order does not place {listed}; see [the error codes](registers.md#error-codes)."]
    return "\n".join(out) + "\n"


def _layout_table(fields: tuple[WireField, ...]) -> list[str]:
    rows, at = [], 0
    for f in fields:
        size = {"B": 1, "I": 4}[f.code]
        rows.append((str(at) if size == 1 else f"{at}..{at + size - 1}", f"`{f.name}`", _md(f.doc)))
        at += size
    return _table(("Bytes", "Field", "Description"), rows)


def render_link() -> str:
    """Render ``docs/link.md``: the UART bridge's frames and the simulator socket, from :mod:`dx1_bringup.spec.link`.

    Returns
    -------
    str
        The Markdown text.
    """
    def limits(docs: dict[str, str]) -> list[str]:
        return _table(("Name", "Value", "Meaning"),
                      [(f"`{name}`", f"`0x{LIMITS[name][0]:x}`" if LIMITS[name][1] == "x" else str(LIMITS[name][0]),
                        _md(doc)) for name, doc in docs.items()])

    def layout(name: str) -> list[str]:
        order, fields, doc = LAYOUTS[name]
        endian = f"{order}-endian"
        return ["", f"### `{name}`", "", f"{_md(doc)} Fields are {endian}.", "", *_layout_table(fields)]

    out = [f"<!-- {NOTICE} -->", "", "# dx1-mini host links", "",
           "Two wire formats reach the SoC's host ports (AXI4-Lite registers, AXI4 device memory): the UART "
           "bridge of a board and the socket of the simulator. Both are defined in `dx1_bringup/spec/link.py`; "
           "the driver's `dx1_driver/link.py` is generated from it.", "",
           "## UART bridge", "",
           "8N1. Every multi-byte field is big-endian. CRC-32 is `zlib.crc32` (IEEE 802.3, reflected, initial "
           "value and final XOR `0xFFFFFFFF`): a burst header's CRC covers the header's 9 bytes, a payload's CRC "
           "the payload, a register frame's CRC every byte before it, command byte included.", "",
           "### Frames", ""]
    out += _table(("Command", "Name", "Frame"),
                  [(f"`0x{c.value:02x}`", f"`{c.name}`", _md(doc)) for c, doc in FRAME_DOCS.items()])
    out += ["", "### Status byte", ""]
    out += _table(("Status", "Name", "Meaning"),
                  [(f"`0x{s.value:02x}`", f"`{s.name}`", _md(doc)) for s, doc in FRAME_STATUS_DOCS.items()])
    for name in ("UARTBONE_HEADER", "BURST_HEADER", "REG_HEADER"):
        out += layout(name)
    out += ["", "### Limits and address windows", ""]
    out += limits(LINK_LIMIT_DOCS)
    out += ["", "## Simulator socket", "",
            "One request at a time on a loopback TCP socket; the simulation advances only inside requests. "
            "A client may send requests before the answers of earlier ones arrive (the driver posts its "
            "writes); the server runs them one at a time in the order they arrive and answers each in turn.", "",
            "### Ops", ""]
    out += _table(("Op", "Name", "Meaning"),
                  [(str(o.value), f"`{o.name}`", _md(doc)) for o, doc in SIM_OP_DOCS.items()])
    out += ["", "### Status", ""]
    out += _table(("Status", "Name", "Meaning"),
                  [(str(s.value), f"`{s.name}`", _md(doc)) for s, doc in SIM_STATUS_DOCS.items()])
    for name in ("SIM_REQUEST", "SIM_RESPONSE"):
        out += layout(name)
    out += ["", "### Limits", ""]
    out += limits(SIM_LIMIT_DOCS)
    return "\n".join(out) + "\n"
