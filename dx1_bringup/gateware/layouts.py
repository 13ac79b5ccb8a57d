"""Amaranth layouts built from the spec, so the gateware decodes exactly what the driver encodes."""

from __future__ import annotations

from amaranth import unsigned
from amaranth.lib import data

from ..spec import COMMAND_BITS, COMMANDS, COMPLETION, HEADER, Field, Opcode

__all__ = ["command_layout", "HEADER_LAYOUT", "DONE_LAYOUT"]


def _layout(fields: tuple[Field, ...], size: int) -> data.FlexibleLayout:
    return data.FlexibleLayout(size, {f.name: data.Field(unsigned(f.width), f.lsb) for f in fields})


def command_layout(opcode: Opcode) -> data.FlexibleLayout:
    """The 256-bit layout of one opcode's command, header included."""
    return _layout(COMMANDS[opcode].all_fields, COMMAND_BITS)


HEADER_LAYOUT = _layout(HEADER, COMMAND_BITS)

#: The compute core's completion: the low word of a completion entry (tag, status, opcode).
DONE_LAYOUT = _layout(tuple(f for f in COMPLETION if f.name in ("tag", "status", "opcode")), 32)
