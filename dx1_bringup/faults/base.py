"""The shared vocabulary of fault injection: seeded randomness, the keys of fault strings, bit operations."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["FaultKey", "FaultRng", "flip_bit", "force_bit", "natural", "probability", "parse_faults"]


@dataclass(frozen=True)
class FaultKey:
    """One ``KEY=VALUE`` of a fault string.

    Attributes
    ----------
    fields:
        The fields of the fault kind the value sets (one key may set several, as ``line-rate`` does).
    parse:
        Reads the value's text; raises ``ValueError`` when it is not one.
    what:
        What the value is, for messages: ``"N"`` for a natural number.
    """

    fields: tuple[str, ...]
    parse: Callable[[str], object]
    what: str = "N"


def natural(text: str) -> int:
    """A natural number written in decimal digits only (``ValueError`` otherwise)."""
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a natural number")
    return int(text)


def probability(text: str) -> float:
    """A probability below 0.5 (``ValueError`` otherwise): at 0.5 a fault stream carries no information."""
    value = float(text)
    if not 0 <= value < 0.5:
        raise ValueError(f"{text!r} is not a probability from 0 to 0.5")
    return value


class FaultRng:
    """The seeded random source every random fault draws from, so that a failing seed can be replayed.

    Parameters
    ----------
    seed:
        Seed of the fault sequence.
    """

    def __init__(self, seed: int):
        self._rng = random.Random(seed)

    def uniform(self) -> float:
        """A number in [0, 1): compare with a probability to decide whether a fault happens."""
        return self._rng.random()

    def bit(self, width: int) -> int:
        """Which of ``width`` bits a fault hits, each equally likely."""
        return self._rng.randrange(width)


def flip_bit(value: int, bit: int) -> int:
    """``value`` with ``bit`` inverted: a transient fault (a line error, an upset)."""
    return value ^ (1 << bit)


def force_bit(data: np.ndarray, bit: int, level: int, where: np.ndarray) -> None:
    """Force ``bit`` of the bytes of ``data`` selected by ``where`` to ``level``, in place: a stuck-at fault.

    Parameters
    ----------
    data:
        Bytes (``uint8``), changed in place.
    bit:
        Bit 0..7 of each byte.
    level:
        0 or 1: what the bit reads whatever was stored.
    where:
        Boolean mask over ``data``: the bytes on the broken lane.
    """
    if level:
        data[where] |= np.uint8(1 << bit)
    else:
        data[where] &= np.uint8(~(1 << bit) & 0xFF)


def parse_faults(text: str, kinds: tuple[type, ...]) -> dict[type, object]:
    """Read a fault string such as ``"stuck-bit=5,stuck-at=0"`` or ``"alias-bit=12,line-rate=1e-4"``.

    Parameters
    ----------
    text:
        Comma-separated ``KEY=VALUE`` items; each key belongs to one fault kind.
    kinds:
        The fault kinds allowed here, each a dataclass with ``NAME`` and ``KEYS`` (a ``dict`` of
        :class:`FaultKey`); the device or tool decides which faults it can inject.

    Returns
    -------
    dict
        One instance per kind that a key of ``text`` names, by kind.

    Raises
    ------
    ValueError
        An item that is not a known key with a value of its kind, a key given twice, or a value the kind
        refuses (its own message).
    """
    label = " or ".join(kind.NAME for kind in kinds)
    keys = {key: (kind, spec) for kind in kinds for key, spec in kind.KEYS.items()}
    whats = {spec.what for _, spec in keys.values()}
    form = f"KEY={whats.pop() if len(whats) == 1 else 'VALUE'}"
    values: dict[type, dict[str, object]] = {}
    seen: set[str] = set()
    for item in text.split(","):
        key, sep, value = item.partition("=")
        try:
            kind, spec = keys[key]
            parsed = spec.parse(value)
        except (KeyError, ValueError):
            parsed = None
        if not sep or key not in keys or parsed is None:
            raise ValueError(f"{label} fault {item!r} is not {form} with KEY one of {', '.join(keys)}") from None
        if key in seen:
            raise ValueError(f"{label} fault {key!r} is given twice")
        seen.add(key)
        values.setdefault(kind, {}).update(dict.fromkeys(spec.fields, parsed))
    return {kind: kind(**fields) for kind, fields in values.items()}
