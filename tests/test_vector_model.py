"""The vector unit's golden model against a second, scalar reading of the spec, and its checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dx1_bringup.model import TileModel, check_command
from dx1_bringup.model.vector import round_shift
from dx1_bringup.sim.vector_stimulus import (
    VECTOR_BAD_KINDS,
    bad_vector_command,
    random_table_entries,
    random_transpose,
    random_vector,
    random_vector_command,
    vector_meta,
)
from dx1_bringup.spec import (
    COMMANDS,
    TABLE_ENTRIES,
    VECTOR_OPS,
    ErrorCode,
    Opcode,
    TileConfig,
    VectorOp,
    pack_command,
    signed32,
    table_rows,
    unpack_command,
    unsigned32,
)

CONFIGS = [TileConfig(array=2, spm_rows=64, acc_rows=32), TileConfig(array=4, spm_rows=256, acc_rows=64),
           TileConfig(array=8, spm_rows=1024, acc_rows=256)]


def _filled(config: TileConfig, rng: np.random.Generator) -> TileModel:
    tile = TileModel(config)
    tile.spm[:] = rng.integers(-128, 128, size=tile.spm.shape)
    edge = np.array([-(1 << 31), (1 << 31) - 1, 0, -1, 1], dtype=np.int64)
    acc = rng.integers(-(1 << 31), 1 << 31, size=tile.acc.shape)
    small = rng.random(tile.acc.shape) < 0.5
    acc[small] = rng.integers(-300, 300, size=int(small.sum()))
    pick = rng.random(tile.acc.shape) < 0.1
    acc[pick] = rng.choice(edge, size=int(pick.sum()))
    tile.acc[:] = acc
    tile.vector.table[:] = random_table_entries(rng)
    return tile


def _scalar_rs(p: int, s: int) -> int:
    return p if s == 0 else (p + (1 << (s - 1)) - (p < 0)) >> s


def _scalar_vector(tile: TileModel, f: dict[str, int]) -> None:
    """The VECTOR command one lane at a time, in the spec's order, with Python integers."""
    flag = COMMANDS[Opcode.VECTOR].flag_bit
    acc = {x: bool(f["flags"] >> flag(f"{x}_acc") & 1) for x in "abd"}
    mem = {x: tile.acc if acc[x] else tile.spm for x in "abd"}
    spec = VECTOR_OPS[VectorOp(f["vop"])]
    op, s, n = spec.op, f["shift"], tile.config.array
    low, high = (-(1 << 31), (1 << 31) - 1) if acc["d"] else (-128, 127)
    t = [int(v) for v in tile.vector.table]
    for r in range(f["rows"]):
        stat = None
        for c in range(f["cols"]):
            a = [int(v) for v in mem["a"][f["a_addr"] + r * f["a_row_stride"] + c]]
            if spec.uses_b:
                b = [int(v) for v in mem["b"][f["b_addr"] + r * f["b_row_stride"] + c * f["b_col_stride"]]]
            if spec.kind == "reduce":
                for x in a:
                    term = (x * x) % (1 << 32) if op == VectorOp.RSUMSQ else x
                    stat = term if stat is None else max(stat, term) if op == VectorOp.RMAX else stat + term
                continue
            out = []
            for lane in range(n):
                x = a[lane]
                y = b[lane] if spec.uses_b else 0
                if op == VectorOp.LUT:
                    u = x - signed32(f["imm"])
                    i = u >> s
                    if i < 0:
                        v = t[0]
                        tile.vector.underflows += 1
                    elif i >= TABLE_ENTRIES - 1:
                        v = t[-1]
                        tile.vector.overflows += 1
                    else:
                        v = t[i] + _scalar_rs((t[i + 1] - t[i]) * (u - (i << s)), s)
                        tile.vector.hits += 1
                else:
                    v = _scalar_lane(op, x, y, s, f)
                out.append(min(max(v, low), high))
            mem["d"][f["d_addr"] + r * f["d_row_stride"] + c] = out
        if spec.kind == "reduce":
            if op != VectorOp.RMAX:
                stat = signed32(stat)
            mem["d"][f["d_addr"] + r * f["d_row_stride"]] = [min(max(stat, low), high)] * n


