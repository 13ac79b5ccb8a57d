"""The pyuvm environment's functional coverage: cocotb-coverage coverpoints and crosses over checked completions and
register accesses, their text report, and :data:`COVERAGE_GOALS`, the bins the runs of one seed must hit together
(``test_uvm_coverage_goals``)."""

from __future__ import annotations

from pathlib import Path

from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db
from pyuvm import ConfigDB, uvm_subscriber

from dx1_bringup.sim.vector_stimulus import VECTOR_BAD_KINDS
from dx1_bringup.spec import VECTOR_OPS, Access, ErrorCode, Opcode

from .items import DECODE, AnalysisExport, RegItem

#: The environment's SoC has no chip-to-chip link: a SEND is refused there as an undefined opcode (the streams' "BAD"
#: commands), and the link's outcomes never occur.  The link is covered by the link fuzzer (``dx1 fuzz-link``).
LINK_STATUSES = (ErrorCode.LINK_DOWN, ErrorCode.LINK_CRC, ErrorCode.REMOTE_WINDOW)
OPCODES = [o.name for o in Opcode if o is not Opcode.SEND] + ["BAD"]
SHAPES = ["tiny", "medium", "long"]
POSTOP_FLAGS = ["none", "relu", "bias", "relu+bias"]
STATUSES = [e.name for e in ErrorCode if e not in (ErrorCode.RING_OVERFLOW, ErrorCode.DOORBELL_RANGE,
                                                    ErrorCode.BUS_ERROR, *LINK_STATUSES)]
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
        self.reg_export = AnalysisExport("reg_export", self, self.on_reg)

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


__all__ = ["Coverage", "LEGAL_STATUS", "DMA_OPCODES", "UNIT_STATUSES", "QUEUE_ERRORS", "COVERAGE_GOALS", "sample_sync",
           "sample_queue_error", "coverage_report", "missed_goals"]
