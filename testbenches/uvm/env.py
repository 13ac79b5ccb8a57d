"""The UVM environment of the SoC: items, a bus-functional model, agents, scoreboard, coverage.

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
* ``Coverage``: cocotb-coverage coverpoints and crosses, written as text into the
  run folder; :data:`COVERAGE_GOALS` are the bins the runs of one seed must hit
  together (``test_uvm_coverage_goals``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import cocotb
from cocotb.triggers import Event, Timer
from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster
from pyuvm import (
    ConfigDB,
    uvm_analysis_export,
    uvm_analysis_port,
    uvm_component,
    uvm_driver,
    uvm_env,
    uvm_sequence_item,
    uvm_sequencer,
    uvm_subscriber,
)

from dx1_bringup.fuzz.layout import LAYOUT, Layout
from dx1_bringup.model.device import BusError, DeviceModel
from dx1_bringup.sim.harness import CLOCK_NS, Harness
from dx1_bringup.sim.vector_stimulus import VECTOR_BAD_KINDS
from dx1_bringup.spec import VECTOR_OPS, Access, ErrorCode, Opcode, register_map, stall_bit, unpack_completion

REGMAP = register_map(LAYOUT.config)
#: address -> (block, placed register)
DECODE = {b.base + r.offset: (b, r) for b in REGMAP.blocks for r in b.registers}
#: Registers whose value runs with the clock, so the notional model cannot predict them.
VOLATILE = {REGMAP.address("GLOBAL", "CYCLES_LO"), REGMAP.address("GLOBAL", "CYCLES_HI")} | {
    b.base + b.reg("CYCLES").offset for b in REGMAP.blocks if b.spec.type.name == "PERF"}
#: Set to "1" to corrupt the predictor on purpose (the checker's self-test): one expected status is flipped.
CORRUPT_ENV = "DX1_UVM_CORRUPT_PREDICTOR"


# ---- items ---------------------------------------------------------------------------------------------------

class RegItem(uvm_sequence_item):
    """One register access.  ``nbytes`` < 4 or a misaligned ``addr`` gives partial strobes / a misaligned address."""

    def __init__(self, name="reg", addr=0, write=False, data=0, nbytes=4, expect_err=None, error_kind=None):
        super().__init__(name)
        self.addr, self.write, self.data, self.nbytes = addr, write, data, nbytes
        self.expect_err = expect_err   # None: only the scoreboard's prediction counts
        self.error_kind = error_kind   # bus-error coverage label
        self.err = None                # response: True for SLVERR
        self.rdata = None

    def __str__(self):
        what = f"W {self.data:#010x}" if self.write else "R"
        got = "" if self.err is None else (" -> SLVERR" if self.err else
                                           ("" if self.write else f" -> {self.rdata:#010x}"))
        return f"reg {what} @{self.addr:#06x}/{self.nbytes}{got}"


class CmdItem(uvm_sequence_item):
    """kind "cmd": ``data`` is a packed command for ``queue``; "doorbell": publish the queue's new commands;
    "mem": write ``data`` to device memory at ``addr``.  ``meta`` carries coverage labels."""

    def __init__(self, name="cmd", kind="cmd", queue=0, data=b"", addr=0, meta=None):
        super().__init__(name)
        self.kind, self.queue, self.data, self.addr = kind, queue, data, addr
        self.meta = meta or {}
        self.index = None   # ring index, set by the driver
        self.phase = None   # expected completion phase

    def __str__(self):
        if self.kind == "cmd":
            return f"q{self.queue}[{self.index}] {self.meta.get('opcode', '?')} {self.meta}"
        return f"{self.kind} q{self.queue} @{self.addr:#x} ({len(self.data)} bytes)"


@dataclass
class Completion:
    queue: int
    index: int
    fields: dict


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

class _Export(uvm_analysis_export):
    def __init__(self, name, parent, fn):
        super().__init__(name, parent)
        self.fn = fn

    def write(self, t):
        self.fn(t)


class Scoreboard(uvm_component):
    """DeviceModel as the predictor; counts mismatches and reports the first few."""

    MAX_REPORTED = 20

    def build_phase(self):
        self.layout: Layout = ConfigDB().get(self, "", "LAYOUT")
        self.model = DeviceModel(self.layout.config)
        self.reg_export = _Export("reg_export", self, self.on_reg)
        self.mem_export = _Export("mem_export", self, self.on_mem)
        self.cmd_export = _Export("cmd_export", self, self.on_cmd)
        self.cpl_export = _Export("cpl_export", self, self.on_completion)
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


# ---- functional coverage -------------------------------------------------------------------------------------

OPCODES = [o.name for o in Opcode] + ["BAD"]
SHAPES = ["tiny", "medium", "long"]
POSTOP_FLAGS = ["none", "relu", "bias", "relu+bias"]
STATUSES = [e.name for e in ErrorCode if e not in (ErrorCode.RING_OVERFLOW, ErrorCode.DOORBELL_RANGE,
                                                    ErrorCode.BUS_ERROR)]
_ALL_CHECKS = {"OK", "RESERVED_BITS"}
#: The opcodes the DMA runs: the watchdog aborts one held there with TIMEOUT (``WatchdogTimeoutSeq``).
DMA_OPCODES = ("LOAD", "STORE", "COPY")
#: Statuses a command gets from the unit it runs in, not from its checks (no refused command gives them).
UNIT_STATUSES = {"TIMEOUT"}
#: Which completion statuses each opcode can produce (the rest of opcode x status is ignored).
LEGAL_STATUS = {
    "NOP": _ALL_CHECKS, "FENCE": _ALL_CHECKS,
    "LOAD": _ALL_CHECKS | {"BAD_DIMENSION", "SPM_RANGE", "ACC_RANGE", "MISALIGNED", "DMA_WINDOW", "TIMEOUT"},
    "STORE": _ALL_CHECKS | {"BAD_DIMENSION", "SPM_RANGE", "ACC_RANGE", "MISALIGNED", "DMA_WINDOW", "TIMEOUT"},
    "GEMM": _ALL_CHECKS | {"BAD_DIMENSION", "SPM_RANGE", "ACC_RANGE"},
    "POSTOP": _ALL_CHECKS | {"BAD_DIMENSION", "BAD_FIELD", "SPM_RANGE", "ACC_RANGE"},
    "SIGNAL": _ALL_CHECKS | {"SEM_RANGE"},
    "WAIT": _ALL_CHECKS | {"BAD_DIMENSION", "SEM_RANGE"},
    "COPY": _ALL_CHECKS | {"BAD_DIMENSION", "MISALIGNED", "DMA_WINDOW", "TIMEOUT"},
    "VECTOR": _ALL_CHECKS | {"BAD_DIMENSION", "BAD_FIELD", "SPM_RANGE", "ACC_RANGE"},
    "TABLE": _ALL_CHECKS | {"SPM_RANGE"},
    "TRANSPOSE": _ALL_CHECKS | {"BAD_DIMENSION", "SPM_RANGE"},
    "BAD": {"BAD_OPCODE"},
}
#: Queue errors, each of which halts its queue until a resume.
QUEUE_ERRORS = ["DOORBELL_RANGE", "RING_OVERFLOW", "TIMEOUT"]
SHAPED = ["LOAD", "STORE", "GEMM", "POSTOP", "COPY", "VECTOR"]
#: The vector unit's coverage: its vops, where their operands live (A/B/D, "-" for no B), the shift corners of the
#: vops that shift, B's broadcast, a destination on top of a source.
VOPS = [spec.op.name for spec in VECTOR_OPS.values()]
OPERANDS = [f"{a}/{b}/{d}" for a in ("spm", "acc") for b in ("spm", "acc", "-") for d in ("spm", "acc")]
SHIFTED_VOPS = [spec.op.name for spec in VECTOR_OPS.values() if spec.max_shift is not None]
SHIFT_CORNERS = ["zero", "one", "mid", "max"]
BROADCASTS = ["none", "row", "column", "outer"]
REG_KINDS = [a.name for a in Access] + ["UNMAPPED"]
BUS_ERRORS = ["unmapped", "misaligned", "partial_strobe", "write_ro", "read_wo"]


@CoverPoint("dx1.cmd.opcode", xf=lambda c: c["opcode"], bins=OPCODES)
@CoverPoint("dx1.cmd.shape", xf=lambda c: c["shape"], bins=SHAPES)
@CoverPoint("dx1.cmd.postop_flags", xf=lambda c: c["postop_flags"], bins=POSTOP_FLAGS)
@CoverPoint("dx1.cmd.status", xf=lambda c: c["status"], bins=STATUSES)
@CoverPoint("dx1.cmd.error_kind", xf=lambda c: c["error_kind"],
            bins=["none", "opcode", "reserved", "dimension", "field", "sem_range", "spm_range", "acc_range",
                  "misaligned", "dma_window"])
@CoverPoint("dx1.cmd.queue", xf=lambda c: c["queue"], bins=[0, 1])
@CoverCross("dx1.cross.opcode_shape", items=["dx1.cmd.opcode", "dx1.cmd.shape"],
            ign_bins=[(o, s) for o in OPCODES if o not in SHAPED for s in SHAPES])
@CoverCross("dx1.cross.postop_flags_shape", items=["dx1.cmd.postop_flags", "dx1.cmd.shape"])
@CoverCross("dx1.cross.opcode_status", items=["dx1.cmd.opcode", "dx1.cmd.status"],
            ign_bins=[(o, s) for o in OPCODES for s in STATUSES if s not in LEGAL_STATUS[o]])
@CoverCross("dx1.cross.queue_opcode", items=["dx1.cmd.queue", "dx1.cmd.opcode"],
            ign_bins=[(q, "BAD") for q in (0, 1)])
def sample_command(c):
    pass


@CoverPoint("dx1.vector.vop", xf=lambda v: v["vop"], bins=VOPS)
@CoverPoint("dx1.vector.operands", xf=lambda v: v["operands"], bins=OPERANDS)
@CoverPoint("dx1.vector.shift", xf=lambda v: v["shift"], bins=SHIFT_CORNERS + ["n/a"])
@CoverCross("dx1.cross.vector_shift", items=["dx1.vector.vop", "dx1.vector.shift"],
            ign_bins=[(v, c) for v in VOPS for c in SHIFT_CORNERS + ["n/a"]
                      if (c == "n/a") == (v in SHIFTED_VOPS)])
@CoverPoint("dx1.vector.broadcast", xf=lambda v: v["broadcast"], bins=BROADCASTS)
@CoverPoint("dx1.vector.overlap", xf=lambda v: v["overlap"], bins=["no", "yes"])
def sample_vector(v):
    pass


@CoverPoint("dx1.vector.refusal", xf=lambda k: k, bins=list(VECTOR_BAD_KINDS))
def sample_vector_refusal(kind):
    pass


@CoverPoint("dx1.sync.direction", xf=lambda s: s["direction"], bins=["q0->q1", "q1->q0"])
@CoverPoint("dx1.sync.doorbell_order", xf=lambda s: s["order"], bins=["waiter_first", "signaller_first"])
@CoverCross("dx1.cross.sync", items=["dx1.sync.direction", "dx1.sync.doorbell_order"])
def sample_sync(s):
    pass


@CoverPoint("dx1.queue.error", xf=lambda e: e["code"], bins=QUEUE_ERRORS)
@CoverPoint("dx1.queue.error_queue", xf=lambda e: e["queue"], bins=[0, 1])
def sample_queue_error(e):
    pass


@CoverPoint("dx1.ring.phase", xf=lambda p: p, bins=[1, 0])
def sample_phase(p):
    pass


@CoverPoint("dx1.reg.kind", xf=lambda r: r["kind"], bins=REG_KINDS)
@CoverPoint("dx1.reg.op", xf=lambda r: r["op"], bins=["read", "write"])
@CoverPoint("dx1.reg.resp", xf=lambda r: r["resp"], bins=["OKAY", "SLVERR"])
@CoverCross("dx1.cross.reg", items=["dx1.reg.kind", "dx1.reg.op", "dx1.reg.resp"],
            ign_bins=[("RO", "write", "OKAY"), ("WO", "read", "OKAY"), ("UNMAPPED", "read", "OKAY"),
                      ("UNMAPPED", "write", "OKAY")])
@CoverPoint("dx1.reg.bus_error", xf=lambda r: r["bus_error"], bins=BUS_ERRORS)
def sample_reg(r):
    pass


class Coverage(uvm_subscriber):
    """Samples checked completions; ``reg_export`` samples register accesses."""

    def build_phase(self):
        self.reg_export = _Export("reg_export", self, self.on_reg)

    def write(self, t):
        cmd, status = t
        meta = cmd.meta
        try:
            name = ErrorCode(status).name
        except ValueError:
            name = f"0x{status:02x}"
        sample_command({"opcode": meta.get("opcode"), "shape": meta.get("shape"),
                        "postop_flags": meta.get("postop_flags"), "status": name,
                        "error_kind": meta.get("error_kind", "none"), "queue": cmd.queue})
        vector = meta.get("vector")
        if vector is not None and vector["opcode"] == "VECTOR" and name == "OK":
            sample_vector(vector)
        if meta.get("vector_refusal") is not None:
            sample_vector_refusal(meta["vector_refusal"])
        sample_phase(cmd.phase)

    def on_reg(self, item: RegItem):
        hit = DECODE.get(item.addr - item.addr % 4)   # partial or misaligned: the register it lands in
        kind = "UNMAPPED" if hit is None else hit[1].register.access.name
        sample_reg({"kind": kind, "op": "write" if item.write else "read",
                    "resp": "SLVERR" if item.err else "OKAY", "bus_error": item.error_kind})

    def report_phase(self):
        lines = coverage_report()
        path = Path.cwd() / f"coverage-{ConfigDB().get(None, '', 'TEST_NAME')}.txt"
        path.write_text("\n".join(lines) + "\n")
        coverage_db.export_to_yaml(str(path.with_suffix(".yml")))
        for line in lines:
            if not line.startswith("    "):
                self.logger.info(line)
        self.logger.info(f"coverage report: {path}")


def coverage_report() -> list[str]:
    """A readable text report: every coverpoint and cross with hits / bins, then its bins."""
    lines = ["functional coverage (bins hit / bins)"]
    total_hit = total_size = 0
    for name in sorted(coverage_db, key=str.lower):
        item = coverage_db[name]
        if name.count(".") < 2:
            continue
        total_hit += item.coverage
        total_size += item.size
        lines.append(f"{name:34s} {item.coverage:4d} / {item.size:<4d} ({item.cover_percentage:5.1f}%)")
        missed = [str(k) for k, v in item.detailed_coverage.items() if not v]
        hit = [f"{k}={v}" for k, v in item.detailed_coverage.items() if v]
        lines.append(f"    hit:    {', '.join(hit) or '-'}")
        if missed:
            lines.append(f"    missed: {', '.join(missed)}")
    lines.insert(1, f"{'TOTAL':34s} {total_hit:4d} / {total_size:<4d} "
                    f"({100 * total_hit / max(1, total_size):5.1f}%)")
    return lines


#: The coverage goals: every bin of each of these coverpoints and crosses (its ignored bins aside) must be hit
#: by the runs of one seed of every test together (``test_uvm_coverage_goals``).  That is every coverpoint and
#: cross defined above: a bin that nothing has to hit is not defined.
COVERAGE_GOALS = (
    "dx1.cmd.opcode", "dx1.cmd.shape", "dx1.cmd.postop_flags", "dx1.cmd.status", "dx1.cmd.error_kind", "dx1.cmd.queue",
    "dx1.cross.opcode_shape", "dx1.cross.postop_flags_shape", "dx1.cross.opcode_status", "dx1.cross.queue_opcode",
    "dx1.sync.direction", "dx1.sync.doorbell_order", "dx1.cross.sync",
    "dx1.queue.error", "dx1.queue.error_queue",
    "dx1.ring.phase",
    "dx1.reg.kind", "dx1.reg.op", "dx1.reg.resp", "dx1.cross.reg", "dx1.reg.bus_error",
    "dx1.vector.vop", "dx1.vector.operands", "dx1.vector.shift", "dx1.cross.vector_shift", "dx1.vector.broadcast",
    "dx1.vector.overlap", "dx1.vector.refusal",
)


def missed_goals(items) -> list[str]:
    """What of :data:`COVERAGE_GOALS` the merged coverage ``items`` (:class:`~dx1_bringup.sim.report.CoverItem`)
    did not hit: one line per goal with a bin never hit (naming the bins) or never sampled at all."""
    by_name = {item.name: item for item in items}
    missed = []
    for name in COVERAGE_GOALS:
        item = by_name.get(name)
        if item is None:
            missed.append(f"{name}: never sampled")
        elif item.missed or item.hit < item.size:
            missed.append(f"{name}: {item.hit} of {item.size} bins hit; never hit: {', '.join(item.missed)}")
    return missed


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


__all__ = ["RegItem", "CmdItem", "Completion", "SocBfm", "Dx1Env", "Scoreboard", "Coverage", "REGMAP", "DECODE",
           "VOLATILE", "LAYOUT", "LEGAL_STATUS", "DMA_OPCODES", "UNIT_STATUSES", "QUEUE_ERRORS", "COVERAGE_GOALS",
           "sample_sync", "sample_queue_error", "coverage_report", "missed_goals"]
