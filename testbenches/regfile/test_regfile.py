"""The register file against the register map, every register from the spec, in a seeded shuffled order.

cocotbext-axi's AXI4-Lite master drives the bus with random pauses on all five
channels; a monitor counts every ``read``/``write`` pulse the register file
gives the hardware, so each access is checked for exactly the side effects it
should have and no others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp

from dx1_bringup.gateware.regfile import HEADER_NAMES, defined_mask
from dx1_bringup.sim import run_cocotb_shared
from dx1_bringup.sim.harness import Harness, seed_note, set_pauses
from dx1_bringup.spec import MAGIC, SPEC_VERSION, Access, BlockType, register_map

OKAY, SLVERR = AxiResp.OKAY, AxiResp.SLVERR
IDENTITY = ("MAGIC", "HW_VERSION", "CAPS", "SPM_ROWS", "ACC_ROWS", "MEM_BYTES", "FEATURES")


@dataclass
class Reg:
    block: str
    name: str          # placed name (SEM3)
    addr: int
    access: Access
    mask: int          # writable bits (RW, W1C), defined bits (RO)
    reset: int
    constant: bool     # answered by the register file itself, no port
    block_base: int

    @property
    def port(self) -> str:
        return f"{self.block}_{self.name}"

    @property
    def readable(self) -> bool:
        return self.access != Access.WO

    @property
    def writable(self) -> bool:
        return self.access != Access.RO


class RegfileTB(Harness):
    def __init__(self, dut, pause: float = 0.3):
        from dx1_bringup.gateware import rtl_module

        super().__init__(dut)
        self.rng = np.random.default_rng(cocotb.RANDOM_SEED)
        self.config = rtl_module(dut._name).args[0]
        self.regmap = register_map(self.config)
        self.regs: list[Reg] = []
        for block in self.regmap.blocks:
            for placed in block.registers:
                r = placed.register
                # A chip without a link is rank 0 of 1 (a constant); with one, the board drives CHIP_ID.
                identity = IDENTITY + (("CHIP_ID",) if self.config.link is None else ())
                constant = placed.name in HEADER_NAMES or (block.name == "GLOBAL" and placed.name in identity)
                mask = defined_mask(r) if r.access == Access.RO else r.writable_mask
                self.regs.append(Reg(block.name, placed.name, block.base + placed.offset, r.access, mask,
                                     r.reset, constant, block.base))
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "bus_"), dut.clk, dut.rst)
        channels = (self.axil.write_if.aw_channel, self.axil.write_if.w_channel, self.axil.write_if.b_channel,
                    self.axil.read_if.ar_channel, self.axil.read_if.r_channel)
        if pause:
            set_pauses(channels, self.rng, pause)
        for ch in channels:
            ch.log.setLevel(logging.WARNING)
        self.axil.write_if.log.setLevel(logging.WARNING)
        self.axil.read_if.log.setLevel(logging.WARNING)
        # Hardware inputs start quiet.
        for reg in self.ported():
            if reg.access == Access.RO:
                self.sig(reg, "value").value = 0
            elif reg.access == Access.RW:
                self.sig(reg, "set").value = 0
                self.sig(reg, "set_value").value = 0
            elif reg.access == Access.W1C:
                self.sig(reg, "set").value = 0
        self.pulses = [(reg, kind, self.sig(reg, kind)) for reg in self.ported()
                       for kind in (("read",) if reg.access == Access.RO else
                                    ("write",) if reg.access in (Access.RW, Access.WO) else ())]
        self.events: list[tuple[str, str, int | None]] = []
        self._monitor = None

    # ---- helpers --------------------------------------------------------------------------------------
    def ported(self) -> list[Reg]:
        return [r for r in self.regs if not r.constant]

    def of(self, *access: Access, constants: bool = False) -> list[Reg]:
        return [r for r in self.regs if r.access in access and (constants or not r.constant)]

    def shuffled(self, regs: list[Reg]) -> list[Reg]:
        return [regs[i] for i in self.rng.permutation(len(regs))]

    def reg(self, block: str, name: str) -> Reg:
        return next(r for r in self.regs if r.block == block and r.name == name)

    def sig(self, reg: Reg, member: str):
        return getattr(self.dut, f"{reg.port}__{member}")

    def rand32(self) -> int:
        return int(self.rng.integers(0, 1 << 32))

    def start_monitor(self) -> None:
        """Record every read/write pulse, sampled mid-cycle."""
        async def run():
            while True:
                await FallingEdge(self.dut.clk)
                for reg, kind, handle in self.pulses:
                    if int(handle.value):
                        wdata = int(self.sig(reg, "wdata").value) if kind == "write" else None
                        self.events.append((reg.port, kind, wdata))

        self._monitor = cocotb.start_soon(run())

    def expect_events(self, expected: list[tuple[str, str, int | None]], what: str) -> None:
        got, self.events = self.events, []
        assert got == expected, f"{what}: hardware pulses {got}, expected {expected} ({seed_note()})"

    # ---- bus ------------------------------------------------------------------------------------------
    async def read(self, addr: int) -> tuple[int, AxiResp]:
        """One read beat at ``addr`` as is (a misaligned one reads up to the end of its word)."""
        r = await self.axil.read(addr, 4 - addr % 4)
        return int.from_bytes(r.data, "little") << 8 * (addr % 4), r.resp

    async def write(self, addr: int, value: int) -> AxiResp:
        return (await self.axil.write(addr, value.to_bytes(4, "little"))).resp

    async def read_ok(self, reg: Reg) -> int:
        value, resp = await self.read(reg.addr)
        assert resp == OKAY, f"read of {reg.port} at {reg.addr:#06x} answered {resp} ({seed_note()})"
        return value

    async def write_ok(self, reg: Reg, value: int) -> None:
        resp = await self.write(reg.addr, value)
        assert resp == OKAY, f"write of {reg.port} at {reg.addr:#06x} answered {resp} ({seed_note()})"

    async def raw_write(self, addr: int, data: int, strb: int, order: str = "random") -> AxiResp:
        """One write beat with any address and strobes, AW and W sent in ``order`` (aw/w/together)."""
        await self.axil.wait()
        wi = self.axil.write_if
        aw = wi.aw_channel._transaction_obj()
        aw.awaddr, aw.awprot = addr, 0
        w = wi.w_channel._transaction_obj()
        w.wdata, w.wstrb = data, strb
        if order == "random":
            order = ("aw", "w", "together")[int(self.rng.integers(3))]
        if order == "aw":
            await wi.aw_channel.send(aw)
            await ClockCycles(self.dut.clk, int(self.rng.integers(1, 4)))
            await wi.w_channel.send(w)
        elif order == "w":
            await wi.w_channel.send(w)
            await ClockCycles(self.dut.clk, int(self.rng.integers(1, 4)))
            await wi.aw_channel.send(aw)
        else:
            await wi.aw_channel.send(aw)
            await wi.w_channel.send(w)
        b = await wi.b_channel.recv()
        return AxiResp(int(b.bresp))


async def setup(dut, *, monitor: bool = True) -> RegfileTB:
    tb = RegfileTB(dut)
    await tb.reset()
    if monitor:
        tb.start_monitor()
    return tb


async def snapshot(tb: RegfileTB) -> dict[str, int]:
    """Every stored register (RW, W1C) read over the bus, in a shuffled order."""
    out = {}
    for reg in tb.shuffled(tb.of(Access.RW, Access.W1C)):
        out[reg.port] = await tb.read_ok(reg)
    return out


def expected_caps(tb: RegfileTB) -> int:
    cfg = tb.config
    caps = {f.name: f for f in tb.regmap.block("GLOBAL").reg("CAPS").register.fields}
    return (cfg.tiles << caps["tiles"].lsb | cfg.tile.array << caps["array"].lsb
            | cfg.mem_banks << caps["mem_banks"].lsb | cfg.semaphores << caps["semaphores"].lsb)


# ---- (1) reset values and the block walk -------------------------------------------------------------
@cocotb.test()
async def reset_and_walk(dut):
    """Walk NEXT from 0: every block's ID and VERSION; the GLOBAL identity; every reset value."""
    tb = await setup(dut)
    addr, seen = 0, []
    for _ in range(len(tb.regmap.blocks) + 1):
        words = [await tb.read(addr + 4 * i) for i in range(3)]
        assert all(resp == OKAY for _, resp in words), f"block header at {addr:#x}: {words} ({seed_note()})"
        ident, version, nxt = (value for value, _ in words)
        seen.append((addr, ident, version, nxt))
        if nxt == 0:
            break
        assert nxt > addr, f"NEXT of the block at {addr:#x} goes backwards to {nxt:#x}"
        addr = nxt
    expected = [(b.base, int(b.spec.type), b.spec.version, b.next) for b in tb.regmap.blocks]
    assert seen == expected, f"block walk differs ({seed_note()}):\nRTL  {seen}\nspec {expected}"
    assert [BlockType(s[1]).name for s in seen][0] == "GLOBAL"
    features = tb.regmap.block("GLOBAL").reg("FEATURES").register.pack(postop=1, copy=1, trace=1,
                                                                       vector=int(tb.config.tile.vector))
    identity = {
        "MAGIC": MAGIC, "HW_VERSION": SPEC_VERSION, "CAPS": expected_caps(tb), "SPM_ROWS": tb.config.tile.spm_rows,
        "ACC_ROWS": tb.config.tile.acc_rows, "MEM_BYTES": tb.config.mem_bytes,
        "FEATURES": features,
    }
    if tb.config.link is None:
        identity["CHIP_ID"] = tb.regmap.block("GLOBAL").reg("CHIP_ID").register.pack(rank=0, chips=1)
    for name in tb.rng.permutation(list(identity)):
        got = await tb.read_ok(tb.reg("GLOBAL", str(name)))
        assert got == identity[name], f"GLOBAL.{name} reads {got:#x}, expected {identity[name]:#x}"
    if tb.config == type(tb.config)():
        assert identity["CAPS"] == 2 | 8 << 4 | 4 << 9 | 16 << 16  # the default config, spelled out once
    tb.expect_events([], "reads of constants")
    for reg in tb.shuffled(tb.of(Access.RW, Access.W1C)):
        got = await tb.read_ok(reg)
        assert got == reg.reset, f"{reg.port} resets to {got:#x}, the spec says {reg.reset:#x} ({seed_note()})"
        assert int(tb.sig(reg, "value").value) == reg.reset, f"{reg.port}.value after reset"
    tb.expect_events([], "reads of RW and W1C registers")
    for reg in tb.shuffled(tb.of(Access.RO)):
        assert await tb.read_ok(reg) == 0, f"{reg.port} should read the 0 the test drives"
        tb.expect_events([(reg.port, "read", None)], f"read of {reg.port}")
    assert tb.reg("QUEUE0", "RING_LOG2").reset == 4  # a non-zero reset value is among those checked


