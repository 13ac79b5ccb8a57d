"""A small IR of quantised operators: what a network is once it has been quantised.

A :class:`Graph` is a list of operators in execution order over named 2-D values.  Device operators are
the ones DX-1's commands express (:class:`QLinear`: GEMM + bias + ReLU + requantise, fused); everything
else is a :class:`HostOp` that runs on the host in numpy (softmax, layer norm, (de)quantisation).  The
split is explicit: :meth:`Graph.placement` says where each operator runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...model.tile import PostOpParams

__all__ = ["Value", "QLinear", "HostOp", "Graph", "Op"]

_DTYPES = ("int8", "int32", "float32")


@dataclass(frozen=True)
class Value:
    """A named 2-D tensor of the graph: ``rows x cols`` of ``dtype``, with its real ``scale`` if quantised."""

    name: str
    rows: int
    cols: int
    dtype: str
    scale: float | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"value {self.name!r}: dtype must be one of {', '.join(_DTYPES)}, not {self.dtype!r}")
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"value {self.name!r}: shape must be at least 1x1, not {self.rows}x{self.cols}")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)


@dataclass
class QLinear:
    """``out = requant(x @ weight.T + bias)``: torch.nn.Linear's layout, int8 in, int8 out (on the device).

    ``weight`` is int8 (N, K), ``bias`` int32 (N,) or ``None``.
    """

    name: str
    x: str
    out: str
    weight: np.ndarray
    bias: np.ndarray | None
    post: PostOpParams

    def __post_init__(self) -> None:
        if not isinstance(self.weight, np.ndarray) or self.weight.dtype != np.int8 or self.weight.ndim != 2:
            raise TypeError(f"{self.name}: weight must be a 2-D int8 array, not "
                            f"{getattr(self.weight, 'dtype', type(self.weight).__name__)}")
        if self.bias is not None and (not isinstance(self.bias, np.ndarray) or self.bias.dtype != np.int32
                                      or self.bias.shape != (self.weight.shape[0],)):
            raise TypeError(f"{self.name}: bias must be an int32 array of shape ({self.weight.shape[0]},)")

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x,)

    @property
    def on_device(self) -> bool:
        return True


@dataclass
class HostOp:
    """An operator DX-1's commands cannot express, run on the host: ``out = fn(*inputs)`` in numpy."""

    name: str
    inputs: tuple[str, ...]
    out: str
    fn: Callable[..., np.ndarray]
    kind: str = "host"

    @property
    def on_device(self) -> bool:
        return False


Op = QLinear | HostOp


@dataclass
class Graph:
    """Operators in execution order over named values; ``inputs`` come from the host, ``outputs`` go back."""

    values: dict[str, Value] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def add_value(self, value: Value) -> Value:
        if value.name in self.values:
            raise ValueError(f"the graph already has a value named {value.name!r}")
        self.values[value.name] = value
        return value

    def add_input(self, value: Value) -> Value:
        self.inputs.append(self.add_value(value).name)
        return value

    def add(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def placement(self) -> list[tuple[str, str]]:
        """``(operator name, "device" | "host")`` for every operator, in order."""
        return [(op.name, "device" if op.on_device else "host") for op in self.ops]

    def validate(self) -> None:
        """Every operator reads values that exist by then, writes a new value, and shapes agree.

        Raises
        ------
        ValueError
            Saying which operator and which value is wrong.
        """
        known = set(self.inputs)
        for name in self.inputs:
            if name not in self.values:
                raise ValueError(f"graph input {name!r} has no value")
        for op in self.ops:
            for name in op.inputs:
                if name not in known:
                    raise ValueError(f"{op.name} reads {name!r} before anything produces it")
            if op.out not in self.values:
                raise ValueError(f"{op.name} writes {op.out!r}, which the graph does not declare")
            if op.out in known:
                raise ValueError(f"{op.name} writes {op.out!r} a second time (values are written once)")
            if isinstance(op, QLinear):
                x, out = self.values[op.x], self.values[op.out]
                n, k = op.weight.shape
                if x.dtype != "int8" or out.dtype != "int8":
                    raise ValueError(f"{op.name}: a QLinear reads and writes int8, not {x.dtype} -> {out.dtype}")
                if x.cols != k or out.shape != (x.rows, n):
                    raise ValueError(f"{op.name}: x {x.rows}x{x.cols} @ weight.T {k}x{n} cannot give "
                                     f"{out.rows}x{out.cols}")
            known.add(op.out)
        for name in self.outputs:
            if name not in known:
                raise ValueError(f"graph output {name!r} is never produced")

    def consumers(self, name: str) -> list[int]:
        """Indices of the operators that read ``name``."""
        return [i for i, op in enumerate(self.ops) if name in op.inputs]

