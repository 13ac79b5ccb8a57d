"""The DMA engine (with a tile core behind it) against a numpy reference of LOAD, STORE and COPY.

Device memory is a cocotbext-axi AxiRam; a monitor on the AXI channels checks
every burst (64-bit INCR, at most 256 beats, never across a 4 KiB page, W
bursts as long as their AW, full strobes).  Error responses come from a range
of addresses that the RAM refuses (the AxiRam itself wraps addresses, so a
smaller RAM would not answer with an error).
"""

from __future__ import annotations

import logging

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiBus, AxiRam, AxiStreamBus, AxiStreamSink, AxiStreamSource

from dx1_bringup.model.tile import TileModel
from dx1_bringup.sim import run_cocotb_shared
from dx1_bringup.sim.bus import refuse_accesses
from dx1_bringup.sim.harness import CLOCK_NS, Harness, seed_note, set_pauses
from dx1_bringup.sim.stimulus import random_gemm
from dx1_bringup.sim.tile_tb import config_of
from dx1_bringup.spec import COMPLETION, ErrorCode, Opcode, pack_command

MEM = 1 << 20
SRC = (0x00000, 0x40000)     # random data, read by LOADs and COPYs
STORE_REGION = (0x40000, 0x80000)
DUMP_SPM = 0x80000           # whole scratchpad / accumulator read back here
DUMP_ACC = 0x90000
COPY_DST = (0xA0000, 0xF0000)
BAD = (0xF8000, 0x100000)    # answered with SLVERR in the error test


class Ref:
    """numpy reference of the tile's memories and device memory."""

    def __init__(self, config, mem: np.ndarray):
        self.n = config.array
        self.spm = np.zeros((config.spm_rows, self.n), dtype=np.int8)
        self.acc = np.zeros((config.acc_rows, self.n), dtype=np.int32)
        self.mem = mem

    def local(self, acc: bool) -> np.ndarray:
        """Local rows as bytes (lanes little-endian, lane 0 first)."""
        mem = self.acc if acc else self.spm
        return mem.view(np.uint8).reshape(len(mem), -1)

    def pairs(self, f: dict):
        """(local row, device address) of a move, in command order."""
        rb = 4 * self.n if f["acc"] else self.n
        depth = len(self.acc if f["acc"] else self.spm)
        for r in range(f["rows"]):
            for c in range(f["cols"]):
                yield ((f["local_addr"] + r * f["local_row_stride"] + c * f["local_col_stride"]) & 0xFFFF) % depth, \
                    f["mem_addr"] + r * f["mem_stride"] + c * rb, rb

    def load(self, f: dict, bad=None) -> None:
        local = self.local(f["acc"])
        for row, addr, rb in self.pairs(f):
            if bad and addr + rb > bad[0] and addr < bad[1]:
                return  # nothing more of the command is written after a read error
            local[row] = self.mem[addr:addr + rb]

    def store(self, f: dict, bad=None) -> None:
        local = self.local(f["acc"])
        for row, addr, rb in self.pairs(f):
            self.mem[addr:addr + rb] = local[row]
            if bad:
                lo, hi = max(addr, bad[0]), min(addr + rb, bad[1])
                if lo < hi:
                    self.mem[lo:hi] = 0  # never compared: the RAM does not hold the bad range

    def copy(self, src: int, dst: int, length: int, bad=None) -> None:
        if bad and src + length > bad[0] and src < bad[1]:
            length = max(0, bad[0] - src)  # beats from the first bad one on are written with null strobes
        self.mem[dst:dst + length] = self.mem[src:src + length].copy()


def move(opcode: Opcode, tag: int = 0, **f) -> tuple[bytes, dict]:
    acc = f.pop("acc")
    fields = dict(rows=1, cols=1, mem_stride=0, local_row_stride=0, local_col_stride=0, local_addr=0) | f
    return pack_command(opcode, tag=tag, flags={"acc": acc}, **fields), dict(fields, acc=acc)


