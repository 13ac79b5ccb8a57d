"""C headers for a host program: register offsets and fields, block bases, command and completion layouts
(``dx1_regs.h``), and the host links (``dx1_link.h``).

The header is self-contained C11 (only ``<stdint.h>``).  Commands are built in a
``uint64_t cmd[DX1_CMD_WORDS]`` buffer with :c:func:`dx1_cmd_set`, which can only
work because no field straddles two 64-bit words: :func:`render` checks that
and refuses a spec that breaks it.
"""

from __future__ import annotations

from ..spec import (
    BLOCK_ALIGN,
    BUS_BYTES,
    COMMAND_BYTES,
    COMMANDS,
    COMPLETION,
    COMPLETION_BYTES,
    ERROR_DOCS,
    FRAME_STATUS_DOCS,
    HEADER,
    MAGIC,
    SPEC_VERSION,
    ErrorCode,
    Field,
    FrameCommand,
    FrameStatus,
    Opcode,
    SimOp,
    SimStatus,
    SocConfig,
    register_map,
)
from .common import NOTICE, BlockLayout, block_layouts, check_unique, version_text, wrap
from .py_link import LAYOUTS, LIMITS

__all__ = ["render", "render_link", "check_word_fields"]

_WORD_BITS = 64
_COMMAND_WORDS = COMMAND_BYTES * 8 // _WORD_BITS


def check_word_fields(fields: tuple[Field, ...], what: str, total_bits: int) -> None:
    """Check that every field lies inside ``total_bits`` and inside one 64-bit word.

    Parameters
    ----------
    fields:
        The fields of one command (header included) or of the completion entry.
    what:
        What the fields belong to, for the error message.
    total_bits:
        Size of the encoded entry in bits.

    Raises
    ------
    ValueError
        When a field runs past the entry or straddles a 64-bit word boundary.
    """
    for f in fields:
        msb = f.lsb + f.width - 1
        if f.width < 1 or f.lsb < 0 or msb >= total_bits:
            raise ValueError(f"{what} field {f.name!r} bits [{msb}:{f.lsb}] do not fit in {total_bits} bits")
        if f.lsb // _WORD_BITS != msb // _WORD_BITS:
            raise ValueError(
                f"{what} field {f.name!r} bits [{msb}:{f.lsb}] straddle a 64-bit word boundary; the C header's "
                f"dx1_cmd_set() and every word-wise encoder need each field inside one word: move the field")


def _safe(text: str) -> str:
    # A spec doc containing "*/" would end the comment early.
    return text.replace("*/", "* /")


def _comment(text: str, width: int = 100) -> list[str]:
    lines = wrap(_safe(text), width - 3)
    if len(lines) == 1:
        return [f"/* {lines[0]} */"]
    return ["/*", *(f" * {line}" for line in lines), " */"]


def _defines(rows: list[tuple[str, str]], comments: dict[str, str] | None = None) -> list[str]:
    """``#define`` lines with the values lined up, optionally with a trailing comment per name."""
    width = max(len(name) for name, _ in rows)
    lines = []
    for name, value in rows:
        line = f"#define {name:<{width}} {value}"
        if comments and name in comments:
            line += f"  /* {comments[name]} */"
        lines.append(line)
    return lines


def _enum(name: str, members: dict[str, tuple[int, str | None]]) -> list[str]:
    """A C enum, values lined up, each member optionally followed by a comment."""
    width = max(len(member) for member in members)
    lines = [f"enum {name} {{"]
    for member, (value, doc) in members.items():
        comment = f"  /* {_safe(doc)} */" if doc else ""
        lines.append(f"    {member:<{width}} = 0x{value:02x},{comment}")
    return [*lines, "};"]


def _hex(value: int, digits: int) -> str:
    return f"0x{value:0{digits}x}u"


def _field_defines(prefix: str, fields: tuple[Field, ...]) -> list[tuple[str, str]]:
    rows = []
    for f in fields:
        rows += [(f"{prefix}_{f.name.upper()}_LSB", str(f.lsb)), (f"{prefix}_{f.name.upper()}_WIDTH", str(f.width))]
    return rows


