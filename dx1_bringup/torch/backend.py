"""The ``"dx1"`` torch.compile backend: DX-1 runs the subgraphs it can, as whole command streams.

``torch.compile(model, backend="dx1")`` hands the backend each FX graph Dynamo captures.  The backend
partitions it with torch.fx's ``CapabilityBasedPartitioner``: connected ``dx1::qlinear`` nodes that DX-1
can take (int8 operands, constant POSTOP parameters) and the vector unit's ``dx1::qsoftmax``,
``dx1::qlayer_norm``, ``dx1::qgelu`` and ``dx1::qsilu`` (int8, constant scales, whole local rows, a device with a vector
unit) become one submodule, which runs as one graph-runtime
session on the current device (:func:`~dx1_bringup.torch.context.device`): weights uploaded once and kept
resident, activations planned in device memory, one command stream per tile.  Dynamic shapes (Dynamo makes
the batch dimension dynamic when a second batch size arrives; ``dynamic=True`` makes every size dynamic)
stay on DX-1: a subgraph plans its session for each call's shapes and keeps it while they repeat, so a
new batch size plans a new session.

Everything else runs on the CPU as PyTorch ops; a ``dx1::qlinear`` node DX-1 cannot take runs the PyTorch
integer reference on the CPU instead, with a :class:`Dx1FallbackWarning` that says why, and so does a
graph that has float ``linear``/matmul nodes but nothing for DX-1 (they must be quantised first:
:func:`~dx1_bringup.torch.quantize.quantize_mlp`).  Where every node ran, and why, is in the compiled
module's ``dx1_placement`` (also logged on the ``dx1_bringup.torch`` logger); to keep the compiled modules,
compile with a :class:`Dx1Backend` instance (``backend=Dx1Backend()``) and read its ``compiled``.
"""

from __future__ import annotations

import logging
import operator
import warnings
from dataclasses import dataclass

import torch
from torch._dynamo.backends.registry import register_backend
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ..runtime.graph import Graph, GraphSession, Value
from ..spec import PostOpParams
from .context import _on_close, current_device
from .ops import KERNEL_OPS, kernel_of, vector_kernel_reference
from .reference import qlinear_reference

__all__ = ["dx1_backend", "Dx1Backend", "Dx1FallbackWarning", "Placement", "Dx1Subgraph"]

log = logging.getLogger("dx1_bringup.torch")


class Dx1FallbackWarning(UserWarning):
    """Work that could run on DX-1 runs on the CPU instead; the message says which node and why."""


@dataclass(frozen=True)
class Placement:
    """Where one FX node runs: ``"dx1"`` (inside subgraph ``subgraph``) or ``"cpu"``, with the reason."""

    node: str
    target: str
    where: str
    subgraph: str | None
    reason: str


