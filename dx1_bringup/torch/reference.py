"""An independent integer reference in PyTorch: what DX-1 must compute, written with torch ops only.

The product is ``torch._int_mm`` (int8 x int8 -> int32, exact; the accumulators wrap modulo 2**32 like the
device's).  The requantise is the spec's POSTOP text in torch integer ops: saturating bias add, ReLU,
exact multiply, then a right shift rounded half away from zero, ``(p + 2**(shift-1) - (p < 0)) >> shift``.
No built-in PyTorch op rounds that way: ``torch.round`` rounds ties to even and TOSA/TFLite's single
rounding rounds ties up (towards +inf); :func:`rounding_rules` shows all three on the same products.
"""

from __future__ import annotations

import torch

__all__ = ["int_matmul", "requantize", "qlinear_reference", "rounding_rules"]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for int8 ``a`` (M, K) and ``b`` (K, N), exact, as int32 (wrapping like the accumulators)."""
    if a.dtype != torch.int8 or b.dtype != torch.int8:
        raise TypeError(f"int_matmul takes int8 operands, not {a.dtype} and {b.dtype}")
    return torch._int_mm(a.contiguous(), b.contiguous())


def requantize(acc: torch.Tensor, bias: torch.Tensor | None, mult: int, shift: int, relu: bool) -> torch.Tensor:
    """The POSTOP on an int32 accumulator (bias per column), in torch ops: int8 out."""
    x = acc.to(torch.int64)
    if bias is not None:
        x = x + bias.to(torch.int64)
    x = x.clamp(_INT32_MIN, _INT32_MAX)
    if relu:
        x = x.clamp_min(0)
    p = x * mult
    if shift:
        p = torch.bitwise_right_shift(p + (1 << (shift - 1)) - (p < 0).to(torch.int64), shift)
    return p.clamp(-128, 127).to(torch.int8)


def qlinear_reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, mult: int, shift: int,
                      relu: bool) -> torch.Tensor:
    """``requant(x @ w.T + bias)`` with torch.nn.Linear's weight layout (w is (N, K)): the CPU fallback."""
    return requantize(int_matmul(x, w.t()), bias, mult, shift, relu)


def rounding_rules(p: torch.Tensor, shift: int) -> dict[str, torch.Tensor]:
    """``p / 2**shift`` rounded three ways: the spec's (half away from zero), torch.round's, TOSA's (half up)."""
    if shift < 1:
        raise ValueError(f"rounding needs a shift of at least 1, not {shift}")
    p = p.to(torch.int64)
    return {
        "half_away_from_zero": torch.bitwise_right_shift(p + (1 << (shift - 1)) - (p < 0).to(torch.int64), shift),
        "torch_round_half_even": torch.round(p.to(torch.float64) / (1 << shift)).to(torch.int64),
        "tosa_half_up": torch.bitwise_right_shift(p + (1 << (shift - 1)), shift),
    }