def _register_rows(layout: BlockLayout) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for reg, offset in layout.registers:
        macro = f"DX1_{layout.name}_{reg.name}"
        if reg.array:
            rows += [(f"{macro}_COUNT", str(reg.count)), (f"{macro}(i)", f"({_hex(offset, 2)} + 4u * (uint32_t)(i))")]
        else:
            rows.append((macro, _hex(offset, 2)))
        for f in reg.fields:
            rows += [(f"{macro}_{f.name.upper()}_SHIFT", str(f.lsb)),
                     (f"{macro}_{f.name.upper()}_MASK", _hex(f.mask, 8))]
    return rows


def _placement_rows(layouts: tuple[BlockLayout, ...]) -> list[tuple[str, str]]:
    rows = []
    for layout in layouts:
        if layout.spec.per_tile:
            rows += [(f"DX1_{layout.name}_STRIDE", _hex(layout.stride, 4)),
                     (f"DX1_{layout.name}_BASE(t)",
                      f"({_hex(layout.bases[0], 4)} + (uint32_t)(t) * DX1_{layout.name}_STRIDE)")]
        else:
            rows.append((f"DX1_{layout.name}_BASE", _hex(layout.bases[0], 4)))
    return rows


_PREAMBLE = """\
/*
 * dx1-mini register map and command encoding, spec version {version}.
 *
 * Registers are 32 bits wide.  Every register block starts with ID, VERSION and
 * NEXT (byte offset of the next block, 0 after the last); a driver finds the
 * blocks by walking NEXT from offset 0.  The DX1_*_BASE macros give the
 * placement for the configuration this header was generated for.
 *
 * A command is DX1_CMD_BYTES bytes read as one little-endian integer.  In a
 * uint64_t cmd[DX1_CMD_WORDS] buffer, cmd[i] holds bits [64*i+63:64*i]; store
 * each word little-endian.  Every bit that no field of the opcode names is
 * reserved and must be 0, so start from a zeroed buffer:
 *
 *     uint64_t cmd[DX1_CMD_WORDS] = {{0}};
 *     DX1_CMD_SET(cmd, OPCODE, DX1_OP_GEMM);
 *     DX1_CMD_SET(cmd, GEMM_M, 16);
 *     DX1_CMD_SET(cmd, FLAGS, 1u << DX1_CMD_GEMM_FLAG_ACCUMULATE_BIT);
 */
#ifndef DX1_REGS_H
#define DX1_REGS_H

#include <stdint.h>

/* C11's _Static_assert, C++11's static_assert: the header serves C drivers and the C++ simulator server. */
#ifdef __cplusplus
#define DX1_STATIC_ASSERT static_assert
#else
#define DX1_STATIC_ASSERT _Static_assert
#endif"""

