"""The transformer kernels on the vector unit: softmax, layer norm, table maps (GELU, SiLU) and transpose.

Each is a :class:`~.base.Kernel`: an int reference in numpy int64 and its lowering, step for step.

Softmax (over ``groups`` blocks of each row, one per attention head; optionally causal)::

    z = x (+ mask: 0 where key <= query, -2**20 above)        ADD / MOV      -> acc
    u = z - max(z)                                            RMAX, SUB      -> acc, in [-255, 0]
    e = exp_table(u) = round(32767 exp(u s_in))               LUT            -> acc (masked lanes: 0)
    r = floor(2**30 / sum(e)) * 127                           RSUM, RECIP, MUL
    p = round(e r / 2**30)                                    MUL            -> spm, int8 at scale 1/127

Layer norm (over each row's N columns; ``d = N x - sum(x) = N (x - mean)``)::

    V = sum(d'^2) + eps_q,  q = isqrt(V) (= N^1.5 std / 2**k)  SHR, RSUMSQ, ADD, ISQRT
      (d' = round(d / 2**k): k = 0 up to N = 50, so that V fits int32 for every int8 row)
    t = round(d floor(2**29 / q) / 2**(13 + k))  (= 2**16 (x - mean) / (sqrt(N) std))  RECIP, MUL
    out = round((round(t G / 2**16) + B) / 2**8),  G = gamma sqrt(N) / s_out 2**8, B = beta / s_out 2**8

Table maps: ``out = sat8(T[x + 128])`` (one exact entry per int8 input).  Transpose: 8x8 block TRANSPOSEs
in the scratchpad between a column-major LOAD and STORE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...spec import VectorOp
from ..commands import CommandStream, LocalRows
from ..operands import ACC_LANE_BYTES
from .base import Consts, Kernel, LocalAlloc, Mem, chunks, split_rows
from .intmath import INT32_MAX, isqrt, recip, round_shift, sat8, sat32, wrap32
from .tables import Table, exp_table, map_table

__all__ = ["Softmax", "LayerNorm", "TableMap", "Transpose", "MASKED", "P_ONE"]

#: What the causal mask adds to a masked score: far below every real one, still far from int32's end.
MASKED = -(1 << 20)
#: The int8 value of probability 1 (the softmax's output scale is 1 / P_ONE).
P_ONE = 127


def _acc(addr: int, row_stride: int = 0, col_stride: int = 1) -> LocalRows:
    return LocalRows(True, addr, row_stride, col_stride)


def _spm(addr: int, row_stride: int = 0, col_stride: int = 1) -> LocalRows:
    return LocalRows(False, addr, row_stride, col_stride)


def _move(stream: CommandStream, load: bool, mem: Mem, r0: int, rows: int, local: int, cols: int,
          acc: bool = False) -> None:
    """LOAD or STORE ``rows`` matrix rows of ``cols`` local rows each, packed at local row ``local``."""
    (stream.load if load else stream.store)(mem_addr=mem.row(r0), mem_stride=mem.stride, local_addr=local, rows=rows,
                                            cols=cols, local_row_stride=cols, local_col_stride=1, acc=acc)


@dataclass(eq=False)
class Softmax(Kernel):
    """Softmax over each of ``groups`` equal blocks of a row of int8 scores at scale ``s_in``; out at 1/127.

    ``mask_keys`` (causal only) is the length of the resident mask's rows: 0 for the block's own keys, or a
    longer one, whose first columns serve every block of up to that many keys (one mask for a KV cache whose
    sequences see a varying number of keys).  The result does not depend on it.
    """

    s_in: float
    groups: int = 1
    causal: bool = False
    recip_shift: int = 30
    mask_keys: int = 0
    table: Table = field(init=False, repr=False)

    kind = "softmax"

    def __post_init__(self) -> None:
        if not self.s_in > 0:
            raise ValueError(f"softmax: the input scale must be positive, not {self.s_in!r}")
        self.table = exp_table(self.s_in)

    def describe(self, x: str) -> str:
        blocks = f"{self.groups} blocks a row" if self.groups > 1 else "one block a row"
        return f"softmax({x}, {blocks}{', causal' if self.causal else ''})"

    def check(self, rows: int, cols: int, array: int) -> None:
        if cols % self.groups or (cols // self.groups) % array:
            raise ValueError(f"softmax: {cols} columns must be {self.groups} block(s) of a multiple of the array "
                             f"size {array}")
        if self.causal and cols // self.groups > rows:
            raise ValueError(f"softmax: a causal block of {cols // self.groups} keys needs as many query rows, "
                             f"not {rows}")
        if self.causal and self.mask_keys and (cols // self.groups > self.mask_keys or self.mask_keys % array):
            raise ValueError(f"softmax: a mask of {self.mask_keys} keys a row must be a multiple of the array size "
                             f"{array} and cover the block's {cols // self.groups} keys")

    def mask(self, rows: int, keys: int) -> np.ndarray:
        """The causal mask, int32 (rows, keys): 0 where key <= query, :data:`MASKED` above."""
        q, k = np.arange(rows)[:, None], np.arange(keys)[None, :]
        return np.where(k <= q, 0, MASKED).astype(np.int32)

    def reference(self, x: np.ndarray) -> np.ndarray:
        rows, cols = x.shape
        z = x.astype(np.int64).reshape(rows, self.groups, cols // self.groups)
        if self.causal:
            z = sat32(z + self.mask(rows, z.shape[2])[:, None, :])
        u = sat32(z - z.max(axis=2, keepdims=True))
        e = sat32(self.table(u))
        r = sat32(recip(wrap32(e.sum(axis=2, keepdims=True)), self.recip_shift) * P_ONE)
        return sat8(round_shift(e * r, self.recip_shift)).reshape(rows, cols).astype(np.int8)

    def consts(self, rows: int, cols: int, array: int) -> Consts:
        spm = np.concatenate([self.table.rows(array), np.full((1, array), P_ONE, np.int8)])
        if not self.causal:
            return Consts(spm=spm)
        keys = self.mask_keys or cols // self.groups
        return Consts(spm=spm, rowwise=self.mask(rows, keys).reshape(-1, array), rowwise_rows=keys // array)

    def lower(self, stream: CommandStream, x: Mem, out: Mem, rows: tuple[int, int], cols: int, consts: Consts,
              consts_addr: int) -> None:
        n, g = stream.array, self.groups
        wl, cl = cols // n, cols // g // n
        alloc = LocalAlloc(stream)
        spm_c, _ = alloc.load_consts(consts, consts_addr)
        ones = spm_c + consts.spm.shape[0] - 1
        stream.table(src_addr=spm_c)
        size, blocks = chunks(*rows, alloc, 2 * wl, 3 * wl + 4 * g + (cl if self.causal else 0))
        xs, ps = alloc.spm(size * wl), alloc.spm(size * wl)
        z, u, e = alloc.acc(size * wl), alloc.acc(size * wl), alloc.acc(size * wl)
        mx, s, rc, r = (alloc.acc(size * g) for _ in range(4))
        mask = alloc.acc(size * cl) if self.causal else 0
        mask_at = consts.offsets()[2]
        k = self.recip_shift
        for r0, m in blocks:
            _move(stream, True, x, r0, m, xs, wl)
            if self.causal:
                mask_row = (self.mask_keys or cl * n) * ACC_LANE_BYTES  # the first cl local rows of each
                _move(stream, True, Mem(consts_addr + mask_at, mask_row), r0, m, mask, cl, acc=True)
                for h in range(g):
                    stream.vector(VectorOp.ADD, a=_spm(xs + h * cl, wl), b=_acc(mask, cl), d=_acc(z + h * cl, wl),
                                  rows=m, cols=cl)
            else:
                stream.vector(VectorOp.MOV, a=_spm(xs, wl), d=_acc(z, wl), rows=m, cols=wl)
            o = m * g
            stream.vector(VectorOp.RMAX, a=_acc(z, cl), d=_acc(mx, 1), rows=o, cols=cl)
            stream.vector(VectorOp.SUB, a=_acc(z, cl), b=_acc(mx, 1, 0), d=_acc(u, cl), rows=o, cols=cl)
            stream.vector(VectorOp.LUT, a=_acc(u, cl), d=_acc(e, cl), rows=o, cols=cl, imm=self.table.offset,
                          shift=self.table.shift)
            stream.vector(VectorOp.RSUM, a=_acc(e, cl), d=_acc(s, 1), rows=o, cols=cl)
            stream.vector(VectorOp.RECIP, a=_acc(s, 1), d=_acc(rc, 1), rows=o, cols=1, shift=k)
            stream.vector(VectorOp.MUL, a=_acc(rc, 1), b=_spm(ones, 0, 0), d=_acc(r, 1), rows=o, cols=1)
            stream.vector(VectorOp.MUL, a=_acc(e, cl), b=_acc(r, 1, 0), d=_spm(ps, cl), rows=o, cols=cl, shift=k)
            _move(stream, False, out, r0, m, ps, wl)


def _variance_shift(n: int) -> int:
    """The smallest ``k`` for which ``sum(round(d / 2**k)**2)`` fits int32 at any int8 row of ``n`` lanes.

    ``d = n (x - mean)``: ``sum d^2 <= n^3 128^2``, which passes 2**31 from n = 51 (RSUMSQ would wrap).
    """
    k = 0
    while n ** 3 * 128 ** 2 / 4 ** k + n * (255 * n / 2 ** k) + n >= 1 << 31:
        k += 1
    return k


@dataclass(eq=False)
class LayerNorm(Kernel):
    """Layer norm over each row of int8 ``x`` at scale ``s_in``, affine ``gamma``, ``beta``, out at ``s_out``."""

    gamma: np.ndarray
    beta: np.ndarray
    s_in: float
    s_out: float
    eps: float = 1e-5
    recip_shift: int = 29
    frac: int = 8

    kind = "layer_norm"

    def __post_init__(self) -> None:
        n = self.gamma.shape[0]
        if self.gamma.shape != (n,) or self.beta.shape != (n,):
            raise ValueError(f"layer_norm: gamma and beta must be vectors of one length, not {self.gamma.shape} "
                             f"and {self.beta.shape}")
        self.g = np.round(self.gamma.astype(np.float64) * math.sqrt(n) / self.s_out * 2 ** self.frac)
        self.b = np.round(self.beta.astype(np.float64) / self.s_out * 2 ** self.frac)
        self.pre = _variance_shift(n)
        self.eps_q = max(1, round(self.eps * n ** 3 / self.s_in ** 2 / 4 ** self.pre))
        for name, v in (("gamma", self.g), ("beta", self.b), ("eps", np.array([self.eps_q]))):
            if np.abs(v).max() > INT32_MAX:
                raise ValueError(f"layer_norm: {name} does not fit an int32 lane at these scales (s_in {self.s_in}, "
                                 f"s_out {self.s_out})")
        self.g, self.b = self.g.astype(np.int64), self.b.astype(np.int64)

    def describe(self, x: str) -> str:
        return f"layer_norm({x}, {self.gamma.shape[0]} columns)"

    def check(self, rows: int, cols: int, array: int) -> None:
        super().check(rows, cols, array)
        if cols != self.gamma.shape[0]:
            raise ValueError(f"layer_norm: the input has {cols} columns, gamma {self.gamma.shape[0]}")

    def reference(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[1]
        x = x.astype(np.int64)
        d = sat32(sat32(x * n) - sat32(x.sum(axis=1, keepdims=True)))
        dv = sat32(round_shift(d, self.pre)) if self.pre else d
        q = isqrt(sat32(wrap32(((dv * dv) & 0xFFFF_FFFF).sum(axis=1, keepdims=True)) + self.eps_q))
        t = sat32(round_shift(d * recip(q, self.recip_shift), self.recip_shift - 16 + self.pre))
        u = sat32(sat32(round_shift(t * self.g, 16)) + self.b)
        return sat8(round_shift(u, self.frac)).astype(np.int8)

    def consts(self, rows: int, cols: int, array: int) -> Consts:
        scalars = np.zeros((2, array), np.int32)
        scalars[0], scalars[1] = cols, self.eps_q
        return Consts(acc=np.concatenate([scalars, self.g.astype(np.int32).reshape(-1, array),
                                          self.b.astype(np.int32).reshape(-1, array)]))

    def lower(self, stream: CommandStream, x: Mem, out: Mem, rows: tuple[int, int], cols: int, consts: Consts,
              consts_addr: int) -> None:
        nl = cols // stream.array
        alloc = LocalAlloc(stream)
        _, c = alloc.load_consts(consts, consts_addr)
        width, eps, gamma, beta = c, c + 1, c + 2, c + 2 + nl
        size, blocks = chunks(*rows, alloc, 2 * nl, 6 * nl + 5)
        xs, ys = alloc.spm(size * nl), alloc.spm(size * nl)
        xn, d, dv, t, u, u2 = (alloc.acc(size * nl) for _ in range(6))
        sx, v, v2, q, rr = (alloc.acc(size) for _ in range(5))
        k = self.recip_shift
        for r0, m in blocks:
            _move(stream, True, x, r0, m, xs, nl)
            stream.vector(VectorOp.RSUM, a=_spm(xs, nl), d=_acc(sx, 1), rows=m, cols=nl)
            stream.vector(VectorOp.MUL, a=_spm(xs, nl), b=_acc(width, 0, 0), d=_acc(xn, nl), rows=m, cols=nl)
            stream.vector(VectorOp.SUB, a=_acc(xn, nl), b=_acc(sx, 1, 0), d=_acc(d, nl), rows=m, cols=nl)
            if self.pre:
                stream.vector(VectorOp.SHR, a=_acc(d, nl), d=_acc(dv, nl), rows=m, cols=nl, shift=self.pre)
            stream.vector(VectorOp.RSUMSQ, a=_acc(dv if self.pre else d, nl), d=_acc(v, 1), rows=m, cols=nl)
            stream.vector(VectorOp.ADD, a=_acc(v, 1), b=_acc(eps, 0, 0), d=_acc(v2, 1), rows=m, cols=1)
            stream.vector(VectorOp.ISQRT, a=_acc(v2, 1), d=_acc(q, 1), rows=m, cols=1)
            stream.vector(VectorOp.RECIP, a=_acc(q, 1), d=_acc(rr, 1), rows=m, cols=1, shift=k)
            stream.vector(VectorOp.MUL, a=_acc(d, nl), b=_acc(rr, 1, 0), d=_acc(t, nl), rows=m, cols=nl,
                          shift=k - 16 + self.pre)
            stream.vector(VectorOp.MUL, a=_acc(t, nl), b=_acc(gamma, 0, 1), d=_acc(u, nl), rows=m, cols=nl, shift=16)
            stream.vector(VectorOp.ADD, a=_acc(u, nl), b=_acc(beta, 0, 1), d=_acc(u2, nl), rows=m, cols=nl)
            stream.vector(VectorOp.SHR, a=_acc(u2, nl), d=_spm(ys, nl), rows=m, cols=nl, shift=self.frac)
            _move(stream, False, out, r0, m, ys, nl)


@dataclass(eq=False)
class TableMap(Kernel):
    """An elementwise function by table (``gelu``, ``silu``): int8 in at ``s_in``, int8 out at ``s_out``."""

    function: str
    s_in: float
    s_out: float
    table: Table = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.table = map_table(self.function, self.s_in, self.s_out)

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.function

    def reference(self, x: np.ndarray) -> np.ndarray:
        return sat8(self.table(x.astype(np.int64))).astype(np.int8)

    def consts(self, rows: int, cols: int, array: int) -> Consts:
        return Consts(spm=self.table.rows(array))

    def lower(self, stream: CommandStream, x: Mem, out: Mem, rows: tuple[int, int], cols: int, consts: Consts,
              consts_addr: int) -> None:
        nl = cols // stream.array
        alloc = LocalAlloc(stream)
        spm_c, _ = alloc.load_consts(consts, consts_addr)
        stream.table(src_addr=spm_c)
        size, blocks = chunks(*rows, alloc, 2 * nl, 0)
        xs, ys = alloc.spm(size * nl), alloc.spm(size * nl)
        for r0, m in blocks:
            _move(stream, True, x, r0, m, xs, nl)
            stream.vector(VectorOp.LUT, a=_spm(xs, nl), d=_spm(ys, nl), rows=m, cols=nl, imm=self.table.offset,
                          shift=self.table.shift)
            _move(stream, False, out, r0, m, ys, nl)


class Transpose(Kernel):
    """``out = x.T`` for an int8 matrix of whole array x array blocks, by TRANSPOSE in the scratchpad."""

    kind = "transpose"

    def out_shape(self, rows: int, cols: int) -> tuple[int, int]:
        return cols, rows

    def check(self, rows: int, cols: int, array: int) -> None:
        if rows % array or cols % array:
            raise ValueError(f"transpose: a {rows}x{cols} matrix is not whole {array}x{array} blocks")

    def reference(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.T)

    def split(self, rows: int, cols: int, tiles: int, array: int) -> list[tuple[int, int]]:
        return split_rows(rows, tiles, array)

    def lower(self, stream: CommandStream, x: Mem, out: Mem, rows: tuple[int, int], cols: int, consts: Consts,
              consts_addr: int) -> None:
        n = stream.array
        cl = cols // n
        alloc = LocalAlloc(stream)
        size, blocks = chunks(*rows, alloc, 2 * cl, 0, unit=n)
        xs, ys = alloc.spm(size * cl), alloc.spm(size * cl)
        for r0, m in blocks:
            # Column-major in the scratchpad: block (i, j) of x is the n rows at xs + j*m + i*n; its
            # transpose is block (j, i) of the output, the n rows at ys + i*cols + j*n.
            stream.load(mem_addr=x.row(r0), mem_stride=x.stride, local_addr=xs, rows=m, cols=cl, local_row_stride=1,
                        local_col_stride=m)
            for i in range(m // n):
                stream.transpose(src_addr=xs + i * n, dst_addr=ys + i * cols, blocks=cl, src_stride=m, dst_stride=n)
            stream.store(mem_addr=out.row(0, col=r0), mem_stride=out.stride, local_addr=ys, rows=cols, cols=m // n,
                         local_row_stride=1, local_col_stride=cols)
