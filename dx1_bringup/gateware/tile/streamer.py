"""The tile core's activation streamer: one scratchpad row into the systolic array a cycle."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import TileConfig
from .issue import GEMM_QUEUE_DEPTH

__all__ = ["ActivationStreamer", "row_ctl_layout", "stream_job_layout"]


def stream_job_layout(config: TileConfig) -> data.StructLayout:
    """A GEMM as the streamer needs it."""
    return data.StructLayout({
        "a_addr": unsigned(exact_log2(config.spm_rows)), "c_addr": unsigned(exact_log2(config.acc_rows)),
        "m": 16, "k_chunks": 16, "accumulate": 1, "tag": 16,
    })


def row_ctl_layout(config: TileConfig) -> data.StructLayout:
    """What travels through the array beside an activation row: where its result goes, and how."""
    return data.StructLayout({
        "acc_addr": unsigned(exact_log2(config.acc_rows)), "accumulate": 1, "last": 1, "tag": 16,
    })


class ActivationStreamer(wiring.Component):
    """Streams the activation rows of queued GEMM jobs through the array, one reduction chunk a bank.

    A job (``job``, pushed with ``push`` while ``room``) streams rows
    ``a_addr .. a_addr + m - 1`` once per reduction chunk, each chunk through
    the next bank, starting once that bank is full (``bank_full``); the bank is
    reported STREAMING at the chunk's first row and DRAINING at its last.  Each
    row is read on the scratchpad read port (``spm_addr``, ``spm_data`` a cycle
    later) and enters the array (``a``, ``a_valid``) a cycle after that, its bank named a cycle
    ahead (``next_bank``: the bank of the row on ``a`` in the next cycle, as the array takes it), with its
    ``ctl``: accumulator row ``c_addr + i``, whether to add to it (every chunk
    but the first, or all with ``accumulate``), and ``last`` on the job's last
    row.  ``stalled`` is high while a job waits for its bank.

    Parameters
    ----------
    config:
        The tile's sizes.
    """

    def __init__(self, config: TileConfig):
        self.config = config
        n, spm_bits = config.array, exact_log2(config.spm_rows)
        super().__init__({
            "job": In(stream_job_layout(config)), "push": In(1), "room": Out(1),
            "bank_full": In(2),
            "stream_start": Out(1), "stream_end": Out(1), "stream_bank": Out(1),
            "spm_addr": Out(spm_bits), "spm_data": In(8 * n),
            "a": Out(8 * n), "a_valid": Out(1), "next_bank": Out(1), "ctl": Out(row_ctl_layout(config)),
            "stalled": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        layout = stream_job_layout(self.config)
        m.submodules.stream_q = queue = SyncFIFO(width=layout.size, depth=GEMM_QUEUE_DEPTH)
        m.d.comb += [queue.w_data.eq(self.job), queue.w_en.eq(self.push), self.room.eq(queue.w_rdy)]
        job = data.View(layout, queue.r_data)
        active = Signal()
        addr = Signal.like(self.spm_addr)
        c = Signal.like(job.c_addr)
        row = Signal(16)
        rows = Signal(16)
        left = Signal(16)
        first = Signal()
        acc = Signal()
        tag = Signal(16)
        bank = Signal()
        issue = Signal()
        m.d.comb += [issue.eq(active & ((row != 0) | Mux(bank, self.bank_full[1], self.bank_full[0]))),
                     self.stream_bank.eq(bank), self.stalled.eq(active & ~issue)]
        with m.If(issue):
            m.d.comb += [self.spm_addr.eq(addr), self.stream_start.eq(row == 0), self.stream_end.eq(row == rows - 1)]
            m.d.sync += [addr.eq(addr + 1), row.eq(row + 1)]
            with m.If(row == rows - 1):
                m.d.sync += [row.eq(0), bank.eq(~bank), left.eq(left - 1), first.eq(0)]
                with m.If(left == 1):
                    m.d.sync += active.eq(0)
        finishing = Signal()
        m.d.comb += finishing.eq(issue & (row == rows - 1) & (left == 1))
        with m.If(queue.r_rdy & (~active | finishing)):
            m.d.comb += queue.r_en.eq(1)
            m.d.sync += [
                active.eq(1), addr.eq(job.a_addr), c.eq(job.c_addr), row.eq(0), rows.eq(job.m),
                left.eq(job.k_chunks), first.eq(1), acc.eq(job.accumulate), tag.eq(job.tag),
            ]
        # The row read a cycle after issue is registered once more before the array: the scratchpad's
        # read port and the first column's multipliers sit far apart on an FPGA, and together they
        # made the tile's critical path.  Valid and ctl wait the same two cycles, the bank one.
        read_valid = Signal()
        read_bank = Signal()
        read_ctl = Signal.like(self.ctl)
        m.d.sync += [
            read_valid.eq(issue), read_bank.eq(bank),
            read_ctl.acc_addr.eq(c + row), read_ctl.accumulate.eq(acc | ~first),
            read_ctl.last.eq((left == 1) & (row == rows - 1)), read_ctl.tag.eq(tag),
            self.a_valid.eq(read_valid), self.ctl.eq(read_ctl), self.a.eq(self.spm_data),
        ]
        m.d.comb += self.next_bank.eq(read_bank)
        return m