_HELPERS = """
/*
 * Sets bits [lsb + width - 1:lsb] of a command to value.  Returns 0, or -1 when
 * value does not fit in width bits (the field then gets its low width bits).
 */
static inline int dx1_cmd_set(uint64_t cmd[DX1_CMD_WORDS], unsigned lsb, unsigned width, uint64_t value)
{
    /* No field straddles two words (the generator checks it), so one word holds it all. */
    uint64_t mask = width >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
    unsigned shift = lsb % 64;
    cmd[lsb / 64] = (cmd[lsb / 64] & ~(mask << shift)) | ((value & mask) << shift);
    return (value & ~mask) ? -1 : 0;
}

/* Reads bits [lsb + width - 1:lsb] of a command. */
static inline uint64_t dx1_cmd_get(const uint64_t cmd[DX1_CMD_WORDS], unsigned lsb, unsigned width)
{
    uint64_t mask = width >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
    return (cmd[lsb / 64] >> (lsb % 64)) & mask;
}

/* Reads bits [lsb + width - 1:lsb] of a completion entry. */
static inline uint64_t dx1_completion_get(uint64_t entry, unsigned lsb, unsigned width)
{
    uint64_t mask = width >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
    return (entry >> lsb) & mask;
}

/* DX1_CMD_SET(cmd, GEMM_M, 16) sets field DX1_CMD_GEMM_M; same return value as dx1_cmd_set(). */
#define DX1_CMD_SET(cmd, field, value) dx1_cmd_set((cmd), DX1_CMD_##field##_LSB, DX1_CMD_##field##_WIDTH, (value))
#define DX1_CMD_GET(cmd, field) dx1_cmd_get((cmd), DX1_CMD_##field##_LSB, DX1_CMD_##field##_WIDTH)
#define DX1_COMPLETION_GET(entry, field) \\
    dx1_completion_get((entry), DX1_COMPLETION_##field##_LSB, DX1_COMPLETION_##field##_WIDTH)

DX1_STATIC_ASSERT(DX1_CMD_BYTES == DX1_CMD_WORDS * sizeof(uint64_t), "a command is DX1_CMD_WORDS 64-bit words");
DX1_STATIC_ASSERT(DX1_COMPLETION_BYTES == sizeof(uint64_t), "a completion entry is one 64-bit word");
DX1_STATIC_ASSERT((DX1_BLOCK_ALIGN & (DX1_BLOCK_ALIGN - 1)) == 0, "blocks are aligned to a power of two");

#endif /* DX1_REGS_H */
"""


def render(config: SocConfig) -> str:
    """Render ``drivers/include/dx1_regs.h`` for ``config``.

    Parameters
    ----------
    config:
        The configuration whose block placement the ``DX1_*_BASE`` macros give.

    Returns
    -------
    str
        The header text.

    Raises
    ------
    ValueError
        When a command or completion field straddles a 64-bit word, or when
        two spec names give the same macro.
    """
    for cmd in COMMANDS.values():
        check_word_fields(cmd.all_fields, f"command {cmd.opcode.name}", COMMAND_BYTES * 8)
    check_word_fields(COMPLETION, "completion", COMPLETION_BYTES * 8)

    rmap = register_map(config)
    layouts = block_layouts(rmap)
    tile = config.tile
    out = [f"/* {NOTICE} */", _PREAMBLE.format(version=version_text(SPEC_VERSION))]
    defines: list[str] = []

    def section(title: str, rows: list[tuple[str, str]], comments: dict[str, str] | None = None) -> None:
        defines.extend(row[0] for row in rows)
        out.extend(["", *_comment(title), *_defines(rows, comments)])

    section("Identity", [("DX1_MAGIC", _hex(MAGIC, 8)), ("DX1_SPEC_VERSION", _hex(SPEC_VERSION, 8)),
                         ("DX1_BLOCK_ALIGN", _hex(BLOCK_ALIGN, 4))])
    section("The configuration this header was generated for", [
        ("DX1_TILES", str(config.tiles)), ("DX1_ARRAY", str(tile.array)), ("DX1_SPM_ROWS", str(tile.spm_rows)),
        ("DX1_ACC_ROWS", str(tile.acc_rows)), ("DX1_MEM_BYTES", _hex(config.mem_bytes, 8)),
        ("DX1_SEMAPHORES", str(config.semaphores)), ("DX1_TRACE_DEPTH", str(config.trace_depth)),
        ("DX1_BUS_BYTES", str(BUS_BYTES)),
    ])
    section("Block types (read from each block's ID register) and block versions", [
        row for layout in layouts for row in (
            (f"DX1_BLOCK_{layout.name}_ID", _hex(layout.spec.type, 8)),
            (f"DX1_BLOCK_{layout.name}_VERSION", _hex(layout.spec.version, 8)))
    ])
    section("Absolute block bases; per-tile blocks are DX1_<BLOCK>_BASE(tile)",
            [*_placement_rows(layouts), ("DX1_MAP_BYTES", _hex(rmap.size, 4))])
    for layout in layouts:
        per = "one per tile" if layout.spec.per_tile else "one per device"
        section(f"{layout.name} block ({per}): {layout.spec.doc} Offsets within the block.", _register_rows(layout))

    out += ["", *_comment("Command opcodes (bits [7:0] of every command)"),
            *_enum("dx1_opcode", {f"DX1_OP_{op.name}": (op.value, None) for op in Opcode})]
    out += ["", *_comment("Completion status codes; only DX1_ERR_OK is a success"),
            *_enum("dx1_error", {f"DX1_ERR_{code.name}": (code.value, ERROR_DOCS[code]) for code in ErrorCode})]
    defines += [f"DX1_OP_{op.name}" for op in Opcode] + [f"DX1_ERR_{code.name}" for code in ErrorCode]

    section("Command size and the common header of every command", [
        ("DX1_CMD_BYTES", str(COMMAND_BYTES)), ("DX1_CMD_WORDS", str(_COMMAND_WORDS)),
        *_field_defines("DX1_CMD", HEADER)])
    for cmd in COMMANDS.values():
        prefix = f"DX1_CMD_{cmd.opcode.name}"
        rows = _field_defines(prefix, cmd.fields)
        flag_rows = [(f"{prefix}_FLAG_{name.upper()}_BIT", str(bit)) for name, bit, _doc in cmd.flags]
        if rows or flag_rows:
            section(f"{cmd.opcode.name}: {cmd.doc}", rows + flag_rows,
                    {name: "bit within the FLAGS field" for name, _ in flag_rows})
    section("Completion entry", [("DX1_COMPLETION_BYTES", str(COMPLETION_BYTES)),
                                 *_field_defines("DX1_COMPLETION", COMPLETION)])
    helpers = ["DX1_CMD_SET", "DX1_CMD_GET", "DX1_COMPLETION_GET"]
    check_unique([d.split("(")[0] for d in defines] + helpers, "C identifiers")
    out.append(_HELPERS)
    return "\n".join(out)


