"""Tests of the GEMM tiling compiler and runner on the device model, and of `dx1 gemm`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from dx1_driver import CommandError, Device, regs

from dx1_bringup.backends import ModelTransport
from dx1_bringup.cli import main
from dx1_bringup.runtime import gemm, gemm_run, reference
from dx1_bringup.runtime.gemm import compile_gemm
from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.operands import padded
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.spec import Opcode, PostOpParams, SocConfig, TileConfig, unpack_command

POST = PostOpParams(mult=3000, shift=20, relu=True)


@pytest.fixture(scope="module")
def dev():
    with Device.open("model") as device:
        yield device


def _operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-(1 << 20), 1 << 20, n).astype(np.int32)
    return a, b, bias


def _plan(caps, m: int, k: int, n: int, **kwargs) -> gemm.GemmPlan:
    # Far-apart operands: the plan never reads them, only checks they fit.
    return compile_gemm(m, k, n, caps, a_addr=0, b_addr=0x40000, c_addr=0x80000, **kwargs)


# -- bit-exact results ----------------------------------------------------------------------------------------

SHAPES = [
    (1, 1, 1), (1, 37, 1), (7, 13, 9), (9, 17, 23), (33, 1, 65), (64, 64, 64), (100, 300, 50),
    (3, 3000, 5),  # K-blocked: the reduction does not fit one block
    (40, 24, 600),  # N wider than one block
]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("post,with_bias", [(None, False), (None, True), (POST, False), (POST, True)])
@pytest.mark.parametrize("tiles", [1, 2])
def test_bit_exact(dev, m, k, n, post, with_bias, tiles):
    a, b, bias = _operands(m, k, n, seed=m * 7 + k * 3 + n)
    bias = bias if with_bias else None
    for t in range(tiles):
        dev.queue(t)  # the rings are allocated on first use; the GEMM's own memory must all come back
    used_before = dev.allocator.used
    c, stats = run_gemm(dev, a, b, bias, post, tiles=tiles)
    expected = reference_gemm(a, b, bias, post)
    assert c.dtype == expected.dtype == (np.int8 if post else np.int32)
    assert c.shape == (m, n)
    np.testing.assert_array_equal(c, expected)
    kp, np_ = padded(k, dev.caps.array), padded(n, dev.caps.array)
    assert stats.macs == m * kp * np_  # every padded MAC issued once
    assert len(stats.tile_ids) <= tiles
    assert dev.allocator.used == used_before


def test_k_blocking_and_wide_n_are_really_used(dev):
    deep = _plan(dev.caps, 3, 3000, 5, post=POST)
    assert deep.kct < deep.k_padded // dev.caps.array
    gemms = [unpack_command(c)[1] for cmds in deep.commands for c in cmds if c[0] == Opcode.GEMM]
    assert any(f["flags"] & 1 for f in gemms) and any(not f["flags"] & 1 for f in gemms)
    wide = _plan(dev.caps, 40, 24, 600, post=POST)
    assert len({blk.n0 for blk in wide.blocks}) > 1


def test_saturation_and_wrapping_match_reference(dev):
    a = np.full((4, 8), 127, np.int8)
    b = np.full((8, 3), 127, np.int8)
    bias = np.array([2**31 - 1, -(2**31), 5], np.int32)
    for post in (None, PostOpParams(1, 0)):
        c, _ = run_gemm(dev, a, b, bias, post)
        np.testing.assert_array_equal(c, reference_gemm(a, b, bias, post))
    wrapped, _ = run_gemm(dev, a, b, bias)
    assert wrapped[0, 0] < 0  # int32 max + 129032 wraps
    saturated, _ = run_gemm(dev, a, b, bias, PostOpParams(1, 0))
    assert saturated[0, 0] == 127 and saturated[0, 1] == -128


@pytest.mark.parametrize("tile_cfg,shape", [
    (TileConfig(array=4), (13, 21, 11)),  # array narrower than the bus: chunks go in pairs
    (TileConfig(array=8, spm_rows=64, acc_rows=16), (10, 40, 20)),  # tiny memories: K-blocked, short blocks
    (TileConfig(array=16, spm_rows=1024, acc_rows=256), (20, 50, 40)),
])
def test_other_device_configurations(tile_cfg, shape):
    with Device(ModelTransport(SocConfig(tile=tile_cfg))) as device:
        for post in (None, POST):
            a, b, bias = _operands(*shape)
            c, _ = run_gemm(device, a, b, bias, post)
            np.testing.assert_array_equal(c, reference_gemm(a, b, bias, post))


def test_stats(dev):
    a, b, bias = _operands(64, 64, 64)
    c, stats = run_gemm(dev, a, b, bias, POST)
    assert stats.tile_ids == [0, 1]
    assert all(stats.commands[t] > 0 for t in stats.tile_ids)
    assert all(stats.delta(t).cycles > 0 for t in stats.tile_ids)
    assert stats.cycles == max(stats.delta(t).cycles for t in stats.tile_ids)
    assert 0 < stats.utilisation() <= 1 and all(0 < stats.utilisation(t) <= 1 for t in stats.tile_ids)
    plan = _plan(dev.caps, 64, 64, 64, bias_addr=0xC0000, post=POST)
    assert stats.dma_bytes == plan.load_bytes + plan.store_bytes == stats.planned_dma_bytes
    assert stats.host_bytes_written == 64 * 64 * 2 + 64 * 4 and stats.host_bytes_read == c.nbytes


# -- plans -----------------------------------------------------------------------------------------------------


def _local_ranges(cmd: bytes, array: int) -> list[tuple[str, int, int]]:
    """(memory, first, last) local rows a command touches."""
    opcode, f = unpack_command(cmd)
    if opcode in (Opcode.LOAD, Opcode.STORE):
        last = f["local_addr"] + (f["rows"] - 1) * f["local_row_stride"] + (f["cols"] - 1) * f["local_col_stride"]
        return [("acc" if f["flags"] & 1 else "spm", f["local_addr"], last)]
    if opcode == Opcode.GEMM:
        return [("spm", f["a_addr"], f["a_addr"] + f["k_chunks"] * f["m"] - 1),
                ("spm", f["b_addr"], f["b_addr"] + f["k_chunks"] * array - 1),
                ("acc", f["c_addr"], f["c_addr"] + f["m"] - 1)]
    assert opcode == Opcode.POSTOP
    ranges = [("acc", f["src_addr"], f["src_addr"] + f["rows"] - 1),
              ("spm", f["dst_addr"], f["dst_addr"] + f["rows"] - 1)]
    if f["flags"] & 2:
        ranges.append(("acc", f["bias_addr"], f["bias_addr"]))
    return ranges


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 9), (256, 256, 256), (3, 3000, 5), (40, 24, 600)])
@pytest.mark.parametrize("post", [None, POST])
def test_plan_local_rows_in_range_and_halves_alternate(dev, m, k, n, post):
    caps = dev.caps
    plan = _plan(caps, m, k, n, bias_addr=0xC0000, post=post)
    depth = {"spm": caps.spm_rows, "acc": caps.acc_rows}
    half = {"spm": caps.spm_rows // 2, "acc": caps.acc_rows // 2}
    for tile, cmds in enumerate(plan.commands):
        assert [unpack_command(c)[1]["tag"] for c in cmds] == list(range(len(cmds)))
        for cmd in cmds:
            for memory, first, last in _local_ranges(cmd, caps.array):
                assert 0 <= first <= last < depth[memory]
                assert first // half[memory] == last // half[memory], "a command straddles two buffer halves"
        steps = plan.steps[tile]
        assert [s.spm_half for s in steps] == [i % 2 for i in range(len(steps))]
        block_halves = {s.block: s.acc_half for s in steps}
        assert list(block_halves.values()) == [i % 2 for i in range(len(block_halves))]
        # Each step's LOADs of A and B (A in two pieces for a tile's first step, but in the first slot) land in
        # that step's scratchpad half: one run of LOADs per step, the halves alternating.
        loads = [unpack_command(c)[1] for c in cmds if c[0] == Opcode.LOAD and not c[1] & 1]
        halves = [f["local_addr"] // half["spm"] for f in loads]
        assert [h for i, h in enumerate(halves) if i == 0 or h != halves[i - 1]] == [s.spm_half for s in steps]
        split = bool(steps) and tile * plan.blocks[steps[0].block].rows // len(plan.commands) > 0
        assert len(loads) == 2 * len(steps) + split


def test_plan_256_cubed(dev):
    plan = _plan(dev.caps, 256, 256, 256, bias_addr=0xC0000, post=POST)
    # Tall, wide blocks with the output kept in the accumulators over several reduction steps: each A row
    # and B column is loaded fewer times than with whole-reduction blocks (0.075 bytes a MAC before).
    assert plan.mt >= 64 and plan.nct >= 4 and plan.kct < 256 // dev.caps.array
    assert {blk.tile for blk in plan.blocks} == {0, 1}
    assert abs(len(plan.commands[0]) - len(plan.commands[1])) <= len(plan.commands[0]) // 10
    assert plan.array_macs == 256 ** 3
    assert plan.load_bytes / plan.useful_macs < 0.05
    # Software pipelining: the next step's LOADs come between this step's GEMMs and its POSTOPs.
    ops = [c[0] for c in plan.commands[0]]
    first_postop = ops.index(Opcode.POSTOP)
    assert Opcode.LOAD in ops[ops.index(Opcode.GEMM):first_postop]


def test_both_tiles_get_work_and_tiles_limit(dev):
    plan = _plan(dev.caps, 64, 64, 64)
    assert all(plan.commands) and {b.tile for b in plan.blocks} == {0, 1}
    one = _plan(dev.caps, 64, 64, 64, tiles=1)
    assert len(one.commands) == 1 and {b.tile for b in one.blocks} == {0}


# -- errors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,message", [
    ((0, 1, 1), "GEMM dimension m must be an integer >= 1, not 0"),
    ((1, -3, 1), "GEMM dimension k must be an integer >= 1, not -3"),
    ((1, 1, 2.0), "GEMM dimension n must be an integer >= 1, not 2.0"),
])
def test_compile_rejects_bad_shapes(dev, shape, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        _plan(dev.caps, *shape)


def test_compile_rejects_bad_arguments(dev):
    caps = dev.caps
    with pytest.raises(ValueError, match="^tiles must be an integer from 1 to 2, not 3$"):
        _plan(caps, 8, 8, 8, tiles=3)
    # tiles is a count, tile_ids a list of ids: a list given as tiles is refused, and so are both at once.
    with pytest.raises(ValueError, match=r"^tiles must be an integer from 1 to 2, not \[1\]$"):
        _plan(caps, 8, 8, 8, tiles=[1])
    with pytest.raises(ValueError, match=r"^give tiles \(how many\) or tile_ids \(which\), not both: 1 and \[1\]$"):
        _plan(caps, 8, 8, 8, tiles=1, tile_ids=[1])
    with pytest.raises(ValueError, match=r"^tile_ids must be a non-empty list of distinct tile ids 0 to 1, "
                                         r"not \[1, 1\]$"):
        _plan(caps, 8, 8, 8, tile_ids=[1, 1])
    assert {blk.tile for blk in _plan(caps, 8, 8, 8, tile_ids=[1]).blocks} == {1}
    with pytest.raises(ValueError, match="^a_addr must be a non-negative multiple of 8, not 4$"):
        compile_gemm(8, 8, 8, caps, a_addr=4, b_addr=0x1000, c_addr=0x2000)
    with pytest.raises(ValueError, match=r"^b_addr \(0x40, 64 bytes\) overlaps c_addr \(0x60, 256 bytes\)$"):
        compile_gemm(8, 8, 8, caps, a_addr=0, b_addr=0x40, c_addr=0x60)
    with pytest.raises(ValueError, match="^c_addr 0xffff8 \\+ 256 bytes runs past the 1048576 bytes of device "
                                         "memory$"):
        compile_gemm(8, 8, 8, caps, a_addr=0, b_addr=0x40, c_addr=0xFFFF8)
    with pytest.raises(TypeError, match=r"^post must be a PostOpParams or None, not \{'mult': 1, 'shift': 0\}$"):
        _plan(caps, 8, 8, 8, post={"mult": 1, "shift": 0})


def test_compile_rejects_device_too_small_for_one_block(dev):
    tiny = dataclasses.replace(dev.caps, spm_rows=16, acc_rows=4)
    with pytest.raises(ValueError, match=r"^a GEMM block does not fit: even 1 row x 8 columns x 8 of the reduction "
                                         r"needs 10 scratchpad rows and 2 accumulator rows per buffer half; the "
                                         r"device has 8 and 2 \(half of 16 and 4\)$"):
        _plan(tiny, 1, 1, 1, bias_addr=0xC0000, post=POST)


def test_run_rejects_bad_operands(dev):
    a, b, bias = _operands(4, 5, 6)
    with pytest.raises(TypeError, match="^a and b must be int8, not float64 and int8$"):
        run_gemm(dev, a.astype(np.float64), b)
    with pytest.raises(TypeError, match="^a and b must be numpy arrays, not list and ndarray$"):
        run_gemm(dev, a.tolist(), b)
    with pytest.raises(ValueError, match=r"^a and b must be non-empty matrices with a.shape\[1\] == b.shape\[0\], "
                                         r"not \(4, 5\) and \(6, 5\)$"):
        run_gemm(dev, a, b.T.copy())
    with pytest.raises(TypeError, match="^bias must be an int32 numpy array, not int64$"):
        run_gemm(dev, a, b, bias.astype(np.int64))
    with pytest.raises(ValueError, match=r"^bias must have shape \(6,\), not \(5,\)$"):
        run_gemm(dev, a, b, bias[:5])


def test_run_rejects_operands_larger_than_device_memory(dev):
    a = np.zeros((1024, 1024), np.int8)
    with pytest.raises(ValueError, match=r"^a 1024x1024x1024 GEMM needs 3145728 bytes of device memory for its "
                                         r"padded operands \(a 1048576, b 1048576, c 1048576\); the device has "
                                         r"1048576$"):
        run_gemm(dev, a, a, post=POST)


def test_command_error_propagates_and_memory_is_freed(dev, monkeypatch):
    real = gemm.compile_gemm

    def broken(*args, **kwargs):
        plan = real(*args, **kwargs)
        plan.commands[0].insert(1, regs.gemm(tag=999, a_addr=0, b_addr=0, c_addr=0, m=0, k_chunks=1))
        return plan

    monkeypatch.setattr(gemm_run, "compile_gemm", broken)
    for t in range(dev.caps.tiles):
        dev.queue(t)
    used = dev.allocator.used
    a, b, _ = _operands(16, 16, 16)
    with pytest.raises(CommandError, match="^command tag 999 \\(GEMM\\) failed with BAD_DIMENSION"):
        run_gemm(dev, a, b)
    assert dev.allocator.used == used
    assert all(dev.queue(t).outstanding == 0 for t in range(dev.caps.tiles))


# -- CLI -------------------------------------------------------------------------------------------------------


def test_cli_gemm_passes(capsys):
    assert main(["gemm", "5", "7", "3"]) == 0
    out = capsys.readouterr().out
    assert "utilisation" in out and "PASS" in out
    assert main(["gemm", "40", "70", "30", "--no-post", "--tiles", "1", "--seed", "3"]) == 0
    assert "tile 1" not in capsys.readouterr().out


def test_cli_gemm_reports_first_mismatch(capsys, monkeypatch):
    real = reference.reference_gemm

    def off_by_one(a, b, bias=None, post=None):
        expected = real(a, b, bias, post)
        expected[1, 2] += 1
        return expected

    monkeypatch.setattr(reference, "reference_gemm", off_by_one)
    assert main(["gemm", "4", "4", "4", "--no-post"]) == 1
    err = capsys.readouterr().err
    assert "1 of 16 elements differ; first at C[1, 2]" in err


def test_cli_gemm_unknown_device(capsys):
    assert main(["gemm", "2", "2", "2", "--device", "bogus"]) == 2
    assert "unknown device 'bogus'" in capsys.readouterr().err


def test_cli_info_with_and_without_device(capsys):
    assert main(["info"]) == 0
    assert "device model" not in capsys.readouterr().out
    assert main(["info", "--device", "model"]) == 0
    out = capsys.readouterr().out
    assert "device model: hw 1.4, tiles 2, array 8x8" in out and "PERF" in out
    assert "features postop copy trace vector" in out
    assert main(["info", "--device", "model:vector=0"]) == 0
    assert "features postop copy trace\n" in capsys.readouterr().out


# -- the command-stream builder, padding and the single-tile layer ---------------------------------------------


def test_command_stream_encodes_through_the_spec_and_counts():
    from dx1_bringup.runtime.commands import CommandStream
    from dx1_bringup.spec import pack_command

    s = CommandStream(array=8, spm_rows=64, acc_rows=16, mem_bytes=4096, tile=1, what="test plan")
    s.load(mem_addr=0, mem_stride=64, local_addr=0, rows=4, cols=2, local_row_stride=1, local_col_stride=4)
    s.gemm(a_addr=0, b_addr=8, c_addr=0, m=4, k_chunks=2, accumulate=True)
    s.postop(src_addr=0, dst_addr=32, rows=4, post=PostOpParams(5, 3, relu=True), bias_addr=8)
    s.store(mem_addr=1024, mem_stride=8, local_addr=32, rows=4, cols=1, local_row_stride=1, local_col_stride=0)
    assert s.commands == [
        pack_command(Opcode.LOAD, tag=0, mem_addr=0, mem_stride=64, local_addr=0, rows=4, cols=2,
                     local_row_stride=1, local_col_stride=4),
        pack_command(Opcode.GEMM, tag=1, flags={"accumulate": True}, a_addr=0, b_addr=8, c_addr=0, m=4, k_chunks=2),
        pack_command(Opcode.POSTOP, tag=2, flags={"relu": True, "bias": True}, src_addr=0, dst_addr=32, rows=4,
                     bias_addr=8, mult=5, shift=3),
        pack_command(Opcode.STORE, tag=3, mem_addr=1024, mem_stride=8, local_addr=32, rows=4, cols=1,
                     local_row_stride=1),
    ]
    assert (s.load_bytes, s.store_bytes, s.array_macs) == (4 * 2 * 8, 4 * 8, 4 * 2 * 64)
    with pytest.raises(ValueError, match=r"^test plan: tile 1 command 4 \(GEMM output\) touches accumulator rows "
                                         r"14..17, outside the 16 rows the device has$"):
        s.gemm(a_addr=0, b_addr=8, c_addr=14, m=4, k_chunks=1)
    with pytest.raises(ValueError, match=r"^test plan: tile 1 command 4 \(STORE\) moves device memory "
                                         r"0xff8..0x1008 with stride 8: not 8-byte aligned or past the 4096 bytes"):
        s.store(mem_addr=4088, mem_stride=8, local_addr=0, rows=2, cols=1, local_row_stride=1, local_col_stride=0)
    with pytest.raises(TypeError, match=r"^post must be a PostOpParams, not \{'mult': 1\}$"):
        s.postop(src_addr=0, dst_addr=0, rows=1, post={"mult": 1}, bias_addr=None)
    assert len(s.commands) == 4, "a refused command was kept"


def test_command_stream_tags_wrap_at_the_tag_field():
    from dx1_bringup.runtime.commands import CommandStream

    s = CommandStream(array=8, spm_rows=64, acc_rows=16)
    s.commands = [b""] * 0xFFFF
    s.gemm(a_addr=0, b_addr=0, c_addr=0, m=1, k_chunks=1)
    s.gemm(a_addr=0, b_addr=0, c_addr=0, m=1, k_chunks=1)
    assert [unpack_command(c)[1]["tag"] for c in s.commands[-2:]] == [0xFFFF, 0]
    with pytest.raises(ValueError, match=r"moves device memory 0x0..0x8 with stride 8: not 8-byte aligned or past "
                                         r"the 0 bytes of device memory$"):
        s.load(mem_addr=0, mem_stride=8, local_addr=0, rows=1, cols=1, local_row_stride=0, local_col_stride=0)


def test_pad_operand():
    from dx1_bringup.runtime.operands import pad_operand

    x = np.arange(6, dtype=np.int8).reshape(2, 3)
    out = pad_operand(x, (3, 8))
    assert out.dtype == np.int8 and out.shape == (3, 8)
    np.testing.assert_array_equal(out[:2, :3], x)
    assert not out[2:].any() and not out[:, 3:].any()
    np.testing.assert_array_equal(pad_operand(np.array([1, 2], np.int32), (4,)), [1, 2, 0, 0])
    with pytest.raises(ValueError, match=r"^an operand of shape \(2, 3\) cannot be padded to \(2, 2\): the padded "
                                         r"shape must have as many dimensions and be at least as large in each$"):
        pad_operand(x, (2, 2))
    with pytest.raises(ValueError, match=r"cannot be padded to \(8,\)"):
        pad_operand(x, (8,))


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_plan_on_the_tile_model_equals_the_reference(with_bias):
    """The single-tile plan, run on the golden tile model, gives reference_gemm bit for bit."""
    from dx1_bringup.runtime.tile_plan import plan_linear

    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (11, 20), dtype=np.int8)
    b = rng.integers(-128, 128, (20, 13), dtype=np.int8)
    bias = rng.integers(-5000, 5000, 13, dtype=np.int32) if with_bias else None
    post = PostOpParams(181, 17, relu=True)
    plan = plan_linear(a, b, bias, post)
    got, statuses = plan.run_on_model()
    assert statuses == [0] * len(plan.commands) == [0] * (2 * 2)  # a GEMM and a POSTOP per output chunk
    np.testing.assert_array_equal(got, reference_gemm(a, b, bias, post))
    with pytest.raises(TypeError, match=r"^post must be a PostOpParams \(a linear layer's output is requantised to "
                                        r"int8\), not None$"):
        plan_linear(a, b, bias, None)


def test_dx1_help_lists_every_tool_on_one_line(monkeypatch, capsys):
    """``dx1 --help`` names every subcommand with a one-line help, even in an 80-column terminal."""
    import argparse

    from dx1_bringup.cli import build_parser

    monkeypatch.setenv("COLUMNS", "80")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {"demo", "gemm", "fuzz", "bench", "rtl", "fpga", "sim", "replay", "serve"} <= set(sub.choices)
    assert main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0]: line for line in lines if line.startswith("    ") and not line.startswith("     ")}
    assert set(listed) == set(sub.choices)
    assert all(len(line.split()) > 2 and len(line) <= 80 for line in listed.values())
    assert not [line for line in lines if line.startswith(" " * 15) and line.strip()], "a help line wrapped"
