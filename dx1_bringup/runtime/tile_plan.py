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

from ..model.tile import TileModel
from ..spec import PostOpParams, TileConfig, ceil_div
from .commands import CommandStream
from .operands import pad_operand

__all__ = ["LinearPlan", "plan_linear"]


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
        return ceil_div(self.n, self.config.array) * self.m

    def gather(self, out: np.ndarray) -> np.ndarray:
        """The (M, N) int8 result from the ``out_rows`` scratchpad rows starting at ``out_base``."""
        lanes = self.config.array
        chunks = out.reshape(-1, self.m, lanes)  # (nc, M, lanes)
        return np.concatenate(list(chunks), axis=1)[:, :self.n]

    @property
    def useful_macs(self) -> int:
        return self.m * self.k * self.n

    def run_on_model(self, model: TileModel | None = None) -> tuple[np.ndarray, list[int]]:
        """Load the memory images into a golden tile model (default: a fresh one) and execute every command.

        Returns
        -------
        (ndarray, list of int)
            The (M, N) int8 result, as :meth:`gather` reads it, and each command's status.
        """
        model = model or TileModel(self.config)
        for row, values in self.spm_writes:
            model.spm[row:row + len(values)] = values
        for row, values in self.acc_writes:
            model.acc[row:row + len(values)] = values
        statuses = [int(model.execute(c)) for c in self.commands]
        return self.gather(model.spm[self.out_base:self.out_base + self.out_rows]), statuses


def plan_linear(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, post: PostOpParams,
                config: TileConfig | None = None) -> LinearPlan:
    """Plan ``requantize(a @ b + bias, post)`` for int8 ``a`` (M, K), int8 ``b`` (K, N) and int32 ``bias`` (N,).

    :func:`~dx1_bringup.runtime.reference.reference_gemm` with the same arguments gives the answer.
    """
    if not isinstance(post, PostOpParams):
        raise TypeError(f"post must be a PostOpParams (a linear layer's output is requantised to int8), "
                        f"not {post!r}")
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
    kc, nc = ceil_div(k, lanes), ceil_div(n_out, lanes)
    b_base = kc * m
    out_base = b_base + nc * kc * lanes
    spm_needed = out_base + nc * m
    acc_needed = nc * m + nc
    if spm_needed > config.spm_rows or acc_needed > config.acc_rows:
        raise ValueError(
            f"a {m}x{k}x{n_out} linear layer needs {spm_needed} scratchpad rows and {acc_needed} accumulator "
            f"rows; the tile has {config.spm_rows} and {config.acc_rows} (split it with the tiling compiler)")

    a_pad = pad_operand(a, (m, kc * lanes))
    b_pad = pad_operand(b, (kc * lanes, nc * lanes))
    plan = LinearPlan(m, k, n_out, config, out_base=out_base)
    # A chunk k: rows k*M .. k*M+M-1, each the k-th group of `lanes` reduction values.
    plan.spm_writes.append((0, a_pad.reshape(m, kc, lanes).transpose(1, 0, 2).reshape(kc * m, lanes)))
    # B for output chunk j: kc*lanes rows of `lanes` output columns.
    plan.spm_writes.append((b_base, np.concatenate([b_pad[:, j * lanes:(j + 1) * lanes] for j in range(nc)])))
    if bias is not None:
        plan.acc_writes.append((nc * m, pad_operand(np.asarray(bias, np.int32), (nc * lanes,)).reshape(nc, lanes)))
    stream = CommandStream.for_tile(config, what="linear plan")
    for j in range(nc):
        stream.gemm(a_addr=0, b_addr=b_base + j * kc * lanes, c_addr=j * m, m=m, k_chunks=kc)
    for j in range(nc):
        stream.postop(src_addr=j * m, dst_addr=out_base + j * m, rows=m, post=post,
                      bias_addr=None if bias is None else nc * m + j)
    plan.commands = stream.commands
    return plan