def _is_qlinear(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in (torch.ops.dx1.qlinear.default, torch.ops.dx1.qlinear)


def _kernel_op(node: torch.fx.Node) -> str | None:
    """``qsoftmax``, ``qlayer_norm`` or ``qgelu`` for a call of that vector-kernel operator, else ``None``."""
    if node.op != "call_function":
        return None
    for name, op in KERNEL_OPS.items():
        if node.target in (op, op.default):
            return name
    return None


def _meta(node) -> torch.Tensor | None:
    if not isinstance(node, torch.fx.Node):
        return None
    return node.meta.get("val", node.meta.get("example_value"))


def unsupported_reason(node: torch.fx.Node) -> str | None:
    """Why DX-1 cannot run this ``dx1::qlinear`` node; ``None`` when it can."""
    x, w, bias, mult, shift, relu = (list(node.args) + [None] * 6)[:6]
    for name, value in (("mult", mult), ("shift", shift), ("relu", relu)):
        if isinstance(value, torch.fx.Node):
            return f"{name} is computed at run time; DX-1 takes it as a constant in the POSTOP command"
    try:
        PostOpParams(mult, shift, bool(relu))
    except (TypeError, ValueError) as exc:
        return f"the POSTOP cannot take these parameters: {exc}"
    if isinstance(w, torch.fx.Node) and _is_qlinear(w):
        return "w is computed by another dx1::qlinear; DX-1 would need it transposed in device memory"
    for name, arg, dtype in (("x", x, torch.int8), ("w", w, torch.int8), ("bias", bias, torch.int32)):
        if arg is None and name == "bias":
            continue
        val = _meta(arg)
        if val is None:
            return f"{name} has no tensor metadata"
        if val.dtype != dtype or val.dim() != (1 if name == "bias" else 2):
            return f"{name} is {val.dtype} with {val.dim()} dimensions"
    # Dynamic sizes are fine: a subgraph plans its command streams for each call's shapes.
    return None


def kernel_unsupported_reason(node: torch.fx.Node) -> str | None:
    """Why DX-1 cannot run this vector-kernel node (``dx1::qsoftmax`` ...); ``None`` when it can."""
    name = _kernel_op(node)
    x, *args = node.args
    consts = args if name != "qlayer_norm" else [args[2], args[3], args[4]]
    if any(isinstance(a, torch.fx.Node) for a in consts):
        return f"a scalar argument of dx1::{name} is computed at run time; DX-1 takes it as a constant"
    val = _meta(x)
    if val is None or val.dtype != torch.int8 or val.dim() != 2:
        return "x is not a 2-D int8 tensor"
    dev = current_device()
    if not dev.caps.vector:
        return "the device has no vector unit (FEATURES.vector is 0)"
    cols = val.shape[1]
    if not isinstance(cols, int):
        return "x's last dimension is dynamic; the kernel is planned for a fixed row width"
    rows = val.shape[0] if isinstance(val.shape[0], int) else cols
    try:
        if name == "qlayer_norm":
            w = _meta(args[0])
            if w is None or w.shape != (cols,):
                return "weight is not a vector of x's width"
            kernel = kernel_of(name, (torch.ones(cols).numpy(), torch.zeros(cols).numpy(), *consts))
        else:
            kernel = kernel_of(name, tuple(args))
        kernel.check(rows, cols, dev.caps.array)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


#: Float operators that DX-1 could run once quantised, and what to do about them.
_FLOAT_MATMULS = {"linear", "matmul", "mm", "addmm", "bmm"}
_QUANTISE_FIRST = ("a float {op}: DX-1 multiplies int8 only; quantise first: dx1_bringup.torch.quantize_mlp(model, "
                   "calibration) turns an nn.Sequential of Linear (+ ReLU) layers into a QuantizedMLP whose layers "
                   "are dx1::qlinear, or call torch.ops.dx1.qlinear on int8 tensors")


_QUANTISE_KERNEL = ("a float {op}: DX-1's vector unit takes int8 only; quantise it first: torch.ops.dx1.{q} on the "
                    "int8 input and its scale")
#: Float operators the vector unit runs once quantised, and the operator that does.
_FLOAT_KERNELS = {"softmax": "qsoftmax", "layer_norm": "qlayer_norm", "gelu": "qgelu", "silu": "qsilu"}


class _Support(OperatorSupportBase):
    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if _kernel_op(node):
            return True  # the ones DX-1 cannot take were moved to the CPU reference already
        return _is_qlinear(node) and unsupported_reason(node) is None


class Dx1Subgraph(torch.nn.Module):
    """A partition of connected ``dx1::qlinear`` nodes, run as one graph-runtime session per call.

    The session (weights resident, arena planned) is kept while the device, the weight tensors and the
    activations' shapes stay the same, so repeated calls upload only the activations; a new batch size
    plans a new session (and uploads the weights again).
    """

    def __init__(self, name: str, gm: torch.fx.GraphModule):
        super().__init__()
        self.name, self.gm = name, gm
        self._session: GraphSession | None = None
        self._key: tuple | None = None
        self.calls = 0
        _on_close(self)

    def device_closed(self, dev) -> None:
        """Drop the session if it lives on ``dev``, which a :func:`~dx1_bringup.torch.context.device` closed."""
        if self._session is not None and self._session.device is dev:
            self._session = None
            self._key = None

    def _build(self, args: tuple[torch.Tensor, ...]) -> tuple[Graph, list[str], bool]:
        """The partition as a graph-runtime graph, its activation inputs, and whether it returns a tuple."""
        env: dict[torch.fx.Node, torch.Tensor] = {}
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, args, strict=True):
            env[node] = value
        g = Graph()
        names: dict[torch.fx.Node, str] = {}
        inputs: list[str] = []
        for node in self.gm.graph.nodes:
            kind = _kernel_op(node)
            if kind:
                x, *args = node.args
                if x not in names:
                    names[x] = x.name
                    g.add_input(Value(x.name, *env[x].shape, "int8"))
                    inputs.append(x.name)
                args = [env[a].double().numpy() if isinstance(a, torch.fx.Node) else a for a in args]
                names[node] = node.name
                g.add_value(Value(node.name, *env[x].shape, "int8"))
                g.kernel(node.name, names[x], node.name, kernel_of(kind, tuple(args)))
                env[node] = torch.empty(env[x].shape, dtype=torch.int8)
                continue
            if not _is_qlinear(node):
                continue
            x, w, bias, mult, shift, relu = node.args
            if x not in names:
                names[x] = x.name
                g.add_input(Value(x.name, *env[x].shape, "int8"))
                inputs.append(x.name)
            weight = env[w].contiguous().numpy()
            names[node] = node.name
            g.add_value(Value(node.name, env[x].shape[0], weight.shape[0], "int8"))
            bias_q = None if bias is None else env[bias].contiguous().numpy()
            g.linear(node.name, names[x], node.name, weight, bias_q, PostOpParams(mult, shift, bool(relu)))
            env[node] = torch.empty((env[x].shape[0], weight.shape[0]), dtype=torch.int8)
        (outs,) = [n.args[0] for n in self.gm.graph.nodes if n.op == "output"]
        is_tuple = isinstance(outs, (tuple, list))
        g.outputs = [names[n] for n in (outs if is_tuple else [outs])]
        return g, inputs, is_tuple

    def _key_of(self, args: tuple, inputs: list[str]) -> tuple:
        """What the session depends on: the device, the weights' storage and contents, the inputs' shapes."""
        key: list = [id(current_device())]
        for node, a in zip((n for n in self.gm.graph.nodes if n.op == "placeholder"), args, strict=True):
            if not isinstance(a, torch.Tensor):
                continue  # a symbolic size of a dynamic batch: the inputs' shapes carry it
            key.append(tuple(a.shape) if node.name in inputs else (a.data_ptr(), a._version, tuple(a.shape), a.dtype))
        return tuple(key)

    def forward(self, *args: torch.Tensor):
        self.calls += 1
        graph, inputs, is_tuple = self._build(args)
        key = self._key_of(args, inputs)
        if key != self._key:
            if self._session is not None:
                self._session.close()
            self._session = GraphSession(current_device(), graph)
            self._key = key
        by_name = {n.name: a for n, a in zip((n for n in self.gm.graph.nodes if n.op == "placeholder"), args,
                                             strict=True)}
        results, self.last_stats = self._session.run({name: by_name[name].contiguous().numpy() for name in inputs})
        tensors = [torch.from_numpy(results[name]) for name in graph.outputs]
        return tuple(tensors) if is_tuple else tensors[0]


