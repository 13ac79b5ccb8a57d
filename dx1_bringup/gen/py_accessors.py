"""Standalone Python accessors for the driver: ``drivers/dx1_driver/regs.py``.

The generated module imports only the standard library, so that the driver
installs without the generator.  It holds the identity constants, the enums,
one class of register offsets and ``(shift, width)`` fields per block type,
the command layouts as data, one checked builder function per opcode and a
completion decoder.  It must pass the project's ruff rules like hand-written
code, hence the care over line lengths below.
"""

from __future__ import annotations

import dataclasses
import json
import keyword
import re

from ..spec import (
    BLOCK_ALIGN,
    BUS_BYTES,
    CHECK_ORDER,
    COMMAND_BYTES,
    COMMANDS,
    COMPLETION,
    COMPLETION_BYTES,
    ERROR_DOCS,
    MAGIC,
    SPEC_VERSION,
    BlockType,
    Command,
    ErrorCode,
    Field,
    Opcode,
    SocConfig,
    register_map,
)
from .common import NOTICE, BlockLayout, block_layouts, camel_case, check_unique, version_text, wrap

__all__ = ["render"]

_LINE = 120  # the project's ruff line length
_DOC_WIDTH = 100


def module_text(out: list[str]) -> str:
    """The lines of a generated module joined into its source; ``ValueError`` if a line is over the ruff limit."""
    too_long = [line for chunk in out for line in chunk.splitlines() if len(line) > _LINE]
    if too_long:
        raise ValueError(f"a spec doc or name gives a line over {_LINE} characters: {too_long[0]!r}")
    return "\n".join(out) + "\n"


def _str(text: str) -> str:
    # A JSON string literal is also a valid Python one, always double-quoted.
    return json.dumps(text)


def _value(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_str(k)}: {_value(v)}" for k, v in value.items()) + "}"
    return _str(value) if isinstance(value, str) else repr(value)


def _doc_safe(text: str) -> str:
    # Spec docs end up inside docstrings: keep backslashes literal and the string unbroken.
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _docstring(indent: str, summary: str, body: list[str] | None = None) -> list[str]:
    """A docstring at ``indent``: ``summary`` wrapped, then the lines of ``body`` after a blank line.

    ``body`` lines are relative to the docstring's indent.
    """
    lines = wrap(_doc_safe(summary), _DOC_WIDTH - len(indent))
    lines[0] = '"""' + lines[0]
    if body:
        lines += ["", *map(_doc_safe, body), '"""']
    elif len(indent) + len(lines[-1]) + 3 <= _LINE:
        lines[-1] += '"""'
    else:
        lines.append('"""')
    return [indent + line if line else "" for line in lines]


def _wrapped(head: str, items: list[str], tail: str, indent: str = "") -> list[str]:
    """``head item, item tail`` on one line when it fits, else one item a line."""
    line = f"{indent}{head}{', '.join(items)}{tail}"
    if len(line) <= _LINE:
        return [line]
    return [f"{indent}{head}", *(f"{indent}    {item}," for item in items), f"{indent}{tail}"]


def _dict(name: str, annotation: str, entries: list[tuple[str, str | list[str]]]) -> list[str]:
    """A module-level dict literal, one entry a line.

    An entry's value is either source text (a string literal too long for
    one line is split), or the items of a nested dict literal, which is
    wrapped one item a line when it does not fit.
    """
    lines = [f"{name}: {annotation} = {{"]
    for key, value in entries:
        if isinstance(value, list):
            lines += _wrapped(f"{key}: {{", value, "},", "    ")
        elif len(f"    {key}: {value},") > _LINE and value.startswith('"'):
            lines += [f"    {key}: (", *_string_lines(value, "        "), "    ),"]
        else:
            lines.append(f"    {key}: {value},")
    return [*lines, "}"]


