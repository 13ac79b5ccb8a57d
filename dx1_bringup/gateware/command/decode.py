"""Command decode: the spec's field checks, the route to a unit and the footprint, in registered steps."""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BYTES, COMMANDS, LINK_PORTS, ErrorCode, LinkOp, Opcode, SocConfig, TileConfig
from ..layouts import HEADER_LAYOUT, command_layout
from .slots import FOOTPRINT_LAYOUT, RANGE_BITS

__all__ = ["CommandDecoder", "FootprintDecoder", "DECODE_STAGES", "Route"]

_VECTOR_OPCODES = (Opcode.VECTOR, Opcode.TABLE, Opcode.TRANSPOSE)

#: Registered decode steps between a fetched command and its dispatch: products, sums, checks (here), and
#: hazards (:class:`~.hazards.HazardTracker`).
DECODE_STAGES = 4


class Route:
    """Where a decoded command goes: completed by the processor itself, the tile core, or the DMA."""
    LOCAL, TILE, DMA = range(3)


class CommandDecoder(wiring.Component):
    """Checks one command's fields in the spec's order and finds its route and footprint.

    ``cmd`` is the command held by the fetch (``valid``); ``status``, ``route`` and ``footprint`` describe it
    once ``decoded`` is high, :data:`DECODE_STAGES` cycles after it arrived, until ``taken``.  Every step
    recomputes each cycle from the previous one, so no path runs from the command register through a
    multiplier and an adder chain into the dispatch decision.

    * GEMM and POSTOP (and, with a vector unit, VECTOR, TABLE and TRANSPOSE) go to the tile core unchecked
      (it checks them itself); LOAD, STORE and COPY (and, with a link, SEND) to the
      DMA; NOP, FENCE, SIGNAL and WAIT stay local.
    * ``status`` is the first failing check's error code (``OK`` when none fails), and any command that
      fails one is routed ``LOCAL``, to complete with its code.  An unknown opcode is ``BAD_OPCODE``.
    * ``footprint``: the bounding local row ranges the command reads and writes, per memory.
    """

    def __init__(self, config: SocConfig):
        if not isinstance(config, SocConfig):
            raise TypeError(f"Command decoder config must be a SocConfig, not {config!r}")
        self.config = config
        super().__init__({
            "cmd": In(8 * COMMAND_BYTES), "valid": In(1), "taken": In(1),
            "dma_base": In(32), "dma_limit": In(32),
            "decoded": Out(1), "status": Out(8), "route": Out(2), "footprint": Out(FOOTPRINT_LAYOUT),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, tile, cmd = self.config, self.config.tile, self.cmd
        hdr = data.View(HEADER_LAYOUT, cmd)
        mv = data.View(command_layout(Opcode.LOAD), cmd)
        cp = data.View(command_layout(Opcode.COPY), cmd)
        sg = data.View(command_layout(Opcode.SIGNAL), cmd)
        g = data.View(command_layout(Opcode.GEMM), cmd)
        p = data.View(command_layout(Opcode.POSTOP), cmd)
        sd = data.View(command_layout(Opcode.SEND), cmd)

        stage = Signal(range(DECODE_STAGES + 1))  # the steps that have seen the current command
        with m.If(~self.valid | self.taken):
            m.d.sync += stage.eq(0)
        with m.Elif(stage != DECODE_STAGES):
            m.d.sync += stage.eq(stage + 1)
        m.d.comb += self.decoded.eq(self.valid & (stage == DECODE_STAGES))

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
        sd_src_end = registered(sd.src_addr + sd.length, "sd_src_end", 33)

        # Step 3: checks, route and footprint.
        def reserved(op):
            return (cmd & COMMANDS[op].reserved_mask) != 0

        def first_failing(checks):
            status = Const(ErrorCode.OK, 8)
            for cond, code in reversed(checks):
                status = Mux(cond, code, status)
            return status

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
        route_next = Signal(2)
        with m.Switch(hdr.opcode):
            with m.Case(Opcode.GEMM, Opcode.POSTOP, *(_VECTOR_OPCODES if tile.vector else ())):
                m.d.comb += [status_next.eq(ErrorCode.OK), route_next.eq(Route.TILE)]
            with m.Case(Opcode.LOAD):
                m.d.comb += [status_next.eq(first_failing(move_checks(Opcode.LOAD))), route_next.eq(Route.DMA)]
            with m.Case(Opcode.STORE):
                m.d.comb += [status_next.eq(first_failing(move_checks(Opcode.STORE))), route_next.eq(Route.DMA)]
            with m.Case(Opcode.COPY):
                m.d.comb += [status_next.eq(first_failing([
                    (reserved(Opcode.COPY), ErrorCode.RESERVED_BITS),
                    (cp.length == 0, ErrorCode.BAD_DIMENSION),
                    ((cp.src_addr[:3] != 0) | (cp.dst_addr[:3] != 0) | (cp.length[:3] != 0), ErrorCode.MISALIGNED),
                    (~in_window(cp.src_addr, cp_src_end) | ~in_window(cp.dst_addr, cp_dst_end), ErrorCode.DMA_WINDOW),
                ])), route_next.eq(Route.DMA)]
            if cfg.link is not None:
                with m.Case(Opcode.SEND):
                    m.d.comb += [status_next.eq(first_failing([
                        (reserved(Opcode.SEND), ErrorCode.RESERVED_BITS),
                        (sd.length == 0, ErrorCode.BAD_DIMENSION),
                        ((sd.op > max(LinkOp)) | (sd.port >= LINK_PORTS), ErrorCode.BAD_FIELD),
                        (sd.sem >= cfg.semaphores, ErrorCode.SEM_RANGE),
                        ((sd.src_addr[:3] != 0) | (sd.dst_addr[:3] != 0) | (sd.length[:3] != 0), ErrorCode.MISALIGNED),
                        (~in_window(sd.src_addr, sd_src_end), ErrorCode.DMA_WINDOW),
                    ])), route_next.eq(Route.DMA)]
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
            m.d.comb += route_next.eq(Route.LOCAL)
        m.d.sync += [self.status.eq(status_next), self.route.eq(route_next)]

        m.submodules.footprint = footprint = FootprintDecoder(tile)
        m.d.comb += [footprint.cmd.eq(cmd), footprint.mv_last.eq(mv_last), footprint.a_end.eq(a_end),
                     footprint.b_end.eq(b_end), footprint.p_src_end.eq(p_src_end)]
        m.d.sync += self.footprint.eq(footprint.footprint)
        return m


class FootprintDecoder(wiring.Component):
    """The local rows a command reads and writes, for dependency tracking (combinational).

    ``footprint`` holds one bounding range [lo, hi) per memory and direction; ranges a command does not touch
    are empty (0, 0).  The sums come from the decoder's second step: ``mv_last`` (a LOAD's or STORE's last
    local row), ``a_end``/``b_end`` (a GEMM's A and B row ends), ``p_src_end`` (a POSTOP's source end).
    A vector command (with ``tile.vector``) reads and writes, conservatively, the whole scratchpad and
    accumulator buffer.

    Parameters
    ----------
    tile:
        The tile's sizes.
    """

    def __init__(self, tile: TileConfig):
        if not isinstance(tile, TileConfig):
            raise TypeError(f"Footprint decoder tile must be a TileConfig, not {tile!r}")
        self.tile = tile
        super().__init__({
            "cmd": In(8 * COMMAND_BYTES), "mv_last": In(RANGE_BITS), "a_end": In(RANGE_BITS), "b_end": In(RANGE_BITS),
            "p_src_end": In(RANGE_BITS), "footprint": Out(FOOTPRINT_LAYOUT),
        })

    def elaborate(self, platform):
        m = Module()
        cmd = self.cmd
        mv_last, a_end, b_end, p_src_end = self.mv_last, self.a_end, self.b_end, self.p_src_end
        mv = data.View(command_layout(Opcode.LOAD), cmd)
        g = data.View(command_layout(Opcode.GEMM), cmd)
        p = data.View(command_layout(Opcode.POSTOP), cmd)
        hdr = data.View(HEADER_LAYOUT, cmd)
        mv_acc = mv.flags[COMMANDS[Opcode.LOAD].flag_bit("acc")]
        fp_next = self.footprint
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
            if self.tile.vector:
                with m.Case(*_VECTOR_OPCODES):
                    rows = {"spm": self.tile.spm_rows, "acc": self.tile.acc_rows}
                    m.d.comb += [getattr(fp_next, f"{mem}_{rw}_hi").eq(size)
                                 for mem, size in rows.items() for rw in ("r", "w")]
        return m
