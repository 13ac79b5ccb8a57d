"""PyTorch custom operators that run on DX-1: ``torch.ops.dx1.qlinear``.

``dx1::qlinear(x int8 [M, K], w int8 [N, K], bias int32 [N] or None, mult, shift, relu) -> int8 [M, N]`` is
``requant(x @ w.T + bias)`` in torch.nn.Linear's weight layout, computed on the current DX-1 device
(:func:`~dx1_bringup.torch.context.device`) by the tiling compiler.  It has a fake-tensor registration, so
it traces under torch.compile and passes ``torch.library.opcheck``; it has no autograd formula (the
inputs are integers).  Anything DX-1 cannot take is refused with a message that says what and why.
"""

# No `from __future__ import annotations`: custom_op reads the signature's annotations at run time.
import torch

from ..runtime.gemm_run import run_gemm
from ..spec import PostOpParams
from .context import current_device

__all__ = ["qlinear", "check_qlinear"]


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
