"""The vector-unit kernels: each lowering equals its int reference on the golden model, bit for bit; each
kernel's accuracy against float; every table exhaustively over its inputs."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from dx1_driver import Device

from dx1_bringup.runtime.graph import Graph, GraphSession, Value
from dx1_bringup.runtime.kernels import (
    LayerNorm,
    Softmax,
    TableMap,
    Transpose,
    exp_table,
    map_table,
    table_accuracy,
)


def _run(kernel, x: np.ndarray, device: str = "model", tiles: int | None = None):
    g = Graph()
    g.add_input(Value("x", *x.shape, "int8"))
    g.add_value(Value("y", *kernel.out_shape(*x.shape), "int8"))
    g.kernel("k", "x", "y", kernel)
    g.outputs = ["y"]
    with Device.open(device) as dev, GraphSession(dev, g, tiles=tiles) as session:
        out, stats = session.run({"x": x})
        return out["y"], stats, session.placement()


def _ints(rng, shape, std=40.0):
    return np.clip(np.round(rng.standard_normal(shape) * std), -128, 127).astype(np.int8)


KERNELS = {
    "transpose": (Transpose(), (24, 40)),
    "gelu": (TableMap("gelu", 0.05, 0.04), (20, 24)),
    "silu": (TableMap("silu", 0.05, 0.04), (20, 24)),
    "softmax": (Softmax(0.06, groups=3), (20, 48)),
    "softmax_causal": (Softmax(0.06, groups=2, causal=True), (20, 32)),
    # A mask of longer rows (a KV cache's longest table) whose first columns serve these 16-key blocks.
    "softmax_causal_long_mask": (Softmax(0.06, groups=2, causal=True, mask_keys=40), (20, 32)),
    "layer_norm": (LayerNorm(np.linspace(0.5, 1.5, 40), np.linspace(-0.3, 0.3, 40), 0.03, 0.03), (20, 40)),
}


@pytest.mark.parametrize("tiles", [1, 2])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_each_kernel_on_the_model_equals_its_int_reference_bit_for_bit(name, tiles):
    kernel, shape = KERNELS[name]
    x = _ints(np.random.default_rng(len(name) + tiles), shape)
    y, stats, placement = _run(kernel, x, tiles=tiles)
    assert placement == [("k", "device")] and stats.host_ops == 0 and stats.commands > 0
    assert np.array_equal(y, kernel.reference(x))


def test_a_longer_mask_gives_the_same_probabilities_and_must_cover_the_block():
    x = _ints(np.random.default_rng(5), (20, 32))
    assert np.array_equal(Softmax(0.06, groups=2, causal=True, mask_keys=40).reference(x),
                          Softmax(0.06, groups=2, causal=True).reference(x))
    with pytest.raises(ValueError, match=re.escape("softmax: a mask of 8 keys a row must be a multiple of the array "
                                                   "size 8 and cover the block's 16 keys")):
        Softmax(0.06, groups=2, causal=True, mask_keys=8).check(20, 32, 8)


@pytest.mark.parametrize("kernel", [Softmax(0.05, groups=2, causal=True),
                                    LayerNorm(np.ones(32), np.zeros(32), 0.02, 0.03)], ids=["softmax", "layer_norm"])
def test_a_tall_input_is_cut_into_blocks_that_fit_the_tile(kernel):
    x = _ints(np.random.default_rng(3), (160, 32))
    y, stats, _ = _run(kernel, x, tiles=1)
    assert np.array_equal(y, kernel.reference(x))
    assert stats.commands > 30  # one block of LOAD ... STORE is 15 commands or fewer: several blocks


@pytest.mark.parametrize("case", range(12))
def test_random_shapes_scales_and_tile_counts_stay_bit_exact(case):
    rng = np.random.default_rng(100 + case)
    rows, groups, width = int(rng.integers(1, 41)), int(rng.integers(1, 4)), 8 * int(rng.integers(1, 4))
    kind = ["softmax", "causal", "layer_norm", "gelu", "transpose"][case % 5]
    if kind == "softmax":
        kernel, cols = Softmax(float(rng.uniform(0.005, 0.3)), groups=groups), groups * width
    elif kind == "causal":
        kernel, cols = Softmax(float(rng.uniform(0.005, 0.3)), groups=groups, causal=True), groups * width
        rows = max(rows, width)
    elif kind == "layer_norm":
        cols = groups * width
        kernel = LayerNorm(rng.uniform(-2, 2, cols), rng.uniform(-1, 1, cols), float(rng.uniform(0.005, 0.1)),
                           float(rng.uniform(0.01, 0.1)))
    elif kind == "gelu":
        kernel, cols = TableMap("gelu", float(rng.uniform(0.005, 0.1)), float(rng.uniform(0.005, 0.1))), width
    else:
        kernel, cols, rows = Transpose(), groups * width, 8 * (rows // 8 + 1)
    x = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    y, _, _ = _run(kernel, x, tiles=int(rng.integers(1, 3)))
    assert np.array_equal(y, kernel.reference(x))


def test_without_a_vector_unit_the_int_reference_runs_on_the_host():
    kernel, shape = KERNELS["layer_norm"]
    x = _ints(np.random.default_rng(5), shape)
    y, stats, placement = _run(kernel, x, device="model:vector=0")
    assert placement == [("k", "host")] and stats.device_segments == 0 and stats.host_ops == 1
    assert np.array_equal(y, kernel.reference(x))


def _float_softmax(real: np.ndarray) -> np.ndarray:
    e = np.exp(real - real.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("s_in", [0.01, 0.05, 0.2])
def test_softmax_is_within_one_lsb_of_float_on_random_rows(s_in):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (256, 64), dtype=np.int8)
    got = Softmax(s_in, groups=2).reference(x).astype(np.float64) / 127
    want = _float_softmax(x.astype(np.float64).reshape(256, 2, 32) * s_in).reshape(256, 64)
    assert np.abs(got - want).max() * 127 <= 0.52


def test_causal_softmax_gives_masked_keys_exactly_zero_and_the_rest_within_one_lsb():
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (32, 64), dtype=np.int8)
    got = Softmax(0.05, groups=2, causal=True).reference(x).reshape(32, 2, 32).astype(np.float64) / 127
    masked = np.triu(np.ones((32, 32), bool), 1)
    assert not got[:, 0][masked].any() and not got[:, 1][masked].any()
    real = np.where(masked[:, None, :], -np.inf, x.astype(np.float64).reshape(32, 2, 32) * 0.05)
    assert np.abs(got - _float_softmax(real)).max() * 127 <= 0.52


def test_layer_norm_is_within_one_lsb_of_torch_on_random_rows():
    rng = np.random.default_rng(9)
    s_in, s_out = 0.03, 4 / 127
    gamma, beta = rng.uniform(0.5, 1.5, 64), rng.uniform(-0.3, 0.3, 64)
    x = _ints(rng, (256, 64), std=30)
    got = LayerNorm(gamma, beta, s_in, s_out).reference(x).astype(np.float64)
    ln = torch.nn.functional.layer_norm(torch.from_numpy(x.astype(np.float64) * s_in), (64,),
                                        torch.from_numpy(gamma), torch.from_numpy(beta), 1e-5).numpy()
    assert np.abs(got - np.clip(ln / s_out, -128, 127)).max() <= 0.6


@pytest.mark.parametrize("n", [32, 64, 128])
def test_layer_norm_of_full_scale_rows_does_not_wrap_its_variance(n):
    """Half the lanes at -128, half at 127: the largest variance an int8 row has (RSUMSQ would wrap from N = 51)."""
    x = np.tile(np.where(np.arange(n) % 2, 127, -128).astype(np.int8), (16, 1))
    x[8:] = np.random.default_rng(n).integers(-128, 128, (8, n), dtype=np.int8)
    kernel = LayerNorm(np.ones(n), np.zeros(n), 0.05, 2 / 127)
    y, _, _ = _run(kernel, x)
    assert np.array_equal(y, kernel.reference(x))
    real = x.astype(np.float64) * 0.05
    want = (real - real.mean(1, keepdims=True)) / np.sqrt(real.var(1, keepdims=True) + 1e-5)
    assert np.abs(y - np.clip(want / (2 / 127), -128, 127)).max() <= 0.6


def _doc_table() -> dict[tuple[str, int], dict[str, str]]:
    """docs/vector.md's accuracy table: (function, bits) -> max, near zero, knee, tails (in LSBs)."""
    text = (Path(__file__).parents[1] / "docs" / "vector.md").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| (GELU|SiLU|exp), int(8|16)[^|]*\| (\d+) \| ([\d.]+) \| x = (-?[\d.]+) \| ([\d.]+) \| "
                     r"([\d.]+) \| ([\d.]+) \|$", line)
        if m:
            rows[(m[1].lower(), int(m[2]))] = dict(zip(("inputs", "max", "at", "near zero", "knee", "tails"),
                                                       m.groups()[2:], strict=True))
    return rows


