"""The argument types of every ``dx1`` command, defined once.

Each type is an argparse ``type=`` callable: it returns the parsed value or raises
:class:`argparse.ArgumentTypeError` with a sentence saying what was expected and what was given, which
argparse prints after the option's name (``argument --seed: must be 0 or more, not -1``) and exits 2.
Integers are decimal with optional ``_`` between digits (``10_000``), as Python writes them; counts of
bytes also take ``0x`` hex.  A device string is checked when it is parsed, before a command does any
work: one that no backend opens, or with options its backend refuses, is refused then (an absent device
still fails when the command opens it).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "integer", "positive", "positive_or_auto", "seed", "seconds", "fraction", "port", "byte_count", "device", "devices",
    "device_group", "MAX_GROUP", "names", "integers", "writable_file", "add_shape",
]

_DECIMAL = re.compile(r"[+-]?\d+(_\d+)*")


def integer(text: str) -> int:
    """A whole number: decimal digits, optionally signed, ``_`` allowed between digits (``10_000``)."""
    if not _DECIMAL.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}")
    return int(text)


def positive(text: str) -> int:
    """A whole number of at least 1 (a count or a size)."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_or_auto(text: str) -> int | None:
    """A count of at least 1, or ``auto`` (None: the command works it out, e.g. as many as fit)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be at least 1 or 'auto', not {text!r}") from None


def seed(text: str) -> int:
    """A random seed: a whole number of 0 or more."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _positive_real(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be {what} > 0, not {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds greater than 0."""
    return _positive_real(text, "a number of seconds")


def positive_number(text: str) -> float:
    """A finite number greater than 0."""
    return _positive_real(text, "a number")


def fraction(below: float) -> Callable[[str], float]:
    """A type: a number from 0 up to (not including) ``below``, for a rate."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 <= value < below:
            raise argparse.ArgumentTypeError(f"must be a number from 0 to {below:g}, not {text!r}")
        return value
    return parse


def port(text: str) -> int:
    """A TCP port on 127.0.0.1: 1 to 65535, or 0 for any free one."""
    value = integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 (any free port) to 65535, not {value}")
    return value


def byte_count(multiple: int) -> Callable[[str], int]:
    """A type: a number of bytes, decimal or ``0x`` hex, a positive multiple of ``multiple``."""
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of bytes (decimal or 0x hex), not {text!r}") from None
        if value < multiple or value % multiple:
            raise argparse.ArgumentTypeError(f"must be a positive multiple of {multiple}, not {value}")
        return value
    return parse


def device(text: str) -> str:
    """A device string that a registered backend opens (``model``, ``sim:tiles=4``, ``serial:URL``, ...), checked
    whole by :func:`dx1_driver.check_device` (malformed options too), without opening anything."""
    from dx1_driver import check_device

    try:
        check_device(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def devices(text: str) -> list[str]:
    """At least two device strings separated by commas, the reference first, each as :func:`device` checks it."""
    listed = [n.strip() for n in text.split(",")]
    if len(listed) < 2 or not all(listed):
        raise argparse.ArgumentTypeError(f"must name at least two devices separated by commas (for example "
                                         f"model,sim), not {text!r}")
    return [device(n) for n in listed]


#: The most ranks a device group may have (each is an open device, and a ``sim`` rank a simulator process).
MAX_GROUP = 64

_REPEAT = re.compile(r"(.*)\*(\d+)")


def _starts_a_device(text: str) -> bool:
    from dx1_driver.registry import find_backend

    match = _REPEAT.fullmatch(text.strip())
    return find_backend((match.group(1) if match else text).strip()) is not None


def device_group(text: str) -> list[str]:
    """A group device string: device strings separated by commas, each optionally ``*N`` (``N`` ranks of it).

    ``model*4`` is four golden models, ``sim*2,model`` two simulators and a model, ``model,model,sim`` three ranks.
    Device strings have commas of their own (``model:tiles=2,banks=4``, ``model:stuck-bit=5,stuck-at=0``): a
    comma starts the next rank only where a registered backend opens what follows it, so
    ``model:tiles=2,banks=4*2,sim`` is two ``model:tiles=2,banks=4`` ranks and a ``sim``.  Returns one device string
    per rank, in rank order, each checked as :func:`device` checks it.
    """
    pieces = [p.strip() for p in text.split(",")]
    items: list[str] = []
    for piece in pieces:
        if items and not _starts_a_device(piece):
            items[-1] += "," + piece
        else:
            items.append(piece)
    ranks: list[str] = []
    for item in items:
        match = _REPEAT.fullmatch(item)
        name, count = (match.group(1).strip(), int(match.group(2))) if match else (item, 1)
        if not name or count < 1:
            raise argparse.ArgumentTypeError(f"must be device strings separated by commas, each optionally *N with N "
                                             f"at least 1 (for example model*4 or sim*2,model), not {text!r}")
        try:
            ranks += [device(name)] * count
        except argparse.ArgumentTypeError as e:
            if "," not in name:
                raise
            why = (f"{e} (in a group, a comma starts the next rank only before a device string that a backend "
                   f"opens, so {name!r} was read as one device)")
            raise argparse.ArgumentTypeError(why) from None
        if len(ranks) > MAX_GROUP:
            raise argparse.ArgumentTypeError(f"a group has at most {MAX_GROUP} ranks, not {len(ranks)} or more "
                                             f"({text!r})")
    return ranks


def names(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """A type: a comma-separated list of some of ``allowed``, in the order given."""
    def parse(text: str) -> list[str]:
        listed = [t.strip() for t in text.split(",") if t.strip()]
        if not listed or any(n not in allowed for n in listed):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of some of {', '.join(allowed)}, "
                                             f"not {text!r}")
        return listed
    return parse


def integers(what: str, accept: Callable[[int], bool], *, ordered: bool = False) -> Callable[[str], list[int]]:
    """A type: comma-separated whole numbers, each one ``accept`` takes (``what`` says which in the message).

    With ``ordered``, the list comes back sorted and without repeats.
    """
    def parse(text: str) -> list[int]:
        try:
            values = [integer(t) for t in text.split(",")]
        except argparse.ArgumentTypeError:
            values = []
        if not values or not all(accept(v) for v in values):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, not {text!r}")
        return sorted(set(values)) if ordered else values
    return parse


def writable_file(text: str) -> str:
    """A file that can be created or overwritten: not a folder, in an existing folder this process may write."""
    folder = Path(text).parent
    if Path(text).is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text} (it must be a file in an existing writable folder)")
    return text


def add_shape(parser: argparse.ArgumentParser, default: tuple[int, int, int] | None = None) -> None:
    """The GEMM shape every command takes the same way: positionals ``M K N`` (``A`` is M x K, ``B`` K x N).

    With a ``default`` shape the three may be left out (all of them, or the last ones).
    """
    what = {"m": "rows of A and C", "k": "the reduction length: columns of A, rows of B", "n": "columns of B and C"}
    for i, (dest, text) in enumerate(what.items()):
        if default is None:
            parser.add_argument(dest, metavar=dest.upper(), type=positive, help=text)
        else:
            parser.add_argument(dest, metavar=dest.upper(), type=positive, nargs="?", default=default[i],
                                help=f"{text} (default {default[i]})")