# ---- (2) RW: walking ones and zeros, aliasing -----------------------------------------------------------
@cocotb.test()
async def rw_walking_and_aliasing(dut):
    """Walking ones and zeros through every RW register; a write to any register changes no other one."""
    tb = await setup(dut)
    for reg in tb.shuffled(tb.of(Access.RW)):
        for bit in range(32):
            for value in (1 << bit, 0xFFFF_FFFF ^ (1 << bit)):
                await tb.write_ok(reg, value)
                tb.expect_events([(reg.port, "write", value)], f"write of {value:#x} to {reg.port}")
                got = await tb.read_ok(reg)
                assert got == value & reg.mask, (
                    f"{reg.port}: wrote {value:#x}, read {got:#x}, writable mask {reg.mask:#x} ({seed_note()})")
                assert int(tb.sig(reg, "value").value) == value & reg.mask, f"{reg.port}.value"
        tb.expect_events([], f"reads of {reg.port}")

    # Aliasing: distinct contents everywhere, then every writable register written once, all others re-read.
    model = {}
    for reg in tb.shuffled(tb.of(Access.RW)):
        value = tb.rand32()
        await tb.write_ok(reg, value)
        model[reg.port] = value & reg.mask
    for reg in tb.of(Access.W1C):
        model[reg.port] = 0
    tb.events.clear()
    for reg in tb.shuffled(tb.of(Access.RW, Access.WO, Access.W1C)):
        value = tb.rand32()
        await tb.write_ok(reg, value)
        if reg.access == Access.RW:
            model[reg.port] = value & reg.mask
        expected = [] if reg.access == Access.W1C else [(reg.port, "write", value)]
        tb.expect_events(expected, f"write to {reg.port}")
        got = await snapshot(tb)
        bad = {k: (got[k], model[k]) for k in model if got[k] != model[k]}
        assert not bad, f"after writing {reg.port}: registers changed (read, expected) {bad} ({seed_note()})"

    # AW before W, W before AW, both together: the same write.
    scratch = tb.reg("GLOBAL", "SCRATCH")
    for order in ("aw", "w", "together") * 3:
        value = tb.rand32()
        assert await tb.raw_write(scratch.addr, value, 0b1111, order) == OKAY
        assert await tb.read_ok(scratch) == value, f"write with {order} first lost"


