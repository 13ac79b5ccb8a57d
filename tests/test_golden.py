"""The golden model agrees with independent, plain-Python readings of the spec's documented semantics."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from dx1_bringup.model.tile import COMPUTE_OPCODES, MAX_SHIFT, TileModel, check_command, requantize
from dx1_bringup.sim.stimulus import BAD_KINDS, bad_command, random_gemm, random_int8, random_int32, random_postop
from dx1_bringup.spec import (
    CHECK_ORDER,
    COMMANDS,
    POSTOP_MAX_SHIFT,
    ErrorCode,
    Opcode,
    PostOpParams,
    TileConfig,
    pack_command,
    unpack_command,
)

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

CONFIGS = [
    pytest.param(TileConfig(array=2, spm_rows=64, acc_rows=32), id="a2"),
    pytest.param(TileConfig(array=4, spm_rows=1024, acc_rows=256), id="a4"),
    pytest.param(TileConfig(array=8, spm_rows=256, acc_rows=64), id="a8"),
]
BAD_KIND_CONFIGS = [
    pytest.param(TileConfig(), id="default"),
    pytest.param(TileConfig(array=4, spm_rows=1024, acc_rows=256), id="a4"),
]


def wrap32(value: int) -> int:
    """value modulo 2**32, as a signed 32-bit integer."""
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


def ref_gemm(spm: list[list[int]], acc: list[list[int]], n: int, a_addr: int, b_addr: int, c_addr: int,
             m: int, k_chunks: int, accumulate: bool) -> list[list[int]]:
    """The accumulator after a GEMM, from the spec's formula, with Python ints and explicit loops."""
    acc = [row[:] for row in acc]
    for i in range(m):
        for col in range(n):
            total = acc[c_addr + i][col] if accumulate else 0
            for k in range(k_chunks):
                for j in range(n):
                    total += spm[a_addr + k * m + i][j] * spm[b_addr + k * n + j][col]
            acc[c_addr + i][col] = wrap32(total)
    return acc


def ref_requant(acc: int, bias: int, mult: int, shift: int, relu: bool) -> int:
    """One lane of the post-op from the spec's words: sat32(acc + bias), ReLU, exact product,
    divide by 2**shift rounding half away from zero, saturate to int8."""
    x = min(max(acc + bias, INT32_MIN), INT32_MAX)
    if relu and x < 0:
        x = 0
    p = x * mult
    if shift:
        magnitude = (abs(p) + (1 << (shift - 1))) // (1 << shift)
        y = magnitude if p >= 0 else -magnitude
    else:
        y = p
    return min(max(y, -128), 127)


def random_model(rng: np.random.Generator, config: TileConfig) -> TileModel:
    """A model whose scratchpad holds random int8 (extremes favoured) and accumulator random int32."""
    model = TileModel(config)
    model.spm[:] = random_int8(rng, model.spm.shape)
    model.acc[:] = random_int32(rng, model.acc.shape)
    return model