def _string_lines(literal: str, indent: str) -> list[str]:
    """Split a long string literal into implicitly concatenated pieces, one a line.

    The pieces break after whitespace and keep all of it (unlike textwrap), so
    that they join back into exactly the spec's text.
    """
    pieces = [""]
    for word in re.split(r"(?<=\s)(?=\S)", json.loads(literal)):
        if pieces[-1] and len(indent) + len(_str(pieces[-1] + word)) > _LINE:
            pieces.append("")
        pieces[-1] += word
    return [f"{indent}{_str(piece)}" for piece in pieces]


def _enum(cls: str, doc: str, members: list[tuple[str, int]], digits: int) -> list[str]:
    lines = ["", "", f"class {cls}(enum.IntEnum):", *_docstring("    ", doc), ""]
    return lines + [f"    {name} = 0x{value:0{digits}x}" for name, value in members]


def _block_class(layout: BlockLayout) -> list[str]:
    cls = camel_case(layout.name)
    per = "one per tile" if layout.spec.per_tile else "one per device"
    lines = ["", "", f"class {cls}:"]
    lines += _docstring("    ", f"{layout.name} block ({per}): {layout.spec.doc}",
                        ["Register offsets within the block; fields as ``(shift, width)``."])
    attributes = [("TYPE", f"BlockType.{layout.name}"), ("BLOCK_VERSION", f"0x{layout.spec.version:08x}")]
    arrays = []
    for reg, offset in layout.registers:
        if reg.array:
            attributes += [(reg.name, f"0x{offset:02x}  # {reg.name}0 .. {reg.name}{reg.count - 1}: use "
                                      f"{reg.name.lower()}(index)"), (f"{reg.name}_COUNT", str(reg.count))]
            arrays.append(reg.name)
        else:
            attributes.append((reg.name, f"0x{offset:02x}"))
        attributes += [(f"{reg.name}_{f.name.upper()}", f"({f.lsb}, {f.width})") for f in reg.fields]
    check_unique([name for name, _ in attributes] + [name.lower() for name in arrays], f"{cls} attributes")
    lines += ["", *(f"    {name} = {value}" for name, value in attributes[:2]), ""]
    lines += [f"    {name} = {value}" for name, value in attributes[2:]]
    for name in arrays:
        lines += [
            "",
            "    @staticmethod",
            f"    def {name.lower()}(index: int) -> int:",
            f'        """Offset of {name}<index>."""',
            f"        if not 0 <= index < {cls}.{name}_COUNT:",
            f'            raise IndexError(f"{name} index must be 0 to {{{cls}.{name}_COUNT - 1}}, not {{index!r}}")',
            f"        return {cls}.{name} + 4 * index",
        ]
    return lines


def _field_layout(fields: tuple[Field, ...]) -> list[str]:
    return [f"{_str(f.name)}: ({f.lsb}, {f.width})" for f in fields]


def _reserved_literal(mask: int) -> str:
    # Grouped by 64-bit word, the unit the C header's dx1_cmd_set() works in.
    digits = f"{mask:0{COMMAND_BYTES * 2}x}"
    return "0x" + "_".join(digits[i:i + 16] for i in range(0, len(digits), 16))


def _builder(cmd: Command) -> list[str]:
    names = ["tag", *(f.name for f in cmd.fields)]
    flags = [name for name, _bit, _doc in cmd.flags]
    check_unique(names + flags, f"{cmd.opcode.name} builder arguments")
    for name in names + flags:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"{cmd.opcode.name} field or flag {name!r} is not a Python identifier")
    params = ["*", *(f"{name}: int" for name in names), *(f"{name}: bool = False" for name in flags)]
    docs = {f.name: f.doc for f in cmd.all_fields}
    body = [*wrap(cmd.doc, _DOC_WIDTH - 4), "", "Parameters", "----------"]
    for name in names:
        body += [f"{name} : int", *(f"    {line}" for line in wrap(docs[name], _DOC_WIDTH - 8))]
    for name, _bit, doc in cmd.flags:
        body += [f"{name} : bool", *(f"    {line}" for line in wrap(f"Flag: {doc}", _DOC_WIDTH - 8))]
    body += ["", "Returns", "-------", "bytes", f"    The {COMMAND_BYTES}-byte command, ready for the ring."]
    lines = ["", "", *_wrapped(f"def {cmd.opcode.name.lower()}(", params, ") -> bytes:")]
    lines += _docstring("    ", f"Build a {cmd.opcode.name} command (opcode 0x{cmd.opcode.value:02x}).", body)
    lines += _wrapped("fields = {", [f"{_str(name)}: {name}" for name in names], "}", "    ")
    flag_dict = "{" + ", ".join(f"{_str(name)}: {name}" for name in flags) + "}"
    return [*lines, f"    return _pack(Opcode.{cmd.opcode.name}, fields, {flag_dict})"]