class DmaTB(Harness):
    """Clock, reset, device memory and stream models around ``dx1_dma_tile``."""

    def __init__(self, dut, rng: np.random.Generator | None = None, pause: float = 0.2):
        super().__init__(dut)
        self.config = config_of(dut)
        self.n = self.config.array
        self.ram = AxiRam(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst, size=MEM)
        self.bad: tuple[int, int] | None = None
        self.null_strobes_ok = False
        self._wrap_ram()

        def stream(kind, prefix):
            return kind(AxiStreamBus.from_prefix(dut, prefix + "_"), dut.clk, dut.rst)

        self.dma_cmd = stream(AxiStreamSource, "dma_cmd")
        self.dma_done = stream(AxiStreamSink, "dma_done")
        self.tile_cmd = stream(AxiStreamSource, "tile_cmd")
        self.tile_done = stream(AxiStreamSink, "tile_done")
        streams = [self.dma_cmd, self.dma_done, self.tile_cmd, self.tile_done]
        channels = [self.ram.read_if.ar_channel, self.ram.read_if.r_channel, self.ram.write_if.aw_channel,
                    self.ram.write_if.w_channel, self.ram.write_if.b_channel]
        if rng is not None:
            set_pauses(streams + channels, rng, pause)
        for s in streams + channels + [self.ram.read_if, self.ram.write_if]:
            s.log.setLevel(logging.ERROR)
        self.bursts: list[tuple[str, int, int]] = []
        self.w_bursts: list[int] = []
        self.violations: list[str] = []
        cocotb.start_soon(self._monitor())

    def _wrap_ram(self) -> None:
        refuse_accesses(self.ram, lambda address, length:
                        self.bad is not None and address + length > self.bad[0] and address < self.bad[1])

    async def _monitor(self) -> None:
        dut = self.dut
        beats = 0
        while True:
            await RisingEdge(dut.clk)
            for ch in ("ar", "aw"):
                if dut.rst.value or not (int(getattr(dut, f"axi__{ch}valid").value)
                                         and int(getattr(dut, f"axi__{ch}ready").value)):
                    continue
                addr = int(getattr(dut, f"axi__{ch}addr").value)
                length = int(getattr(dut, f"axi__{ch}len").value) + 1
                size = int(getattr(dut, f"axi__{ch}size").value)
                burst = int(getattr(dut, f"axi__{ch}burst").value)
                self.bursts.append((ch, addr, length))
                if size != 3 or burst != 1 or addr % 8:
                    self.violations.append(f"{ch} burst at {addr:#x}: size {size}, type {burst}")
                if (addr & 0xFFF) + 8 * length > 0x1000:
                    self.violations.append(f"{ch} burst at {addr:#x} of {length} beats crosses a 4 KiB page")
            if int(dut.axi__wvalid.value) and int(dut.axi__wready.value):
                beats += 1
                strb = int(dut.axi__wstrb.value)
                if strb != 0xFF and not (self.null_strobes_ok and strb == 0):
                    self.violations.append(f"W beat with strobes {strb:#x}")
                if int(dut.axi__wlast.value):
                    self.w_bursts.append(beats)
                    beats = 0

    def check_bus(self) -> None:
        assert not self.violations, f"AXI rule broken ({seed_note()}): {self.violations[:5]}"
        aw = [length for ch, _, length in self.bursts if ch == "aw"]
        assert aw[:len(self.w_bursts)] == self.w_bursts, f"W bursts differ from their AW lengths ({seed_note()})"

    async def dma(self, commands: list[bytes], timeout_cycles: int = 400_000) -> list[int]:
        """Run DMA commands; their status bytes, in order."""
        async def send_all():
            for c in commands:
                await self.dma_cmd.send(c)

        async def collect():
            return [int.from_bytes(bytes((await self.dma_done.recv()).tdata), "little") for _ in commands]

        sender = cocotb.start_soon(send_all())
        statuses = await with_timeout(collect(), timeout_cycles * CLOCK_NS, "ns")
        await sender
        return statuses

    async def tile(self, commands: list[bytes]) -> list[dict]:
        async def send_all():
            for c in commands:
                await self.tile_cmd.send(c)

        async def collect():
            out = []
            for _ in commands:
                word = int.from_bytes(bytes((await self.tile_done.recv()).tdata), "little")
                out.append({f.name: f.extract(word) for f in COMPLETION if f.name in ("tag", "status", "opcode")})
            return out

        sender = cocotb.start_soon(send_all())
        done = await with_timeout(collect(), 400_000 * CLOCK_NS, "ns")
        await sender
        return done

    async def dump(self) -> tuple[np.ndarray, np.ndarray]:
        """Both local memories, read back through the DMA (STORE of every row)."""
        cfg = self.config
        spm_cmd, _ = move(Opcode.STORE, acc=False, mem_addr=DUMP_SPM, cols=cfg.spm_rows,
                          local_col_stride=1)
        acc_cmd, _ = move(Opcode.STORE, acc=True, mem_addr=DUMP_ACC, cols=cfg.acc_rows,
                          local_col_stride=1)
        assert await self.dma([spm_cmd, acc_cmd]) == [ErrorCode.OK] * 2, f"dump STORE failed ({seed_note()})"
        spm = np.frombuffer(self.ram.read(DUMP_SPM, cfg.spm_rows * self.n), dtype=np.int8).reshape(-1, self.n)
        acc = np.frombuffer(self.ram.read(DUMP_ACC, cfg.acc_rows * 4 * self.n), dtype=np.int32).reshape(-1, self.n)
        return spm, acc