def _close(stated: str, measured: float) -> bool:
    """``measured`` rounds to ``stated``, to the decimals docs/vector.md gives."""
    decimals = len(stated.partition(".")[2])
    return abs(measured - float(stated)) <= 0.5 * 10 ** -decimals + 1e-12


@pytest.mark.parametrize("name,bits", [("gelu", 8), ("silu", 8), ("exp", 8), ("gelu", 16), ("silu", 16),
                                       ("exp", 16)])
def test_every_table_input_is_within_the_error_docs_state(name, bits):
    if name == "exp":
        inputs = np.arange(-(1 << bits) + 1, 1)
        s_in, s_out, out_range = 16 / ((1 << bits) - 1), 1 / 32767, (0, 32767)
        table = exp_table(s_in, bits=bits)
    else:
        inputs = np.arange(-(1 << (bits - 1)), 1 << (bits - 1))
        s_in, s_out = 8 / (1 << (bits - 1)), 8 / ((1 << (bits - 1)) - 1)
        out_range = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        table = map_table(name, s_in, s_out, bits)
    acc = table_accuracy(name, table, s_in, s_out, inputs, out_range)
    doc = _doc_table()[(name, bits)]
    assert acc.inputs == inputs.size == int(doc["inputs"])
    assert _close(doc["max"], acc.max_error) and _close(doc["at"], acc.worst_input)
    for region, error in acc.by_region.items():
        assert _close(doc[region], error), region
    if bits == 8:
        assert acc.max_error <= 0.5 + 1e-9  # one entry per input: the rounding of the entry, nothing more


def test_kernel_shapes_are_checked_with_the_reason():
    g = Graph()
    g.add_input(Value("x", 8, 20, "int8"))
    g.add_value(Value("y", 8, 20, "int8"))
    g.kernel("sm", "x", "y", Softmax(0.1))
    with Device.open("model") as dev, pytest.raises(ValueError, match="20 columns must be 1 block"):
        GraphSession(dev, g)
    with pytest.raises(ValueError, match="a 8x12 matrix is not whole 8x8 blocks"):
        Transpose().check(8, 12, 8)
    g = Graph()
    g.add_input(Value("x", 8, 16, "int8"))
    g.add_value(Value("y", 8, 16, "int8"))
    g.kernel("t", "x", "y", Transpose())
    with pytest.raises(ValueError, match="transpose of x \\(8x16\\) is 16x8; y is 8x16"):
        g.validate()
    assert math.isclose(Softmax(0.1).table.entries[-1], 32767)