# ---- (3) RO: hardware values and read pulses -------------------------------------------------------------
@cocotb.test()
async def ro_values_and_read_pulses(dut):
    """Every RO register reads what the hardware drives (field bits only) and pulses its read once."""
    tb = await setup(dut)
    for _round in range(2):
        driven = {}
        for reg in tb.of(Access.RO):
            driven[reg.port] = tb.rand32()
            tb.sig(reg, "value").value = driven[reg.port]
        await RisingEdge(dut.clk)
        for reg in tb.shuffled(tb.of(Access.RO)):
            got = await tb.read_ok(reg)
            assert got == driven[reg.port] & reg.mask, (
                f"{reg.port} reads {got:#x}, hardware drives {driven[reg.port]:#x}, fields {reg.mask:#x} "
                f"({seed_note()})")
            tb.expect_events([(reg.port, "read", None)], f"read of {reg.port}")
    for reg in tb.shuffled(tb.of(Access.RO, constants=True)):
        if reg.constant:
            await tb.read_ok(reg)
            tb.expect_events([], f"read of the constant {reg.port}")


# ---- (4) WO and W1C --------------------------------------------------------------------------------------
@cocotb.test()
async def wo_and_w1c(dut):
    """WO writes pulse write with the data and reads are errors; W1C bits set by hardware, cleared by 1s."""
    tb = await setup(dut)
    for reg in tb.shuffled(tb.of(Access.WO)):
        value = tb.rand32()
        await tb.write_ok(reg, value)
        tb.expect_events([(reg.port, "write", value)], f"write of {value:#x} to {reg.port}")
        data, resp = await tb.read(reg.addr)
        assert (data, resp) == (0, SLVERR), f"read of WO {reg.port} gave {resp} with {data:#x} ({seed_note()})"
        tb.expect_events([], f"read of WO {reg.port}")

    for reg in tb.shuffled(tb.of(Access.W1C)):
        set_sig, value_sig = tb.sig(reg, "set"), tb.sig(reg, "value")
        expect = 0
        for _ in range(6):
            bits = tb.rand32()
            await FallingEdge(dut.clk)
            set_sig.value = bits
            await FallingEdge(dut.clk)
            set_sig.value = 0
            expect |= bits & reg.mask
            assert int(value_sig.value) == expect, f"{reg.port}.value after set {bits:#x}"
            assert await tb.read_ok(reg) == expect, f"{reg.port} after hardware set {bits:#x} ({seed_note()})"
            clear = tb.rand32()
            await tb.write_ok(reg, clear)
            expect &= ~clear
            assert await tb.read_ok(reg) == expect, f"{reg.port} after writing {clear:#x} ({seed_note()})"
        # A set in the cycle of a clear wins: with set held through a clearing write, no bit ever drops.
        await FallingEdge(dut.clk)
        set_sig.value = reg.mask
        dropped = []

        async def watch(reg=reg, value_sig=value_sig, dropped=dropped):
            await FallingEdge(dut.clk)
            while True:
                await FallingEdge(dut.clk)
                if int(value_sig.value) != reg.mask:
                    dropped.append(int(value_sig.value))

        watcher = cocotb.start_soon(watch())
        await tb.write_ok(reg, 0xFFFF_FFFF)
        await ClockCycles(dut.clk, 2)
        watcher.cancel()
        set_sig.value = 0
        assert not dropped, f"{reg.port}: a clear beat a set in the same cycle ({dropped}) ({seed_note()})"
        assert await tb.read_ok(reg) == reg.mask
        await tb.write_ok(reg, 0xFFFF_FFFF)
        assert await tb.read_ok(reg) == 0, f"{reg.port} not cleared by writing ones"
    tb.expect_events([], "W1C accesses")