def _compare(name: str, got: np.ndarray, expected: np.ndarray) -> None:
    bad = np.argwhere(got != expected)
    assert not len(bad), (f"{name} differs from the reference in {len(bad)} places ({seed_note()}); first at "
                          f"{tuple(bad[0])}: RTL {got[tuple(bad[0])]}, reference {expected[tuple(bad[0])]}")


async def setup(dut, *, pauses: bool = True) -> tuple[DmaTB, Ref, np.random.Generator]:
    """Random device memory, and both local memories loaded from it (so every row is known)."""
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    tb = DmaTB(dut, rng if pauses else None)
    image = rng.integers(0, 256, size=MEM, dtype=np.uint8)
    image[BAD[0]:BAD[1]] = 0
    tb.ram.write(0, image.tobytes())
    await tb.reset()
    ref = Ref(tb.config, image)
    cmds = []
    for acc, addr, rows in ((False, 0x0, tb.config.spm_rows), (True, 0x10000, tb.config.acc_rows)):
        cmd, f = move(Opcode.LOAD, acc=acc, mem_addr=addr, cols=rows, local_col_stride=1)
        ref.load(f)
        cmds.append(cmd)
    assert await tb.dma(cmds) == [ErrorCode.OK] * 2, f"initial LOADs failed ({seed_note()})"
    return tb, ref, rng


async def check_local(tb: DmaTB, ref: Ref) -> None:
    spm, acc = await tb.dump()
    _compare("scratchpad", spm, ref.spm)
    _compare("accumulator buffer", acc, ref.acc)


