"""The tiling compiler on views (row strides) and on sums of products (GEMM terms), against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup.runtime.gemm import GemmTerm, compile_gemm
from dx1_bringup.runtime.gemm_run import drive
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.spec import PostOpParams


def _put(dev, addr, matrix, stride):
    rows = np.zeros((matrix.shape[0], stride // matrix.itemsize), matrix.dtype)
    rows[:, :matrix.shape[1]] = matrix
    dev.write_mem(addr, rows)


@pytest.mark.parametrize("tiles", [1, 2])
def test_a_sum_of_strided_products_is_one_accumulation(tiles):
    rng = np.random.default_rng(tiles)
    m, k0, k1, n = 37, 24, 16, 20
    a0 = rng.integers(-128, 128, (m, k0), dtype=np.int8)
    a1 = rng.integers(-128, 128, (m, k1), dtype=np.int8)
    b0 = rng.integers(-128, 128, (k0, n), dtype=np.int8)
    b1 = rng.integers(-128, 128, (k1, n), dtype=np.int8)
    bias = rng.integers(-3000, 3000, n).astype(np.int32)
    post = PostOpParams(40000, 22, True)
    # A0 is the left half of a 64-byte-wide matrix, A1 columns 32.. of the same rows: two views of one buffer.
    wide, b_stride, c_stride = 64, 32, 48
    with Device.open("model") as dev:
        caps = dev.caps
        base = dev.alloc(1 << 16)
        a_at, b0_at, b1_at, bias_at, c_at = base, base + 8192, base + 12288, base + 16384, base + 20480
        both = np.zeros((m, wide), np.int8)
        both[:, :k0], both[:, 32:32 + k1] = a0, a1
        dev.write_mem(a_at, both)
        _put(dev, b0_at, b0, b_stride)
        _put(dev, b1_at, b1, b_stride)
        dev.write_mem(bias_at, np.pad(bias, (0, 4)))
        plan = compile_gemm(m, k0, n, caps, a_addr=a_at, b_addr=b0_at, c_addr=c_at, bias_addr=bias_at, post=post,
                            tiles=tiles, a_stride=wide, b_stride=b_stride, c_stride=c_stride,
                            more=(GemmTerm(k1, a_at + 32, b1_at, wide, b_stride),))
        drive(dev, plan.commands, timeout=5)
        got = dev.read_array(c_at, (m, c_stride), np.int8)[:, :n]
    want = reference_gemm(np.concatenate([a0, a1], 1), np.concatenate([b0, b1]), bias, post)
    assert np.array_equal(got, want)
    assert plan.k == k0 + k1 and plan.useful_macs == m * (k0 + k1) * n


def test_views_are_checked():
    with Device.open("model") as dev:
        with pytest.raises(ValueError, match="a_stride must be a multiple of 8 of at least 16"):
            compile_gemm(8, 16, 8, dev.caps, a_addr=0, b_addr=4096, c_addr=8192, a_stride=8)
        with pytest.raises(ValueError, match="k of term 1 must be an integer >= 1"):
            compile_gemm(8, 16, 8, dev.caps, a_addr=0, b_addr=4096, c_addr=8192, more=(GemmTerm(0, 0, 0),))
        with pytest.raises(ValueError, match=r"a_addr \(term 1\) .* overlaps c_addr"):
            compile_gemm(8, 16, 8, dev.caps, a_addr=0, b_addr=4096, c_addr=8192,
                         more=(GemmTerm(8, 8192, 0),), post=PostOpParams(1, 0))