def _placement(gm: torch.fx.GraphModule, subgraphs: dict[str, Dx1Subgraph],
               fallbacks: dict[str, str]) -> list[Placement]:
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target in subgraphs:
            for inner in subgraphs[node.target].gm.graph.nodes:
                if _is_qlinear(inner):
                    out.append(Placement(inner.name, "dx1::qlinear", "dx1", node.target,
                                         "int8 qlinear with constant POSTOP parameters"))
                elif _kernel_op(inner):
                    out.append(Placement(inner.name, f"dx1::{_kernel_op(inner)}", "dx1", node.target,
                                         "int8 kernel on the vector unit"))
        elif node.op in ("call_function", "call_method", "call_module") and node.target is not operator.getitem:
            target = getattr(node.target, "__name__", str(node.target))
            if _kernel_op(node):
                target = f"dx1::{_kernel_op(node)}"
            if target in _FLOAT_MATMULS:
                default = _QUANTISE_FIRST.format(op=target)
            elif target in _FLOAT_KERNELS:
                default = _QUANTISE_KERNEL.format(op=target, q=_FLOAT_KERNELS[target])
            else:
                default = "DX-1's commands have no such operator"
            out.append(Placement(node.name, target, "cpu", None, fallbacks.get(node.name, default)))
    return out


