"""PyTorch custom operators that run on DX-1: ``torch.ops.dx1.qlinear`` and the vector unit's kernels.

``dx1::qlinear(x int8 [M, K], w int8 [N, K], bias int32 [N] or None, mult, shift, relu) -> int8 [M, N]`` is
``requant(x @ w.T + bias)`` in torch.nn.Linear's weight layout, computed on the current DX-1 device
(:func:`~dx1_bringup.torch.context.device`) by the tiling compiler.  It has a fake-tensor registration, so
it traces under torch.compile and passes ``torch.library.opcheck``; it has no autograd formula (the
inputs are integers).  Anything DX-1 cannot take is refused with a message that says what and why.

The vector unit's kernels (:mod:`dx1_bringup.runtime.kernels`), int8 in and out, each its integer math
bit for bit (on a device without a vector unit, its int reference on the CPU):

* ``dx1::qsoftmax(x int8 [M, N], scale, groups, causal) -> int8 [M, N]``: softmax of ``x * scale`` over
  each of ``groups`` blocks of a row (attention heads side by side), out at scale 1/127;
* ``dx1::qlayer_norm(x int8 [M, N], weight, bias, eps, scale, out_scale) -> int8 [M, N]``;
* ``dx1::qgelu(x int8 [M, N], scale, out_scale) -> int8 [M, N]``: GELU (erf) by a table of every input;
* ``dx1::qsilu(x int8 [M, N], scale, out_scale) -> int8 [M, N]``: SiLU (x sigmoid(x)) the same way.

N must be a multiple of the array size (8 on dx1-mini).
"""

# No `from __future__ import annotations`: custom_op reads the signature's annotations at run time.
import numpy as np
import torch

from ..runtime.gemm_run import run_gemm
from ..runtime.graph import Graph, GraphSession, Value
from ..runtime.kernels import Kernel, LayerNorm, Softmax, TableMap
from ..spec import PostOpParams
from .context import current_device

__all__ = ["qlinear", "check_qlinear", "qsoftmax", "qlayer_norm", "qgelu", "qsilu", "kernel_of", "KERNEL_OPS",
           "vector_kernel_reference"]


def check_qlinear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, mult: int, shift: int,
                  relu: bool) -> PostOpParams:
    """The POSTOP parameters of a ``qlinear`` call; ``TypeError``/``ValueError`` saying what DX-1 cannot take."""
    if x.dtype != torch.int8 or w.dtype != torch.int8:
        raise TypeError(f"dx1::qlinear takes int8 x and w, not {x.dtype} and {w.dtype} (quantise first)")
    if x.dim() != 2 or w.dim() != 2:
        raise ValueError(f"dx1::qlinear takes a 2-D x [M, K] and w [N, K], not {tuple(x.shape)} and {tuple(w.shape)}")
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"dx1::qlinear: x [M, K] and w [N, K] must agree on K, not {tuple(x.shape)} and "
                         f"{tuple(w.shape)}")
    if bias is not None:
        if bias.dtype != torch.int32:
            raise TypeError(f"dx1::qlinear takes an int32 bias, not {bias.dtype}")
        if bias.dim() != 1 or bias.shape[0] != w.shape[0]:
            raise ValueError(f"dx1::qlinear: bias must have shape [{w.shape[0]}], not {tuple(bias.shape)}")
    for t, name in ((x, "x"), (w, "w")):
        if t.device.type != "cpu":
            raise ValueError(f"dx1::qlinear takes {name} in host memory (a CPU tensor), not on {t.device}")
    try:
        return PostOpParams(mult, shift, relu)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"dx1::qlinear: {exc}") from None


@torch.library.custom_op("dx1::qlinear", mutates_args=())
def qlinear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, mult: int, shift: int,
            relu: bool) -> torch.Tensor:
    """``requant(x @ w.T + bias)`` on the current DX-1 device; int8 [M, N]."""
    post = check_qlinear(x, w, bias, mult, shift, relu)
    if x.shape[0] == 0 or w.shape[0] == 0 or x.shape[1] == 0:
        return torch.zeros((x.shape[0], w.shape[0]), dtype=torch.int8)
    out, _stats = run_gemm(current_device(), x.contiguous().numpy(), w.t().contiguous().numpy(),
                           None if bias is None else bias.contiguous().numpy(),
                           post=post)
    return torch.from_numpy(out)


@qlinear.register_fake
def _qlinear_fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, mult: int, shift: int,
                  relu: bool) -> torch.Tensor:
    check_qlinear(x, w, bias, mult, shift, relu)
    return x.new_empty((x.shape[0], w.shape[0]), dtype=torch.int8)


def _check_kernel_input(op: str, x: torch.Tensor) -> None:
    if x.dtype != torch.int8 or x.dim() != 2:
        raise TypeError(f"dx1::{op} takes a 2-D int8 x, not {x.dtype} with {x.dim()} dimensions (quantise first)")
    if x.device.type != "cpu":
        raise ValueError(f"dx1::{op} takes x in host memory (a CPU tensor), not on {x.device}")