def render_link(_config: SocConfig) -> str:
    """Render ``drivers/include/dx1_link.h``: the UART bridge's frames and the simulator socket, as C constants.

    Returns
    -------
    str
        The header text: frame commands, status bytes, header sizes and limits of the bridge; op codes,
        status codes, request and response sizes and limits of the simulator socket.
    """
    def size(fields) -> int:
        return sum({"B": 1, "I": 4}[f.code] for f in fields)

    out = [f"/* {NOTICE} */", "/*", f" * dx1-mini host links, spec version {version_text(SPEC_VERSION)}: the UART "
           "bridge's frames", " * and the simulator socket (docs/link.md).  Bridge fields are big-endian, simulator",
           " * fields little-endian; CRC-32 is zlib's crc32 (IEEE 802.3, reflected).", " */",
           "#ifndef DX1_LINK_H", "#define DX1_LINK_H"]
    out += ["", *_comment("UART bridge: the first byte of every frame"),
            *_enum("dx1_frame", {f"DX1_FRAME_{c.name}": (c.value, None) for c in FrameCommand})]
    out += ["", *_comment("UART bridge: the status byte that answers a burst or a CRC register frame"),
            *_enum("dx1_frame_status", {f"DX1_FRAME_{s.name}": (s.value, FRAME_STATUS_DOCS[s]) for s in FrameStatus})]
    out += ["", *_comment("Simulator socket: request op codes"),
            *_enum("dx1_sim_op", {f"DX1_SIM_{o.name}": (o.value, None) for o in SimOp})]
    out += ["", *_comment("Simulator socket: response status codes"),
            *_enum("dx1_sim_status", {f"DX1_SIM_{s.name}": (s.value, None) for s in SimStatus})]
    rows = [(f"DX1_{name}_BYTES", str(size(fields))) for name, (_order, fields, _doc) in LAYOUTS.items()]
    rows += [(f"DX1_{name}", _hex(value, 8) if style == "x" else f"{value}u")
             for name, (value, style) in LIMITS.items()]
    out += ["", *_comment("Header sizes (a burst header is followed by its CRC) and limits"), *_defines(rows)]
    out += ["", "#endif /* DX1_LINK_H */", ""]
    return "\n".join(out)
