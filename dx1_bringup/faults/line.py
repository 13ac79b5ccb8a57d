"""Faults of a serial line: bits flipped, bytes dropped or delivered twice, seeded so a failure replays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .base import FaultKey, FaultRng, flip_bit, natural, probability

__all__ = ["LINE_SCOPES", "LineFaults"]

#: Which traffic line faults hit: every byte, or only the CRC-checked frames (see :class:`LineFaults`).
LINE_SCOPES = ("all", "bursts")


def _scope(text: str) -> str:
    if text not in LINE_SCOPES:
        raise ValueError(f"line scope must be one of {', '.join(LINE_SCOPES)}, not {text!r}")
    return text


@dataclass
class LineFaults:
    """Faults injected into the bytes of one direction (or both) of a serial line.

    Parameters
    ----------
    bit_error_rate:
        Probability that a bit is flipped (at most one flip per byte is drawn: exact enough below 1e-2).
    drop_rate, dup_rate:
        Probability per byte that it is lost, or delivered twice.
    seed:
        Seed of the fault sequence.
    scope:
        ``"all"``: every byte; ``"bursts"``: only the bytes of CRC-checked frames (bursts and CRC register
        frames) after their command byte, and their answers: everything but UARTBone.  The scope is for
        whoever decides which bytes go through :meth:`apply` (``dx1_bringup.model.bridge.ModelBridge``).

    Attributes
    ----------
    flipped, dropped, duplicated:
        Faults injected so far.
    """

    bit_error_rate: float = 0.0
    drop_rate: float = 0.0
    dup_rate: float = 0.0
    seed: int = 0
    scope: str = "all"
    flipped: int = 0
    dropped: int = 0
    duplicated: int = 0
    _rng: FaultRng = field(init=False, repr=False)

    #: Kind name in fault-string messages.
    NAME: ClassVar[str] = "line"
    #: Fault-string keys (see :func:`~dx1_bringup.faults.parse_faults`): ``line-rate`` sets all three rates.
    KEYS: ClassVar[dict[str, FaultKey]] = {
        "line-rate": FaultKey(("bit_error_rate", "drop_rate", "dup_rate"), probability, "RATE"),
        "line-seed": FaultKey(("seed",), natural),
        "line-scope": FaultKey(("scope",), _scope, "SCOPE"),
    }

    def __post_init__(self) -> None:
        if self.scope not in LINE_SCOPES:
            raise ValueError(f"fault scope must be 'all' or 'bursts', not {self.scope!r}")
        self._rng = FaultRng(self.seed)
        self._p_flip = 1.0 - (1.0 - self.bit_error_rate) ** 8

    @classmethod
    def uniform(cls, rate: float, seed: int = 0, scope: str = "all") -> LineFaults:
        """Bits flipped at ``rate``, and bytes dropped and repeated at ``rate`` each (``line-rate=RATE``)."""
        return cls(rate, rate, rate, seed=seed, scope=scope)

    @property
    def active(self) -> bool:
        return bool(self.bit_error_rate or self.drop_rate or self.dup_rate)

    def apply(self, data: bytes) -> bytes:
        """``data`` as the faulty line delivers it."""
        if not self.active:
            return data
        out = bytearray()
        rng = self._rng
        for b in data:
            r = rng.uniform()
            if r < self._p_flip:
                self.flipped += 1
                out.append(flip_bit(b, rng.bit(8)))
            elif r < self._p_flip + self.drop_rate:
                self.dropped += 1
            elif r < self._p_flip + self.drop_rate + self.dup_rate:
                self.duplicated += 1
                out += bytes((b, b))
            else:
                out.append(b)
        return bytes(out)
