"""The UVM environment of the SoC: a bus-functional model, agents, scoreboard; its items are in :mod:`.items`, its
coverage in :mod:`.coverage`.

* ``SocBfm`` owns the cocotbext-axi masters (AXI4-Lite on ``regs_``, AXI4 on
  ``mem_``) and the test-only ``stall_units`` input, and tells its listeners about
  every completed register access, every host write into device memory and every
  change of the stalled units.  The monitors are those listeners: they
  see transactions as the masters completed them, not by sampling pins.
* Register agent: ``RegItem`` (address, read/write, data, byte count, expected
  response), ``RegDriver``, ``RegMonitor``.
* Command agent: ``CmdItem`` (a packed command for one queue, a doorbell, or a
  block of data for device memory), ``CmdDriver`` (writes commands into the
  queue's ring and rings the doorbell through the BFM), ``CmdMonitor``.
* ``CompletionMonitor`` polls the completion rings for the entries the driver
  published (phase bit) and reports each once.
* ``Scoreboard`` feeds the same register and memory writes to a
  :class:`DeviceModel` and compares every register read (but the free-running
  counters), every bus response, every completion (tag, status, opcode, phase)
  and, at the end, the output regions of device memory.
* ``Coverage`` (:mod:`.coverage`): cocotb-coverage coverpoints and crosses, written
  as text into the run folder; ``COVERAGE_GOALS`` are the bins the runs of one seed
  must hit together (``test_uvm_coverage_goals``).
"""

from __future__ import annotations

import os

import cocotb
from cocotb.triggers import Event, Timer
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster
from pyuvm import ConfigDB, uvm_analysis_port, uvm_component, uvm_driver, uvm_env, uvm_sequencer

from dx1_bringup.fuzz.layout import LAYOUT, Layout
from dx1_bringup.model.device import BusError, DeviceModel
from dx1_bringup.sim.harness import CLOCK_NS, Harness
from dx1_bringup.spec import ErrorCode, stall_bit, unpack_completion

from .coverage import Coverage
from .items import REGMAP, AnalysisExport, CmdItem, Completion, RegItem

#: Registers whose value runs with the clock, so the notional model cannot predict them.
VOLATILE = {REGMAP.address("GLOBAL", "CYCLES_LO"), REGMAP.address("GLOBAL", "CYCLES_HI")} | {
    b.base + b.reg("CYCLES").offset for b in REGMAP.blocks if b.spec.type.name == "PERF"}
#: Set to "1" to corrupt the predictor on purpose (the checker's self-test): one expected status is flipped.
CORRUPT_ENV = "DX1_UVM_CORRUPT_PREDICTOR"


# ---- bus-functional model ------------------------------------------------------------------------------------

class SocBfm(Harness):
    """The SoC's host ports, driven by cocotbext-axi, and its unit stalls; listeners hear about every completed
    access and every stall change."""

    def __init__(self, dut):
        # The clock starts with the reset, in the environment's run phase.
        super().__init__(dut, start_clock=False)
        self.regs = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "regs_"), dut.clk, dut.rst)
        self.mem = AxiMaster(AxiBus.from_prefix(dut, "mem_"), dut.clk, dut.rst)
        for master in (self.regs, self.mem):
            master.write_if.log.setLevel("WARNING")
            master.read_if.log.setLevel("WARNING")
        self.reg_listeners: list = []
        self.mem_listeners: list = []
        self.stall_listeners: list = []

    async def reset(self):
        self.start_clock()
        self.dut.stall_units.value = 0
        await super().reset()

    def set_stalls(self, units) -> None:
        """Stall exactly ``units`` (``(unit, tile)`` pairs, :func:`~dx1_bringup.spec.stall_bit`) from now on."""
        units = frozenset(units)
        self.dut.stall_units.value = sum(stall_bit(unit, tile) for unit, tile in units)
        for listener in self.stall_listeners:
            listener(units)

    async def reg_access(self, item: RegItem) -> RegItem:
        if item.write:
            data = (item.data & 0xFFFF_FFFF).to_bytes(4, "little")[:item.nbytes]
            resp = await self.regs.write(item.addr, data)
            item.err = int(resp.resp) != 0
        else:
            resp = await self.regs.read(item.addr, item.nbytes)
            item.err = int(resp.resp) != 0
            item.rdata = int.from_bytes(bytes(resp.data)[:4], "little")
        for listener in self.reg_listeners:
            listener(item)
        return item

    async def reg_write(self, addr: int, value: int) -> RegItem:
        return await self.reg_access(RegItem("bfm_write", addr=addr, write=True, data=value))

    async def mem_write(self, addr: int, data: bytes):
        resp = await self.mem.write(addr, data)
        assert int(resp.resp) == 0, f"host write to device memory @{addr:#x} failed: {resp.resp}"
        for listener in self.mem_listeners:
            listener(addr, bytes(data))

    async def mem_read(self, addr: int, length: int) -> bytes:
        resp = await self.mem.read(addr, length)
        assert int(resp.resp) == 0, f"host read of device memory @{addr:#x} failed: {resp.resp}"
        return bytes(resp.data)