def _warn_fallbacks(placement: list[Placement], fallbacks: dict[str, str]) -> None:
    """One :class:`Dx1FallbackWarning` for what could have run on DX-1 but runs on the CPU, saying why."""
    cpu = [p for p in placement if p.node in fallbacks]
    if not any(p.where == "dx1" for p in placement):
        cpu += [p for p in placement if p.target in _FLOAT_MATMULS]
    by_reason: dict[str, list[Placement]] = {}
    for p in cpu:
        by_reason.setdefault(p.reason, []).append(p)
    if by_reason:
        warnings.warn("torch.compile(backend='dx1'): " + "; ".join(
            f"{', '.join(f'{p.node} ({p.target})' for p in ps)} run{'s' if len(ps) == 1 else ''} on the CPU, not on "
            f"DX-1: {reason}" for reason, ps in by_reason.items()), Dx1FallbackWarning, stacklevel=2)


def dx1_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
    """Partition ``gm``: supported ``dx1::qlinear`` subgraphs on DX-1, everything else on the CPU.

    The backend registered as ``"dx1"``.  It keeps nothing: the returned module (with ``dx1_placement``
    and ``dx1_subgraphs``) lives as long as Dynamo's cache holds it; :class:`Dx1Backend` keeps them.

    Warns
    -----
    Dx1FallbackWarning
        A ``dx1::qlinear`` runs on the CPU integer reference (the message says why), or nothing runs on
        DX-1 while float ``linear``/matmul nodes are there (they need quantising first).
    """
    fallbacks: dict[str, str] = {}
    for node in gm.graph.nodes:
        if _is_qlinear(node):
            reason = unsupported_reason(node)
            if reason is not None:
                fallbacks[node.name] = f"CPU integer reference: {reason}"
                node.target = qlinear_reference
        elif _kernel_op(node):
            reason = kernel_unsupported_reason(node)
            if reason is not None:
                fallbacks[node.name] = f"CPU integer reference: {reason}"
                node.args = (_kernel_op(node), *node.args)
                node.target = vector_kernel_reference
    gm.recompile()
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions(), prefix="dx1_subgraph_")
    subgraphs: dict[str, Dx1Subgraph] = {}
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("dx1_subgraph_"):
            subgraphs[node.target] = Dx1Subgraph(node.target, getattr(fused, node.target))
            setattr(fused, node.target, subgraphs[node.target])
    fused.dx1_placement = _placement(fused, subgraphs, fallbacks)
    fused.dx1_subgraphs = subgraphs
    for p in fused.dx1_placement:
        log.info("%-4s %-28s %s%s", p.where, p.node, p.target, f" ({p.reason})" if p.where == "cpu" else "")
    _warn_fallbacks(fused.dx1_placement, fallbacks)
    return fused


register_backend(name="dx1")(dx1_backend)


class Dx1Backend:
    """The ``"dx1"`` backend that keeps what it compiled: ``torch.compile(model, backend=Dx1Backend())``.

    Attributes
    ----------
    compiled:
        Every graph module this instance returned, newest last; each has ``dx1_placement`` (a
        :class:`Placement` a node) and ``dx1_subgraphs``.  It lives as long as the instance.
    """

    def __init__(self) -> None:
        self.compiled: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
        fused = dx1_backend(gm, example_inputs)
        self.compiled.append(fused)
        return fused

    def __repr__(self) -> str:
        return f"Dx1Backend({len(self.compiled)} graphs compiled)"
