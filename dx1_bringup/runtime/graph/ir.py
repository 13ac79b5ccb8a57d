"""A small IR of quantised operators: what a network is once it has been quantised.

A :class:`Graph` is a list of operators in execution order over named 2-D values.  The device operator
is :class:`QMatmul`: ``out = requant(sum_i A_i @ B_i + bias)``, one tiled GEMM whose terms accumulate
into the same accumulators before one POSTOP (bias, ReLU, requantise, fused), so a linear layer, a
residual add (a second term, ``x @ (c * I)``) or a product of two activations (attention's ``Q K^T`` and
``P V``) are each one operator.  Operands are :class:`View` s: a value, or a block of its rows and
columns (one attention head's columns, say), read and written in place with the value's row stride.
Values are activations (uploaded by the host or written by an operator) or constants (weights, resident
on the device).  A :class:`VectorKernel` runs an integer kernel (softmax, layer norm, GELU, transpose, ...) on the
tiles' vector units.  For tensor parallelism a QMatmul without a post-op keeps its int32 accumulators
(a partial sum), a :class:`Collective` sums or gathers a value across the ranks of a group in place (the
graph session hands it to the caller's collective runner), and a :class:`Requantize` runs the POSTOP on an
int32 value.
Everything the commands cannot express is a :class:`HostOp` that runs on the host
in numpy ((de)quantisation of float tensors); :meth:`Graph.placement` shows the split.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...spec import PostOpParams
from ..kernels import Kernel
from ..operands import BUS_BYTES

__all__ = ["Value", "View", "QMatmul", "Requantize", "Collective", "COLLECTIVE_KINDS", "HostOp", "VectorKernel",
           "Graph", "Op"]

_DTYPES = {"int8": np.int8, "int32": np.int32, "float32": np.float32}


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

    @property
    def numpy_dtype(self) -> type:
        return _DTYPES[self.dtype]


@dataclass(frozen=True)
class View:
    """Rows ``[row0, row0 + rows)`` and columns ``[col0, col0 + cols)`` of a value (default: all of it)."""

    value: str
    row0: int = 0
    rows: int | None = None
    col0: int = 0
    cols: int | None = None

    def shape(self, graph: Graph) -> tuple[int, int]:
        v = graph.values[self.value]
        return (v.rows - self.row0 if self.rows is None else self.rows,
                v.cols - self.col0 if self.cols is None else self.cols)

    def __str__(self) -> str:
        def span(first: int, count: int | None) -> str:
            return ":" if (first, count) == (0, None) else f"{first}:{'' if count is None else first + count}"

        if (self.row0, self.rows, self.col0, self.cols) == (0, None, 0, None):
            return self.value
        return f"{self.value}[{span(self.row0, self.rows)}, {span(self.col0, self.cols)}]"


@dataclass
class QMatmul:
    """``out = requant(sum_i a_i @ b_i + bias)`` on the device: int8 operands, int32 bias per column, int8 out.

    Without a post-op (``post=None``) ``out`` is int32: the accumulators ``sum_i a_i @ b_i + bias``, wrapping.
    """

    name: str
    terms: tuple[tuple[View, View], ...]
    out: View
    bias: np.ndarray | None
    post: PostOpParams | None

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.value for term in self.terms for v in term))

    @property
    def writes(self) -> str:
        return self.out.value

    @property
    def on_device(self) -> bool:
        return True


@dataclass
class Requantize:
    """``out = requant(x + bias)`` on the device: the POSTOP of an int32 value ``x`` (int32 bias per column) to int8.

    The POSTOP of a :class:`QMatmul` whose accumulators were summed elsewhere first (a row-parallel layer's
    partial sums, all-reduced), so the result is the one the whole product's fused POSTOP gives.
    """

    name: str
    x: View
    out: View
    bias: np.ndarray | None
    post: PostOpParams

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x.value,)

    @property
    def writes(self) -> str:
        return self.out.value

    @property
    def on_device(self) -> bool:
        return True


#: What a :class:`Collective` does to its value, as NCCL names it.
COLLECTIVE_KINDS = ("all_reduce", "reduce_scatter", "all_gather")


@dataclass
class Collective:
    """A collective over the ranks of a group on ``value``, in place in each rank's device memory.

    ``all_reduce``: every rank's value becomes the sum of every rank's (int32 wraps).  ``reduce_scatter``:
    rank ``r``'s ``r`` th block of rows becomes the sum of every rank's block (the rest is left as it was).
    ``all_gather``: every rank's value becomes the ranks' ``r`` th blocks of rows, each from rank ``r``.  The
    blocks are equal, so the ranks must divide the rows.  Neither host nor device operator: the graph session
    calls the collective runner it was given (a rank of a :class:`~dx1_bringup.collectives.DeviceGroup`, say)
    with the value's place in device memory.
    """

    name: str
    kind: str
    value: str

    def __post_init__(self) -> None:
        if self.kind not in COLLECTIVE_KINDS:
            raise ValueError(f"{self.name}: a collective is one of {', '.join(COLLECTIVE_KINDS)}, not {self.kind!r}")

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.value,)

    @property
    def writes(self) -> str:
        return self.value

    @property
    def on_device(self) -> bool:
        return False


@dataclass
class HostOp:
    """An operator DX-1's commands cannot express, run on the host: ``out = fn(*inputs)`` in numpy."""

    name: str
    inputs: tuple[str, ...]
    out: str
    fn: Callable[..., np.ndarray]

    @property
    def writes(self) -> str:
        return self.out

    @property
    def on_device(self) -> bool:
        return False