_HELPERS = '''

def get_field(value: int, field: tuple[int, int]) -> int:
    """Extract ``field``, a ``(shift, width)`` pair such as ``Queue.ERROR_CODE``, from a register value."""
    shift, width = field
    return (value >> shift) & ((1 << width) - 1)


def set_field(value: int, field: tuple[int, int], field_value: int) -> int:
    """Return register value ``value`` with ``field`` set to ``field_value``, which must fit in the field."""
    shift, width = field
    if not 0 <= field_value < 1 << width:
        raise ValueError(f"field value must fit in {width} bits unsigned, not {field_value!r}")
    return (value & ~(((1 << width) - 1) << shift)) | (field_value << shift)'''

_PACKING = '''

def _pack(opcode: Opcode, fields: dict[str, int], flags: dict[str, bool]) -> bytes:
    """Encode a command; every field value must fit in its field."""
    flag_bits = sum(1 << COMMAND_FLAGS[opcode][name] for name, on in flags.items() if on)
    word = 0
    for name, value in {"opcode": opcode.value, "flags": flag_bits, **fields}.items():
        lsb, width = COMMAND_FIELDS[opcode][name]
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{opcode.name} field {name!r} must be an integer, not {value!r}") from None
        if not 0 <= value < 1 << width:
            raise ValueError(f"{opcode.name} field {name!r} must fit in {width} bits unsigned, not {value!r}")
        word |= value << lsb
    return word.to_bytes(COMMAND_BYTES, "little")


def unpack_completion(data: bytes) -> dict[str, int]:
    """Decode one completion entry of ``COMPLETION_BYTES`` bytes into its field values."""
    if len(data) != COMPLETION_BYTES:
        raise ValueError(f"a completion entry is {COMPLETION_BYTES} bytes, not {len(data)}")
    word = int.from_bytes(data, "little")
    return {name: get_field(word, field) for name, field in COMPLETION_FIELDS.items()}'''


