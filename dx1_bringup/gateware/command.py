"""The command processor of one dx1-mini queue: ring fetch, checks, dependency tracking, completions."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..spec import BUS_BYTES, COMMAND_BYTES, COMMANDS, COMPLETION_BYTES, ErrorCode, Opcode, SocConfig
from .axi import BURST_INCR, RESP_OKAY, AXI4Signature
from .layouts import HEADER_LAYOUT, command_layout
from .stream import AXIStreamSignature

__all__ = ["CommandProcessor"]

#: Compute commands the processor tracks while the tile core runs them.
TILE_SLOTS = 4
#: DMA commands the processor tracks while the DMA runs them.
DMA_SLOTS = 2
RANGE_BITS = 34  # local row arithmetic: 16-bit address + 16-bit x 16-bit products
#: Registered decode steps between a fetched command and its dispatch: products, sums, checks, hazards.
DECODE_STAGES = 4


def _overlap(a_lo, a_hi, b_lo, b_hi):
    """Half-open ranges [a_lo, a_hi) and [b_lo, b_hi) share a row (empty ranges share nothing)."""
    return (a_lo < b_hi) & (b_lo < a_hi)


#: The local rows a command reads and writes: one bounding range [lo, hi) per memory and direction.
_Footprint = data.StructLayout({
    f"{mem}_{rw}_{end}": unsigned(RANGE_BITS) for mem in ("spm", "acc") for rw in ("r", "w") for end in ("lo", "hi")
})


def _conflict(x, y):
    """True when one of the two commands writes rows the other reads or writes."""
    terms = []
    for mem in ("spm", "acc"):
        xr = (getattr(x, f"{mem}_r_lo"), getattr(x, f"{mem}_r_hi"))
        xw = (getattr(x, f"{mem}_w_lo"), getattr(x, f"{mem}_w_hi"))
        yr = (getattr(y, f"{mem}_r_lo"), getattr(y, f"{mem}_r_hi"))
        yw = (getattr(y, f"{mem}_w_lo"), getattr(y, f"{mem}_w_hi"))
        terms += [_overlap(*xw, *yw), _overlap(*xw, *yr), _overlap(*xr, *yw)]
    result = terms[0]
    for t in terms[1:]:
        result = result | t
    return result


#: A command in flight in the tile core or the DMA: where its completion goes and what it touches.
#: (Not "index": an Array of these is indexed through an ArrayProxy, whose own ``index`` would win.)
_Slot = data.StructLayout({
    "ring_index": unsigned(16), "phase": unsigned(1), "tag": unsigned(16), "opcode": unsigned(8),
    "footprint": _Footprint,
})


class CommandProcessor(wiring.Component):
    """Runs one queue: fetches commands from its ring, checks them, dispatches and completes them.

    * Fetch: while enabled, not halted and HEAD != TAIL, reads the 32-byte command
      at ``ring_base + 32*HEAD`` with one 4-beat burst and advances HEAD.
    * Checks (in the spec's order) for every opcode but GEMM and POSTOP, which
      the tile core checks itself; a refused command completes with its code.
      A fetched command spends :data:`DECODE_STAGES` cycles in registered decode
      steps (products, sums, checks, hazards) before it can be dispatched.
    * Dispatch: GEMM/POSTOP to the tile core, LOAD/STORE/COPY to the DMA, so that
      loads, compute and stores overlap.  A command waits only while it would
      write local rows an in-flight command of the other unit reads or writes, or
      read rows it writes (bounding ranges per memory); each unit runs its own
      commands in order.  FENCE and SIGNAL wait until every earlier command has
      completed; WAIT until its semaphore reaches ``count``.
    * Completion: one 8-byte entry per command at ``cq_base + 8*index`` (tag,
      status, opcode, timestamp, phase), then an IRQ_STATUS.completion pulse.
    * ``ring_reset`` (RING_LOG2 written) empties the ring: HEAD = TAIL = 0, phase 1.
      Program a ring while the queue is disabled and idle.
    * Queue errors (doorbell past the ring, tail overtaking head, RING_LOG2 out
      of 1..16, a bus error on a fetch or completion write) halt the queue with
      ERROR set until ``resume``.
    * Watchdog: while a command is in flight in the tile core or the DMA, a
      counter counts the cycles in which ``progress`` (a unit of this tile moved
      a bus beat or a local row, streamed or wrote a row) was low and no unit
      completion was taken; any of those clears it, and so does an empty
      pipeline.  When it reaches ``watchdog`` (0: off) the queue halts with
      TIMEOUT at the oldest in-flight command's index, raises ``abort_req``
      until ``abort_done`` (the SoC has drained and reset the DMA and the tile
      core), then completes every command still in flight with TIMEOUT.
      Completions the units finished meanwhile are not taken (they are lost
      with the units' state), so every command still gets exactly one.
    * ``quiesce`` starts no new fetch and no new completion write; ``axi_quiet``
      is high while neither is in progress, so the processor can then be reset
      without breaking the bus protocol (the per-tile reset).
    """

    def __init__(self, config: SocConfig):
        if not isinstance(config, SocConfig):
            raise TypeError(f"Command processor config must be a SocConfig, not {config!r}")
        self.config = config
        sem_bits = max(1, (config.semaphores - 1).bit_length())
        super().__init__({
            "axi": Out(AXI4Signature(id_width=4)),
            "tile_cmd": Out(AXIStreamSignature(256)),
            "tile_done": In(AXIStreamSignature(32)),
            "dma_cmd": Out(AXIStreamSignature(256)),
            "dma_done": In(AXIStreamSignature(8)),
            "ring_base": In(32), "ring_log2": In(5), "cq_base": In(32),
            "dma_base": In(32), "dma_limit": In(32),
            "enable": In(1), "doorbell": In(1), "doorbell_index": In(16), "resume": In(1), "ring_reset": In(1),
            "head": Out(16), "tail": Out(16), "busy": Out(1), "halted": Out(1),
            "error_code": Out(8), "error_index": Out(16),
            "irq_completion": Out(1), "irq_error": Out(1),
            "sem_values": In(data.ArrayLayout(16, config.semaphores)),
            "sem_valid": Out(1), "sem_index": Out(sem_bits), "sem_delta": Out(signed(18)), "sem_grant": In(1),
            "timestamp": In(32),
            "stall": Out(1),
            "trace_start": Out(1), "trace_end": Out(1),
            "trace_tag": Out(16), "trace_opcode": Out(8), "trace_status": Out(8),
            "trace_end_tag": Out(16), "trace_end_opcode": Out(8),
            "watchdog": In(32), "progress": In(1), "abort_req": Out(1), "abort_done": In(1),
            "quiesce": In(1), "axi_quiet": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        tile = cfg.tile
        axi = self.axi

        # ---- ring state and doorbells ---------------------------------------------------------
        entries_ok = Signal()
        m.d.comb += entries_ok.eq((self.ring_log2 >= 1) & (self.ring_log2 <= 16))
        mask = Signal(16)
        m.d.comb += mask.eq((Const(1, 17) << self.ring_log2) - 1)
        head, tail, phase = self.head, self.tail, Signal(init=1)
        halted = self.halted

        def queue_error(code, index):
            m.d.sync += [halted.eq(1), self.error_code.eq(code), self.error_index.eq(index)]
            m.d.comb += self.irq_error.eq(1)

        with m.If(self.resume):
            m.d.sync += halted.eq(0)
        with m.If(self.ring_reset):  # RING_LOG2 written: a new, empty ring
            m.d.sync += [head.eq(0), tail.eq(0), phase.eq(1)]
        with m.If(self.doorbell):
            pending_before = (tail - head) & mask
            pending_after = (self.doorbell_index - head) & mask
            with m.If(~entries_ok):
                queue_error(ErrorCode.BAD_FIELD, self.doorbell_index)
            with m.Elif(self.doorbell_index > mask):
                queue_error(ErrorCode.DOORBELL_RANGE, self.doorbell_index)
            with m.Elif(pending_after < pending_before):
                queue_error(ErrorCode.RING_OVERFLOW, self.doorbell_index)
            with m.Else():
                m.d.sync += tail.eq(self.doorbell_index)

        # ---- fetch -------------------------------------------------------------------------
        cmd = Signal(8 * COMMAND_BYTES)
        cmd_index = Signal(16)
        cmd_phase = Signal()
        have = Signal()  # a fetched command waits in `cmd`
        beat = Signal(range(COMMAND_BYTES // BUS_BYTES))
        fetch_error = Signal()
        dispatched = Signal()
        fetch_idle = Signal()
        m.d.comb += [axi.arid.eq(0), axi.arlen.eq(COMMAND_BYTES // BUS_BYTES - 1), axi.arsize.eq(exact_log2(BUS_BYTES)),
                     axi.arburst.eq(BURST_INCR), axi.araddr.eq(self.ring_base + (head << 5))]
        with m.FSM(name="fetch"):
            with m.State("IDLE"):
                m.d.comb += fetch_idle.eq(1)
                with m.If(self.enable & ~halted & entries_ok & (head != tail) & ~have & ~self.doorbell
                          & ~self.quiesce):
                    m.next = "ADDR"
            with m.State("ADDR"):
                m.d.comb += axi.arvalid.eq(1)
                with m.If(axi.arready):
                    m.d.sync += [beat.eq(0), fetch_error.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += axi.rready.eq(1)
                with m.If(axi.rvalid):
                    m.d.sync += [beat.eq(beat + 1), cmd.word_select(beat, 8 * BUS_BYTES).eq(axi.rdata)]
                    bad = fetch_error | (axi.rresp != RESP_OKAY)
                    m.d.sync += fetch_error.eq(bad)
                    with m.If(axi.rlast):
                        with m.If(bad):
                            queue_error(ErrorCode.BUS_ERROR, head)
                        with m.Else():
                            m.d.sync += [have.eq(1), cmd_index.eq(head), cmd_phase.eq(phase),
                                         head.eq((head + 1) & mask)]
                            with m.If(((head + 1) & mask) == 0):
                                m.d.sync += phase.eq(~phase)
                        m.next = "IDLE"
        with m.If(dispatched):
            m.d.sync += have.eq(0)

        # ---- decode and checks ---------------------------------------------------------------
        hdr = data.View(HEADER_LAYOUT, cmd)
        mv = data.View(command_layout(Opcode.LOAD), cmd)
        cp = data.View(command_layout(Opcode.COPY), cmd)
        sg = data.View(command_layout(Opcode.SIGNAL), cmd)
        g = data.View(command_layout(Opcode.GEMM), cmd)
        p = data.View(command_layout(Opcode.POSTOP), cmd)

        def reserved(op):
            return (cmd & COMMANDS[op].reserved_mask) != 0

        def first_failing(checks):
            status = Const(ErrorCode.OK, 8)
            for cond, code in reversed(checks):
                status = Mux(cond, code, status)
            return status

        # The checks and footprints need 16x16 and 32x16 products and wide sums.  They are computed in
        # DECODE_STAGES registered steps while the command waits in `cmd` (products, sums, checks,
        # hazards), so that no path runs from the command register through a multiplier and an adder
        # chain into the dispatch decision.  Each step recomputes every cycle from the previous one;
        # `stage` counts the steps that have seen the current command.
        stage = Signal(range(DECODE_STAGES + 1))
        with m.If(~have | dispatched):
            m.d.sync += stage.eq(0)
        with m.Elif(stage != DECODE_STAGES):
            m.d.sync += stage.eq(stage + 1)
        decoded = Signal()
        m.d.comb += decoded.eq(have & (stage == DECODE_STAGES))

        def registered(expr, name, width=None):
            reg = Signal(width if width is not None else Value.cast(expr).shape(), name=name)
            m.d.sync += reg.eq(expr)
            return reg

        # Step 1: products.
        mv_acc = mv.flags[COMMANDS[Opcode.LOAD].flag_bit("acc")]
        mv_row_off = registered((mv.rows - 1) * mv.local_row_stride, "mv_row_off")
        mv_col_off = registered((mv.cols - 1) * mv.local_col_stride, "mv_col_off")
        mv_mem_off = registered((mv.rows - 1) * mv.mem_stride, "mv_mem_off")
        mv_bytes = registered(Mux(mv_acc, mv.cols * tile.acc_row_bytes, mv.cols * tile.spm_row_bytes), "mv_bytes")
        g_a_rows = registered(g.k_chunks * g.m, "g_a_rows")
        g_b_rows = registered(g.k_chunks * tile.array, "g_b_rows")

        # Step 2: sums.
        mv_last = registered(mv.local_addr + mv_row_off + mv_col_off, "mv_last", RANGE_BITS)
        mv_end = registered(mv.mem_addr + mv_mem_off + mv_bytes, "mv_end", 50)
        cp_src_end = registered(cp.src_addr + cp.length, "cp_src_end")
        cp_dst_end = registered(cp.dst_addr + cp.length, "cp_dst_end")
        a_end = registered(g.a_addr + g_a_rows, "g_a_end")
        b_end = registered(g.b_addr + g_b_rows, "g_b_end")
        p_src_end = registered(p.src_addr + p.rows, "p_src_end")

        # Step 3: checks, route and footprint.
        def in_window(lo, hi):
            return (lo >= self.dma_base) & (hi <= self.dma_limit) & (hi <= cfg.mem_bytes)

        move_checks = lambda op: [  # noqa: E731 - read as a table
            (reserved(op), ErrorCode.RESERVED_BITS),
            ((mv.rows == 0) | (mv.cols == 0), ErrorCode.BAD_DIMENSION),
            (~mv_acc & (mv_last >= tile.spm_rows), ErrorCode.SPM_RANGE),
            (mv_acc & (mv_last >= tile.acc_rows), ErrorCode.ACC_RANGE),
            ((mv.mem_addr[:3] != 0) | (mv.mem_stride[:3] != 0), ErrorCode.MISALIGNED),
            (~in_window(mv.mem_addr, mv_end), ErrorCode.DMA_WINDOW),
        ]
        status_next = Signal(8)
        route_next = Signal(2)  # 0 local, 1 tile core, 2 DMA
        with m.Switch(hdr.opcode):
            with m.Case(Opcode.GEMM, Opcode.POSTOP):
                m.d.comb += [status_next.eq(ErrorCode.OK), route_next.eq(1)]
            with m.Case(Opcode.LOAD):
                m.d.comb += [status_next.eq(first_failing(move_checks(Opcode.LOAD))), route_next.eq(2)]
            with m.Case(Opcode.STORE):
                m.d.comb += [status_next.eq(first_failing(move_checks(Opcode.STORE))), route_next.eq(2)]
            with m.Case(Opcode.COPY):
                m.d.comb += [status_next.eq(first_failing([
                    (reserved(Opcode.COPY), ErrorCode.RESERVED_BITS),
                    (cp.length == 0, ErrorCode.BAD_DIMENSION),
                    ((cp.src_addr[:3] != 0) | (cp.dst_addr[:3] != 0) | (cp.length[:3] != 0), ErrorCode.MISALIGNED),
                    (~in_window(cp.src_addr, cp_src_end) | ~in_window(cp.dst_addr, cp_dst_end), ErrorCode.DMA_WINDOW),
                ])), route_next.eq(2)]
            with m.Case(Opcode.SIGNAL):
                m.d.comb += status_next.eq(first_failing([
                    (reserved(Opcode.SIGNAL), ErrorCode.RESERVED_BITS),
                    (sg.sem >= cfg.semaphores, ErrorCode.SEM_RANGE),
                ]))
            with m.Case(Opcode.WAIT):
                m.d.comb += status_next.eq(first_failing([
                    (reserved(Opcode.WAIT), ErrorCode.RESERVED_BITS),
                    (sg.count == 0, ErrorCode.BAD_DIMENSION),
                    (sg.sem >= cfg.semaphores, ErrorCode.SEM_RANGE),
                ]))
            with m.Case(Opcode.NOP):
                m.d.comb += status_next.eq(first_failing([(reserved(Opcode.NOP), ErrorCode.RESERVED_BITS)]))
            with m.Case(Opcode.FENCE):
                m.d.comb += status_next.eq(first_failing([(reserved(Opcode.FENCE), ErrorCode.RESERVED_BITS)]))
            with m.Default():
                m.d.comb += status_next.eq(ErrorCode.BAD_OPCODE)
        # Errors complete here, whatever unit the opcode belongs to.
        with m.If(status_next != ErrorCode.OK):
            m.d.comb += route_next.eq(0)
        status = registered(status_next, "status")
        route = registered(route_next, "route")

        # The local rows the command reads and writes, for dependency tracking.
        fp_next = Signal(_Footprint)
        bias_on = p.flags[COMMANDS[Opcode.POSTOP].flag_bit("bias")]
        with m.Switch(hdr.opcode):
            with m.Case(Opcode.GEMM):
                m.d.comb += [
                    fp_next.spm_r_lo.eq(Mux(g.a_addr < g.b_addr, g.a_addr, g.b_addr)),
                    fp_next.spm_r_hi.eq(Mux(a_end > b_end, a_end, b_end)),
                    fp_next.acc_w_lo.eq(g.c_addr), fp_next.acc_w_hi.eq(g.c_addr + g.m),
                ]
            with m.Case(Opcode.POSTOP):
                m.d.comb += [
                    fp_next.acc_r_lo.eq(Mux(bias_on & (p.bias_addr < p.src_addr), p.bias_addr, p.src_addr)),
                    fp_next.acc_r_hi.eq(Mux(bias_on & (p.bias_addr >= p_src_end), p.bias_addr + 1, p_src_end)),
                    fp_next.spm_w_lo.eq(p.dst_addr), fp_next.spm_w_hi.eq(p.dst_addr + p.rows),
                ]
            with m.Case(Opcode.LOAD):
                with m.If(mv_acc):
                    m.d.comb += [fp_next.acc_w_lo.eq(mv.local_addr), fp_next.acc_w_hi.eq(mv_last + 1)]
                with m.Else():
                    m.d.comb += [fp_next.spm_w_lo.eq(mv.local_addr), fp_next.spm_w_hi.eq(mv_last + 1)]
            with m.Case(Opcode.STORE):
                with m.If(mv_acc):
                    m.d.comb += [fp_next.acc_r_lo.eq(mv.local_addr), fp_next.acc_r_hi.eq(mv_last + 1)]
                with m.Else():
                    m.d.comb += [fp_next.spm_r_lo.eq(mv.local_addr), fp_next.spm_r_hi.eq(mv_last + 1)]
        fp = Signal(_Footprint)
        m.d.sync += fp.eq(fp_next)

        # ---- in-flight slots (FIFOs: each unit completes in order) ---------------------------
        def slot_table(name, depth):
            slots = Array(Signal(_Slot, name=f"{name}_slot{i}") for i in range(depth))
            valid = Array(Signal(name=f"{name}_valid{i}") for i in range(depth))
            wr = Signal(range(depth), name=f"{name}_wr")
            rd = Signal(range(depth), name=f"{name}_rd")
            count = Signal(range(depth + 1), name=f"{name}_count")
            return slots, valid, wr, rd, count

        t_slots, t_valid, t_wr, t_rd, t_count = slot_table("tile", TILE_SLOTS)
        d_slots, d_valid, d_wr, d_rd, d_count = slot_table("dma", DMA_SLOTS)

        def conflicts_with(slots, valid, depth):
            result = Const(0)
            for i in range(depth):
                result = result | (valid[i] & _conflict(fp, slots[i].footprint))
            return result

        # Step 4: hazards against the commands in flight.  Slots only gain a command when this one is
        # dispatched, so a hazard a cycle old can only be one that has since cleared: it waits a cycle more.
        tile_hazard = registered(conflicts_with(d_slots, d_valid, DMA_SLOTS), "tile_hazard")
        dma_hazard = registered(conflicts_with(t_slots, t_valid, TILE_SLOTS), "dma_hazard")

        # ---- completions -----------------------------------------------------------------------
        local_valid = Signal()
        aborting = Signal()
        flushing = Signal()
        local = Signal(_Slot)
        local_status = Signal(8)
        writer_busy = Signal()
        in_flight = Signal()
        m.d.comb += in_flight.eq((t_count != 0) | (d_count != 0) | local_valid | writer_busy)

        # ---- dispatch ----------------------------------------------------------------------------
        slot_in = Signal(_Slot)
        m.d.comb += [slot_in.ring_index.eq(cmd_index), slot_in.phase.eq(cmd_phase), slot_in.tag.eq(hdr.tag),
                     slot_in.opcode.eq(hdr.opcode), slot_in.footprint.eq(fp)]
        m.d.comb += [self.tile_cmd.tdata.eq(cmd), self.dma_cmd.tdata.eq(cmd)]
        t_push = Signal()
        d_push = Signal()
        with m.If(decoded & ~halted & ~aborting):
            with m.Switch(route):
                with m.Case(1):
                    with m.If((t_count < TILE_SLOTS) & ~tile_hazard):
                        m.d.comb += self.tile_cmd.tvalid.eq(1)
                        m.d.comb += [t_push.eq(self.tile_cmd.tready), dispatched.eq(self.tile_cmd.tready)]
                with m.Case(2):
                    with m.If((d_count < DMA_SLOTS) & ~dma_hazard):
                        m.d.comb += self.dma_cmd.tvalid.eq(1)
                        m.d.comb += [d_push.eq(self.dma_cmd.tready), dispatched.eq(self.dma_cmd.tready)]
                with m.Case(0):
                    with m.If(~local_valid):
                        with m.If(status != ErrorCode.OK):
                            m.d.comb += dispatched.eq(1)
                        with m.Elif((hdr.opcode == Opcode.FENCE) | (hdr.opcode == Opcode.NOP)):
                            m.d.comb += dispatched.eq((hdr.opcode == Opcode.NOP) | ~in_flight)
                        with m.Elif(hdr.opcode == Opcode.SIGNAL):
                            with m.If(~in_flight):
                                m.d.comb += [self.sem_valid.eq(1), self.sem_delta.eq(sg.count),
                                             dispatched.eq(self.sem_grant)]
                        with m.Else():  # WAIT
                            sem_now = Array(self.sem_values[i] for i in range(cfg.semaphores))[sg.sem]
                            with m.If(sem_now >= sg.count):
                                m.d.comb += [self.sem_valid.eq(1), self.sem_delta.eq(-sg.count),
                                             dispatched.eq(self.sem_grant)]
        m.d.comb += self.sem_index.eq(sg.sem)
        with m.If(dispatched & (route == 0)):
            m.d.sync += [local_valid.eq(1), local.eq(slot_in), local_status.eq(status)]
        m.d.comb += [self.stall.eq(decoded & ~halted & ~aborting & ~dispatched),
                     self.trace_start.eq(dispatched), self.trace_tag.eq(hdr.tag),
                     self.trace_opcode.eq(hdr.opcode)]

        # Slot bookkeeping: push at dispatch, pop when the completion is taken.
        t_pop = Signal()
        d_pop = Signal()
        def keep_slots(slots, valid, wr, rd, count, depth, push, pop):
            with m.If(push):
                m.d.sync += [slots[wr].eq(slot_in), valid[wr].eq(1), wr.eq(Mux(wr == depth - 1, 0, wr + 1))]
            with m.If(pop):
                m.d.sync += [valid[rd].eq(0), rd.eq(Mux(rd == depth - 1, 0, rd + 1))]
            m.d.sync += count.eq(count + push - pop)

        keep_slots(t_slots, t_valid, t_wr, t_rd, t_count, TILE_SLOTS, t_push, t_pop)
        keep_slots(d_slots, d_valid, d_wr, d_rd, d_count, DMA_SLOTS, d_push, d_pop)

        # ---- completion writer ---------------------------------------------------------------
        cpl_addr = Signal(32)
        cpl_data = Signal(64)
        cpl_index = Signal(16)
        cpl_tag = Signal(16)
        cpl_opcode = Signal(8)

        def entry(slot, tag, opcode, st):
            word = Cat(tag, st, opcode, self.timestamp[:31], slot.phase)
            return [cpl_addr.eq(self.cq_base + (slot.ring_index << 3)), cpl_data.eq(word),
                    cpl_index.eq(slot.ring_index),
                    cpl_tag.eq(tag), cpl_opcode.eq(opcode)]

        done_word = data.View(data.StructLayout({"tag": 16, "status": 8, "opcode": 8}), self.tile_done.tdata)
        m.d.comb += [axi.awid.eq(0), axi.awlen.eq(0), axi.awsize.eq(exact_log2(BUS_BYTES)), axi.awburst.eq(BURST_INCR),
                     axi.awaddr.eq(cpl_addr), axi.wdata.eq(cpl_data), axi.wstrb.eq((1 << COMPLETION_BYTES) - 1),
                     axi.wlast.eq(1)]
        aw_done = Signal()
        w_done = Signal()
        writer_idle = Signal()
        with m.FSM(name="complete"):
            with m.State("IDLE"):
                m.d.comb += writer_idle.eq(1)
                with m.If(local_valid & ~self.quiesce):
                    m.d.sync += entry(local, local.tag, local.opcode, local_status)
                    m.d.sync += local_valid.eq(0)
                    m.next = "WRITE"
                with m.Elif(flushing & (d_count != 0) & ~self.quiesce):
                    slot = d_slots[d_rd]
                    m.d.sync += entry(slot, slot.tag, slot.opcode, Const(ErrorCode.TIMEOUT, 8))
                    m.d.comb += d_pop.eq(1)
                    m.next = "WRITE"
                with m.Elif(flushing & (t_count != 0) & ~self.quiesce):
                    slot = t_slots[t_rd]
                    m.d.sync += entry(slot, slot.tag, slot.opcode, Const(ErrorCode.TIMEOUT, 8))
                    m.d.comb += t_pop.eq(1)
                    m.next = "WRITE"
                with m.Elif(self.dma_done.tvalid & ~aborting & ~self.quiesce):
                    slot = d_slots[d_rd]
                    m.d.sync += entry(slot, slot.tag, slot.opcode, self.dma_done.tdata)
                    m.d.comb += [self.dma_done.tready.eq(1), d_pop.eq(1)]
                    m.next = "WRITE"
                with m.Elif(self.tile_done.tvalid & ~aborting & ~self.quiesce):
                    slot = t_slots[t_rd]
                    m.d.sync += entry(slot, done_word.tag, done_word.opcode, done_word.status)
                    m.d.comb += [self.tile_done.tready.eq(1), t_pop.eq(1)]
                    m.next = "WRITE"
                m.d.sync += [aw_done.eq(0), w_done.eq(0)]
            with m.State("WRITE"):
                m.d.comb += [writer_busy.eq(1), axi.awvalid.eq(~aw_done), axi.wvalid.eq(~w_done)]
                with m.If(axi.awready & ~aw_done):
                    m.d.sync += aw_done.eq(1)
                with m.If(axi.wready & ~w_done):
                    m.d.sync += w_done.eq(1)
                with m.If((aw_done | axi.awready) & (w_done | axi.wready)):
                    m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [writer_busy.eq(1), axi.bready.eq(1)]
                with m.If(axi.bvalid):
                    with m.If(axi.bresp != RESP_OKAY):
                        queue_error(ErrorCode.BUS_ERROR, cpl_index)
                    with m.Else():
                        m.d.comb += self.irq_completion.eq(1)
                    m.d.comb += [self.trace_end.eq(1)]
                    m.next = "IDLE"
        m.d.comb += [self.trace_end_tag.eq(cpl_tag), self.trace_end_opcode.eq(cpl_opcode),
                     self.trace_status.eq(cpl_data[16:24])]

        m.d.comb += self.axi_quiet.eq(fetch_idle & writer_idle)

        # ---- watchdog ----------------------------------------------------------------------------
        # aborting: from the watchdog firing until the last TIMEOUT completion is taken; flushing: the
        # units have been reset, and the writer completes what they held with TIMEOUT.
        watched = Signal()
        idle_cycles = Signal(32)
        fire = Signal()
        m.d.comb += [
            watched.eq((t_count != 0) | (d_count != 0)),
            fire.eq(watched & (self.watchdog != 0) & (idle_cycles >= self.watchdog) & ~aborting),
            self.abort_req.eq(aborting & ~flushing),
        ]
        with m.If(~watched | self.progress | t_pop | d_pop | (self.watchdog == 0) | aborting):
            m.d.sync += idle_cycles.eq(0)
        with m.Else():
            m.d.sync += idle_cycles.eq(idle_cycles + 1)
        # The oldest command in flight: the one furthest behind HEAD in ring order.
        t_oldest = t_slots[t_rd].ring_index
        d_oldest = d_slots[d_rd].ring_index
        t_age = (head - t_oldest) & mask
        d_age = (head - d_oldest) & mask
        oldest = Mux((d_count == 0) | ((t_count != 0) & (t_age > d_age)), t_oldest, d_oldest)
        with m.If(fire):
            queue_error(ErrorCode.TIMEOUT, oldest)
            m.d.sync += aborting.eq(1)
        with m.If(self.abort_done):
            m.d.sync += flushing.eq(1)
        with m.If(flushing & ~watched & writer_idle):
            m.d.sync += [aborting.eq(0), flushing.eq(0)]

        m.d.comb += self.busy.eq(self.enable & ~halted & ((head != tail) | have | in_flight))
        return m