@dataclass
class VectorKernel:
    """``out = kernel(x)`` on the device's vector unit (softmax, layer norm, GELU, transpose, ...): int8 in and out.

    The kernel (:mod:`dx1_bringup.runtime.kernels`) is its int reference and its lowering; on a device
    without a vector unit the graph session runs the reference on the host instead.
    """

    name: str
    x: View
    out: View
    kernel: Kernel

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x.value,)

    @property
    def writes(self) -> str:
        return self.out.value

    @property
    def on_device(self) -> bool:
        return True


Op = QMatmul | Requantize | Collective | HostOp | VectorKernel


@dataclass
class Graph:
    """Operators in execution order over named values; ``inputs`` come from the host, ``outputs`` go back.

    ``consts`` holds the data of constant values (weights), uploaded once and kept on the device.
    """

    values: dict[str, Value] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
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

    def add_const(self, name: str, data: np.ndarray, scale: float | None = None) -> Value:
        """A constant 2-D int8 value (weights), resident on the device."""
        if not isinstance(data, np.ndarray) or data.dtype != np.int8 or data.ndim != 2:
            raise TypeError(f"constant {name!r} must be a 2-D int8 array, not "
                            f"{getattr(data, 'dtype', type(data).__name__)} {getattr(data, 'shape', '')}")
        value = self.add_value(Value(name, *data.shape, "int8", scale))
        self.consts[name] = np.ascontiguousarray(data)
        return value

    def kernel(self, name: str, x: str | View, out: str | View, kernel: Kernel) -> VectorKernel:
        """``out = kernel(x)`` as a :class:`VectorKernel`."""
        x = x if isinstance(x, View) else View(x)
        out = out if isinstance(out, View) else View(out)
        return self.add(VectorKernel(name, x, out, kernel))

    def add(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def linear(self, name: str, x: str | View, out: str | View, weight: np.ndarray, bias: np.ndarray | None,
               post: PostOpParams) -> QMatmul:
        """``out = requant(x @ weight.T + bias)`` (torch.nn.Linear's layout, weight int8 (N, K)) as a QMatmul."""
        if not isinstance(weight, np.ndarray) or weight.dtype != np.int8 or weight.ndim != 2:
            raise TypeError(f"{name}: weight must be a 2-D int8 array, not "
                            f"{getattr(weight, 'dtype', type(weight).__name__)}")
        self.add_const(f"{name}.weight", weight.T)
        x = x if isinstance(x, View) else View(x)
        out = out if isinstance(out, View) else View(out)
        return self.add(QMatmul(name, ((x, View(f"{name}.weight")),), out, bias, post))

    def placement(self) -> list[tuple[str, str]]:
        """``(operator name, "device" | "host")`` for every operator, in order."""
        return [(op.name, "device" if op.on_device else "host") for op in self.ops]

    def producers(self, name: str) -> list[int]:
        """Indices of the operators that write (part of) ``name``."""
        return [i for i, op in enumerate(self.ops) if op.writes == name]

    def validate(self) -> None:
        """Values exist when read, shapes agree, and views can be read and written in place.

        Raises
        ------
        ValueError
            Saying which operator and which value is wrong.
        """
        known = set(self.inputs) | set(self.consts)
        for name in [*self.inputs, *self.consts]:
            if name not in self.values:
                raise ValueError(f"graph input or constant {name!r} has no value")
        for op in self.ops:
            for name in op.inputs:
                if name not in known:
                    raise ValueError(f"{op.name} reads {name!r} before anything produces it")
            if op.writes not in self.values:
                raise ValueError(f"{op.name} writes {op.writes!r}, which the graph does not declare")
            if op.writes in self.consts or op.writes in self.inputs:
                raise ValueError(f"{op.name} writes {op.writes!r}, which is a graph input or a constant")
            if isinstance(op, QMatmul):
                self._check_matmul(op)
            elif isinstance(op, VectorKernel):
                self._check_kernel(op)
            elif isinstance(op, Requantize):
                self._check_requantize(op)
            elif isinstance(op, Collective):
                if self.values[op.value].dtype not in ("int32", "int8"):
                    raise ValueError(f"{op.name}: a collective moves int32 or int8, not {self.values[op.value].dtype}")
            elif op.writes in known:
                raise ValueError(f"{op.name} writes {op.writes!r} a second time (a host operator writes a whole value)")
            known.add(op.writes)
        for name in self.outputs:
            if name not in known:
                raise ValueError(f"graph output {name!r} is never produced")

    def _check_view(self, op: Op, view: View, role: str, dtype: str = "int8") -> tuple[int, int]:
        if view.value not in self.values:
            raise ValueError(f"{op.name}: {role} reads {view.value!r}, which the graph does not declare")
        v = self.values[view.value]
        rows, cols = view.shape(self)
        if v.dtype != dtype:
            raise ValueError(f"{op.name}: {role} {view} must be {dtype}, not {v.dtype}")
        if not (0 <= view.row0 and rows >= 1 and view.row0 + rows <= v.rows
                and 0 <= view.col0 and cols >= 1 and view.col0 + cols <= v.cols):
            raise ValueError(f"{op.name}: {role} {view} is not inside {v.name} ({v.rows}x{v.cols})")
        if view.col0 % BUS_BYTES:
            raise ValueError(f"{op.name}: {role} {view} must start at a column that is a multiple of {BUS_BYTES}")
        # The tiling compiler reads and writes whole padded chunks: a view's last chunk must be whole
        # or be the value's own zero padding.
        if cols % BUS_BYTES and view.col0 + cols != v.cols:
            raise ValueError(f"{op.name}: {role} {view} must have a multiple of {BUS_BYTES} columns or end at "
                             f"{v.name}'s last column")
        return rows, cols

    def _check_matmul(self, op: QMatmul) -> None:
        if not op.terms:
            raise ValueError(f"{op.name}: a QMatmul needs at least one term")
        m, n = self._check_view(op, op.out, "out", "int8" if op.post is not None else "int32")
        for i, (a, b) in enumerate(op.terms):
            am, ak = self._check_view(op, a, f"term {i} A")
            bk, bn = self._check_view(op, b, f"term {i} B")
            if am != m or bn != n or ak != bk:
                raise ValueError(f"{op.name}: term {i} multiplies {a} ({am}x{ak}) by {b} ({bk}x{bn}), which cannot "
                                 f"give {op.out} ({m}x{n})")
            if bk % BUS_BYTES and b.value not in self.consts:
                raise ValueError(f"{op.name}: term {i} B {b} has {bk} rows; a B operand that is not a constant "
                                 f"needs a multiple of {BUS_BYTES} (its padding rows are not zero)")
        if op.bias is not None and (not isinstance(op.bias, np.ndarray) or op.bias.dtype != np.int32
                                    or op.bias.shape != (n,)):
            raise ValueError(f"{op.name}: bias must be an int32 array of shape ({n},)")

    def _check_requantize(self, op: Requantize) -> None:
        shape = self._check_view(op, op.x, "x", "int32")
        if self._check_view(op, op.out, "out") != shape:
            raise ValueError(f"{op.name}: out {op.out} must have the shape of x {op.x} ({shape[0]}x{shape[1]})")
        if op.bias is not None and (not isinstance(op.bias, np.ndarray) or op.bias.dtype != np.int32
                                    or op.bias.shape != (shape[1],)):
            raise ValueError(f"{op.name}: bias must be an int32 array of shape ({shape[1]},)")

    def _check_kernel(self, op: VectorKernel) -> None:
        rows, cols = self._check_view(op, op.x, "x")
        want = op.kernel.out_shape(rows, cols)
        if self._check_view(op, op.out, "out") != want:
            raise ValueError(f"{op.name}: {op.kernel.kind} of {op.x} ({rows}x{cols}) is {want[0]}x{want[1]}; "
                             f"{op.out} is {op.out.shape(self)[0]}x{op.out.shape(self)[1]}")
