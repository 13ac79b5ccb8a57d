"""The tile core's weight loader: for each reduction chunk of a GEMM, ``size`` scratchpad rows into a free bank."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import TileConfig
from .issue import GEMM_QUEUE_DEPTH

__all__ = ["WeightLoader", "load_job_layout"]


def load_job_layout(config: TileConfig) -> data.StructLayout:
    """A GEMM as the weight loader needs it: the first B row and the number of reduction chunks."""
    return data.StructLayout({"b_addr": unsigned(exact_log2(config.spm_rows)), "k_chunks": 16})


class WeightLoader(wiring.Component):
    """Loads the weights of queued GEMM jobs into the array's banks, alternating banks chunk by chunk.

    A job (``job``, pushed with ``push`` while ``room``) loads ``k_chunks``
    blocks of ``size`` rows from ``b_addr`` on.  A block starts once its bank
    is empty (``bank_empty``): its rows are read last-first on the scratchpad
    read port (``spm_addr`` in the cycles of ``issue``, a row a cycle, ``spm_data``
    a cycle later), so that after ``size`` shifts row k of the bank holds
    ``B[k]``.  The rows go to the array's weight port (``w_*``); the bank is
    reported LOADING at the first row (``load_start``) and FULL as the last
    enters (``loaded``).  The next job's first block follows its last at once.

    Parameters
    ----------
    config:
        The tile's sizes.
    """

    def __init__(self, config: TileConfig):
        self.config = config
        n, spm_bits = config.array, exact_log2(config.spm_rows)
        super().__init__({
            "job": In(load_job_layout(config)), "push": In(1), "room": Out(1),
            "bank_empty": In(2),
            "load_start": Out(1), "load_bank": Out(1), "loaded": Out(1), "loaded_bank": Out(1),
            "issue": Out(1), "spm_addr": Out(spm_bits), "spm_data": In(8 * n),
            "w_load": Out(1), "w_bank": Out(1), "w_row": Out(8 * n),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.array
        layout = load_job_layout(self.config)
        m.submodules.load_q = queue = SyncFIFO(width=layout.size, depth=GEMM_QUEUE_DEPTH)
        m.d.comb += [queue.w_data.eq(self.job), queue.w_en.eq(self.push), self.room.eq(queue.w_rdy)]
        job = data.View(layout, queue.r_data)
        active = Signal()
        addr = Signal.like(self.spm_addr)
        row = Signal(range(n))
        left = Signal(16)
        bank = Signal()
        issue = self.issue
        m.d.comb += [issue.eq(active & ((row != 0) | Mux(bank, self.bank_empty[1], self.bank_empty[0]))),
                     self.load_bank.eq(bank)]
        with m.If(issue):
            # Rows go in last-first: after n shifts row k of the bank holds B[k].
            m.d.comb += [self.spm_addr.eq(addr + (n - 1) - row), self.load_start.eq(row == 0)]
            m.d.sync += row.eq(row + 1)
            with m.If(row == n - 1):
                m.d.sync += [row.eq(0), bank.eq(~bank), addr.eq(addr + n), left.eq(left - 1)]
                with m.If(left == 1):
                    m.d.sync += active.eq(0)
        finishing = Signal()
        m.d.comb += finishing.eq(issue & (row == n - 1) & (left == 1))
        with m.If(queue.r_rdy & (~active | finishing)):
            m.d.comb += queue.r_en.eq(1)
            m.d.sync += [active.eq(1), addr.eq(job.b_addr), left.eq(job.k_chunks), row.eq(0)]
        last = Signal()
        m.d.sync += [self.w_load.eq(issue), self.w_bank.eq(bank), last.eq(issue & (row == n - 1))]
        m.d.comb += [self.w_row.eq(self.spm_data), self.loaded.eq(self.w_load & last),
                     self.loaded_bank.eq(self.w_bank)]
        return m
