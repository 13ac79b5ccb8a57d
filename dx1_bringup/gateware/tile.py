"""The compute core of a dx1-mini tile: scratchpad, systolic array, accumulator buffer and post-op."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..spec import COMMAND_BITS, COMMANDS, ErrorCode, Opcode, TileConfig
from .layouts import DONE_LAYOUT, HEADER_LAYOUT, command_layout
from .postop import MAX_SHIFT, PostOp
from .stream import AXIStreamSignature
from .systolic import SystolicArray

__all__ = ["ADDR_BITS", "LOCAL_PORTS", "TileCore", "local_ports"]

#: Completions the core can hold; it accepts no command that would not have room for its own.
DONE_DEPTH = 8
#: GEMM commands queued ahead of the weight loader and the activation streamer.
GEMM_QUEUE_DEPTH = 4
#: Outstanding external reads per memory.
READ_QUEUE_DEPTH = 4

ADDR_BITS = 16  # width of every row-address field in the spec
#: Registered decode steps between taking a command and dispatching it: products, then the checks.
DECODE_STAGES = 2


def local_ports(array: int) -> dict[str, wiring.Member]:
    """The tile core's local-memory ports for an ``array``-wide tile, as the core (their slave) has them.

    Scratchpad and accumulator buffer each have a write stream (row address, then the row), a read
    request stream (row address) and a read response stream (the row); a master (the DMA) has each
    member flipped.
    """
    return {
        "spm_wr": In(AXIStreamSignature(ADDR_BITS + 8 * array)),
        "spm_rreq": In(AXIStreamSignature(ADDR_BITS)),
        "spm_rresp": Out(AXIStreamSignature(8 * array)),
        "acc_wr": In(AXIStreamSignature(ADDR_BITS + 32 * array)),
        "acc_rreq": In(AXIStreamSignature(ADDR_BITS)),
        "acc_rresp": Out(AXIStreamSignature(32 * array)),
    }


#: The names of :func:`local_ports`, in order.
LOCAL_PORTS = tuple(local_ports(1))


class _Bank:
    """States of one weight bank; each moves EMPTY -> LOADING -> FULL -> STREAMING -> DRAINING."""

    EMPTY, LOADING, FULL, STREAMING, DRAINING = range(5)


def _first_failing(checks: list[tuple[object, ErrorCode]]):
    """Status of the first true condition in ``checks`` (spec order), else OK."""
    status = ErrorCode.OK
    for cond, code in reversed(checks):
        status = Mux(cond, code, status)
    return status


def _write_server(m: Module, port, req, grant, data_bits: int) -> None:
    """Let a stream of ``{addr, data}`` words use a memory write port when ``grant`` is high."""
    m.d.comb += req.tready.eq(grant)
    with m.If(req.tvalid & grant):
        m.d.comb += [port.addr.eq(req.tdata[data_bits:]), port.data.eq(req.tdata[:data_bits]), port.en.eq(1)]


def _read_server(m: Module, name: str, port, req, resp, grant) -> None:
    """Serve a stream of read addresses from a memory read port when ``grant`` is high.

    Responses queue in a small FIFO; a request is only taken while there is room
    for its answer, so back-pressure on ``resp`` never loses data.
    """
    fifo = SyncFIFO(width=len(port.data), depth=READ_QUEUE_DEPTH)
    m.submodules[f"{name}_fifo"] = fifo
    pending = Signal(name=f"{name}_pending")
    m.d.comb += req.tready.eq(grant & (fifo.level + pending < READ_QUEUE_DEPTH))
    with m.If(req.tvalid & req.tready):
        m.d.comb += [port.addr.eq(req.tdata), port.en.eq(1)]
    m.d.sync += pending.eq(req.tvalid & req.tready)
    m.d.comb += [
        fifo.w_data.eq(port.data), fifo.w_en.eq(pending),
        resp.tdata.eq(fifo.r_data), resp.tvalid.eq(fifo.r_rdy), fifo.r_en.eq(resp.tready),
    ]


class TileCore(wiring.Component):
    """Executes NOP, GEMM and POSTOP commands on the tile's own memories.

    Commands arrive on ``cmd`` (the spec's 256-bit encoding); each leaves one
    entry on ``done`` (tag, status, opcode), in the order the commands came.
    A command is taken into an input register (``cmd.tready`` is low while it
    is full) and checked in :data:`DECODE_STAGES` registered steps.
    Other opcodes, and commands whose fields fail the spec's checks, complete
    with their error code and change nothing.  GEMMs run back to back: the
    weight loader fills one bank of the array while the activation streamer
    uses the other.  A POSTOP waits for earlier GEMMs to finish, and a GEMM for
    an earlier POSTOP, since one writes what the other reads.

    The ``spm_*`` and ``acc_*`` streams give the outside (the DMA, or a
    testbench) access to the memories; the compute pipeline has priority and the
    outside is back-pressured.  Write words are ``{addr[15:0], data}`` with the
    data in the low bits; read requests are a row address, answered in order.
    Addresses are taken modulo the memory's depth: checking them is the DMA's job.

    Parameters
    ----------
    config:
        The tile's sizes.
    """

    def __init__(self, config: TileConfig):
        if not isinstance(config, TileConfig):
            raise TypeError(f"Tile core config must be a TileConfig, not {config!r}")
        self.config = config
        n = config.array
        super().__init__({
            "cmd": In(AXIStreamSignature(COMMAND_BITS)),
            "done": Out(AXIStreamSignature(32)),
            **local_ports(n),
            "busy": Out(1),
            "perf_macs": Out(48),
            "perf_busy": Out(32),
            "perf_stall": Out(32),
            "progress": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        n = cfg.array
        spm_bits = exact_log2(cfg.spm_rows)
        acc_bits = exact_log2(cfg.acc_rows)

        m.submodules.spm = spm = Memory(shape=unsigned(8 * n), depth=cfg.spm_rows, init=[])
        m.submodules.acc = acc = Memory(shape=unsigned(32 * n), depth=cfg.acc_rows, init=[])
        spm_w = spm.write_port()
        spm_ra = spm.read_port()          # activations, streamer only
        spm_rb = spm.read_port()          # weights, shared with outside reads
        acc_w = acc.write_port()
        acc_rc = acc.read_port(transparent_for=(acc_w,))  # read-modify-write of GEMM results
        acc_rp = acc.read_port()          # post-op, shared with outside reads

        row_ctl = data.StructLayout({
            "acc_addr": unsigned(acc_bits), "accumulate": 1, "last": 1, "tag": 16,
        })
        m.submodules.array = array = SystolicArray(n, ctl_width=row_ctl.size)
        post_ctl = data.StructLayout({"dst": unsigned(spm_bits), "last": 1})
        m.submodules.postop = postop = PostOp(n, ctl_width=post_ctl.size)

        # ---- completions -------------------------------------------------------------------
        m.submodules.done_fifo = done_fifo = SyncFIFOBuffered(width=32, depth=DONE_DEPTH)
        done = data.View(DONE_LAYOUT, done_fifo.w_data)
        m.d.comb += [
            self.done.tdata.eq(done_fifo.r_data),
            self.done.tvalid.eq(done_fifo.r_rdy),
            done_fifo.r_en.eq(self.done.tready),
        ]
        # ---- input register: the command waits in `cmd` while its checks are computed ---------
        cmd = Signal(COMMAND_BITS)
        cmd_valid = Signal()
        stage = Signal(range(DECODE_STAGES + 1))
        take = Signal()  # the command in `cmd` is dispatched this cycle
        decoded = Signal()
        m.d.comb += [self.cmd.tready.eq(~cmd_valid), decoded.eq(cmd_valid & (stage == DECODE_STAGES))]
        with m.If(self.cmd.tvalid & self.cmd.tready):
            m.d.sync += [cmd.eq(self.cmd.tdata), cmd_valid.eq(1), stage.eq(0)]
        with m.Elif(take):
            m.d.sync += cmd_valid.eq(0)
        with m.Elif(cmd_valid & (stage != DECODE_STAGES)):
            m.d.sync += stage.eq(stage + 1)

        outstanding = Signal(range(DONE_DEPTH + 1))
        popped = Signal()
        m.d.comb += [
            popped.eq(self.done.tvalid & self.done.tready),
            self.busy.eq((outstanding != 0) | cmd_valid),
        ]
        m.d.sync += outstanding.eq(outstanding + take - popped)
        credit = Signal()
        m.d.comb += credit.eq(outstanding < DONE_DEPTH)

        gemm_inflight = Signal(range(2 * GEMM_QUEUE_DEPTH + 2))
        gemm_accepted = Signal()
        gemm_completed = Signal()
        m.d.sync += gemm_inflight.eq(gemm_inflight + gemm_accepted - gemm_completed)
        postop_busy = Signal()

        # ---- decode and check ----------------------------------------------------------------
        hdr = data.View(HEADER_LAYOUT, cmd)
        g = data.View(command_layout(Opcode.GEMM), cmd)
        p = data.View(command_layout(Opcode.POSTOP), cmd)
        gemm_spec, post_spec = COMMANDS[Opcode.GEMM], COMMANDS[Opcode.POSTOP]

        def reserved(op):
            return (cmd & COMMANDS[op].reserved_mask) != 0

        # Step 1: the products (registered); step 2: the checks (registered into `status`).
        a_rows = Signal(32)
        b_rows = Signal(32)
        m.d.sync += [a_rows.eq(g.k_chunks * g.m), b_rows.eq(g.k_chunks * n)]
        p_bias = p.flags[post_spec.flag_bit("bias")]
        status_next = Signal(8)
        with m.Switch(hdr.opcode):
            with m.Case(Opcode.NOP):
                m.d.comb += status_next.eq(_first_failing([(reserved(Opcode.NOP), ErrorCode.RESERVED_BITS)]))
            with m.Case(Opcode.GEMM):
                m.d.comb += status_next.eq(_first_failing([
                    (reserved(Opcode.GEMM), ErrorCode.RESERVED_BITS),
                    ((g.m == 0) | (g.k_chunks == 0), ErrorCode.BAD_DIMENSION),
                    ((g.a_addr + a_rows > cfg.spm_rows) | (g.b_addr + b_rows > cfg.spm_rows), ErrorCode.SPM_RANGE),
                    (g.c_addr + g.m > cfg.acc_rows, ErrorCode.ACC_RANGE),
                ]))
            with m.Case(Opcode.POSTOP):
                m.d.comb += status_next.eq(_first_failing([
                    (reserved(Opcode.POSTOP), ErrorCode.RESERVED_BITS),
                    (p.rows == 0, ErrorCode.BAD_DIMENSION),
                    (p.shift > MAX_SHIFT, ErrorCode.BAD_FIELD),
                    (p.dst_addr + p.rows > cfg.spm_rows, ErrorCode.SPM_RANGE),
                    ((p.src_addr + p.rows > cfg.acc_rows)
                     | (p_bias & (p.bias_addr >= cfg.acc_rows)), ErrorCode.ACC_RANGE),
                ]))
            with m.Default():
                m.d.comb += status_next.eq(ErrorCode.BAD_OPCODE)
        status = Signal(8)
        m.d.sync += status.eq(status_next)

        # ---- GEMM queues: one for the weight loader, one for the activation streamer ----------
        load_job = data.StructLayout({"b_addr": unsigned(spm_bits), "k_chunks": 16})
        stream_job = data.StructLayout({
            "a_addr": unsigned(spm_bits), "c_addr": unsigned(acc_bits), "m": 16, "k_chunks": 16,
            "accumulate": 1, "tag": 16,
        })
        m.submodules.load_q = load_q = SyncFIFO(width=load_job.size, depth=GEMM_QUEUE_DEPTH)
        m.submodules.stream_q = stream_q = SyncFIFO(width=stream_job.size, depth=GEMM_QUEUE_DEPTH)
        m.d.comb += [
            load_q.w_data.eq(Cat(g.b_addr[:spm_bits], g.k_chunks)),
            stream_q.w_data.eq(Cat(g.a_addr[:spm_bits], g.c_addr[:acc_bits], g.m, g.k_chunks,
                                   g.flags[gemm_spec.flag_bit("accumulate")], g.tag)),
        ]

        # ---- dispatch: one command a cycle at most, completions kept in order ----------------
        idle = Signal()
        m.d.comb += idle.eq((gemm_inflight == 0) & ~postop_busy)
        post_start = Signal()
        with m.If(decoded & credit):
            with m.If((status != ErrorCode.OK) | (hdr.opcode == Opcode.NOP)):
                with m.If(idle):
                    m.d.comb += [
                        take.eq(1), done_fifo.w_en.eq(1),
                        done.tag.eq(hdr.tag), done.status.eq(status), done.opcode.eq(hdr.opcode),
                    ]
            with m.Elif(hdr.opcode == Opcode.GEMM):
                with m.If(~postop_busy & load_q.w_rdy & stream_q.w_rdy):
                    m.d.comb += [take.eq(1), load_q.w_en.eq(1), stream_q.w_en.eq(1),
                                 gemm_accepted.eq(1)]
            with m.Else():  # POSTOP
                with m.If(idle):
                    m.d.comb += [take.eq(1), post_start.eq(1)]

        # ---- weight banks ------------------------------------------------------------------
        bank_state = [Signal(range(5), name=f"bank{b}_state") for b in range(2)]
        drain = [Signal(range(2 * n + 1), name=f"bank{b}_drain") for b in range(2)]
        for b in range(2):
            with m.If((bank_state[b] == _Bank.DRAINING) & (drain[b] == 0)):
                m.d.sync += bank_state[b].eq(_Bank.EMPTY)
            with m.Elif(bank_state[b] == _Bank.DRAINING):
                m.d.sync += drain[b].eq(drain[b] - 1)

        def bank_is(bank, state):
            return Mux(bank, bank_state[1] == state, bank_state[0] == state)

        def set_bank(bank, state):
            for b in range(2):
                with m.If(bank == b):
                    m.d.sync += bank_state[b].eq(state)
                    if state == _Bank.DRAINING:
                        # The bank's last activations need 2n-1 cycles to leave the array.
                        m.d.sync += drain[b].eq(2 * n)

        # ---- weight loader: n scratchpad rows into a free bank per reduction chunk -------------
        l_job = data.View(load_job, load_q.r_data)
        l_active = Signal()
        l_addr = Signal(spm_bits)
        l_row = Signal(range(n))
        l_left = Signal(16)
        l_bank = Signal()
        l_issue = Signal()
        m.d.comb += l_issue.eq(l_active & ((l_row != 0) | bank_is(l_bank, _Bank.EMPTY)))
        with m.If(l_issue):
            # Rows go in last-first: after n shifts row k of the bank holds B[k].
            m.d.comb += [spm_rb.addr.eq(l_addr + (n - 1) - l_row), spm_rb.en.eq(1)]
            with m.If(l_row == 0):
                set_bank(l_bank, _Bank.LOADING)
            m.d.sync += l_row.eq(l_row + 1)
            with m.If(l_row == n - 1):
                m.d.sync += [l_row.eq(0), l_bank.eq(~l_bank), l_addr.eq(l_addr + n), l_left.eq(l_left - 1)]
                with m.If(l_left == 1):
                    m.d.sync += l_active.eq(0)
        l_finishing = Signal()
        m.d.comb += l_finishing.eq(l_issue & (l_row == n - 1) & (l_left == 1))
        with m.If(load_q.r_rdy & (~l_active | l_finishing)):
            m.d.comb += load_q.r_en.eq(1)
            m.d.sync += [l_active.eq(1), l_addr.eq(l_job.b_addr), l_left.eq(l_job.k_chunks), l_row.eq(0)]
        w_valid = Signal()
        w_bank = Signal()
        w_last = Signal()
        m.d.sync += [w_valid.eq(l_issue), w_bank.eq(l_bank), w_last.eq(l_issue & (l_row == n - 1))]
        m.d.comb += [array.w_load.eq(w_valid), array.w_bank.eq(w_bank), array.w_row.eq(spm_rb.data)]
        with m.If(w_valid & w_last):
            set_bank(w_bank, _Bank.FULL)

        # ---- activation streamer: one scratchpad row into the array a cycle -----------------
        s_job = data.View(stream_job, stream_q.r_data)
        s_active = Signal()
        s_addr = Signal(spm_bits)
        s_c = Signal(acc_bits)
        s_row = Signal(16)
        s_m = Signal(16)
        s_left = Signal(16)
        s_first = Signal()
        s_acc = Signal()
        s_tag = Signal(16)
        s_bank = Signal()
        s_issue = Signal()
        m.d.comb += s_issue.eq(s_active & ((s_row != 0) | bank_is(s_bank, _Bank.FULL)))
        s_ctl = Signal(row_ctl)
        with m.If(s_issue):
            m.d.comb += [spm_ra.addr.eq(s_addr), spm_ra.en.eq(1)]
            m.d.sync += [s_addr.eq(s_addr + 1), s_row.eq(s_row + 1)]
            with m.If(s_row == 0):
                set_bank(s_bank, _Bank.STREAMING)
            with m.If(s_row == s_m - 1):
                set_bank(s_bank, _Bank.DRAINING)
                m.d.sync += [s_row.eq(0), s_bank.eq(~s_bank), s_left.eq(s_left - 1), s_first.eq(0)]
                with m.If(s_left == 1):
                    m.d.sync += s_active.eq(0)
        s_finishing = Signal()
        m.d.comb += s_finishing.eq(s_issue & (s_row == s_m - 1) & (s_left == 1))
        with m.If(stream_q.r_rdy & (~s_active | s_finishing)):
            m.d.comb += stream_q.r_en.eq(1)
            m.d.sync += [
                s_active.eq(1), s_addr.eq(s_job.a_addr), s_c.eq(s_job.c_addr), s_row.eq(0),
                s_m.eq(s_job.m), s_left.eq(s_job.k_chunks), s_first.eq(1), s_acc.eq(s_job.accumulate),
                s_tag.eq(s_job.tag),
            ]
        a_valid = Signal()
        a_bank = Signal()
        m.d.sync += [
            a_valid.eq(s_issue), a_bank.eq(s_bank),
            s_ctl.acc_addr.eq(s_c + s_row), s_ctl.accumulate.eq(s_acc | ~s_first),
            s_ctl.last.eq((s_left == 1) & (s_row == s_m - 1)), s_ctl.tag.eq(s_tag),
        ]
        m.d.comb += [
            array.a.eq(spm_ra.data), array.a_valid.eq(a_valid), array.a_bank.eq(a_bank), array.ctl.eq(s_ctl),
        ]

        # ---- results: read-modify-write into the accumulator buffer --------------------------
        out_ctl = data.View(row_ctl, array.out_ctl)
        m.d.comb += [acc_rc.addr.eq(out_ctl.acc_addr), acc_rc.en.eq(1)]
        r_valid = Signal()
        r_ctl = Signal(row_ctl)
        r_psum = Signal.like(array.out)
        m.d.sync += [r_valid.eq(array.out_valid), r_ctl.eq(out_ctl), r_psum.eq(array.out)]
        old = data.View(data.ArrayLayout(unsigned(32), n), acc_rc.data)
        summed = Signal(32 * n)
        m.d.comb += summed.eq(Cat(
            Mux(r_ctl.accumulate, old[lane] + r_psum[lane].as_unsigned(), r_psum[lane].as_unsigned())[:32]
            for lane in range(n)))
        with m.If(r_valid):
            m.d.comb += [acc_w.addr.eq(r_ctl.acc_addr), acc_w.data.eq(summed), acc_w.en.eq(1)]
            with m.If(r_ctl.last):
                m.d.comb += [
                    gemm_completed.eq(1), done_fifo.w_en.eq(1),
                    done.tag.eq(r_ctl.tag), done.status.eq(ErrorCode.OK), done.opcode.eq(Opcode.GEMM),
                ]

        # ---- post-op: accumulator rows -> requantised scratchpad rows ------------------------
        po_src = Signal(acc_bits)
        po_dst = Signal(spm_bits)
        po_left = Signal(16)
        po_tag = Signal(16)
        po_bias_pending = Signal()
        po_reading = Signal()
        bias = Signal.like(postop.bias)
        with m.If(post_start):
            m.d.sync += [
                postop_busy.eq(1), po_src.eq(p.src_addr), po_dst.eq(p.dst_addr), po_left.eq(p.rows),
                po_tag.eq(p.tag), po_bias_pending.eq(p_bias), bias.eq(0),
                postop.mult.eq(p.mult), postop.shift.eq(p.shift),
                postop.relu.eq(p.flags[post_spec.flag_bit("relu")]),
            ]
            with m.If(p_bias):
                m.d.comb += [acc_rp.addr.eq(p.bias_addr), acc_rp.en.eq(1)]
        with m.Elif(po_bias_pending):
            m.d.sync += [bias.eq(acc_rp.data), po_bias_pending.eq(0)]
        with m.Elif(postop_busy & (po_left != 0)):
            m.d.comb += [po_reading.eq(1), acc_rp.addr.eq(po_src), acc_rp.en.eq(1)]
            m.d.sync += [po_src.eq(po_src + 1), po_dst.eq(po_dst + 1), po_left.eq(po_left - 1)]
        row_valid = Signal()
        row_ctl_p = Signal(post_ctl)
        m.d.sync += [row_valid.eq(po_reading), row_ctl_p.dst.eq(po_dst), row_ctl_p.last.eq(po_left == 1)]
        m.d.comb += [
            postop.bias.eq(bias), postop.row.eq(acc_rp.data), postop.row_valid.eq(row_valid),
            postop.ctl.eq(row_ctl_p),
        ]
        po_out = data.View(post_ctl, postop.out_ctl)
        with m.If(postop.out_valid):
            m.d.comb += [spm_w.addr.eq(po_out.dst), spm_w.data.eq(postop.out), spm_w.en.eq(1)]
            with m.If(po_out.last):
                m.d.sync += postop_busy.eq(0)
                m.d.comb += [
                    done_fifo.w_en.eq(1),
                    done.tag.eq(po_tag), done.status.eq(ErrorCode.OK), done.opcode.eq(Opcode.POSTOP),
                ]

        # ---- the outside's access, behind the pipeline ---------------------------------------
        _write_server(m, spm_w, self.spm_wr, ~postop.out_valid, 8 * n)
        _write_server(m, acc_w, self.acc_wr, ~r_valid, 32 * n)
        _read_server(m, "spm_ext", spm_rb, self.spm_rreq, self.spm_rresp, ~l_issue)
        _read_server(m, "acc_ext", acc_rp, self.acc_rreq, self.acc_rresp,
                     ~(post_start | po_bias_pending | po_reading))

        # ---- counters ------------------------------------------------------------------------
        with m.If(a_valid):
            m.d.sync += [self.perf_macs.eq(self.perf_macs + n * n), self.perf_busy.eq(self.perf_busy + 1)]
        # For the queue's watchdog: a row entered the array, or the post-op wrote one.
        m.d.comb += self.progress.eq(a_valid | postop.out_valid)
        with m.If(s_active & ~s_issue):
            m.d.sync += self.perf_stall.eq(self.perf_stall + 1)
        return m