def _scalar_lane(op: VectorOp, x: int, y: int, s: int, f: dict[str, int]) -> int:
    """One lane of an elementwise vop other than LUT, before saturation."""
    if op in (VectorOp.ADD, VectorOp.SUB):
        return x + y if op == VectorOp.ADD else x - y
    if op == VectorOp.MUL:
        return _scalar_rs(x * y, s)
    if op in (VectorOp.MAX, VectorOp.MIN):
        return max(x, y) if op == VectorOp.MAX else min(x, y)
    if op == VectorOp.SHR:
        return _scalar_rs(x, s)
    if op == VectorOp.SHL:
        return x << s
    if op == VectorOp.CLAMP:
        return min(max(x, signed32(f["imm"])), signed32(f["imm2"]))
    if op == VectorOp.RECIP:
        return min((1 << s) // x, (1 << 31) - 1) if x >= 1 else (1 << 31) - 1
    if op == VectorOp.ISQRT:
        return math.isqrt(x) if x > 0 else 0
    return x  # MOV


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_random_vector_commands_match_a_scalar_reading_of_the_spec(config):
    rng = np.random.default_rng(config.array)
    seen = set()
    for tag in range(300):
        tile = _filled(config, rng)
        cmd = random_vector(rng, config, tag)
        assert check_command(cmd, config) == ErrorCode.OK, vector_meta(cmd)
        _, f = unpack_command(cmd)
        expect = _filled(config, np.random.default_rng(0))
        expect.spm[:], expect.acc[:], expect.vector.table[:] = tile.spm, tile.acc, tile.vector.table
        _scalar_vector(expect, f)
        assert tile.execute(cmd) == ErrorCode.OK
        meta = vector_meta(cmd)
        np.testing.assert_array_equal(tile.spm, expect.spm, err_msg=str(meta))
        np.testing.assert_array_equal(tile.acc, expect.acc, err_msg=str(meta))
        assert (tile.vector.hits, tile.vector.underflows, tile.vector.overflows) == (
            expect.vector.hits, expect.vector.underflows, expect.vector.overflows)
        seen.add((meta["vop"], meta["overlap"]))
    assert {vop for vop, _ in seen} == {op.name for op in VectorOp}
    assert ("MOV", "yes") in seen and ("ADD", "yes") in seen


def test_in_place_prefix_sees_the_commands_earlier_writes():
    """D one row past A over the same rows: each step reads the row the previous step wrote (a prefix sum)."""
    config = CONFIGS[1]
    tile = TileModel(config)
    tile.acc[0:5] = np.arange(1, 6)[:, None]
    tile.acc[10] = 1
    cmd = pack_command(Opcode.VECTOR, vop=VectorOp.ADD, rows=4, cols=1, a_addr=0, a_row_stride=1, b_addr=10,
                       b_row_stride=0, d_addr=1, d_row_stride=1, flags={"a_acc": True, "b_acc": True, "d_acc": True})
    assert tile.execute(cmd) == ErrorCode.OK
    assert tile.acc[0:5, 0].tolist() == [1, 2, 3, 4, 5]


def test_saturation_rounding_and_the_divider_edges():
    config = CONFIGS[0]
    tile = TileModel(config)
    tile.acc[0] = [-(1 << 31), 7]
    tile.acc[1] = [-1, 3]

    def run(vop, d_acc=True, **fields):
        binary = VECTOR_OPS[vop].uses_b
        cmd = pack_command(Opcode.VECTOR, vop=vop, rows=1, cols=1, a_addr=0, b_addr=int(binary), d_addr=2,
                           flags={"a_acc": True, "b_acc": binary, "d_acc": d_acc}, **fields)
        assert tile.execute(cmd) == ErrorCode.OK
        return (tile.acc[2] if d_acc else tile.spm[2]).tolist()

    assert run(VectorOp.SUB) == [-(1 << 31) + 1, 4]
    assert run(VectorOp.MUL) == [(1 << 31) - 1, 21]           # -2**31 * -1 saturates
    assert run(VectorOp.MUL, shift=1) == [1 << 30, 11]       # 21/2 = 10.5 rounds away from zero
    assert run(VectorOp.SHR, shift=1) == [-(1 << 30), 4]
    assert run(VectorOp.SHR, shift=47) == [0, 0]
    assert run(VectorOp.SHL, shift=31, d_acc=False) == [-128, 127]
    assert run(VectorOp.RECIP, shift=4) == [(1 << 31) - 1, 2]
    assert run(VectorOp.RECIP, shift=47) == [(1 << 31) - 1, (1 << 31) - 1]
    assert run(VectorOp.ISQRT) == [0, 2]
    assert run(VectorOp.RSUMSQ) == [49, 49]                   # (2**62 mod 2**32 = 0) + 49
    assert run(VectorOp.RMAX, d_acc=False) == [7, 7]
    assert int(round_shift(np.array([-3]), 1)[0]) == -2


def test_lookup_interpolates_and_counts_the_ends():
    config = CONFIGS[1]
    tile = TileModel(config)
    entries = np.arange(TABLE_ENTRIES, dtype=np.int16) * 100
    tile.spm[8:8 + table_rows(4)] = np.frombuffer(
        np.concatenate([entries, np.zeros(table_rows(4) * 2 - TABLE_ENTRIES, np.int16)]).tobytes(),
        np.int8).reshape(-1, 4)
    assert tile.execute(pack_command(Opcode.TABLE, src_addr=8)) == ErrorCode.OK
    np.testing.assert_array_equal(tile.vector.table, entries)
    tile.acc[0] = [-1, 0, 3, 2048 * 4]        # below, the first entry, between 0 and 1, past the end
    cmd = pack_command(Opcode.VECTOR, vop=VectorOp.LUT, rows=1, cols=1, a_addr=0, d_addr=1, shift=2,
                       imm=unsigned32(0), flags={"a_acc": True, "d_acc": True})
    assert tile.execute(cmd) == ErrorCode.OK
    assert tile.acc[1].tolist() == [0, 0, 75, 25600]
    assert (tile.vector.hits, tile.vector.underflows, tile.vector.overflows) == (2, 1, 1)


def test_transpose_blocks():
    config = CONFIGS[1]
    rng = np.random.default_rng(3)
    tile = _filled(config, rng)
    before = tile.spm.copy()
    assert tile.execute(pack_command(Opcode.TRANSPOSE, src_addr=0, dst_addr=100, blocks=3, src_stride=4,
                                     dst_stride=8)) == ErrorCode.OK
    for b in range(3):
        np.testing.assert_array_equal(tile.spm[100 + 8 * b:104 + 8 * b], before[4 * b:4 * b + 4].T)
    np.testing.assert_array_equal(tile.spm[104:108], before[104:108])
    for tag in range(50):
        assert check_command(random_transpose(rng, config, tag), config) == ErrorCode.OK


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_bad_vector_commands_get_their_code_and_change_nothing(config):
    rng = np.random.default_rng(7)
    tile = _filled(config, rng)
    spm, acc = tile.spm.copy(), tile.acc.copy()
    for tag in range(400):
        kind = VECTOR_BAD_KINDS[tag % len(VECTOR_BAD_KINDS)]
        cmd, code = bad_vector_command(rng, config, tag, kind)
        assert tile.execute(cmd) == code, (kind, vector_meta(cmd))
    np.testing.assert_array_equal(tile.spm, spm)
    np.testing.assert_array_equal(tile.acc, acc)


def test_legal_commands_pass_the_checks_on_every_config():
    for config in CONFIGS:
        rng = np.random.default_rng(11)
        for tag in range(500):
            cmd = random_vector_command(rng, config, tag)
            assert check_command(cmd, config) == ErrorCode.OK, vector_meta(cmd)


def test_the_vector_bench_measures_long_rows_on_two_devices():
    from dx1_bringup.bench_vector import VOPS, vector_bench

    report = vector_bench(("model", "model:tiles=1"))
    assert [r["vop"] for r in report["runs"]] == [v.name for v in VOPS]
    assert all(r["same_bytes"] and r["model_error"] == 0 for r in report["runs"])
    assert min(r["steady_elements_per_cycle"] for r in report["runs"] if r["vop"] != "RECIP") == report["array"]


def test_the_directed_sweep_hits_every_vector_coverage_bin():
    from dx1_bringup.sim.vector_stimulus import vector_sweep

    config = CONFIGS[2]
    sweep = vector_sweep(np.random.default_rng(2), config, 0)
    legal = [vector_meta(cmd) for cmd, refusal in sweep if refusal is None]
    assert {m["vop"] for m in legal} == {op.name for op in VectorOp}
    assert len({m["operands"] for m in legal}) == 12
    shifted = {(m["vop"], m["shift"]) for m in legal if m["shift"] != "n/a"}
    assert shifted == {(s.op.name, c) for s in VECTOR_OPS.values() if s.max_shift is not None
                       for c in ("zero", "one", "mid", "max")}
    assert {m["broadcast"] for m in legal} >= {"none", "row", "column", "outer"}
    assert {m["overlap"] for m in legal} == {"no", "yes"}
    assert [r for _, r in sweep if r is not None] == list(VECTOR_BAD_KINDS)
    tile = TileModel(config)
    for cmd, refusal in sweep:
        assert (tile.execute(cmd) == ErrorCode.OK) == (refusal is None), (refusal, vector_meta(cmd))