def bfm() -> SocBfm:
    return ConfigDB().get(None, "", "BFM")


# ---- register agent ------------------------------------------------------------------------------------------

class RegDriver(uvm_driver):
    async def run_phase(self):
        while True:
            item = await self.seq_item_port.get_next_item()
            await bfm().reg_access(item)
            self.seq_item_port.item_done()


class RegMonitor(uvm_component):
    """Publishes every completed register access (the sequences', the command driver's doorbells)."""

    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)

    def connect_phase(self):
        bfm().reg_listeners.append(self.ap.write)


class RegAgent(uvm_component):
    def build_phase(self):
        self.seqr = uvm_sequencer("seqr", self)
        self.driver = RegDriver("driver", self)
        self.monitor = RegMonitor("monitor", self)

    def connect_phase(self):
        self.driver.seq_item_port.connect(self.seqr.seq_item_export)


# ---- command agent -------------------------------------------------------------------------------------------

class CmdDriver(uvm_driver):
    """Puts commands into the rings, rings doorbells, writes data blocks; reports what it published."""

    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)   # published CmdItems (index and phase set)
        self.layout: Layout = ConfigDB().get(self, "", "LAYOUT")
        self.tail = [0] * self.layout.config.tiles
        self.wraps = [0] * self.layout.config.tiles
        self.unpublished: list[list[CmdItem]] = [[] for _ in range(self.layout.config.tiles)]
        self.completions: CompletionMonitor | None = None

    async def run_phase(self):
        lay = self.layout
        while True:
            item = await self.seq_item_port.get_next_item()
            q = item.queue
            if item.kind == "mem":
                await bfm().mem_write(item.addr, item.data)
            elif item.kind == "cmd":
                item.index, item.phase = self.tail[q], 1 ^ (self.wraps[q] & 1)
                await bfm().mem_write(lay.ring_slot(q, item.index), item.data)
                self.tail[q] = (self.tail[q] + 1) % lay.entries
                if self.tail[q] == 0:
                    self.wraps[q] += 1
                self.unpublished[q].append(item)
            elif item.kind == "doorbell":
                for cmd in self.unpublished[q]:
                    self.ap.write(cmd)
                    self.completions.expect(q, cmd.index, cmd.phase)
                self.unpublished[q] = []
                await bfm().reg_write(REGMAP.address(f"QUEUE{q}", "DOORBELL"), self.tail[q])
            else:
                raise ValueError(f"unknown command item kind {item.kind!r}")
            self.seq_item_port.item_done()


class CompletionMonitor(uvm_component):
    """Polls the completion rings for expected entries; publishes each ``Completion`` once."""

    POLL_NS = 256 * CLOCK_NS

    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)
        self.layout: Layout = ConfigDB().get(self, "", "LAYOUT")
        self.pending: dict[int, dict[int, int]] = {q: {} for q in range(self.layout.config.tiles)}
        self.idle = Event()
        self.idle.set()

    def expect(self, q: int, index: int, phase: int):
        self.pending[q][index] = phase
        self.idle.clear()

    async def run_phase(self):
        lay = self.layout
        while True:
            await Timer(self.POLL_NS, "ns")
            for q, waiting in self.pending.items():
                if not waiting:
                    continue
                lo, hi = min(waiting), max(waiting) + 1
                data = await bfm().mem_read(lay.cq_slot(q, lo), 8 * (hi - lo))
                for index, phase in sorted(waiting.items()):
                    entry = unpack_completion(data[8 * (index - lo):8 * (index - lo) + 8])
                    if entry["phase"] == phase:
                        del waiting[index]
                        self.ap.write(Completion(q, index, entry))
            if not any(self.pending.values()):
                self.idle.set()

    async def wait_idle(self, timeout_cycles: int = 400_000):
        await cocotb.triggers.with_timeout(self.idle.wait(), timeout_cycles * CLOCK_NS, "ns")


class CmdAgent(uvm_component):
    def build_phase(self):
        self.seqr = uvm_sequencer("seqr", self)
        self.driver = CmdDriver("driver", self)
        self.completions = CompletionMonitor("completions", self)

    def connect_phase(self):
        self.driver.seq_item_port.connect(self.seqr.seq_item_export)
        self.driver.completions = self.completions


# ---- scoreboard ----------------------------------------------------------------------------------------------