# --- GEMM -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_gemm_matches_reference(config: TileConfig) -> None:
    """Random GEMMs (shapes, addresses, accumulate flag) change acc exactly as the loop reference does, spm not."""
    rng = np.random.default_rng(config.array)
    n = config.array
    model = random_model(rng, config)
    for _ in range(12):
        k_chunks = int(rng.integers(1, 4))
        m = int(rng.integers(1, min(12, (config.spm_rows - k_chunks * n) // k_chunks) + 1))
        a_addr = int(rng.integers(0, config.spm_rows - k_chunks * m + 1))
        b_addr = int(rng.integers(0, config.spm_rows - k_chunks * n + 1))
        c_addr = int(rng.integers(0, config.acc_rows - m + 1))
        accumulate = bool(rng.integers(0, 2))
        expected = ref_gemm(model.spm.tolist(), model.acc.tolist(), n, a_addr, b_addr, c_addr, m, k_chunks,
                            accumulate)
        spm_before = model.spm.copy()
        cmd = pack_command(Opcode.GEMM, flags={"accumulate": accumulate}, a_addr=a_addr, b_addr=b_addr,
                           c_addr=c_addr, m=m, k_chunks=k_chunks)
        assert model.execute(cmd) == ErrorCode.OK
        assert model.acc.dtype == np.int32
        assert model.acc.tolist() == expected
        np.testing.assert_array_equal(model.spm, spm_before)


def test_gemm_overwrite_vs_accumulate() -> None:
    """Without the flag the old accumulator rows are replaced; with it they are added to; other rows stay."""
    config = TileConfig(array=4, spm_rows=1024, acc_rows=256)
    rng = np.random.default_rng(7)
    model = random_model(rng, config)
    a = model.spm[0:3].astype(np.int64)
    b = model.spm[100:104].astype(np.int64)
    product = a @ b
    old = model.acc.copy()
    cmd = dict(a_addr=0, b_addr=100, c_addr=10, m=3, k_chunks=1)
    assert model.execute(pack_command(Opcode.GEMM, **cmd)) == ErrorCode.OK
    np.testing.assert_array_equal(model.acc[10:13], product)
    assert model.execute(pack_command(Opcode.GEMM, flags={"accumulate": True}, **cmd)) == ErrorCode.OK
    np.testing.assert_array_equal(model.acc[10:13], 2 * product)
    np.testing.assert_array_equal(np.delete(model.acc, [10, 11, 12], axis=0), np.delete(old, [10, 11, 12], axis=0))


def test_gemm_chunk_layout() -> None:
    """Chunk k reads activation rows a_addr + k*m .. and weight rows b_addr + k*n ..; row j of a chunk is B[j]."""
    config = TileConfig(array=2, spm_rows=64, acc_rows=32)
    model = TileModel(config)
    # m = 1, two chunks: A chunk 0 = [1, 0], chunk 1 = [0, 1]; B_0 = [[1, 2], [3, 4]], B_1 = [[5, 6], [7, 8]].
    model.spm[0:2] = [[1, 0], [0, 1]]
    model.spm[8:12] = [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert model.execute(pack_command(Opcode.GEMM, a_addr=0, b_addr=8, c_addr=3, m=1, k_chunks=2)) == ErrorCode.OK
    assert model.acc[3].tolist() == [1 + 7, 2 + 8]
    assert not model.acc[np.arange(32) != 3].any()


def test_gemm_int32_wraps() -> None:
    """Accumulating past INT32_MAX or below INT32_MIN wraps modulo 2**32, as int8 x int8 products are summed."""
    config = TileConfig(array=4, spm_rows=1024, acc_rows=256)
    model = TileModel(config)
    model.spm[0] = [-128, -128, -128, -128]       # activation row
    model.spm[4:8] = -128                          # every weight -128: each output is 4 * 16384 = 65536
    model.spm[8] = [127, -128, 127, -128]
    start = [INT32_MAX, INT32_MAX - 65535, INT32_MIN + 10, -1]
    model.acc[0] = start
    assert model.execute(pack_command(Opcode.GEMM, flags={"accumulate": True}, a_addr=0, b_addr=4, c_addr=0,
                                      m=1, k_chunks=1)) == ErrorCode.OK
    assert model.acc[0].tolist() == [wrap32(v + 65536) for v in start]
    assert model.acc[0].tolist() == [INT32_MIN + 65535, INT32_MIN, INT32_MIN + 65546, 65535]
    # Row 8 times all -128: each output is -128 * (127 - 128 + 127 - 128) = 256.
    model.acc[1] = [INT32_MIN, INT32_MIN + 1, INT32_MAX, 0]
    assert model.execute(pack_command(Opcode.GEMM, flags={"accumulate": True}, a_addr=8, b_addr=4, c_addr=1,
                                      m=1, k_chunks=1)) == ErrorCode.OK
    assert model.acc[1].tolist() == [INT32_MIN + 256, INT32_MIN + 257, INT32_MIN + 255, 256]


def test_gemm_random_accumulator_extremes_wrap() -> None:
    """Many accumulating GEMMs over accumulators near the int32 limits all wrap like the reference."""
    config = TileConfig(array=4, spm_rows=1024, acc_rows=256)
    rng = np.random.default_rng(11)
    model = random_model(rng, config)
    model.acc[:] = rng.choice([INT32_MIN, INT32_MIN + 1, INT32_MAX - 1, INT32_MAX], size=model.acc.shape)
    for _ in range(20):
        k_chunks, m = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        args = dict(a_addr=int(rng.integers(0, 512)), b_addr=int(rng.integers(512, 1024 - 4 * k_chunks)),
                    c_addr=int(rng.integers(0, 256 - m)), m=m, k_chunks=k_chunks)
        expected = ref_gemm(model.spm.tolist(), model.acc.tolist(), 4, accumulate=True, **args)
        assert model.execute(pack_command(Opcode.GEMM, flags={"accumulate": True}, **args)) == ErrorCode.OK
        assert model.acc.tolist() == expected


@pytest.mark.parametrize("value", [-128, 127])
def test_gemm_is_exact_at_the_extremes_on_the_deepest_reduction(value: int) -> None:
    # The model multiplies in float64 (BLAS); with every operand at an extreme over the longest K the
    # scratchpad holds, each sum is exact and the int32 wrap matches the integer reference.
    config = TileConfig(array=8, spm_rows=4096, acc_rows=64)
    tile = TileModel(config)
    n = config.array
    kc = config.spm_rows // (2 * n)
    tile.spm[:] = np.int8(value)
    tile.spm[kc * n:, :] = np.int8(-128)
    assert tile.execute(pack_command(Opcode.GEMM, a_addr=0, b_addr=kc * n, c_addr=0, m=n, k_chunks=kc)) == ErrorCode.OK
    exact = value * -128 * kc * n
    assert abs(exact) < 1 << 53
    np.testing.assert_array_equal(tile.acc[:n], np.full((n, n), wrap32(exact), dtype=np.int32))


def test_macs_count() -> None:
    """macs grows by m*k_chunks*n*n per executed GEMM and by nothing for NOP, POSTOP or a refused GEMM."""
    config = TileConfig(array=4, spm_rows=1024, acc_rows=256)
    rng = np.random.default_rng(3)
    model = TileModel(config)
    expected = 0
    for _ in range(30):
        m, kc = int(rng.integers(1, 20)), int(rng.integers(1, 5))
        assert model.execute(pack_command(Opcode.GEMM, m=m, k_chunks=kc)) == ErrorCode.OK
        expected += m * kc * 16
        assert model.macs == expected
    assert model.execute(pack_command(Opcode.NOP)) == ErrorCode.OK
    assert model.execute(pack_command(Opcode.POSTOP, rows=3)) == ErrorCode.OK
    assert model.execute(pack_command(Opcode.GEMM, m=300, k_chunks=1)) == ErrorCode.ACC_RANGE
    assert model.macs == expected


# --- requantize -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("p", "shift", "expected"), [
    (-3, 1, -2), (3, 1, 2), (-1, 2, 0), (1, 2, 0), (-2, 2, -1), (2, 2, 1), (-6, 2, -2), (-5, 2, -1),
    (5, 1, 3), (-5, 1, -3), (127, 0, 127), (128, 0, 127), (-128, 0, -128), (-129, 0, -128),
    (255, 1, 127), (-255, 1, -128), (-257, 1, -128), (253, 1, 127), (-253, 1, -127), (0, 47, 0),
])
def test_requantize_worked_examples(p: int, shift: int, expected: int) -> None:
    """Hand-worked roundings (half away from zero) and int8 saturations, with mult 1 and no bias."""
    out = requantize(np.array([p], dtype=np.int32), 0, PostOpParams(1, shift, False))
    assert out.dtype == np.int8
    assert out.tolist() == [expected]


def test_requantize_saturates_after_bias_before_multiply() -> None:
    """acc + bias saturates to int32 first, ReLU then sees the saturated value, and the multiply is exact."""
    acc = np.array([INT32_MAX, INT32_MIN, INT32_MIN, INT32_MAX], dtype=np.int32)
    bias = np.array([INT32_MAX, -1, -1, 0], dtype=np.int32)
    # Lane 0: sat(2**32 - 2) = 2**31 - 1, >> 31 rounds to 1 (2 without saturation, -1 if wrapped).
    assert requantize(acc[:1], bias[:1], PostOpParams(1, 31, False)).tolist() == [1]
    assert requantize(acc[1:2], bias[1:2], PostOpParams(1, 31, False)).tolist() == [-1]
    assert requantize(acc, bias, PostOpParams(1, 31, True)).tolist() == [1, 0, 0, 1]
    # Largest product: (2**31 - 1) * 65535 >> 47 is 0.99998 -> 1; INT32_MIN * 65535 >> 47 is -0.99998 -> -1.
    assert requantize(acc, 0, PostOpParams(65535, 47, False)).tolist() == [1, -1, -1, 1]
    assert requantize(acc, 0, PostOpParams(65535, 46, False)).tolist() == [2, -2, -2, 2]


def test_requantize_matches_scalar_reference() -> None:
    """Random and edge accumulators, per-lane biases, every mult/shift corner and relu: lane for lane equal to
    the pure-Python rule."""
    rng = np.random.default_rng(2024)
    lanes = 8
    for mult, shift, relu in itertools.product((0, 1, 2, 255, 32768, 65535, int(rng.integers(0, 1 << 16))),
                                               (0, 1, 2, 7, 15, 16, 24, 31, 32, 40, 46, 47), (False, True)):
        acc = random_int32(rng, (24, lanes))
        bias = random_int32(rng, lanes)
        # Exact halves of the rounding step (only reachable when mult is 1).
        if 0 < shift <= 28:
            acc[0] = [(2 * j + 1) * (1 << (shift - 1)) * (1 if j % 2 else -1) for j in range(lanes)]
        out = requantize(acc, bias, PostOpParams(mult, shift, relu))
        expected = [[ref_requant(a, b, mult, shift, relu) for a, b in zip(row, bias.tolist(), strict=True)]
                    for row in acc.tolist()]
        assert out.dtype == np.int8 and out.shape == acc.shape
        assert out.tolist() == expected, (mult, shift, relu)
        scalar_bias = int(bias[0])
        expected_scalar = [[ref_requant(a, scalar_bias, mult, shift, relu) for a in row] for row in acc.tolist()]
        assert requantize(acc, scalar_bias, PostOpParams(mult, shift, relu)).tolist() == expected_scalar


def test_requantize_exact_halves() -> None:
    """Every +/-(j + 1/2) and +/-(j + 1/2 +- 1/2**shift) with mult 1 rounds as the reference (shift 1..31)."""
    for shift in range(1, 32):
        step = 1 << shift
        values = []
        for j in range(0, 130):
            half = j * step + step // 2
            values += [half, -half, half - 1, -half + 1, half + 1, -half - 1]
        acc = np.array([v for v in values if INT32_MIN <= v <= INT32_MAX], dtype=np.int32)
        expected = [ref_requant(a, 0, 1, shift, False) for a in acc.tolist()]
        assert requantize(acc, 0, PostOpParams(1, shift, False)).tolist() == expected, shift


def test_requantize_extreme_random_products() -> None:
    """Random full-range accumulators and biases with random mult and shift, 20000 lanes, against the reference."""
    rng = random.Random(5)
    for _ in range(200):
        mult, shift, relu = rng.randrange(1 << 16), rng.randrange(MAX_SHIFT + 1), rng.random() < 0.5
        acc = [rng.randint(INT32_MIN, INT32_MAX) for _ in range(100)]
        bias = [rng.choice([0, INT32_MIN, INT32_MAX, rng.randint(INT32_MIN, INT32_MAX)]) for _ in range(100)]
        out = requantize(np.array(acc, dtype=np.int32), np.array(bias, dtype=np.int32),
                         PostOpParams(mult, shift, relu))
        assert out.tolist() == [ref_requant(a, b, mult, shift, relu) for a, b in zip(acc, bias, strict=True)]


@pytest.mark.parametrize(("mult", "shift", "message"), [
    (1, 48, "post-op shift must be from 0 to 47, not 48"),
    (1, -1, "post-op shift must be from 0 to 47, not -1"),
    (65536, 0, "post-op mult must fit in 16 bits unsigned, not 65536"),
    (-1, 0, "post-op mult must fit in 16 bits unsigned, not -1"),
])
def test_postop_params_reject_bad_values(mult: int, shift: int, message: str) -> None:
    """PostOpParams refuses a shift outside 0..47 or a mult outside POSTOP's 16-bit field, with the exact message."""
    assert MAX_SHIFT == POSTOP_MAX_SHIFT == 47
    assert COMMANDS[Opcode.POSTOP].field("mult").width == 16
    with pytest.raises(ValueError, match=f"^{message}$"):
        PostOpParams(mult, shift, False)


@pytest.mark.parametrize(("args", "message"), [
    ((1.5, 0, False), r"post-op mult must be an integer, not 1.5"),
    ((1, True, False), r"post-op shift must be an integer, not True"),
    ((1, 0, 1), r"post-op relu must be a bool, not 1"),
])
def test_postop_params_reject_wrong_types(args: tuple, message: str) -> None:
    with pytest.raises(TypeError, match=f"^{message}$"):
        PostOpParams(*args)


def test_postop_params_are_one_frozen_value() -> None:
    """Equal parameters are equal (and hashable), numpy integers become ints, and a POSTOP decodes to them."""
    post = PostOpParams(np.int64(181), np.uint8(17), np.bool_(True))
    assert post == PostOpParams(181, 17, True) and hash(post) == hash(PostOpParams(181, 17, True))
    assert type(post.mult) is int and type(post.relu) is bool
    with pytest.raises(AttributeError):
        post.mult = 3  # type: ignore[misc]
    _, fields = unpack_command(pack_command(Opcode.POSTOP, flags={"relu": True}, src_addr=0, dst_addr=0, rows=1,
                                            bias_addr=0, mult=181, shift=17))
    assert PostOpParams.from_command(fields) == post
    with pytest.raises(TypeError, match=r"^post must be a PostOpParams, not \{'mult': 1\}$"):
        requantize(np.zeros(4, dtype=np.int32), 0, {"mult": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("config", CONFIGS)
def test_postop_command_matches_reference(config: TileConfig) -> None:
    """POSTOP commands write requantised accumulator rows to the scratchpad lane by lane as the reference does,
    with and without the bias row, and touch nothing else."""
    rng = np.random.default_rng(100 + config.array)
    model = random_model(rng, config)
    spec = COMMANDS[Opcode.POSTOP]
    for tag in range(15):
        cmd = random_postop(rng, config, tag)
        _opcode, f = unpack_command(cmd)
        relu = bool(f["flags"] >> spec.flag_bit("relu") & 1)
        use_bias = bool(f["flags"] >> spec.flag_bit("bias") & 1)
        bias = model.acc[f["bias_addr"]].tolist() if use_bias else [0] * config.array
        expected_spm = model.spm.tolist()
        for i in range(f["rows"]):
            expected_spm[f["dst_addr"] + i] = [
                ref_requant(a, b, f["mult"], f["shift"], relu)
                for a, b in zip(model.acc[f["src_addr"] + i].tolist(), bias, strict=True)]
        acc_before = model.acc.copy()
        assert model.execute(cmd) == ErrorCode.OK
        assert model.spm.tolist() == expected_spm
        np.testing.assert_array_equal(model.acc, acc_before)


# --- command checks ---------------------------------------------------------------------------------------------

SMALL = TileConfig(array=4, spm_rows=1024, acc_rows=256)


def _gemm_with_faults(faults: set[ErrorCode]) -> bytes:
    """A GEMM for SMALL that is wrong in exactly the listed ways (later faults may be masked by earlier ones)."""
    fields = dict(a_addr=0, b_addr=0, c_addr=0, m=2, k_chunks=1)
    raw = 0
    if ErrorCode.RESERVED_BITS in faults:
        raw |= 1 << 9  # undefined flag bit
    if ErrorCode.BAD_DIMENSION in faults:
        fields["k_chunks"] = 0
    if ErrorCode.SPM_RANGE in faults:
        fields["b_addr"] = SMALL.spm_rows - SMALL.array + 1
    if ErrorCode.ACC_RANGE in faults:
        fields["c_addr"] = SMALL.acc_rows - 1
    return pack_command(Opcode.GEMM, raw=raw, **fields)


def _postop_with_faults(faults: set[ErrorCode]) -> bytes:
    """A POSTOP for SMALL (bias flag on) that is wrong in exactly the listed ways."""
    fields = dict(src_addr=0, dst_addr=0, rows=2, bias_addr=0, mult=1, shift=0)
    raw = 0
    if ErrorCode.RESERVED_BITS in faults:
        raw |= 1 << 255
    if ErrorCode.BAD_DIMENSION in faults:
        fields["rows"] = 0
    if ErrorCode.BAD_FIELD in faults:
        fields["shift"] = 48
    if ErrorCode.SPM_RANGE in faults:
        fields["dst_addr"] = SMALL.spm_rows - 1
    if ErrorCode.ACC_RANGE in faults:
        fields["bias_addr"] = SMALL.acc_rows
    return pack_command(Opcode.POSTOP, raw=raw, flags={"bias": True}, **fields)


def _subsets(codes: tuple[ErrorCode, ...]):
    for r in range(1, len(codes) + 1):
        yield from (set(c) for c in itertools.combinations(codes, r))


@pytest.mark.parametrize(("build", "codes"), [
    pytest.param(_gemm_with_faults, (ErrorCode.RESERVED_BITS, ErrorCode.BAD_DIMENSION, ErrorCode.SPM_RANGE,
                                     ErrorCode.ACC_RANGE), id="gemm"),
    pytest.param(_postop_with_faults, (ErrorCode.RESERVED_BITS, ErrorCode.BAD_DIMENSION, ErrorCode.BAD_FIELD,
                                       ErrorCode.SPM_RANGE, ErrorCode.ACC_RANGE), id="postop"),
])
def test_check_command_reports_first_failure_in_check_order(build, codes: tuple[ErrorCode, ...]) -> None:
    """For every combination of faults, check_command gives the one that comes first in CHECK_ORDER."""
    assert check_command(build(set()), SMALL) == ErrorCode.OK
    for faults in _subsets(codes):
        expected = min(faults, key=CHECK_ORDER.index)
        assert check_command(build(faults), SMALL) == expected, sorted(f.name for f in faults)


def test_reserved_bits_and_zero_dims_give_reserved_bits() -> None:
    """A command with a reserved bit set and zero dimensions is refused for its reserved bit."""
    cmd = pack_command(Opcode.GEMM, m=0, k_chunks=0, raw=1 << 200)
    assert check_command(cmd, SMALL) == ErrorCode.RESERVED_BITS
    assert check_command(pack_command(Opcode.GEMM, m=0, k_chunks=1), SMALL) == ErrorCode.BAD_DIMENSION


@pytest.mark.parametrize("opcode", [0x01, 0x02, 0x05, 0x06, 0x07, 0x08, 0x0C, 0x7F, 0xFF])
def test_non_compute_opcodes_are_bad_opcode(opcode: int) -> None:
    """Opcodes the compute core does not run (including undefined ones) are BAD_OPCODE, even with reserved bits."""
    assert opcode not in COMPUTE_OPCODES
    cmd = (opcode | 1 << 255).to_bytes(32, "little")
    assert check_command(cmd, SMALL) == ErrorCode.BAD_OPCODE


def test_range_checks_at_the_boundary() -> None:
    """Ranges that end exactly at the last row pass; one row more fails with the range's code."""
    n, spm, acc = SMALL.array, SMALL.spm_rows, SMALL.acc_rows
    gemm = dict(m=4, k_chunks=2)
    assert check_command(pack_command(Opcode.GEMM, a_addr=spm - 8, b_addr=spm - 2 * n, c_addr=acc - 4,
                                      **gemm), SMALL) == ErrorCode.OK
    assert check_command(pack_command(Opcode.GEMM, a_addr=spm - 7, **gemm), SMALL) == ErrorCode.SPM_RANGE
    assert check_command(pack_command(Opcode.GEMM, b_addr=spm - 2 * n + 1, **gemm), SMALL) == ErrorCode.SPM_RANGE
    assert check_command(pack_command(Opcode.GEMM, c_addr=acc - 3, **gemm), SMALL) == ErrorCode.ACC_RANGE
    post = dict(rows=3, shift=47)
    assert check_command(pack_command(Opcode.POSTOP, src_addr=acc - 3, dst_addr=spm - 3, bias_addr=acc - 1,
                                      flags={"bias": True}, **post), SMALL) == ErrorCode.OK
    assert check_command(pack_command(Opcode.POSTOP, dst_addr=spm - 2, **post), SMALL) == ErrorCode.SPM_RANGE
    assert check_command(pack_command(Opcode.POSTOP, src_addr=acc - 2, **post), SMALL) == ErrorCode.ACC_RANGE
    # Without the bias flag, bias_addr is not used and not checked.
    assert check_command(pack_command(Opcode.POSTOP, bias_addr=0xFFFF, **post), SMALL) == ErrorCode.OK


@pytest.mark.parametrize("config", BAD_KIND_CONFIGS)
@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_command_kinds_give_claimed_code(config: TileConfig, kind: str) -> None:
    """Every kind of bad_command, over several seeds, is refused with the code it claims and changes nothing."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        cmd, code = bad_command(rng, config, seed, kind)
        assert code != ErrorCode.OK
        assert check_command(cmd, config) == code, (seed, cmd.hex())
        model = TileModel(config)
        model.spm[:] = random_int8(rng, model.spm.shape)
        model.acc[:] = random_int32(rng, model.acc.shape)
        spm, acc = model.spm.copy(), model.acc.copy()
        assert model.execute(cmd) == code
        np.testing.assert_array_equal(model.spm, spm)
        np.testing.assert_array_equal(model.acc, acc)
        assert model.macs == 0


def test_bad_command_rejects_unknown_kind() -> None:
    """An unknown kind name is a ValueError listing the kinds."""
    with pytest.raises(ValueError, match=r"^bad command kind must be one of \("):
        bad_command(np.random.default_rng(0), SMALL, 0, "typo")


@pytest.mark.parametrize("config", BAD_KIND_CONFIGS)
def test_random_commands_are_legal(config: TileConfig) -> None:
    """random_gemm and random_postop only produce commands the model accepts, with the tag asked for."""
    rng = np.random.default_rng(9)
    for tag in range(100):
        for cmd in (random_gemm(rng, config, tag), random_postop(rng, config, tag)):
            assert check_command(cmd, config) == ErrorCode.OK
            assert int.from_bytes(cmd[2:4], "little") == tag


# --- stimulus on the smallest and largest legal memories ---------------------------------------------------------


@pytest.mark.parametrize("config", [
    pytest.param(TileConfig(array=16, spm_rows=64, acc_rows=32), id="a16_s64"),
    pytest.param(TileConfig(array=2, spm_rows=8, acc_rows=4), id="a2_s8"),
])
def test_random_gemm_on_smallest_scratchpad(config: TileConfig) -> None:
    """random_gemm produces legal commands for the smallest legal scratchpad."""
    rng = np.random.default_rng(0)
    for tag in range(50):
        assert check_command(random_gemm(rng, config, tag), config) == ErrorCode.OK


def test_random_postop_with_accumulator_deeper_than_scratchpad() -> None:
    """random_postop produces legal commands when the accumulator buffer has more rows than the scratchpad."""
    config = TileConfig(array=2, spm_rows=8, acc_rows=1024)
    rng = np.random.default_rng(0)
    for tag in range(50):
        assert check_command(random_postop(rng, config, tag), config) == ErrorCode.OK


def test_bad_command_acc_range_on_largest_accumulator() -> None:
    """bad_command('acc_range') gives an ACC_RANGE command for the largest legal accumulator buffer."""
    config = TileConfig(array=8, spm_rows=4096, acc_rows=65536)
    for seed in range(12):
        cmd, code = bad_command(np.random.default_rng(seed), config, seed, "acc_range")
        assert code == ErrorCode.ACC_RANGE and check_command(cmd, config) == code
