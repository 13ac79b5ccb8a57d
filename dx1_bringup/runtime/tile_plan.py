"""A quantised linear layer laid out in one tile's memories, as a command stream.

This is the single-tile case of the tiling compiler: the whole problem fits in
the scratchpad and accumulator buffer, so there is no DMA.  Layout, for
``kc = ceil(K / n)`` reduction chunks and ``nc = ceil(N / n)`` output chunks of
the array size ``n`` (zero-padded):

* scratchpad rows ``[0, kc*M)``: A, chunk k row i at ``k*M + i``;
* then B, output chunk j and reduction chunk k at ``b_base + (j*kc + k)*n``;
* then the int8 output, chunk j row i at ``out_base + j*M + i``;
* accumulator rows ``[0, nc*M)``: int32 results, chunk j at ``j*M``; then one
  bias row per output chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.tile import requantize
from ..spec import Opcode, TileConfig, pack_command

__all__ = ["LinearPlan", "plan_linear", "reference_linear"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class LinearPlan:
    """Memory images, commands and where the answer will be."""

    m: int
    k: int
    n: int
    config: TileConfig
    spm_writes: list[tuple[int, np.ndarray]] = field(default_factory=list)
    acc_writes: list[tuple[int, np.ndarray]] = field(default_factory=list)
    commands: list[bytes] = field(default_factory=list)
    out_base: int = 0

    @property
    def out_rows(self) -> int:
        return _ceil_div(self.n, self.config.array) * self.m

    def gather(self, out: np.ndarray) -> np.ndarray:
        """The (M, N) int8 result from the ``out_rows`` scratchpad rows starting at ``out_base``."""
        lanes = self.config.array
        chunks = out.reshape(-1, self.m, lanes)  # (nc, M, lanes)
        return np.concatenate(list(chunks), axis=1)[:, :self.n]

    @property
    def useful_macs(self) -> int:
        return self.m * self.k * self.n


def plan_linear(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, *, mult: int, shift: int, relu: bool,
                config: TileConfig | None = None) -> LinearPlan:
    """Plan ``requant(a @ b + bias)`` for int8 ``a`` (M, K), int8 ``b`` (K, N) and int32 ``bias`` (N,)."""
    config = config or TileConfig()
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b must be matrices with a.shape[1] == b.shape[0], not {a.shape} and {b.shape}")
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"a and b must be int8, not {a.dtype} and {b.dtype}")
    m, k = a.shape
    n_out = b.shape[1]
    if bias is not None and np.asarray(bias).shape != (n_out,):
        raise ValueError(f"bias must have shape ({n_out},), not {np.asarray(bias).shape}")
    lanes = config.array
    kc, nc = _ceil_div(k, lanes), _ceil_div(n_out, lanes)
    b_base = kc * m
    out_base = b_base + nc * kc * lanes
    spm_needed = out_base + nc * m
    acc_needed = nc * m + nc
    if spm_needed > config.spm_rows or acc_needed > config.acc_rows:
        raise ValueError(
            f"a {m}x{k}x{n_out} linear layer needs {spm_needed} scratchpad rows and {acc_needed} accumulator "
            f"rows; the tile has {config.spm_rows} and {config.acc_rows} (split it with the tiling compiler)")

    a_pad = np.zeros((m, kc * lanes), dtype=np.int8)
    a_pad[:, :k] = a
    b_pad = np.zeros((kc * lanes, nc * lanes), dtype=np.int8)
    b_pad[:k, :n_out] = b
    plan = LinearPlan(m, k, n_out, config, out_base=out_base)
    # A chunk k: rows k*M .. k*M+M-1, each the k-th group of `lanes` reduction values.
    plan.spm_writes.append((0, a_pad.reshape(m, kc, lanes).transpose(1, 0, 2).reshape(kc * m, lanes)))
    # B for output chunk j: kc*lanes rows of `lanes` output columns.
    plan.spm_writes.append((b_base, np.concatenate([b_pad[:, j * lanes:(j + 1) * lanes] for j in range(nc)])))
    bias_pad = np.zeros(nc * lanes, dtype=np.int32)
    if bias is not None:
        bias_pad[:n_out] = bias
        plan.acc_writes.append((nc * m, bias_pad.reshape(nc, lanes)))
    tag = 0
    for j in range(nc):
        plan.commands.append(pack_command(Opcode.GEMM, tag=tag, a_addr=0, b_addr=b_base + j * kc * lanes,
                                          c_addr=j * m, m=m, k_chunks=kc))
        tag += 1
    for j in range(nc):
        plan.commands.append(pack_command(
            Opcode.POSTOP, tag=tag, flags={"relu": relu, "bias": bias is not None}, src_addr=j * m,
            dst_addr=out_base + j * m, rows=m, bias_addr=nc * m + j, mult=mult, shift=shift))
        tag += 1
    return plan


def reference_linear(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, *, mult: int, shift: int,
                     relu: bool) -> np.ndarray:
    """The same layer in plain numpy (int64 matmul wrapped to int32, then the spec's post-op)."""
    acc = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).view(np.int32)
    return requantize(acc, 0 if bias is None else bias, mult, shift, relu)
