# amaranth: UnusedElaboratable=no
"""Gateware building blocks: constructor checks, and PostOp / SystolicArray cycle-accurate in Amaranth's simulator
against the golden model.

The first line turns off Amaranth's UnusedElaboratable warning for this file: the constructor checks make
components whose ``__init__`` raises, and those would warn when garbage-collected.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import wiring
from amaranth_run import simulate

from dx1_bringup.gateware import PostOp, SystolicArray, TileCore
from dx1_bringup.gateware.stream import AXIStreamSignature
from dx1_bringup.model.tile import MAX_SHIFT, requantize
from dx1_bringup.sim.stimulus import random_int8, random_int32
from dx1_bringup.spec import PostOpParams, TileConfig

# --- constructor checks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("build", "exc", "message"), [
    (lambda: TileCore("x"), TypeError, "Tile core config must be a TileConfig, not 'x'"),
    (lambda: TileCore(None), TypeError, "Tile core config must be a TileConfig, not None"),
    (lambda: SystolicArray(0), ValueError, "Systolic array size must be an integer from 1 to 16, not 0"),
    (lambda: SystolicArray(17), ValueError, "Systolic array size must be an integer from 1 to 16, not 17"),
    (lambda: SystolicArray(2.0), ValueError, "Systolic array size must be an integer from 1 to 16, not 2.0"),
    (lambda: SystolicArray(True), ValueError, "Systolic array size must be an integer from 1 to 16, not True"),
    (lambda: SystolicArray(4, ctl_width=0), ValueError,
     "Systolic array ctl width must be a positive integer, not 0"),
    (lambda: PostOp(0), ValueError, "Post-op lanes must be an integer from 1 to 16, not 0"),
    (lambda: PostOp(17), ValueError, "Post-op lanes must be an integer from 1 to 16, not 17"),
    (lambda: PostOp("4"), ValueError, "Post-op lanes must be an integer from 1 to 16, not '4'"),
    (lambda: AXIStreamSignature(0), TypeError, "Stream width must be a positive integer, not 0"),
    (lambda: AXIStreamSignature(8.0), TypeError, "Stream width must be a positive integer, not 8.0"),
], ids=["tile_str", "tile_none", "sa_0", "sa_17", "sa_float", "sa_bool", "sa_ctl0", "postop_0", "postop_17",
        "postop_str", "stream_0", "stream_float"])
def test_constructor_errors(build: Callable[[], object], exc: type[Exception], message: str) -> None:
    """Bad generator parameters raise the documented exception type with the exact message."""
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        build()


def test_constructors_accept_legal_parameters() -> None:
    """The ends of the legal ranges construct and elaborate, with the documented latencies and port widths."""
    for size in (1, 16):
        array = SystolicArray(size)
        assert array.LATENCY == 2 * size - 1 and len(array.out.as_value()) == 32 * size
        Fragment.get(array, None)
    postop = PostOp(16)
    assert PostOp.LATENCY == 5 and postop.lanes == 16 and len(postop.out.as_value()) == 8 * 16
    Fragment.get(postop, None)
    assert AXIStreamSignature(32) == AXIStreamSignature(32) != AXIStreamSignature(33)
    core = TileCore(TileConfig(array=4, spm_rows=1024, acc_rows=256))
    assert len(core.cmd.tdata) == 256 and len(core.spm_wr.tdata) == 16 + 8 * 4
    Fragment.get(core, None)


@pytest.mark.parametrize(("tiles", "banks"), [(4, 2), (8, 8)])
def test_soc_scales_to_more_tiles_and_banks(tiles: int, banks: int) -> None:
    """4- and 8-tile SoCs elaborate, with one memory port for the host and two a tile, in the given banks."""
    from dx1_bringup.gateware.soc import Dx1Soc
    from dx1_bringup.spec import SocConfig

    soc = Dx1Soc(SocConfig(tiles=tiles, mem_banks=banks, mem_bytes=1 << 16,
                           tile=TileConfig(array=8, spm_rows=256, acc_rows=64)))
    fragment = Fragment.get(soc, None)
    memory = next(sub for sub, name, _ in fragment.subfragments if name == "memory")
    bank_names = sorted(name for _, name, _ in memory.subfragments if name.startswith("bank"))
    assert bank_names == sorted(f"bank{b}" for b in range(banks))


# --- simulation helpers -----------------------------------------------------------------------------------------



class _Schedule:
    """Expected outputs by cycle: checks that each appears exactly on its cycle and nothing appears otherwise."""

    def __init__(self, latency: int):
        self.latency = latency
        self.expected: dict[int, tuple[list[int], int]] = {}
        self.seen = 0

    def push(self, cycle: int, out: list[int], ctl: int) -> None:
        self.expected[cycle + self.latency] = (out, ctl)

    def check(self, cycle: int, valid: int, out: list[int], ctl: int) -> None:
        if cycle in self.expected:
            assert valid == 1, f"cycle {cycle}: no output"
            assert (out, ctl) == self.expected.pop(cycle), f"cycle {cycle}"
            self.seen += 1
        else:
            assert valid == 0, f"cycle {cycle}: unexpected output {out}"


# --- PostOp -----------------------------------------------------------------------------------------------------


@pytest.mark.amaranth_sim
@pytest.mark.parametrize("lanes", [4, 16])
def test_postop_matches_golden_requantize(lanes: int) -> None:
    """PostOp(lanes) requantises ~200 rows (int32 extremes included) under random bias/mult/shift/relu exactly as
    golden.requantize, each row LATENCY cycles after it went in with its ctl alongside, and no other output."""
    dut = PostOp(lanes, ctl_width=8)
    rng = np.random.default_rng(lanes)
    schedule = _Schedule(PostOp.LATENCY)
    segments = []
    for _ in range(20):
        settings = dict(
            bias=random_int32(rng, lanes),
            mult=int(rng.choice([0, 1, 65535, int(rng.integers(0, 1 << 16))])),
            shift=int(rng.choice([0, 1, MAX_SHIFT, int(rng.integers(0, MAX_SHIFT + 1))])),
            relu=bool(rng.integers(0, 2)),
        )
        segments.append((settings, random_int32(rng, (int(rng.integers(5, 16)), lanes))))
    total = sum(len(rows) for _settings, rows in segments)
    assert total >= 150

    async def bench(ctx) -> None:
        cycle = 0

        async def step() -> None:
            nonlocal cycle
            schedule.check(cycle, ctx.get(dut.out_valid), list(ctx.get(dut.out)), ctx.get(dut.out_ctl))
            await ctx.tick()
            cycle += 1

        for settings, rows in segments:
            ctx.set(dut.bias, settings["bias"].tolist())
            ctx.set(dut.mult, settings["mult"])
            ctx.set(dut.shift, settings["shift"])
            ctx.set(dut.relu, settings["relu"])
            for row in rows:
                while rng.random() < 0.3:  # idle cycle between rows
                    ctx.set(dut.row_valid, 0)
                    ctx.set(dut.row, random_int32(rng, lanes).tolist())  # garbage, must not come out
                    await step()
                ctx.set(dut.row, row.tolist())
                ctx.set(dut.row_valid, 1)
                ctl = cycle & 0xFF
                ctx.set(dut.ctl, ctl)
                post = PostOpParams(settings["mult"], settings["shift"], settings["relu"])
                expected = requantize(row, settings["bias"], post)
                schedule.push(cycle, expected.tolist(), ctl)
                await step()
            ctx.set(dut.row_valid, 0)
            for _ in range(PostOp.LATENCY):
                await step()

    simulate(dut, bench)
    assert schedule.seen == total and not schedule.expected


@pytest.mark.amaranth_sim
def test_postop_saturation_corners() -> None:
    """Hand-picked lanes that hit each saturation and rounding corner come out as the golden model says."""
    dut = PostOp(4)
    cases = [  # (row, bias, mult, shift, relu)
        ([2**31 - 1, -2**31, -3, 3], [2**31 - 1, -1, 0, 0], 1, 31, False),
        ([2**31 - 1, -2**31, -3, 3], [0, 0, 0, 0], 1, 1, False),
        ([-2**31, -1, -2, 2**31 - 1], [-1, 0, 0, 0], 65535, 47, True),
        ([2**31 - 1, -2**31, -1, 1], [0, 0, 0, 0], 65535, 0, False),
        ([-1, -2, -5, -6], [0, 0, 0, 0], 1, 2, False),
    ]
    results: list[list[int]] = []

    async def bench(ctx) -> None:
        for row, bias, mult, shift, relu in cases:
            ctx.set(dut.bias, bias)
            ctx.set(dut.mult, mult)
            ctx.set(dut.shift, shift)
            ctx.set(dut.relu, relu)
            ctx.set(dut.row, row)
            ctx.set(dut.row_valid, 1)
            await ctx.tick()
            ctx.set(dut.row_valid, 0)
            await ctx.tick().repeat(PostOp.LATENCY - 1)
            assert ctx.get(dut.out_valid) == 1
            results.append(list(ctx.get(dut.out)))
            await ctx.tick()

    simulate(dut, bench)
    expected = [requantize(np.array(row, dtype=np.int32), np.array(bias, dtype=np.int32),
                           PostOpParams(mult, shift, bool(relu))).tolist()
                for row, bias, mult, shift, relu in cases]
    assert expected[0] == [1, -1, 0, 0] and expected[4] == [0, -1, -1, -2]
    assert results == expected


# --- SystolicArray ----------------------------------------------------------------------------------------------


def _matmul32(row: np.ndarray, b: np.ndarray) -> list[int]:
    return (row.astype(np.int64) @ b.astype(np.int64)).astype(np.int32).tolist()


class _BankBesideRow(wiring.Component):
    """A systolic array with every input but the bank registered once: ``a_bank`` names the bank of the
    row on ``a`` in the same cycle, as a bench writes it (the array's ``next_bank`` is a cycle ahead).
    ``LATENCY`` is the array's plus that register."""

    def __init__(self, array: SystolicArray):
        self.array = array
        self.LATENCY = array.LATENCY + 1
        ports = dict(array.signature.members)
        ports["a_bank"] = ports.pop("next_bank")
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = array = self.array
        m.d.comb += array.next_bank.eq(self.a_bank)
        m.d.sync += [getattr(array, name).eq(getattr(self, name))
                     for name in ("a", "a_valid", "ctl", "w_row", "w_load", "w_bank")]
        m.d.comb += [getattr(self, name).eq(getattr(array, name)) for name in ("out", "out_valid", "out_ctl")]
        return m


@pytest.mark.amaranth_sim
@pytest.mark.parametrize("size", [4, 2, 8])
def test_systolic_array_two_banks(size: int) -> None:
    """SystolicArray(size) multiplies each activation row by the weights of the bank it names, output LATENCY
    cycles later with all columns together and ctl alongside: bank 0 alone, then blocks of rows alternating
    between banks 0 and 1, then bank 0 reloaded while bank 1 streams (rows right after a load included).
    The array takes a row's bank a cycle ahead of the row; the bench names it beside the row, through
    :class:`_BankBesideRow`."""
    dut = _BankBesideRow(SystolicArray(size, ctl_width=8))
    rng = np.random.default_rng(size)
    b0, b1, b2 = (random_int8(rng, (size, size)) for _ in range(3))
    weights = {0: b0, 1: b1}
    schedule = _Schedule(dut.LATENCY)
    streamed = 0

    async def bench(ctx) -> None:
        nonlocal streamed
        cycle = 0

        async def step() -> None:
            nonlocal cycle
            schedule.check(cycle, ctx.get(dut.out_valid), list(ctx.get(dut.out)), ctx.get(dut.out_ctl))
            await ctx.tick()
            cycle += 1

        def activation(bank: int, b: np.ndarray) -> None:
            nonlocal streamed
            row = random_int8(rng, size)
            ctx.set(dut.a, row.tolist())
            ctx.set(dut.a_valid, 1)
            ctx.set(dut.a_bank, bank)
            ctx.set(dut.ctl, cycle & 0xFF)
            schedule.push(cycle, _matmul32(row, b), cycle & 0xFF)
            streamed += 1

        def idle() -> None:
            ctx.set(dut.a_valid, 0)
            ctx.set(dut.a, random_int8(rng, size).tolist())  # garbage, must not come out
            ctx.set(dut.a_bank, int(rng.integers(0, 2)))

        async def load(bank: int, b: np.ndarray) -> None:
            """Shift B[size-1] .. B[0] into the bank, one row a cycle, with no activations."""
            idle()
            ctx.set(dut.w_load, 1)
            ctx.set(dut.w_bank, bank)
            for k in reversed(range(size)):
                ctx.set(dut.w_row, b[k].tolist())
                await step()
            ctx.set(dut.w_load, 0)

        async def drain() -> None:
            idle()
            for _ in range(2 * size):
                await step()

        # Phase 1: bank 0 only, with random idle cycles between rows.
        await load(0, b0)
        for _ in range(20):
            while rng.random() < 0.3:
                idle()
                await step()
            activation(0, b0)
            await step()
        await drain()

        # Phase 2: bank 1 loaded; blocks of rows alternate between the banks, back to back or with gaps.
        await load(1, b1)
        bank = 0
        for _ in range(8):
            for _ in range(int(rng.integers(1, 5))):
                if rng.random() < 0.2:
                    idle()
                    await step()
                activation(bank, weights[bank])
                await step()
            bank ^= 1
        await drain()

        # Phase 3: bank 0 gets B2 while bank 1 streams every cycle; then bank 0 streams with B2.
        ctx.set(dut.w_load, 1)
        ctx.set(dut.w_bank, 0)
        for k in reversed(range(size)):
            ctx.set(dut.w_row, b2[k].tolist())
            activation(1, b1)
            await step()
        ctx.set(dut.w_load, 0)
        for _ in range(10):
            activation(0, b2)
            await step()
        await drain()

    simulate(dut, bench)
    assert streamed >= 40
    assert schedule.seen == streamed and not schedule.expected


@pytest.mark.amaranth_sim
def test_systolic_array_weight_row_order() -> None:
    """After loading rows B[3], B[2], B[1], B[0], a one-hot activation e_k reads back exactly row B[k]
    (so the shift order is the documented one, not its reverse)."""
    size = 4
    dut = SystolicArray(size)
    b = np.arange(size * size, dtype=np.int8).reshape(size, size) - 8
    outputs: list[list[int]] = []

    async def bench(ctx) -> None:
        ctx.set(dut.w_load, 1)
        for k in reversed(range(size)):
            ctx.set(dut.w_row, b[k].tolist())
            await ctx.tick()
        ctx.set(dut.w_load, 0)
        for k in range(size):
            ctx.set(dut.a, [1 if j == k else 0 for j in range(size)])
            ctx.set(dut.a_valid, 1)
            await ctx.tick()
        ctx.set(dut.a_valid, 0)
        await ctx.tick().repeat(dut.LATENCY - size)
        for _ in range(size):
            assert ctx.get(dut.out_valid) == 1
            outputs.append(list(ctx.get(dut.out)))
            await ctx.tick()
        assert ctx.get(dut.out_valid) == 0

    simulate(dut, bench)
    assert outputs == b.tolist()
