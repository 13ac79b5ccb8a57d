"""The dx1-mini SoC: tiles, their command processors and DMAs, device memory and the host ports."""

from __future__ import annotations

from amaranth import Cat, Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import BUS_BYTES, LINK_PORTS, STALL_UNITS, Access, SocConfig, stall_bit
from ..axi import AXI4LiteSignature, AXI4Signature
from ..command import CommandProcessor
from ..dma import Dma
from ..link import COUNTERS, LinkEndpoint, SendRouter, link_wire
from ..memory import AxiMemory
from ..regfile import ADDR_WIDTH, RegisterFile, field_bits, field_word
from ..tile import LOCAL_PORTS, TileCore
from ..tile_reset import TileReset
from .perf import COUNTED, KEPT, PerfCounters
from .semaphores import SemaphoreArbiter
from .trace import TraceWriter

__all__ = ["Dx1Soc", "MAX_LINK_TILES"]

#: Most tiles of a SoC with the chip-to-chip link: each of its two ports' DMA halves is two more masters on the
#: device memory, which serves at most 17 (the host and a command processor and a DMA for each tile).
MAX_LINK_TILES = 6

# The LINK block's counter registers and the port counters they show.
_LINK_COUNTERS = {"TX_PACKETS": "tx_frames", "RX_PACKETS": "rx_frames", "RETRIES": "retries",
                  "CRC_ERRORS": "crc_errors", "CREDIT_STALLS": "credit_stalls"}