class Scoreboard(uvm_component):
    """DeviceModel as the predictor; counts mismatches and reports the first few."""

    MAX_REPORTED = 20

    def build_phase(self):
        self.layout: Layout = ConfigDB().get(self, "", "LAYOUT")
        self.model = DeviceModel(self.layout.config)
        self.reg_export = AnalysisExport("reg_export", self, self.on_reg)
        self.mem_export = AnalysisExport("mem_export", self, self.on_mem)
        self.cmd_export = AnalysisExport("cmd_export", self, self.on_cmd)
        self.cpl_export = AnalysisExport("cpl_export", self, self.on_completion)
        self.checked_ap = uvm_analysis_port("checked_ap", self)  # (CmdItem, status) to coverage
        self.reg_ap = uvm_analysis_port("reg_ap", self)          # checked RegItems to coverage
        self.commands: dict[tuple[int, int], CmdItem] = {}
        self.mismatches: list[str] = []
        self.counts = dict(reg_reads=0, reg_writes=0, slverr=0, completions=0, mem_bytes=0)
        self.corrupt = os.environ.get(CORRUPT_ENV) == "1"

    def mismatch(self, text: str):
        if len(self.mismatches) < self.MAX_REPORTED:
            self.logger.error(text)
        self.mismatches.append(text)

    # Register accesses, in bus order.
    def on_reg(self, item: RegItem):
        m = self.model
        value = None
        if item.nbytes != 4 and item.addr % 4 == 0:
            predicted_err = True   # partial strobes: the model has no byte writes; the bus must refuse it
        else:
            try:
                if item.write:
                    m.write32(item.addr, item.data & 0xFFFF_FFFF)
                else:
                    value = m.read32(item.addr)
                predicted_err = False
            except BusError:
                predicted_err = True
        self.counts["reg_writes" if item.write else "reg_reads"] += 1
        self.counts["slverr"] += bool(item.err)
        if item.err != predicted_err:
            self.mismatch(f"{item}: the model predicts {'SLVERR' if predicted_err else 'OKAY'}")
        elif item.expect_err is not None and item.err != item.expect_err:
            self.mismatch(f"{item}: the sequence expected {'SLVERR' if item.expect_err else 'OKAY'}")
        elif not item.write and not item.err and item.addr not in VOLATILE and item.rdata != value:
            self.mismatch(f"{item}: the model predicts {value:#010x}")
        self.reg_ap.write(item)

    def on_stalls(self, units: frozenset):
        self.model.set_stalls(units)

    def on_mem(self, t):
        addr, data = t
        self.model.mem_write(addr, data)
        self.counts["mem_bytes"] += len(data)

    def on_cmd(self, item: CmdItem):
        self.commands[(item.queue, item.index)] = item

    def on_completion(self, c: Completion):
        lay = self.layout
        slot = lay.cq_slot(c.queue, c.index)
        expected = unpack_completion(bytes(self.model.mem[slot:slot + 8]))
        if self.corrupt and self.counts["completions"] == 0:
            expected["status"] ^= 1
        self.counts["completions"] += 1
        cmd = self.commands.pop((c.queue, c.index), None)
        keys = ("tag", "status", "opcode", "phase")
        got = {k: c.fields[k] for k in keys}
        want = {k: expected[k] for k in keys}
        if cmd is None:
            self.mismatch(f"completion q{c.queue}[{c.index}] {got} for no published command")
        elif got != want:
            self.mismatch(f"completion q{c.queue}[{c.index}] of {cmd}: RTL {_named(got)}, model {_named(want)}")
        else:
            self.checked_ap.write((cmd, c.fields["status"]))

    async def check_memory(self):
        """Compare the checked regions of every queue with the model."""
        for q in range(self.layout.config.tiles):
            for addr, length in self.layout.checked_regions(q):
                got = await bfm().mem_read(addr, length)
                want = bytes(self.model.mem[addr:addr + length])
                if got != want:
                    diff = [i for i in range(length) if got[i] != want[i]]
                    self.mismatch(f"device memory differs from the model in {len(diff)} bytes of "
                                  f"[{addr:#x}, {addr + length:#x}); first at {addr + diff[0]:#x}: "
                                  f"RTL {got[diff[0]]:#04x}, model {want[diff[0]]:#04x}")

    def check_phase(self):
        if self.commands:
            self.mismatch(f"{len(self.commands)} published commands never completed: "
                          f"{sorted(self.commands)[:8]}")
        self.logger.info(f"scoreboard: {self.counts}, {len(self.mismatches)} mismatches")
        assert not self.mismatches, (f"{len(self.mismatches)} scoreboard mismatches (seed {cocotb.RANDOM_SEED}); "
                                     f"first: {self.mismatches[0]}")


def _named(c: dict) -> dict:
    out = dict(c)
    try:
        out["status"] = ErrorCode(c["status"]).name
    except ValueError:
        pass
    return out


# ---- environment ---------------------------------------------------------------------------------------------

class Dx1Env(uvm_env):
    def build_phase(self):
        self.reg_agent = RegAgent("reg_agent", self)
        self.cmd_agent = CmdAgent("cmd_agent", self)
        self.scoreboard = Scoreboard("scoreboard", self)
        self.coverage = Coverage("coverage", self)

    def connect_phase(self):
        self.reg_agent.monitor.ap.connect(self.scoreboard.reg_export)
        bfm().mem_listeners.append(lambda addr, data: self.scoreboard.mem_export.write((addr, data)))
        bfm().stall_listeners.append(self.scoreboard.on_stalls)
        self.cmd_agent.driver.ap.connect(self.scoreboard.cmd_export)
        self.cmd_agent.completions.ap.connect(self.scoreboard.cpl_export)
        self.scoreboard.checked_ap.connect(self.coverage.analysis_export)
        self.scoreboard.reg_ap.connect(self.coverage.reg_export)


__all__ = ["SocBfm", "bfm", "Dx1Env", "Scoreboard", "VOLATILE", "LAYOUT"]