def render(config: SocConfig) -> str:
    """Render ``drivers/dx1_driver/regs.py`` for ``config``.

    Parameters
    ----------
    config:
        The configuration recorded in the module's ``CONFIG`` and ``BLOCK_BASES``.

    Returns
    -------
    str
        The module's source.

    Raises
    ------
    ValueError
        When spec names would give clashing or invalid Python identifiers.
    """
    rmap = register_map(config)
    layouts = block_layouts(rmap)
    check_unique([camel_case(layout.name) for layout in layouts] + [op.name.lower() for op in Opcode]
                 + ["BlockType", "Opcode", "ErrorCode", "get_field", "set_field", "unpack_completion"],
                 "module-level Python names")
    doc = (f"DX-1 register map and command encoding, spec version {version_text(SPEC_VERSION)}.\n\n"
           "Standalone (standard library only), so that the driver installs without the generator.\n"
           "Registers are 32 bits wide.  Every register block starts with ID, VERSION and NEXT (byte offset of\n"
           "the next block, 0 after the last); a driver finds the blocks by walking NEXT from offset 0 and\n"
           "looks the ID up in ``BLOCK_CLASSES``.  Each block class gives register offsets within the block\n"
           "and fields as ``(shift, width)`` pairs for :func:`get_field` and :func:`set_field`.\n\n"
           "A command is ``COMMAND_BYTES`` bytes read as one little-endian integer; build one with the\n"
           "function named after its opcode, for example ``gemm(tag=1, a_addr=0, b_addr=64, c_addr=0, m=8,\n"
           "k_chunks=1)``, which checks that every value fits its field and leaves reserved bits zero.\n")
    out = [f"# {NOTICE}", f'"""{doc}"""', "", "import enum", "import operator", ""]
    out += [f"MAGIC = 0x{MAGIC:08x}", f"SPEC_VERSION = 0x{SPEC_VERSION:08x}", f"BLOCK_ALIGN = 0x{BLOCK_ALIGN:x}",
            f"COMMAND_BYTES = {COMMAND_BYTES}", f"COMPLETION_BYTES = {COMPLETION_BYTES}",
            "#: Bytes of one beat of the device-memory bus: DMA addresses and strides are multiples of it.",
            f"BUS_BYTES = {BUS_BYTES}", ""]
    out += ["#: The configuration this module was generated for."]
    out += _dict("CONFIG", "dict[str, object]",
                 [(_str(name), _value(value)) for name, value in dataclasses.asdict(config).items()])
    out += ["", "#: Block bases in CONFIG's register map; a driver should still walk the NEXT chain."]
    out += _dict("BLOCK_BASES", "dict[str, int]", [(_str(b.name), f"0x{b.base:04x}") for b in rmap.blocks])
    out += _enum("BlockType", "Register block types, as read from each block's ID register.",
                 [(t.name, t.value) for t in BlockType], 8)
    out += _enum("Opcode", "Command opcodes (bits [7:0] of every command).", [(o.name, o.value) for o in Opcode], 2)
    out += _enum("ErrorCode", "Completion status codes; ``OK`` is the only success.",
                 [(e.name, e.value) for e in ErrorCode], 2)
    out += ["", ""]
    out += _dict("ERROR_DOCS", "dict[ErrorCode, str]",
                 [(f"ErrorCode.{code.name}", _str(ERROR_DOCS[code])) for code in ErrorCode])
    out += ["", "#: The order in which the device checks a command; the first failing check gives the status."]
    out += _wrapped("CHECK_ORDER = (", [f"ErrorCode.{code.name}" for code in CHECK_ORDER], ")")
    out += _HELPERS.splitlines()
    for layout in layouts:
        out += _block_class(layout)
    out += ["", "", "#: Which class describes a block, by the value of its ID register."]
    out += _dict("BLOCK_CLASSES", "dict[BlockType, type]",
                 [(f"BlockType.{layout.name}", camel_case(layout.name)) for layout in layouts])
    out += ["", "#: Fields of each command, the common header included: name -> (lsb, width)."]
    out += _dict("COMMAND_FIELDS", "dict[Opcode, dict[str, tuple[int, int]]]",
                 [(f"Opcode.{op.name}", _field_layout(cmd.all_fields)) for op, cmd in COMMANDS.items()])
    out += ["", "#: Flag bits of each command, numbered within its flags field."]
    out += _dict("COMMAND_FLAGS", "dict[Opcode, dict[str, int]]",
                 [(f"Opcode.{op.name}", [f"{_str(name)}: {bit}" for name, bit, _ in cmd.flags])
                  for op, cmd in COMMANDS.items()])
    out += ["", "#: Bits of each command that must be zero, undefined flag bits included."]
    out += _dict("RESERVED_MASK", "dict[Opcode, int]",
                 [(f"Opcode.{op.name}", _reserved_literal(cmd.reserved_mask)) for op, cmd in COMMANDS.items()])
    out += ["", "#: Fields of a completion entry: name -> (lsb, width)."]
    out += _wrapped("COMPLETION_FIELDS: dict[str, tuple[int, int]] = {", _field_layout(COMPLETION), "}")
    out += _PACKING.splitlines()
    for cmd in COMMANDS.values():
        out += _builder(cmd)
    return module_text(out)
