"""The compute core of a dx1-mini tile: scratchpad, systolic array, accumulator buffer and post-op.

The core is built from parts: command :mod:`.decode` and :mod:`.issue`, the in-order :mod:`.completions`,
the GEMM pipeline (:mod:`.loader` of weights into the :mod:`.banks`, activation :mod:`.streamer`, the systolic array,
the :mod:`.results` writer), the :mod:`.postops` sequencer, the vector unit (:mod:`..vector.unit`, with
``TileConfig.vector``), and the outside's memory :mod:`.ports`.
"""

from __future__ import annotations

from amaranth import Module, Mux, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BITS, COMMANDS, Opcode, TileConfig
from ..layouts import command_layout
from ..stream import AXIStreamSignature
from ..systolic import SystolicArray
from ..vector.unit import VectorUnit
from .banks import WeightBanks
from .completions import Completions
from .decode import CommandDecoder
from .issue import CommandIssue
from .loader import WeightLoader
from .ports import ADDR_BITS, ReadServer, WriteServer
from .postops import PostOpSequencer
from .results import ResultWriter
from .streamer import ActivationStreamer, row_ctl_layout

__all__ = ["ADDR_BITS", "LOCAL_PORTS", "TileCore", "local_ports"]


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


class TileCore(wiring.Component):
    """Executes NOP, GEMM and POSTOP (and, with a vector unit, VECTOR, TABLE and TRANSPOSE) commands on the
    tile's own memories.

    Commands arrive on ``cmd`` (the spec's 256-bit encoding); each leaves one
    entry on ``done`` (tag, status, opcode), in the order the commands came.
    A command is taken into an input register (``cmd.tready`` is low while it
    is full) and checked in :data:`DECODE_STAGES` registered steps.
    Other opcodes, and commands whose fields fail the spec's checks, complete
    with their error code and change nothing.  GEMMs run back to back: the
    weight loader fills one bank of the array while the activation streamer
    uses the other.  A POSTOP waits for earlier GEMMs to finish, and a GEMM for
    an earlier POSTOP, since one writes what the other reads.  A vector command
    runs alone: it waits for every earlier command and the next waits for it;
    while it runs it uses the GEMM pipeline's read ports and the write ports.

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
            "perf_vector_busy": Out(32),
            "perf_table_hits": Out(32),
            "perf_table_underflows": Out(32),
            "perf_table_overflows": Out(32),
            "progress": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        n = cfg.array
        m.submodules.spm = spm = Memory(shape=unsigned(8 * n), depth=cfg.spm_rows, init=[])
        m.submodules.acc = acc = Memory(shape=unsigned(32 * n), depth=cfg.acc_rows, init=[])
        spm_w = spm.write_port()
        spm_ra = spm.read_port()          # activations, streamer only
        spm_rb = spm.read_port()          # weights, shared with outside reads
        acc_w = acc.write_port()
        acc_rc = acc.read_port(transparent_for=(acc_w,))  # read-modify-write of GEMM results
        acc_rp = acc.read_port()          # post-op, shared with outside reads

        m.submodules.decoder = decoder = CommandDecoder(cfg)
        m.submodules.issue = issue = CommandIssue()
        m.submodules.completions = completions = Completions()
        m.submodules.banks = banks = WeightBanks(n)
        m.submodules.loader = loader = WeightLoader(cfg)
        m.submodules.streamer = streamer = ActivationStreamer(cfg)
        m.submodules.array = array = SystolicArray(n, ctl_width=row_ctl_layout(cfg).size)
        m.submodules.results = results = ResultWriter(cfg)
        m.submodules.postops = postops = PostOpSequencer(cfg)
        m.submodules.spm_ext_write = spm_ext_w = WriteServer(8 * n)
        m.submodules.acc_ext_write = acc_ext_w = WriteServer(32 * n)
        m.submodules.spm_ext_read = spm_ext_r = ReadServer(8 * n)
        m.submodules.acc_ext_read = acc_ext_r = ReadServer(32 * n)

        # ---- commands: decode, issue, completions ------------------------------------------------
        wiring.connect(m, wiring.flipped(self.cmd), decoder.cmd)
        wiring.connect(m, completions.done, wiring.flipped(self.done))
        wiring.connect(m, issue.done, completions.issue)
        wiring.connect(m, results.done, completions.gemm)
        wiring.connect(m, postops.done, completions.postop)
        g = data.View(command_layout(Opcode.GEMM), decoder.command)
        m.d.comb += [
            issue.decoded.eq(decoder.decoded), issue.command.eq(decoder.command), issue.status.eq(decoder.status),
            decoder.take.eq(issue.take), completions.reserve.eq(issue.take), issue.credit.eq(completions.credit),
            issue.queues_ready.eq(loader.room & streamer.room), issue.postop_busy.eq(postops.busy),
            issue.gemm_done.eq(results.done.valid),
            self.busy.eq(completions.pending | decoder.holding),
            loader.push.eq(issue.gemm), loader.job.b_addr.eq(g.b_addr), loader.job.k_chunks.eq(g.k_chunks),
            streamer.push.eq(issue.gemm), streamer.job.a_addr.eq(g.a_addr), streamer.job.c_addr.eq(g.c_addr),
            streamer.job.m.eq(g.m), streamer.job.k_chunks.eq(g.k_chunks), streamer.job.tag.eq(g.tag),
            streamer.job.accumulate.eq(g.flags[COMMANDS[Opcode.GEMM].flag_bit("accumulate")]),
            postops.start.eq(issue.postop), postops.command.eq(decoder.command),
        ]

        # ---- GEMM pipeline: weights and activations into the array, results into the accumulators --
        m.d.comb += [
            banks.load_start.eq(loader.load_start), banks.load_bank.eq(loader.load_bank),
            banks.loaded.eq(loader.loaded), banks.loaded_bank.eq(loader.loaded_bank),
            banks.stream_start.eq(streamer.stream_start), banks.stream_end.eq(streamer.stream_end),
            banks.stream_bank.eq(streamer.stream_bank),
            loader.bank_empty.eq(banks.empty), streamer.bank_full.eq(banks.full),
            array.w_load.eq(loader.w_load), array.w_bank.eq(loader.w_bank), array.w_row.eq(loader.w_row),
            streamer.spm_data.eq(spm_ra.data),
            array.a.eq(streamer.a), array.a_valid.eq(streamer.a_valid), array.next_bank.eq(streamer.next_bank),
            array.ctl.eq(streamer.ctl),
            results.out.eq(array.out), results.out_valid.eq(array.out_valid), results.out_ctl.eq(array.out_ctl),
            results.acc_data.eq(acc_rc.data),
        ]

        # ---- the vector unit: it runs alone, on the pipeline's read ports and the write ports ------------
        if cfg.vector:
            m.submodules.vector = vector = VectorUnit(cfg)
            wiring.connect(m, vector.done, completions.vector)
            m.d.comb += [
                vector.start.eq(issue.vector), vector.command.eq(decoder.command), issue.vector_busy.eq(vector.busy),
                vector.spm_a_data.eq(spm_ra.data), vector.acc_a_data.eq(acc_rc.data),
                vector.spm_b_data.eq(spm_rb.data), vector.acc_b_data.eq(acc_rp.data),
                self.perf_vector_busy.eq(vector.busy_cycles), self.perf_table_hits.eq(vector.hits),
                self.perf_table_underflows.eq(vector.underflows), self.perf_table_overflows.eq(vector.overflows),
            ]
            v_spm_a, v_acc_a, v_busy = vector.spm_a_addr, vector.acc_a_addr, vector.busy
            v_spm_b, v_spm_b_use, v_acc_b, v_acc_b_use = (vector.spm_b_addr, vector.spm_b_use, vector.acc_b_addr,
                                                          vector.acc_b_use)
            v_spm_w, v_acc_w = (vector.spm_w_en, vector.spm_w_addr, vector.spm_w_data), \
                (vector.acc_w_en, vector.acc_w_addr, vector.acc_w_data)
            v_progress = vector.progress
        else:
            v_spm_a = v_acc_a = v_busy = v_spm_b = v_spm_b_use = v_acc_b = v_acc_b_use = v_progress = 0
            v_spm_w = v_acc_w = (0, 0, 0)
        m.d.comb += [spm_ra.addr.eq(streamer.spm_addr | v_spm_a),
                     acc_rc.addr.eq(Mux(v_busy, v_acc_a, results.acc_addr))]

        # ---- shared memory ports: the pipeline (or the vector unit) first, the outside behind it ----------
        m.d.comb += [
            spm_ext_w.grant.eq(~postops.writing & ~v_spm_w[0]), acc_ext_w.grant.eq(~results.writing & ~v_acc_w[0]),
            spm_ext_r.grant.eq(~loader.issue & ~v_spm_b_use), acc_ext_r.grant.eq(~postops.acc_use & ~v_acc_b_use),
            spm_w.addr.eq(postops.spm_addr | spm_ext_w.addr | v_spm_w[1]),
            spm_w.data.eq(postops.spm_data | spm_ext_w.data | v_spm_w[2]),
            spm_w.en.eq(postops.writing | spm_ext_w.en | v_spm_w[0]),
            acc_w.addr.eq(results.w_addr | acc_ext_w.addr | v_acc_w[1]),
            acc_w.data.eq(results.w_data | acc_ext_w.data | v_acc_w[2]),
            acc_w.en.eq(results.writing | acc_ext_w.en | v_acc_w[0]),
            spm_rb.addr.eq(loader.spm_addr | spm_ext_r.addr | v_spm_b),
            loader.spm_data.eq(spm_rb.data), spm_ext_r.data.eq(spm_rb.data),
            acc_rp.addr.eq(postops.acc_addr | acc_ext_r.addr | v_acc_b),
            postops.acc_data.eq(acc_rp.data), acc_ext_r.data.eq(acc_rp.data),
        ]
        for server, port in ((spm_ext_w, self.spm_wr), (acc_ext_w, self.acc_wr),
                             (spm_ext_r, self.spm_rreq), (acc_ext_r, self.acc_rreq)):
            wiring.connect(m, wiring.flipped(port), server.req)
        wiring.connect(m, spm_ext_r.resp, wiring.flipped(self.spm_rresp))
        wiring.connect(m, acc_ext_r.resp, wiring.flipped(self.acc_rresp))

        # ---- counters ------------------------------------------------------------------------------
        with m.If(streamer.a_valid):
            m.d.sync += [self.perf_macs.eq(self.perf_macs + n * n), self.perf_busy.eq(self.perf_busy + 1)]
        # For the queue's watchdog: a row entered the array, the post-op wrote one, or the vector unit moved one.
        m.d.comb += self.progress.eq(streamer.a_valid | postops.writing | v_progress)
        with m.If(streamer.stalled):
            m.d.sync += self.perf_stall.eq(self.perf_stall + 1)
        return m