assert sorted(_LINK_COUNTERS.values()) == sorted(COUNTERS)


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

    With ``config.link`` the SoC has the chip-to-chip link (:mod:`dx1_bringup.gateware.link`): ports
    ``link{p}_tx``/``link{p}_rx`` (p = 0: the next chip, 1: the previous one), the input ``chip_id``
    (GLOBAL.CHIP_ID, the board's straps), SEND through every queue and the LINK registers.  Without it
    (the default) nothing of the link is built.

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
        if config.link is not None and config.tiles > MAX_LINK_TILES:
            raise ValueError(f"A SoC with the chip-to-chip link has at most {MAX_LINK_TILES} tiles (device memory "
                             f"serves 17 masters), not {config.tiles}")
        self.config = config
        self.stall_port = stall_port
        ports = {
            "regs": In(AXI4LiteSignature(addr_width=ADDR_WIDTH)),
            "mem": In(AXI4Signature(data_width=8 * BUS_BYTES, id_width=4)),
            "irq": Out(1),
        }
        if stall_port:
            ports["stall_units"] = In(len(STALL_UNITS) * config.tiles)
        if config.link is not None:
            for p in range(LINK_PORTS):
                ports[f"link{p}_tx"], ports[f"link{p}_rx"] = Out(link_wire()), In(link_wire())
            ports["chip_id"] = In(16)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.regfile = rf = RegisterFile(cfg)
        link_masters = 0 if cfg.link is None else 2 * LINK_PORTS
        # A link port's sender only reads (its lander writes): its port has no write side.
        senders = () if cfg.link is None else tuple(1 + 2 * cfg.tiles + 2 * p for p in range(LINK_PORTS))
        m.submodules.memory = memory = AxiMemory(size=cfg.mem_bytes, ports=1 + 2 * cfg.tiles + link_masters,
                                                 banks=cfg.mem_banks, read_only=senders)
        self.memory = memory  # for simulation backdoors (dx1_bringup.sim.amaranth_transport)
        wiring.connect(m, wiring.flipped(self.regs), rf.bus)
        wiring.connect(m, wiring.flipped(self.mem), memory.s0)
        reg, spec_reg = self._registers(rf)

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
        # The link's landers signal semaphores too, after the tiles.
        requesters = cfg.tiles + (0 if cfg.link is None else LINK_PORTS)
        m.submodules.semaphores = arbiter = SemaphoreArbiter(requesters, cfg.semaphores, sem_bits)
        m.d.comb += arbiter.values.eq(Cat(s.value for s in sems))

        irq_lines = []
        routers = []
        # A tile's SEND moving frames on its link port is progress for the tile's watchdog (driven by _link).
        link_progress = [Signal(name=f"link_progress{t}") for t in range(cfg.tiles)]
        for t in range(cfg.tiles):
            q, perf, trace = f"QUEUE{t}", f"PERF{t}", f"TRACE{t}"
            cp, core, dma, seq, router = self._tile(m, t, reg, spec_reg, memory, soft_reset, link_progress[t])
            routers.append(router)
            m.d.comb += [
                cp.timestamp.eq(cycles[:32]),
                cp.sem_values.eq(Cat(field_bits(s.value, spec_reg("GLOBAL", "SEM0"), "value") for s in sems)),
                getattr(arbiter, f"valid{t}").eq(cp.sem_valid), getattr(arbiter, f"index{t}").eq(cp.sem_index),
                getattr(arbiter, f"delta{t}").eq(cp.sem_delta), cp.sem_grant.eq(getattr(arbiter, f"grant{t}")),
            ]
            irq_lines.append((reg(q, "IRQ_STATUS").value & reg(q, "IRQ_MASK").value) != 0)

            # Performance counters.
            m.submodules[f"perf{t}"] = counters = PerfCounters()
            pctl = reg(perf, "CONTROL")
            m.d.comb += [
                counters.clear.eq(soft_reset | seq.reset_units
                                  | (pctl.write & field_bits(pctl.wdata, spec_reg(perf, "CONTROL"), "clear"))),
                counters.reset_units.eq(seq.reset_units), counters.waiting_dep.eq(cp.stall),
                *(getattr(counters, f"dma_{name}").eq(getattr(dma.axi, name))
                  for name in ("arvalid", "arready", "rvalid", "rready", "rlast", "awvalid", "awready", "wvalid",
                               "wready", "bvalid", "bready")),
                counters.busy_compute_source.eq(core.perf_busy), counters.macs_source.eq(core.perf_macs),
                counters.bytes_read_source.eq(dma.bytes_read), counters.bytes_written_source.eq(dma.bytes_written),
                counters.busy_vector_source.eq(core.perf_vector_busy),
                counters.table_hits_source.eq(core.perf_table_hits),
                counters.table_underflows_source.eq(core.perf_table_underflows),
                counters.table_overflows_source.eq(core.perf_table_overflows),
                counters.macs_lo_read.eq(reg(perf, "MACS_LO").read),
                *(reg(perf, name).value.eq(getattr(counters, name.lower()))
                  for name in (*COUNTED, *KEPT, "MACS_LO", "MACS_HI")),
            ]

            # Trace FIFO: start events at dispatch, end events when the completion is written.
            m.submodules[f"trace{t}"] = writer = TraceWriter(cfg.trace_depth, spec_reg(trace, "DATA_HI"))
            tctl, tctl_spec = reg(trace, "CONTROL"), spec_reg(trace, "CONTROL")
            tclear = tctl.write & field_bits(tctl.wdata, tctl_spec, "clear")
            m.d.comb += [
                writer.timestamp.eq(cycles[:32]), writer.enable.eq(field_bits(tctl.value, tctl_spec, "enable")),
                writer.clear.eq(soft_reset | tclear),
                writer.start.eq(cp.trace_start), writer.start_tag.eq(cp.trace_tag),
                writer.start_opcode.eq(cp.trace_opcode),
                writer.end.eq(cp.trace_end), writer.end_tag.eq(cp.trace_end_tag),
                writer.end_opcode.eq(cp.trace_end_opcode), writer.end_status.eq(cp.trace_status),
                reg(trace, "COUNT").value.eq(writer.count), reg(trace, "DATA_LO").value.eq(writer.data_lo),
                reg(trace, "DATA_HI").value.eq(writer.data_hi_word), writer.pop.eq(reg(trace, "DATA_HI").read),
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

        if cfg.link is not None:
            self._link(m, reg, spec_reg, memory, routers, arbiter, soft_reset, link_progress)
        for i, s in enumerate(sems):
            with m.If(arbiter.set[i]):
                m.d.comb += [s.set.eq(1), s.set_value.eq(arbiter.set_value[i])]
        irq = irq_lines[0]
        for line in irq_lines[1:]:
            irq = irq | line
        m.d.comb += self.irq.eq(irq)
        return m

    @staticmethod
    def _registers(rf: RegisterFile):
        """Lookups into ``rf``: a register's port by block and name, and the spec's register (whose fields
        place the bits)."""
        def reg(block, name):
            return getattr(rf, f"{block}_{name}")

        def spec_reg(block, name):
            return rf.regmap.block(block).reg(name).register

        return reg, spec_reg

    def _tile(self, m: Module, t: int, reg, spec_reg, memory: AxiMemory, soft_reset, link_progress):
        """Tile ``t``'s units, their reset sequencer, their memory ports and its QUEUE registers.

        Returns the command processor, tile core, DMA and :class:`TileReset` for the PERF, TRACE and
        semaphore wiring, and with a link the tile's :class:`SendRouter` (None without).
        """
        cfg = self.config
        q = f"QUEUE{t}"
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
        router = None
        if cfg.link is None:
            wiring.connect(m, cp.dma_cmd, dma.cmd)
            wiring.connect(m, dma.done, cp.dma_done)
        else:
            # SENDs leave the tile for the link ports; the router is reset with the tile's units.
            m.submodules[f"route{t}"] = router = ResetInserter(seq.reset_units)(SendRouter())
            wiring.connect(m, cp.dma_cmd, router.cmd)
            wiring.connect(m, router.done, cp.dma_done)
            wiring.connect(m, router.dma_cmd, dma.cmd)
            wiring.connect(m, dma.done, router.dma_done)
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
            cp.watchdog.eq(reg(q, "WATCHDOG").value), cp.progress.eq((moved != 0) | core.progress | link_progress),
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
        ]
        # CONTROL.resume reads back 0: clear it the cycle after the write.
        resume_written = Signal(name=f"resume_written{t}")
        m.d.sync += resume_written.eq(resume)
        with m.If(resume_written):
            m.d.comb += [control.set.eq(1),
                         control.set_value.eq(control.value & ~control_spec.field("resume").mask)]
        return cp, core, dma, seq, router

    def _link(self, m: Module, reg, spec_reg, memory: AxiMemory, routers: list, arbiter, soft_reset,
              link_progress: list) -> None:
        """The link ports' endpoints, their memory masters, the SENDs of every tile and the LINK registers
        (GLOBAL.RESET clears the counters; the window and controls keep their values, as in the model)."""
        cfg = self.config
        link = cfg.link
        glob_chip = spec_reg("GLOBAL", "CHIP_ID")
        m.d.comb += reg("GLOBAL", "CHIP_ID").value.eq(
            field_word(glob_chip, rank=self.chip_id[:8], chips=self.chip_id[8:16]))
        m.d.comb += [
            reg("LINK", "CAPS").value.eq(field_word(spec_reg("LINK", "CAPS"), width=link.width, credits=link.credits,
                                                    retries=link.retries,
                                                    max_payload_log2=link.max_payload.bit_length() - 1)),
            reg("LINK", "LATENCY").value.eq(field_word(spec_reg("LINK", "LATENCY"), cycles=link.latency)),
        ]
        clear = reg("LINK", "CLEAR")
        clear_counters = soft_reset | (clear.write & field_bits(clear.wdata, spec_reg("LINK", "CLEAR"), "counters"))
        first_link_master = 1 + 2 * cfg.tiles
        for p in range(LINK_PORTS):
            m.submodules[f"link{p}"] = end = LinkEndpoint(link, cfg.semaphores, cfg.mem_bytes)
            wiring.connect(m, end.tx, wiring.flipped(getattr(self, f"link{p}_tx")))
            wiring.connect(m, wiring.flipped(getattr(self, f"link{p}_rx")), end.rx)
            wiring.connect(m, end.send_bus, getattr(memory, f"s{first_link_master + 2 * p}"))
            wiring.connect(m, end.land_bus, getattr(memory, f"s{first_link_master + 2 * p + 1}"))
            control, control_spec = reg("LINK", f"CONTROL{p}"), spec_reg("LINK", f"CONTROL{p}")
            requester = cfg.tiles + p
            m.d.comb += [
                end.window_base.eq(reg("LINK", "WINDOW_BASE").value),
                end.window_limit.eq(field_bits(reg("LINK", "WINDOW_LIMIT").value, spec_reg("LINK", "WINDOW_LIMIT"),
                                               "limit")),
                end.force_down.eq(field_bits(control.value, control_spec, "force_down")),
                end.inject.eq(control.write),
                end.inject_count.eq(field_bits(control.wdata, control_spec, "corrupt")),
                end.clear.eq(clear_counters),
                reg("LINK", f"STATUS{p}").value.eq(field_word(spec_reg("LINK", f"STATUS{p}"), up=end.up,
                                                              busy=end.busy)),
                *(reg("LINK", f"{name}{p}").value.eq(getattr(end, counter))
                  for name, counter in _LINK_COUNTERS.items()),
                getattr(arbiter, f"valid{requester}").eq(end.sem_valid),
                getattr(arbiter, f"index{requester}").eq(end.sem_index),
                getattr(arbiter, f"delta{requester}").eq(end.sem_delta),
                end.sem_grant.eq(getattr(arbiter, f"grant{requester}")),
            ]
            # CONTROL.corrupt counts down as the corrupted frames go out (a host write wins).
            corrupt_now = field_bits(control.value, control_spec, "corrupt")
            with m.If(~control.write & (corrupt_now != end.inject_left)):
                m.d.comb += [control.set.eq(1), control.set_value.eq(
                    (control.value & ~control_spec.field("corrupt").mask)
                    | (end.inject_left << control_spec.field("corrupt").lsb))]

            # SENDs on this port from every tile, the lowest tile first; the status goes back to the tile it ran for.
            owner = Signal(range(max(2, cfg.tiles)), name=f"link{p}_owner")
            granted = Signal(name=f"link{p}_granted0")
            for t, router in enumerate(routers):
                req = getattr(router, f"send{p}")
                # Ready without valid (SendRouter's contract): the port is free and no lower tile asks.
                m.d.comb += req.ready.eq(end.request.ready & ~granted)
                with m.If(req.valid & ~granted):
                    m.d.comb += [end.request.valid.eq(1),
                                 *(getattr(end.request, f).eq(getattr(req, f))
                                   for f in ("src_addr", "dst_addr", "length", "op", "sem", "count"))]
                    with m.If(end.request.ready):
                        m.d.sync += owner.eq(t)
                granted_next = Signal(name=f"link{p}_granted{t + 1}")
                m.d.comb += granted_next.eq(granted | req.valid)
                granted = granted_next
            m.d.comb += end.done.tready.eq(1)
            # A frame word either way on this port, or the sender's memory reads: the owning tile's SEND moves.
            moved = Signal(name=f"link{p}_moved")
            m.d.comb += moved.eq(end.tx.valid | end.rx.valid | (end.send_bus.rvalid & end.send_bus.rready))
            for t, router in enumerate(routers):
                with m.If(moved & router.sending & (owner == t)):
                    m.d.comb += link_progress[t].eq(1)
            for t, router in enumerate(routers):
                with m.If(end.done.tvalid & (owner == t)):
                    m.d.comb += [router.send_done.eq(1), router.send_status.eq(end.done.tdata)]
