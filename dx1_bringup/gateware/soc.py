"""The dx1-mini SoC: tiles, their command processors and DMAs, device memory and the host ports."""

from __future__ import annotations

from amaranth import Cat, Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..spec import BUS_BYTES, STALL_UNITS, Access, SocConfig, stall_bit
from .axi import AXI4LiteSignature, AXI4Signature
from .command import CommandProcessor
from .dma import Dma
from .memory import AxiMemory
from .regfile import ADDR_WIDTH, RegisterFile, field_bits, field_word
from .tile import LOCAL_PORTS, TileCore
from .tile_reset import TileReset

__all__ = ["Dx1Soc"]


def _connect_gated(m: Module, src, dst, stop) -> None:
    """Connect two streams; while ``stop`` is high neither side sees a handshake."""
    m.d.comb += [dst.tdata.eq(src.tdata), dst.tvalid.eq(src.tvalid & ~stop), src.tready.eq(dst.tready & ~stop)]


class Dx1Soc(wiring.Component):
    """The whole device as the host sees it.

    * ``regs``: the AXI4-Lite register port (PCIe BAR0, or the serial bridge).
    * ``mem``: an AXI4 port into device memory (PCIe BAR2, or the serial bridge's bulk data).
    * ``irq``: high while any queue has an enabled interrupt cause.

    Each tile has a :class:`TileCore`, a :class:`Dma` and a :class:`CommandProcessor`;
    the command processors and DMAs are AXI4 masters on :class:`AxiMemory`, which
    arbitrates them with the host's port.  GLOBAL.RESET resets every queue, DMA,
    tile pipeline, counter and semaphore (not memories); the tiles' units are reset
    through their :class:`TileReset`, after their open bursts drain, so it is safe
    with commands in flight (they get no completion).  QUEUEn.RESET resets tile n alone (:class:`TileReset`),
    and QUEUEn.WATCHDOG aborts a command of tile n that makes no progress.

    ``stall_port`` adds the test-only input ``stall_units``
    (:mod:`dx1_bringup.spec.stall`): a DMA bit holds that DMA's new bursts, a core
    bit stops the tile core's command and completion handshakes.  Only the
    simulation build has it; board and FPGA tops build the SoC without it.
    """

    def __init__(self, config: SocConfig | None = None, *, stall_port: bool = False):
        config = config or SocConfig()
        if not isinstance(config, SocConfig):
            raise TypeError(f"SoC config must be a SocConfig, not {config!r}")
        if config.tile.array % BUS_BYTES:
            raise ValueError(f"SoC array size must be a multiple of {BUS_BYTES} (a scratchpad row is whole "
                             f"{8 * BUS_BYTES}-bit beats), not {config.tile.array}")
        self.config = config
        self.stall_port = stall_port
        ports = {
            "regs": In(AXI4LiteSignature(addr_width=ADDR_WIDTH)),
            "mem": In(AXI4Signature(data_width=8 * BUS_BYTES, id_width=4)),
            "irq": Out(1),
        }
        if stall_port:
            ports["stall_units"] = In(len(STALL_UNITS) * config.tiles)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.regfile = rf = RegisterFile(cfg)
        m.submodules.memory = memory = AxiMemory(size=cfg.mem_bytes, ports=1 + 2 * cfg.tiles, banks=cfg.mem_banks)
        self.memory = memory  # for simulation backdoors (dx1_bringup.sim.amaranth_transport)
        wiring.connect(m, wiring.flipped(self.regs), rf.bus)
        wiring.connect(m, wiring.flipped(self.mem), memory.s0)

        def reg(block, name):
            return getattr(rf, f"{block}_{name}")

        def spec_reg(block, name):
            """The spec's register ``name`` of ``block``: its fields place the bits below."""
            return rf.regmap.block(block).reg(name).register

        # ---- GLOBAL ---------------------------------------------------------------------------
        cycles = Signal(64)
        cycles_hi = Signal(32)
        m.d.sync += cycles.eq(cycles + 1)
        with m.If(reg("GLOBAL", "CYCLES_LO").read):
            m.d.sync += cycles_hi.eq(cycles[32:])
        m.d.comb += [reg("GLOBAL", "CYCLES_LO").value.eq(cycles[:32]), reg("GLOBAL", "CYCLES_HI").value.eq(cycles_hi)]
        soft_reset = Signal()
        reset = reg("GLOBAL", "RESET")
        m.d.comb += soft_reset.eq(reset.write & field_bits(reset.wdata, spec_reg("GLOBAL", "RESET"), "all"))
        with m.If(soft_reset):
            m.d.sync += [cycles.eq(0), cycles_hi.eq(0)]
        sems = [reg("GLOBAL", f"SEM{i}") for i in range(cfg.semaphores)]
        sem_bits = spec_reg("GLOBAL", "SEM0").field("value").width
        with m.If(soft_reset):
            m.d.comb += [s.set.eq(1) for s in sems]  # set_value defaults to 0

        irq_lines = []
        sem_requests = []
        for t in range(cfg.tiles):
            q, perf, trace = f"QUEUE{t}", f"PERF{t}", f"TRACE{t}"
            m.submodules[f"reset{t}"] = seq = TileReset()
            # GLOBAL.RESET goes through each tile's TileReset, so no bus master is reset with a burst open
            # (a command processor reset mid-fetch would leave the memory's read side waiting for ever).
            core = ResetInserter(seq.reset_units)(TileCore(cfg.tile))
            dma = ResetInserter(seq.reset_units)(Dma(cfg.tile))
            cp = ResetInserter(seq.reset_cp)(CommandProcessor(cfg))
            m.submodules[f"core{t}"], m.submodules[f"dma{t}"], m.submodules[f"cp{t}"] = core, dma, cp
            core_stalled = Signal(name=f"core{t}_stalled")
            if self.stall_port:
                m.d.comb += [core_stalled.eq((self.stall_units & stall_bit("core", t)) != 0),
                             dma.hold.eq((self.stall_units & stall_bit("dma", t)) != 0)]
            _connect_gated(m, cp.tile_cmd, core.cmd, core_stalled)
            _connect_gated(m, core.done, cp.tile_done, core_stalled)
            wiring.connect(m, cp.dma_cmd, dma.cmd)
            wiring.connect(m, dma.done, cp.dma_done)
            for port in ("spm_wr", "spm_rreq", "acc_wr", "acc_rreq"):
                wiring.connect(m, getattr(dma, port), getattr(core, port))
            for port in ("spm_rresp", "acc_rresp"):
                wiring.connect(m, getattr(core, port), getattr(dma, port))
            wiring.connect(m, cp.axi, getattr(memory, f"s{1 + 2 * t}"))
            wiring.connect(m, dma.axi, getattr(memory, f"s{2 + 2 * t}"))

            # Watchdog progress, and the per-tile reset.
            streams = [getattr(dma, p) for p in LOCAL_PORTS]
            moved = Cat((dma.axi.rvalid & dma.axi.rready), (dma.axi.wvalid & dma.axi.wready),
                        *(s.tvalid & s.tready for s in streams))
            tile_reset = reg(q, "RESET")
            m.d.comb += [
                cp.watchdog.eq(reg(q, "WATCHDOG").value), cp.progress.eq((moved != 0) | core.progress),
                seq.host_reset.eq(soft_reset
                                  | (tile_reset.write & field_bits(tile_reset.wdata, spec_reg(q, "RESET"), "tile"))),
                seq.abort_req.eq(cp.abort_req), seq.cp_quiet.eq(cp.axi_quiet), seq.dma_quiet.eq(dma.quiet),
                cp.quiesce.eq(seq.cp_quiesce), dma.abort.eq(seq.dma_abort), cp.abort_done.eq(seq.abort_done),
            ]

            # Queue registers.
            control, control_spec = reg(q, "CONTROL"), spec_reg(q, "CONTROL")
            resume = control.write & field_bits(control.wdata, control_spec, "resume")
            m.d.comb += [
                cp.ring_base.eq(reg(q, "RING_BASE").value), cp.ring_log2.eq(reg(q, "RING_LOG2").value),
                cp.cq_base.eq(reg(q, "CQ_BASE").value), cp.dma_base.eq(reg(q, "DMA_BASE").value),
                cp.dma_limit.eq(reg(q, "DMA_LIMIT").value),
                cp.enable.eq(field_bits(control.value, control_spec, "enable")),
                cp.resume.eq(resume), cp.ring_reset.eq(reg(q, "RING_LOG2").write),
                cp.doorbell.eq(reg(q, "DOORBELL").write),
                cp.doorbell_index.eq(field_bits(reg(q, "DOORBELL").wdata, spec_reg(q, "DOORBELL"), "index")),
                reg(q, "HEAD").value.eq(cp.head), reg(q, "TAIL").value.eq(cp.tail),
                reg(q, "STATUS").value.eq(field_word(spec_reg(q, "STATUS"), busy=cp.busy, halted=cp.halted,
                                                        resetting=seq.busy)),
                reg(q, "ERROR").value.eq(field_word(spec_reg(q, "ERROR"), code=cp.error_code, index=cp.error_index)),
                reg(q, "IRQ_STATUS").set.eq(field_word(spec_reg(q, "IRQ_STATUS"), completion=cp.irq_completion,
                                                       error=cp.irq_error)),
                cp.timestamp.eq(cycles[:32]),
                cp.sem_values.eq(Cat(field_bits(s.value, spec_reg("GLOBAL", "SEM0"), "value") for s in sems)),
            ]
            # CONTROL.resume reads back 0: clear it the cycle after the write.
            resume_written = Signal(name=f"resume_written{t}")
            m.d.sync += resume_written.eq(resume)
            with m.If(resume_written):
                m.d.comb += [control.set.eq(1),
                             control.set_value.eq(control.value & ~control_spec.field("resume").mask)]
            irq_lines.append((reg(q, "IRQ_STATUS").value & reg(q, "IRQ_MASK").value) != 0)
            sem_requests.append(cp)

            # Performance counters.
            clear = Signal(name=f"perf_clear{t}")
            pctl = reg(perf, "CONTROL")
            m.d.comb += clear.eq(soft_reset | seq.reset_units
                                 | (pctl.write & field_bits(pctl.wdata, spec_reg(perf, "CONTROL"), "clear")))
            reads_open = Signal(9, name=f"reads_open{t}")
            writes_open = Signal(9, name=f"writes_open{t}")
            ax = dma.axi
            m.d.sync += [
                reads_open.eq(reads_open + (ax.arvalid & ax.arready) - (ax.rvalid & ax.rready & ax.rlast)),
                writes_open.eq(writes_open + (ax.awvalid & ax.awready) - (ax.bvalid & ax.bready)),
            ]
            reading = (reads_open != 0) | ax.arvalid
            writing = (writes_open != 0) | ax.awvalid | ax.wvalid
            waiting = ((reads_open != 0) & ~ax.rvalid) | (ax.wvalid & ~ax.wready) | (ax.arvalid & ~ax.arready)
            counters = {
                "CYCLES": 1, "BUSY_LOAD": reading, "BUSY_STORE": writing, "STALL_DEP": cp.stall,
                "STALL_MEM": waiting,
            }
            for name, inc in counters.items():
                count = Signal(32, name=f"perf{t}_{name.lower()}")
                m.d.sync += count.eq(count + inc)
                with m.If(clear):
                    m.d.sync += count.eq(0)
                m.d.comb += reg(perf, name).value.eq(count)
            # Counters kept inside the units are reported relative to their value at the last clear.
            for name, source in (("BUSY_COMPUTE", core.perf_busy), ("BYTES_READ", dma.bytes_read),
                                 ("BYTES_WRITTEN", dma.bytes_written)):
                base = Signal(32, name=f"perf{t}_{name.lower()}_base")
                with m.If(clear):
                    m.d.sync += base.eq(source)
                with m.If(seq.reset_units):  # the unit's own counter restarts from 0
                    m.d.sync += base.eq(0)
                m.d.comb += reg(perf, name).value.eq(source - base)
            macs_base = Signal(48, name=f"perf{t}_macs_base")
            macs_hi = Signal(32, name=f"perf{t}_macs_hi")
            macs = Signal(48, name=f"perf{t}_macs")
            m.d.comb += macs.eq(core.perf_macs - macs_base)
            with m.If(clear):
                m.d.sync += [macs_base.eq(core.perf_macs), macs_hi.eq(0)]
            with m.If(seq.reset_units):
                m.d.sync += macs_base.eq(0)
            with m.If(reg(perf, "MACS_LO").read):
                m.d.sync += macs_hi.eq(macs[32:])
            m.d.comb += [reg(perf, "MACS_LO").value.eq(macs[:32]), reg(perf, "MACS_HI").value.eq(macs_hi)]

            # Trace buffer: start events at dispatch, end events when the completion is written.
            tctl, tctl_spec, data_hi = reg(trace, "CONTROL"), spec_reg(trace, "CONTROL"), spec_reg(trace, "DATA_HI")
            tclear = tctl.write & field_bits(tctl.wdata, tctl_spec, "clear")
            tenable = field_bits(tctl.value, tctl_spec, "enable")
            trace_clear = Signal(name=f"trace{t}_clear")
            m.d.comb += trace_clear.eq(soft_reset | tclear)
            fifo = ResetInserter(trace_clear)(SyncFIFOBuffered(width=64, depth=cfg.trace_depth))
            m.submodules[f"trace{t}"] = fifo
            # Events are registered with their timestamp first, so the dispatch logic does not reach
            # the buffer's write port in the same cycle.
            start = Signal(64, name=f"trace{t}_start")
            end = Signal(64, name=f"trace{t}_end")
            start_valid = Signal(name=f"trace{t}_start_valid")
            end_valid = Signal(name=f"trace{t}_end_valid")
            m.d.sync += [
                start.eq(Cat(cycles[:32], field_word(data_hi, tag=cp.trace_tag, opcode=cp.trace_opcode[:7], end=0))),
                end.eq(Cat(cycles[:32], field_word(data_hi, tag=cp.trace_end_tag, status=cp.trace_status,
                                                   opcode=cp.trace_end_opcode[:7], end=1))),
                start_valid.eq(cp.trace_start & tenable & ~trace_clear),
                end_valid.eq(cp.trace_end & tenable & ~trace_clear),
            ]
            held = Signal(64, name=f"trace{t}_held")
            held_valid = Signal(name=f"trace{t}_held_valid")
            # A start and an end can come in the same cycle: the end waits one cycle.  Dispatches are
            # a command fetch apart and completion writes a bus write apart, so one register is enough.
            with m.If(held_valid):
                m.d.comb += [fifo.w_data.eq(held), fifo.w_en.eq(1)]
                m.d.sync += held_valid.eq(0)
            with m.Elif(start_valid):
                m.d.comb += [fifo.w_data.eq(start), fifo.w_en.eq(1)]
                m.d.sync += [held.eq(end), held_valid.eq(end_valid)]
            with m.Elif(end_valid):
                m.d.comb += [fifo.w_data.eq(end), fifo.w_en.eq(1)]
            with m.If(trace_clear):
                m.d.sync += held_valid.eq(0)
            m.d.comb += [
                reg(trace, "COUNT").value.eq(fifo.level),
                reg(trace, "DATA_LO").value.eq(fifo.r_data[:32] & fifo.r_rdy.replicate(32)),
                reg(trace, "DATA_HI").value.eq(fifo.r_data[32:] & fifo.r_rdy.replicate(32)),
                fifo.r_en.eq(reg(trace, "DATA_HI").read),
            ]
            # CONTROL.clear reads back 0.
            clear_written = Signal(name=f"trace{t}_clear_written")
            m.d.sync += clear_written.eq(tclear)
            with m.If(clear_written):
                m.d.comb += [tctl.set.eq(1), tctl.set_value.eq(tctl.value & ~tctl_spec.field("clear").mask)]

            # GLOBAL.RESET returns the tile's QUEUE, PERF and TRACE registers to the spec's reset values, as
            # the model does (last, so it wins over the self-clearing bits above).
            with m.If(soft_reset):
                for block in (q, perf, trace):
                    for placed in rf.regmap.block(block).registers:
                        if placed.register.access == Access.RW:
                            port = reg(block, placed.name)
                            m.d.comb += [port.set.eq(1), port.set_value.eq(placed.register.reset)]
                        elif placed.register.access == Access.W1C:
                            m.d.comb += reg(block, placed.name).clear.eq(1)

        # ---- semaphores: one SIGNAL/WAIT a cycle, lowest tile first ---------------------------
        granted = Signal()
        for cp in sem_requests:
            with m.If(cp.sem_valid & ~granted):
                m.d.comb += cp.sem_grant.eq(1)
                for i, s in enumerate(sems):
                    with m.If(cp.sem_index == i):
                        m.d.comb += [s.set.eq(1), s.set_value.eq((s.value + cp.sem_delta)[:sem_bits])]
            granted_next = Signal()
            m.d.comb += granted_next.eq(granted | cp.sem_valid)
            granted = granted_next

        irq = irq_lines[0]
        for line in irq_lines[1:]:
            irq = irq | line
        m.d.comb += self.irq.eq(irq)
        return m
