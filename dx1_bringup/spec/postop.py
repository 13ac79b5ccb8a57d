"""The post-op's parameters as one value: the contract between whoever builds a POSTOP and whoever runs it.

The runtime, the golden model, the gateware's tests and the PyTorch backend all pass requantisation
settings around as :class:`PostOpParams`; it lives in the spec because it is the POSTOP command's
``mult``, ``shift`` and ``relu`` fields, checked against their widths and limits here.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from .commands import COMMANDS, POSTOP_MAX_SHIFT, Opcode

__all__ = ["PostOpParams"]

_MULT_BITS = COMMANDS[Opcode.POSTOP].field("mult").width


@dataclass(frozen=True)
class PostOpParams:
    """The requantisation a POSTOP applies: ``mult``, ``shift`` and ``relu``, checked against the spec.

    ``mult`` must fit POSTOP's unsigned ``mult`` field and ``shift`` be 0 to
    :data:`POSTOP_MAX_SHIFT` (the spec's limit, below what its 6-bit field holds).  The
    bias is not a parameter but an operand (an accumulator row, or the bias
    vector of a GEMM), so it travels beside this value.

    Raises
    ------
    TypeError
        ``mult`` or ``shift`` is not an integer, or ``relu`` not a bool.
    ValueError
        ``mult`` or ``shift`` is outside its range.
    """

    mult: int
    shift: int
    relu: bool = False

    def __post_init__(self) -> None:
        for name in ("mult", "shift"):
            value = getattr(self, name)
            try:
                if isinstance(value, bool):
                    raise TypeError
                object.__setattr__(self, name, operator.index(value))
            except TypeError:
                raise TypeError(f"post-op {name} must be an integer, not {value!r}") from None
        numpy_bool = type(self.relu).__module__ == "numpy" and type(self.relu).__name__ in ("bool", "bool_")
        if not (isinstance(self.relu, bool) or numpy_bool):
            raise TypeError(f"post-op relu must be a bool, not {self.relu!r}")
        object.__setattr__(self, "relu", bool(self.relu))
        if not 0 <= self.mult < 1 << _MULT_BITS:
            raise ValueError(f"post-op mult must fit in {_MULT_BITS} bits unsigned, not {self.mult!r}")
        if not 0 <= self.shift <= POSTOP_MAX_SHIFT:
            raise ValueError(f"post-op shift must be from 0 to {POSTOP_MAX_SHIFT}, not {self.shift!r}")

    @classmethod
    def from_command(cls, fields: dict[str, int]) -> PostOpParams:
        """The parameters of a decoded POSTOP command (its ``mult``, ``shift`` and relu flag)."""
        relu = fields["flags"] >> COMMANDS[Opcode.POSTOP].flag_bit("relu") & 1
        return cls(fields["mult"], fields["shift"], bool(relu))
