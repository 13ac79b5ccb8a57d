"""Helpers shared by the generators: the spec's register map grouped per block type, and text formatting.

Every generator reads the spec through :func:`block_layouts` so that the C header,
the Python accessors, the JSON description and the Markdown reference agree on
what a block's registers are and where its instances are placed.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ..spec import BLOCK_ALIGN, BlockSpec, BlockType, PlacedBlock, Register, RegisterMap, align_up

__all__ = [
    "NOTICE", "BLOCK_WALK", "BlockLayout", "block_layouts", "check_unique", "version_text", "bit_range", "wrap",
    "camel_case",
]

#: The first line (as a comment in the file's own syntax) of every generated file.
NOTICE = "generated from dx1_bringup/spec by `make rtl`; do not edit"

#: How a driver finds the register blocks, for the readers of the JSON and Markdown outputs.
BLOCK_WALK = (
    "Registers are 32 bits wide. Every register block starts with three registers: ID (the block type), "
    "VERSION (the block's version, major.minor in 16.16) and NEXT (the byte offset of the next block from the "
    "start of the register space, 0 after the last block). Blocks are placed one after another at "
    f"{BLOCK_ALIGN:#x}-byte boundaries, starting at offset 0; a driver finds every block by reading ID and "
    "following NEXT from offset 0, rather than trusting a fixed address."
)


@dataclass(frozen=True)
class BlockLayout:
    """One block type as placed in a register map.

    Attributes
    ----------
    spec:
        The block's specification.
    registers:
        Every register (the ``ID``/``VERSION``/``NEXT`` header included) with
        its byte offset within the block; for a register array, the offset of
        element 0 (element ``i`` is at ``offset + 4 * i``).
    bases:
        Absolute base of each instance: one per tile for a per-tile block,
        else a single one.
    stride:
        Bytes between the bases of consecutive instances (the block's span).
    """

    spec: BlockSpec
    registers: tuple[tuple[Register, int], ...]
    bases: tuple[int, ...]
    stride: int

    @property
    def name(self) -> str:
        return self.spec.type.name


def block_layouts(rmap: RegisterMap) -> tuple[BlockLayout, ...]:
    """Group the placed blocks of ``rmap`` by block type, in placement order.

    Parameters
    ----------
    rmap:
        A map from :func:`dx1_bringup.spec.register_map`.

    Returns
    -------
    tuple of BlockLayout
        One entry per block type present in the map.

    Raises
    ------
    ValueError
        When the instances of a per-tile block are not evenly spaced, which a
        ``BASE(t)`` macro or accessor could not express.
    """
    by_type: dict[BlockType, list[PlacedBlock]] = {}
    for block in rmap.blocks:
        by_type.setdefault(block.spec.type, []).append(block)
    layouts = []
    for blocks in by_type.values():
        first = blocks[0]
        registers: list[tuple[Register, int]] = []
        for placed in first.registers:
            if not registers or registers[-1][0] is not placed.register:
                registers.append((placed.register, placed.offset))
        span = align_up(4 * len(first.registers), BLOCK_ALIGN)
        bases = tuple(b.base for b in blocks)
        if any(base != bases[0] + i * span for i, base in enumerate(bases)):
            raise ValueError(f"{first.spec.type.name} blocks are not {span:#x} bytes apart: "
                             f"{[hex(b) for b in bases]}")
        layouts.append(BlockLayout(first.spec, tuple(registers), bases, span))
    return tuple(layouts)


def check_unique(names: Iterable[str], what: str) -> None:
    """Raise ``ValueError`` naming every duplicate in ``names``.

    Generated identifiers are built by joining spec names (``BLOCK_REG_FIELD``),
    so two different spec entries can collide; better to fail than to emit a
    file that does not compile or silently shadows a value.
    """
    duplicates = sorted(name for name, n in Counter(names).items() if n > 1)
    if duplicates:
        raise ValueError(f"the spec gives clashing {what}: {', '.join(duplicates)}")


def version_text(version: int) -> str:
    """Format a 16.16 version number as ``major.minor``."""
    return f"{version >> 16}.{version & 0xFFFF}"


def bit_range(lsb: int, width: int) -> str:
    """Format a bit field as ``[msb:lsb]``, or ``[bit]`` for a single bit."""
    return f"[{lsb}]" if width == 1 else f"[{lsb + width - 1}:{lsb}]"


def wrap(text: str, width: int) -> list[str]:
    """Split ``text`` into lines of at most ``width`` characters, at spaces only."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def camel_case(name: str) -> str:
    """``TRACE`` -> ``Trace``, ``DMA_ENGINE`` -> ``DmaEngine``."""
    return "".join(part.capitalize() for part in name.split("_"))