# ---- (5) bus errors ----------------------------------------------------------------------------------------
@cocotb.test()
async def bus_errors(dut):
    """Unmapped, misaligned, partial and RO writes, WO reads: SLVERR, no effect, and the bus keeps serving."""
    tb = await setup(dut)
    model = {}
    for reg in tb.shuffled(tb.of(Access.RW)):
        model[reg.port] = tb.rand32() & reg.mask
        await tb.write_ok(reg, model[reg.port])
    for reg in tb.of(Access.W1C):
        model[reg.port] = 0
    tb.events.clear()
    scratch = tb.reg("GLOBAL", "SCRATCH")

    async def still_serving(what: str):
        tb.expect_events([], what)
        value = tb.rand32()
        await tb.write_ok(scratch, value)
        assert await tb.read_ok(scratch) == value, f"SCRATCH broken after {what} ({seed_note()})"
        tb.expect_events([(scratch.port, "write", value)], f"SCRATCH write after {what}")
        await tb.write_ok(scratch, model[scratch.port])
        tb.events.clear()

    mapped = {r.addr for r in tb.regs}
    unmapped = []
    for block in tb.regmap.blocks:  # the gap after each block's last register, and random holes in it
        end = block.base + 4 * len(block.registers)
        gap = list(range(end, block.base + 0x100, 4))
        unmapped += [end, gap[-1]] + [gap[int(i)] for i in tb.rng.integers(0, len(gap), 2)]
    unmapped += [tb.regmap.size, 0xFFFC] + [int(a) * 4 for a in tb.rng.integers(tb.regmap.size // 4, 1 << 14, 4)]
    assert not mapped & set(unmapped)
    for addr in unmapped:
        data, resp = await tb.read(addr)
        assert (data, resp) == (0, SLVERR), f"read of unmapped {addr:#06x}: {resp} {data:#x} ({seed_note()})"
        assert await tb.write(addr, tb.rand32()) == SLVERR, f"write of unmapped {addr:#06x} ({seed_note()})"
        await still_serving(f"unmapped access at {addr:#06x}")

    for reg in tb.shuffled([r for r in tb.regs])[:24]:
        addr = reg.addr + int(tb.rng.integers(1, 4))
        data, resp = await tb.read(addr)  # one beat, araddr sent as is
        assert (data, resp) == (0, SLVERR), f"misaligned read at {addr:#06x}: {resp} ({seed_note()})"
        assert await tb.raw_write(addr, tb.rand32(), 0b1111) == SLVERR, f"misaligned write at {addr:#06x}"
        await still_serving(f"misaligned access at {addr:#06x}")

    for reg in tb.shuffled(tb.of(Access.RW, Access.WO, Access.W1C)):
        strb = int(tb.rng.choice([s for s in range(15)]))
        assert await tb.raw_write(reg.addr, tb.rand32(), strb) == SLVERR, (
            f"write to {reg.port} with strobes {strb:#06b} not refused ({seed_note()})")
        await still_serving(f"partial write to {reg.port}")
    # The master's own byte writes give partial strobes too.
    for size in (1, 2, 3):
        resp = (await tb.axil.write(scratch.addr, bytes(range(1, size + 1)))).resp
        assert resp == SLVERR, f"{size}-byte write to SCRATCH not refused"
        await still_serving(f"{size}-byte write")

    for reg in tb.shuffled(tb.of(Access.RO, constants=True)):
        before = await tb.read_ok(reg)
        tb.events.clear()
        assert await tb.write(reg.addr, tb.rand32()) == SLVERR, f"write to RO {reg.port} not refused"
        tb.expect_events([], f"write to RO {reg.port}")
        assert await tb.read_ok(reg) == before, f"write to RO {reg.port} changed it"
        tb.events.clear()

    for reg in tb.shuffled(tb.of(Access.WO)):
        data, resp = await tb.read(reg.addr)
        assert (data, resp) == (0, SLVERR), f"read of WO {reg.port}: {resp} {data:#x}"
        await still_serving(f"read of WO {reg.port}")

    got = await snapshot(tb)
    bad = {k: (got[k], model[k]) for k in model if got[k] != model[k]}
    assert not bad, f"refused accesses changed registers (read, expected): {bad} ({seed_note()})"


# ---- (6) hardware set on RW ---------------------------------------------------------------------------------
@cocotb.test()
async def rw_hardware_set(dut):
    """Hardware overwrites RW registers through set/set_value; a host write in the same cycle wins."""
    tb = await setup(dut)
    for reg in tb.shuffled(tb.of(Access.RW)):
        set_sig, set_value, value_sig = tb.sig(reg, "set"), tb.sig(reg, "set_value"), tb.sig(reg, "value")
        hw = tb.rand32()
        await FallingEdge(dut.clk)
        set_sig.value, set_value.value = 1, hw
        await FallingEdge(dut.clk)
        set_sig.value = 0
        assert int(value_sig.value) == hw & reg.mask, f"{reg.port}.value after set"
        assert await tb.read_ok(reg) == hw & reg.mask, f"{reg.port} after hardware set {hw:#x} ({seed_note()})"
        set_value.value = tb.rand32()  # set_value alone changes nothing
        await ClockCycles(dut.clk, 2)
        assert await tb.read_ok(reg) == hw & reg.mask, f"{reg.port} changed without set"

        # Same cycle: assert set exactly in the cycle the register file writes the host's word.
        host, hw2 = tb.rand32(), tb.rand32()
        hits = []

        async def collide(reg=reg, set_sig=set_sig, set_value=set_value, hw2=hw2, hits=hits):
            write = tb.sig(reg, "write")
            while True:
                await FallingEdge(dut.clk)
                if int(write.value):
                    set_sig.value, set_value.value = 1, hw2
                    await FallingEdge(dut.clk)
                    set_sig.value = 0
                    hits.append(1)
                    return

        task = cocotb.start_soon(collide())
        await tb.write_ok(reg, host)
        await ClockCycles(dut.clk, 2)
        task.cancel()
        assert hits, "the collision was not staged"
        got = await tb.read_ok(reg)
        assert got == host & reg.mask, (
            f"{reg.port}: host wrote {host:#x} while hardware set {hw2:#x}; reads {got:#x} ({seed_note()})")
    tb.events.clear()


@pytest.mark.parametrize("testcase", ["reset_and_walk", "rw_walking_and_aliasing", "ro_values_and_read_pulses",
                                      "wo_and_w1c", "bus_errors", "rw_hardware_set"])
def test_regfile(testcase, seed, cocotb_batch):
    run_cocotb_shared("dx1_regfile", "regfile.test_regfile", testcase, batch=cocotb_batch, seed=seed, quiet=True)