def random_move(rng: np.random.Generator, tb: DmaTB, opcode: Opcode, tag: int, region: tuple[int, int]):
    cfg, n = tb.config, tb.n
    while True:
        acc = bool(rng.integers(0, 2))
        depth = cfg.acc_rows if acc else cfg.spm_rows
        rb = 4 * n if acc else n
        rows = 1 if rng.random() < 0.25 else int(rng.integers(1, 7))
        bucket = rng.integers(0, 3)
        cols = 1 if bucket == 0 else int(rng.integers(1, (40, 300 if not acc else 80)[bucket - 1] + 1))
        seg = cols * rb
        kind = rng.integers(0, 4)
        stride = (0, rb * int(rng.integers(0, 2 * cols + 1)), seg + 8 * int(rng.integers(0, 65)),
                  seg)[kind]  # 0 and short strides overlap outer rows in device memory
        lrs = int(rng.choice([0, cols, int(rng.integers(0, 2 * cols + 1))]))
        lcs = int(rng.choice([0, 1, int(rng.integers(0, 5))]))
        span = (rows - 1) * lrs + (cols - 1) * lcs
        dspan = (rows - 1) * stride + seg
        if span >= depth or dspan > region[1] - region[0]:
            continue
        local = int(rng.integers(0, depth - span))
        image = region[0] + 8 * int(rng.integers(0, (region[1] - region[0] - dspan) // 8 + 1))
        return move(opcode, tag, acc=acc, mem_addr=image, mem_stride=stride, local_addr=local, rows=rows,
                    cols=cols, local_row_stride=lrs, local_col_stride=lcs)


@cocotb.test()
async def random_loads(dut):
    """Random LOADs (spm and acc, overlapping rows, zero strides), read back by STORE and through GEMMs."""
    tb, ref, rng = await setup(dut)
    for _batch in range(2):
        cmds = []
        for t in range(25):
            cmd, f = random_move(rng, tb, Opcode.LOAD, t, SRC)
            ref.load(f)
            cmds.append(cmd)
        assert await tb.dma(cmds) == [ErrorCode.OK] * len(cmds), f"a LOAD failed ({seed_note()})"
        await check_local(tb, ref)
    # GEMMs read the loaded scratchpad rows and add to the loaded accumulator rows: this checks the
    # byte order of LOAD independently of STORE.
    model = TileModel(tb.config)
    model.spm[:], model.acc[:] = ref.spm, ref.acc
    gemms = [random_gemm(rng, tb.config, t) for t in range(6)]
    expected = []
    for g in gemms:
        word = int.from_bytes(g, "little")
        expected.append({"tag": word >> 16 & 0xFFFF, "status": int(model.execute(g)), "opcode": word & 0xFF})
    assert await tb.tile(gemms) == expected, f"GEMM completions differ ({seed_note()})"
    ref.spm[:], ref.acc[:] = model.spm, model.acc
    await check_local(tb, ref)
    tb.check_bus()


@cocotb.test()
async def random_stores(dut):
    """Random STOREs (overlapping outer rows, zero strides) into random device memory."""
    tb, ref, rng = await setup(dut)
    cmds = []
    for t in range(40):
        cmd, f = random_move(rng, tb, Opcode.STORE, t, STORE_REGION)
        ref.store(f)
        cmds.append(cmd)
    assert await tb.dma(cmds) == [ErrorCode.OK] * len(cmds), f"a STORE failed ({seed_note()})"
    got = np.frombuffer(tb.ram.read(STORE_REGION[0], STORE_REGION[1] - STORE_REGION[0]), dtype=np.uint8)
    _compare("device memory", got, ref.mem[STORE_REGION[0]:STORE_REGION[1]])
    tb.check_bus()


@cocotb.test()
async def copies(dut):
    """COPYs of odd beat counts, across 4 KiB pages, from one byte-beat up to several pages."""
    tb, ref, rng = await setup(dut)
    cmds = []
    dst = COPY_DST[0] + 8 * int(rng.integers(0, 512))
    lengths = [8, 16, 24, 8 * 257, 8 * 511, 8 * 2049] + [8 * (2 * int(rng.integers(0, 400)) + 1) for _ in range(12)]
    for t, length in enumerate(lengths):
        src = 8 * int(rng.integers(0, (SRC[1] - length) // 8))
        if t < 3:
            src = 0x1000 * int(rng.integers(1, 16)) - 8  # straddles a page
        if dst + length > COPY_DST[1]:
            dst = COPY_DST[0]
        cmds.append(pack_command(Opcode.COPY, tag=t, src_addr=src, dst_addr=dst, length=length))
        ref.copy(src, dst, length)
        dst += length + 8 * int(rng.integers(0, 64))
    assert await tb.dma(cmds) == [ErrorCode.OK] * len(cmds), f"a COPY failed ({seed_note()})"
    got = np.frombuffer(tb.ram.read(COPY_DST[0], COPY_DST[1] - COPY_DST[0]), dtype=np.uint8)
    _compare("device memory", got, ref.mem[COPY_DST[0]:COPY_DST[1]])
    tb.check_bus()


@cocotb.test()
async def burst_rules(dut):
    """Long moves starting just below a page: bursts split at 256 beats and at every 4 KiB boundary."""
    tb, ref, rng = await setup(dut)
    tb.bursts.clear()
    tb.w_bursts.clear()
    load, fl = move(Opcode.LOAD, acc=False, mem_addr=0x0FF8, cols=1000, local_addr=7, local_col_stride=1)
    acc_load, fa = move(Opcode.LOAD, acc=True, mem_addr=0x20FE0, rows=3, mem_stride=0x2008, cols=200,
                        local_addr=3, local_row_stride=200, local_col_stride=1)
    store, fs = move(Opcode.STORE, acc=True, mem_addr=STORE_REGION[0] + 0xFF8, cols=300, local_addr=5,
                     local_col_stride=1)
    copy = pack_command(Opcode.COPY, src_addr=0x3FF8, dst_addr=COPY_DST[0] + 0x7F0, length=8 * 1500)
    ref.load(fl)
    ref.load(fa)
    ref.store(fs)
    ref.copy(0x3FF8, COPY_DST[0] + 0x7F0, 8 * 1500)
    assert await tb.dma([load, acc_load, store, copy]) == [ErrorCode.OK] * 4, f"a move failed ({seed_note()})"
    tb.check_bus()
    lengths = [length for _, _, length in tb.bursts]
    assert 256 in lengths, "no burst reached 256 beats"
    assert any((addr + 8 * length) % 0x1000 == 0 and length < 256 for _, addr, length in tb.bursts), \
        "no burst was cut at a page boundary"
    assert max(lengths) <= 256
    for lo, hi in (STORE_REGION, COPY_DST):
        got = np.frombuffer(tb.ram.read(lo, hi - lo), dtype=np.uint8)
        _compare("device memory", got, ref.mem[lo:hi])
    await check_local(tb, ref)
    tb.check_bus()


@cocotb.test()
async def bus_errors(dut):
    """Error responses give BUS_ERROR, a failed LOAD stops writing local rows, and later commands work."""
    tb, ref, rng = await setup(dut)
    tb.bad = BAD
    tb.null_strobes_ok = True
    n = tb.n
    cases = [
        # read error in the second outer row: the first row's local rows are written, nothing after
        move(Opcode.LOAD, acc=False, mem_addr=BAD[0] - 40, mem_stride=32, rows=3, cols=4, local_addr=100,
             local_row_stride=4, local_col_stride=1),
        move(Opcode.LOAD, acc=True, mem_addr=BAD[0] - 4 * n, rows=2, cols=3, mem_stride=0x100,
             local_addr=50, local_row_stride=3, local_col_stride=1),
        move(Opcode.LOAD, acc=True, mem_addr=BAD[0] + 0x1000, cols=20, local_addr=200, local_col_stride=1),
    ]
    statuses = await tb.dma([c for c, _ in cases])
    for _, f in cases:
        ref.load(f, BAD)
    assert statuses == [ErrorCode.BUS_ERROR] * 3, f"LOAD statuses {statuses} ({seed_note()})"
    store, fs = move(Opcode.STORE, acc=False, mem_addr=BAD[0] - 64, cols=40, local_addr=9, local_col_stride=1)
    ref.store(fs, BAD)
    src = BAD[0] - 8 * 37
    copy_bad_src = pack_command(Opcode.COPY, src_addr=src, dst_addr=COPY_DST[0] + 0x100, length=8 * 300)
    ref.copy(src, COPY_DST[0] + 0x100, 8 * 300, BAD)
    copy_bad_dst = pack_command(Opcode.COPY, src_addr=0x2000, dst_addr=BAD[0] + 0x800, length=8 * 600)
    good, fg = move(Opcode.LOAD, acc=True, mem_addr=0x5008, rows=2, mem_stride=0x1000, cols=30, local_addr=400,
                    local_row_stride=30, local_col_stride=1)
    ref.load(fg)
    statuses = await tb.dma([store, copy_bad_src, copy_bad_dst, good])
    assert statuses == [ErrorCode.BUS_ERROR] * 3 + [ErrorCode.OK], f"statuses {statuses} ({seed_note()})"
    tb.bad = None
    tb.null_strobes_ok = False
    for lo, hi in (STORE_REGION, COPY_DST, (BAD[0] - 0x1000, BAD[0])):
        got = np.frombuffer(tb.ram.read(lo, hi - lo), dtype=np.uint8)
        _compare("device memory", got, ref.mem[lo:hi])
    await check_local(tb, ref)
    tb.check_bus()


@cocotb.test()
async def throughput(dut):
    """32 KiB LOAD into the scratchpad with no pauses: at most 4096 * 1.1 cycles (also reports STORE, COPY)."""
    tb, ref, rng = await setup(dut, pauses=False)
    beats = 32768 // 8
    results = {}
    for name, cmd in (
        ("LOAD", move(Opcode.LOAD, acc=False, mem_addr=0x0, cols=32768 // tb.n)[0]),
        ("LOAD acc", move(Opcode.LOAD, acc=True, mem_addr=0x8000, cols=32768 // (4 * tb.n))[0]),
        ("STORE", move(Opcode.STORE, acc=False, mem_addr=STORE_REGION[0], cols=32768 // tb.n)[0]),
        ("STORE acc", move(Opcode.STORE, acc=True, mem_addr=STORE_REGION[0] + 0x8000, cols=32768 // (4 * tb.n))[0]),
        ("COPY", pack_command(Opcode.COPY, src_addr=0x10000, dst_addr=COPY_DST[0], length=32768)),
    ):
        read0, written0 = int(dut.dma_bytes_read.value), int(dut.dma_bytes_written.value)
        await RisingEdge(dut.clk)
        start = tb.cycle
        assert await tb.dma([cmd]) == [ErrorCode.OK]
        results[name] = tb.cycle - start
        read = int(dut.dma_bytes_read.value) - read0
        written = int(dut.dma_bytes_written.value) - written0
        assert (read, written) == {"L": (32768, 0), "S": (0, 32768), "C": (32768, 32768)}[name[0]], \
            f"{name}: byte counters moved by {read} read, {written} written"
        await ClockCycles(dut.clk, 2)
    dut._log.warning("DMA cycles for 32 KiB (%d beats): %s", beats,
                     ", ".join(f"{k} {v} ({beats / v:.3f} beats/cycle)" for k, v in results.items()))
    assert results["LOAD"] <= beats * 1.1, f"32 KiB LOAD took {results['LOAD']} cycles ({seed_note()})"
    tb.check_bus()


TESTCASES = ["random_loads", "random_stores", "copies", "burst_rules", "bus_errors", "throughput"]


def test_dma(testcase, seed, cocotb_batch):
    run_cocotb_shared("dx1_dma_tile", "dma.test_dma", testcase, batch=cocotb_batch, seed=seed, quiet=True)


def pytest_generate_tests(metafunc):
    if "testcase" in metafunc.fixturenames:
        metafunc.parametrize("testcase", TESTCASES)