def kernel_of(op: str, args: tuple) -> Kernel:
    """The vector kernel of a ``dx1::q*`` call (``op`` without the namespace), its arguments after ``x``."""
    if op == "qsoftmax":
        scale, groups, causal = args
        return Softmax(float(scale), groups=int(groups), causal=bool(causal))
    if op == "qlayer_norm":
        weight, bias, eps, scale, out_scale = args
        return LayerNorm(np.asarray(weight, np.float64), np.asarray(bias, np.float64), float(scale), float(out_scale),
                         float(eps))
    if op in ("qgelu", "qsilu"):
        scale, out_scale = args
        return TableMap(op[1:], float(scale), float(out_scale))
    raise ValueError(f"no DX-1 vector kernel dx1::{op}")


def vector_kernel_reference(op: str, x: torch.Tensor, *args) -> torch.Tensor:
    """The int reference of a ``dx1::{op}`` call on the CPU (what the device's kernel equals bit for bit)."""
    _check_kernel_input(op, x)
    args = tuple(a.double().numpy() if isinstance(a, torch.Tensor) else a for a in args)
    return torch.from_numpy(kernel_of(op, args).reference(x.contiguous().numpy()))


def _run_kernel(kernel: Kernel, x: torch.Tensor) -> torch.Tensor:
    """One kernel as a one-operator graph session on the current device."""
    if x.shape[0] == 0:
        return torch.empty_like(x)
    g = Graph()
    g.add_input(Value("x", *x.shape, "int8"))
    g.add_value(Value("y", *x.shape, "int8"))
    g.kernel("kernel", "x", "y", kernel)
    g.outputs = ["y"]
    with GraphSession(current_device(), g) as session:
        out, _ = session.run({"x": x.contiguous().numpy()})
    return torch.from_numpy(out["y"])


@torch.library.custom_op("dx1::qsoftmax", mutates_args=())
def qsoftmax(x: torch.Tensor, scale: float, groups: int, causal: bool) -> torch.Tensor:
    """Softmax of ``x * scale`` over each of ``groups`` blocks of a row (causal: key <= query), int8 at 1/127."""
    _check_kernel_input("qsoftmax", x)
    return _run_kernel(kernel_of("qsoftmax", (scale, groups, causal)), x)


@qsoftmax.register_fake
def _qsoftmax_fake(x: torch.Tensor, scale: float, groups: int, causal: bool) -> torch.Tensor:
    _check_kernel_input("qsoftmax", x)
    return torch.empty_like(x)


@torch.library.custom_op("dx1::qlayer_norm", mutates_args=())
def qlayer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, scale: float,
                out_scale: float) -> torch.Tensor:
    """Layer norm of ``x * scale`` over its last dimension, affine, int8 at ``out_scale``."""
    _check_kernel_input("qlayer_norm", x)
    return _run_kernel(kernel_of("qlayer_norm", (weight.double().numpy(), bias.double().numpy(), eps, scale,
                                                 out_scale)), x)


@qlayer_norm.register_fake
def _qlayer_norm_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, scale: float,
                      out_scale: float) -> torch.Tensor:
    _check_kernel_input("qlayer_norm", x)
    return torch.empty_like(x)


@torch.library.custom_op("dx1::qgelu", mutates_args=())
def qgelu(x: torch.Tensor, scale: float, out_scale: float) -> torch.Tensor:
    """GELU (erf) of ``x * scale``, int8 at ``out_scale``, by a table of every int8 input."""
    _check_kernel_input("qgelu", x)
    return _run_kernel(kernel_of("qgelu", (scale, out_scale)), x)


@qgelu.register_fake
def _qgelu_fake(x: torch.Tensor, scale: float, out_scale: float) -> torch.Tensor:
    _check_kernel_input("qgelu", x)
    return torch.empty_like(x)


@torch.library.custom_op("dx1::qsilu", mutates_args=())
def qsilu(x: torch.Tensor, scale: float, out_scale: float) -> torch.Tensor:
    """SiLU of ``x * scale``, int8 at ``out_scale``, by a table of every int8 input."""
    _check_kernel_input("qsilu", x)
    return _run_kernel(kernel_of("qsilu", (scale, out_scale)), x)


@qsilu.register_fake
def _qsilu_fake(x: torch.Tensor, scale: float, out_scale: float) -> torch.Tensor:
    _check_kernel_input("qsilu", x)
    return torch.empty_like(x)


#: The vector-kernel operators, by name, as the backend finds them in an FX graph.
KERNEL_OPS = {"qsoftmax": torch.ops.dx1.qsoftmax, "qlayer_norm": torch.ops.dx1.qlayer_norm,
              "qgelu": torch.ops.dx1.qgelu, "qsilu": torch.ops.dx1.qsilu}
