"""Machine-readable description of the whole spec: ``docs/dx1.json``.

For tools that are not written in Python (or must not import the generator):
the configuration, the placed register blocks, every register and field, the
opcodes and command layouts, the completion entry, the error codes and the
check order.  Numbers are JSON integers, except the 256-bit reserved masks,
which are hex strings because many JSON readers hold numbers as doubles.
"""

from __future__ import annotations

import dataclasses
import json

from ..spec import (
    BLOCK_ALIGN,
    CHECK_ORDER,
    COMMAND_BYTES,
    COMMANDS,
    COMPLETION,
    COMPLETION_BYTES,
    ERROR_DOCS,
    HEADER,
    MAGIC,
    SPEC_VERSION,
    ErrorCode,
    Field,
    Opcode,
    Register,
    SocConfig,
    register_map,
)
from .common import BLOCK_WALK, NOTICE, BlockLayout, block_layouts

__all__ = ["describe", "render"]


def _fields(fields: tuple[Field, ...]) -> list[dict[str, object]]:
    return [{"name": f.name, "lsb": f.lsb, "width": f.width, "doc": f.doc} for f in fields]


def _register(reg: Register, offset: int) -> dict[str, object]:
    return {
        "name": reg.name,
        "offset": offset,
        "count": reg.count,
        "array": reg.array,
        "access": reg.access.value,
        "reset": reg.reset,
        "writable_mask": reg.writable_mask,
        "doc": reg.doc,
        "fields": [{"name": f.name, "lsb": f.lsb, "width": f.width, "reset": f.reset, "doc": f.doc}
                   for f in reg.fields],
    }


def _block_type(layout: BlockLayout) -> dict[str, object]:
    return {
        "name": layout.name,
        "id": int(layout.spec.type),
        "version": layout.spec.version,
        "doc": layout.spec.doc,
        "per_tile": layout.spec.per_tile,
        "stride": layout.stride,
        "registers": [_register(reg, offset) for reg, offset in layout.registers],
    }


def describe(config: SocConfig) -> dict[str, object]:
    """Describe the spec, placed for ``config``, as plain JSON-ready data.

    Parameters
    ----------
    config:
        The configuration whose register map is described.

    Returns
    -------
    dict
        Keys in a fixed order: identity, ``config``, ``register_map`` (placed
        blocks with absolute bases), ``block_types`` (registers with offsets
        within the block), ``opcodes``, ``commands``, ``completion``,
        ``error_codes`` and ``check_order``.
    """
    rmap = register_map(config)
    return {
        "_comment": NOTICE,
        "magic": MAGIC,
        "spec_version": SPEC_VERSION,
        "block_align": BLOCK_ALIGN,
        "config": dataclasses.asdict(config),
        "register_map": {
            "rule": BLOCK_WALK,
            "size": rmap.size,
            "blocks": [{"name": b.name, "type": b.spec.type.name, "tile": b.tile, "base": b.base, "next": b.next}
                       for b in rmap.blocks],
        },
        "block_types": [_block_type(layout) for layout in block_layouts(rmap)],
        "opcodes": [{"name": op.name, "value": op.value} for op in Opcode],
        "command_bytes": COMMAND_BYTES,
        "header": _fields(HEADER),
        "commands": [
            {
                "opcode": op.name,
                "value": op.value,
                "doc": cmd.doc,
                "fields": _fields(cmd.all_fields),
                "flags": [{"name": name, "bit": bit, "doc": doc} for name, bit, doc in cmd.flags],
                "reserved_mask": f"0x{cmd.reserved_mask:0{COMMAND_BYTES * 2}x}",
            }
            for op, cmd in COMMANDS.items()
        ],
        "completion": {"bytes": COMPLETION_BYTES, "fields": _fields(COMPLETION)},
        "error_codes": [{"name": code.name, "value": code.value, "doc": ERROR_DOCS[code]} for code in ErrorCode],
        "check_order": [code.name for code in CHECK_ORDER],
    }


def render(config: SocConfig) -> str:
    """Render ``docs/dx1.json`` for ``config``.

    Parameters
    ----------
    config:
        The configuration whose register map is described.

    Returns
    -------
    str
        :func:`describe` as JSON indented by two spaces, keys in their given order.
    """
    return json.dumps(describe(config), indent=2, sort_keys=False) + "\n"
