"""Cycle costs of the dx1-mini units, one definition for the golden model, the planner and the predictor.

Each constant was read off the RTL generator (``dx1_bringup/gateware``) and fitted to the SoC's
TRACE events on Verilator (``dx1 gemm`` and GEMM-only streams, one and two tiles):

* DMA (``gateware/dma/``): a LOAD or STORE is cut into one burst per outer row (more where a row
  crosses a 4 KiB page or exceeds 256 beats of 8 bytes); one command runs at a time per tile.  A STORE
  costs ``store_fixed + store_burst * bursts + beats`` exactly, a LOAD ``load_fixed + load_burst * bursts
  + load_beat * beats`` (least squares over the TRACE of single-tile LOADs), each when it has its memory
  banks to itself.  The memory's banks (4 KiB pages interleaved) serve one burst per direction at a time,
  holding the bank for a cycle plus one per beat (:func:`move_bank_runs`); what other bursts in the same
  bank (other tiles' DMA, command fetches) add is the schedule's business (:mod:`.schedule`).  BUSY_LOAD
  and BUSY_STORE count the cycles a burst is open, ``load_idle`` and ``store_idle`` cycles fewer than the
  command takes.  ``contention`` is the planner's average: how much longer a LOAD takes per other tile
  loading at the same time.
* GEMM (``gateware/tile.py``): the array streams ``m`` scratchpad rows per reduction chunk; two weight
  banks ping-pong, so chunk ``j`` starts no earlier than ``bank_cycle`` cycles plus the rows of chunk
  ``j-2`` after chunk ``j-2`` started (a bank's load, stream and drain); the first chunk after idle
  starts ``gemm_fill`` cycles after dispatch and a GEMM completes ``gemm_drain`` cycles after its last
  row entered.
* POSTOP: waits for earlier GEMMs, starts ``postop_fill`` cycles after dispatch at the earliest and
  takes ``rows + postop_drain`` cycles.
* Command processor (``gateware/command/``): consecutive dispatches are at least ``dispatch_gap``
  cycles apart (fetch burst plus ``DECODE_STAGES``); a command's fetch, one read burst of its beats from
  the command ring, asks for the memory ``fetch_lead`` cycles after the command before it dispatched; the
  DMA takes its next command ``dma_handover`` cycles before the previous one's completion is written; the
  tile core holds ``core_slots`` commands; FENCE, SIGNAL, WAIT and NOP take ``sync_cycles``.
* Link collectives (:mod:`.collectives`, fitted on ``dx1 collectives --device sim:chips=2`` and ``4``): a
  collective costs ``link_launch`` cycles beyond its commands (the host's semaphore and doorbell writes
  before its first dispatch, the completion wait after its last), and each round of its barrier's token
  ``token_round`` beyond the SEND and the WAIT (a token's SEND and WAIT issue back to back, nothing to hide
  them behind, where a data step's overlap its neighbours' streaming).
* Host (``run_gemm`` through the driver on the simulated SoC, whose memory requests take the backdoor and
  cost no cycles): every register access on the AXI4-Lite port costs ``host_register`` cycles, during
  which the device runs on.  A run's CYCLES (tile 0's counter, read first) span the PERF snapshots of
  every tile used (:data:`PERF_SNAPSHOT_WORDS` register reads each; the other tiles read theirs at the
  same offsets), tile 0's doorbell (one register write; each further tile's doorbell follows one write
  later, which is when that tile starts) and ``host_fixed`` cycles from a doorbell to the first dispatch
  and from the last completion to the interrupt wait that sees it.  The completion wait's own register
  writes (one IRQ_STATUS clear per wake-up) overlap the running device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec import BUS_BYTES, PAGE_BYTES, TABLE_ENTRIES, Opcode, VectorOp, ceil_div, register_map

__all__ = ["COSTS", "PERF_SNAPSHOT_WORDS", "Costs", "move_bank_runs", "move_bursts"]

#: Bursts carry at most MAX_BURST beats and never cross a PAGE_BYTES boundary (gateware/dma/burst.py).
MAX_BURST = 256
#: Longest write burst of a COPY (half the DMA's data FIFO).
COPY_BURST = 16


def _perf_snapshot_words() -> int:
    perf = next(b for b in register_map().blocks if b.name == "PERF0")
    return (perf.reg("TABLE_OVERFLOWS").offset - perf.reg("CYCLES").offset) // 4 + 1


#: Registers one PERF snapshot reads (CYCLES to TABLE_OVERFLOWS, as ``dx1_driver.Perf.read`` does).
PERF_SNAPSHOT_WORDS = _perf_snapshot_words()


@dataclass(frozen=True)
class Costs:
    """The fitted cycle costs (see the module docstring for what each one is)."""

    load_fixed: float = 12.26
    load_burst: float = 1.08
    load_beat: float = 0.994
    store_fixed: float = 10.0
    store_burst: float = 2.0
    store_beat: float = 1.0
    contention: float = 0.35
    load_idle: float = 9.0
    store_idle: float = 6.0
    gemm_fill: int = 18
    gemm_drain: int = 18
    bank_cycle: int = 26
    postop_fill: int = 7
    postop_drain: int = 8
    dispatch_gap: int = 13
    fetch_lead: int = 2
    dma_handover: int = 2
    core_slots: int = 4
    sync_cycles: int = 3
    link_launch: int = 47
    token_round: int = 18
    vector_fill: int = 1
    vector_drain: int = 12
    vector_reduce: int = 7
    divider_steps: int = 21
    host_register: int = 4
    host_fixed: int = 12

    def host_cycles(self, tiles: int) -> int:
        """The host's part of the CYCLES of a run on ``tiles`` tiles: snapshots, tile 0's doorbell, latencies."""
        return self.host_fixed + self.host_register * (PERF_SNAPSHOT_WORDS * tiles + 1) if tiles else 0

    def load_cycles(self, bursts, beats):
        """Cycles of a LOAD (or a COPY's read side) of ``bursts`` bursts and ``beats`` beats; numbers or arrays."""
        return self.load_fixed + self.load_burst * bursts + self.load_beat * beats

    def store_cycles(self, bursts, beats):
        """Cycles of a STORE of ``bursts`` bursts and ``beats`` beats; numbers or arrays."""
        return self.store_fixed + self.store_burst * bursts + self.store_beat * beats

    def copy_cycles(self, beats):
        """Cycles of a COPY of ``beats`` beats: read and write bursts of ``COPY_BURST`` beats; arrays work."""
        bursts = ceil_div(np.asarray(beats), COPY_BURST)
        return self.load_cycles(bursts, beats) + self.store_cycles(bursts, beats) - self.store_fixed

    def gemm_cycles(self, m, k_chunks):
        """Cycles of one GEMM run alone: fill, ``k_chunks`` chunks of ``m`` rows (bank-bound when short), drain."""
        m, k_chunks = np.asarray(m), np.asarray(k_chunks)
        pair = np.maximum(2 * m, m + self.bank_cycle)  # two chunks, one per bank
        return self.gemm_fill + self.gemm_drain + m + (k_chunks - 1) // 2 * pair + (k_chunks - 1) % 2 * m

    def gemm_period(self, m, k_chunks):
        """Cycles a GEMM adds to a run of back-to-back GEMMs (the steady state of the two banks); numbers or arrays."""
        return k_chunks * np.maximum(m, (m + self.bank_cycle) / 2)

    def postop_cycles(self, rows):
        """Cycles of one POSTOP of ``rows`` rows once the array has drained; numbers or arrays."""
        return rows + self.postop_drain

    def vector_command_cycles(self, f: dict[str, int], array: int) -> int:
        """Cycles the vector unit is busy with one VECTOR, TABLE or TRANSPOSE command (decoded fields ``f``),
        fitted to the RTL's BUSY_VECTOR.

        VECTOR: ``vector_fill``, a step (one local row of every operand) a cycle, then ``vector_drain`` (the
        read and the lanes), ``vector_reduce`` more for a reduction (the reducer); RECIP and ISQRT run one
        step at a time, ``divider_steps`` each, with no drain.  A step that reads a row an earlier step of
        the command still has to write waits for it: not counted.  TABLE: ``vector_fill`` and an entry a
        cycle.  TRANSPOSE: per block ``array`` rows read, one cycle for the last to arrive, ``array`` written.
        """
        opcode = f["opcode"]
        if opcode == Opcode.TABLE:
            return self.vector_fill + TABLE_ENTRIES
        if opcode == Opcode.TRANSPOSE:
            return f["blocks"] * (2 * array + 1)
        steps = f["rows"] * f["cols"]
        if f["vop"] in (VectorOp.RECIP, VectorOp.ISQRT):
            return self.vector_fill + steps * self.divider_steps
        reduce = self.vector_reduce if f["vop"] in (VectorOp.RMAX, VectorOp.RSUM, VectorOp.RSUMSQ) else 0
        return self.vector_fill + steps + self.vector_drain + reduce


#: The costs every user shares.
COSTS = Costs()


def move_bursts(mem_addr, mem_stride, rows, seg_bytes):
    """AXI bursts of a 2-D move: one per outer row, cut at 4 KiB pages and at 256 beats; arrays work.

    Parameters
    ----------
    mem_addr, mem_stride, rows:
        The move's first device-memory address, the bytes between outer rows and the outer row count.
    seg_bytes:
        Bytes of one outer row (``cols`` local rows).

    Returns
    -------
    int or ndarray
        The bursts the DMA issues.  Exact when the stride is a multiple of 4 KiB or the rows stay inside
        pages; otherwise the page crossings are counted from the first row's offset and the stride.
    """
    mem_addr, mem_stride, rows, seg_bytes = (np.asarray(x, dtype=np.int64)
                                               for x in (mem_addr, mem_stride, rows, seg_bytes))
    max_bytes = MAX_BURST * BUS_BYTES
    per_row = ceil_div(seg_bytes, max_bytes)
    # Page crossings: count, over every outer row, the pages its bytes touch beyond the first.
    scalar = mem_addr.ndim == 0
    addr, stride, n, seg = (np.atleast_1d(x) for x in (mem_addr, mem_stride, rows, seg_bytes))
    crossings = np.zeros(addr.shape, dtype=np.int64)
    for i in range(addr.size):
        starts = addr[i] + stride[i] * np.arange(n[i])
        crossings[i] = int(((starts + seg[i] - 1) // PAGE_BYTES - starts // PAGE_BYTES).sum())
    total = rows * per_row + (crossings[0] if scalar else crossings)
    return int(total) if scalar else total


def move_bank_runs(mem_addr: int, mem_stride: int, rows: int, seg_bytes: int, banks: int,
                   max_beats: int = MAX_BURST) -> tuple[np.ndarray, np.ndarray]:
    """The banks a 2-D move's bursts go to, in the order it issues them, and the cycles each holds its bank.

    The memory (``gateware/memory.py``) interleaves its ``banks`` banks by 4 KiB page and serves one
    burst per direction and bank at a time, taking a cycle for the address and then one beat a cycle.
    The move's bursts are cut as :func:`move_bursts` counts them (``max_beats`` at most: 256 for LOAD and
    STORE, :data:`COPY_BURST` for a COPY).

    Returns
    -------
    (ndarray, ndarray, ndarray)
        Runs of consecutive bursts to one bank: each run's bank, the cycles its bursts hold that bank
        (their beats plus one per burst) and how many bursts it has.
    """
    starts = mem_addr + mem_stride * np.arange(rows, dtype=np.int64)
    left = np.full(rows, seg_bytes, dtype=np.int64)
    order = np.arange(rows, dtype=np.int64) * (seg_bytes // PAGE_BYTES + 2)  # pieces of a row stay together
    max_bytes = max_beats * BUS_BYTES
    keys, bank_ids, cycles, bursts = [], [], [], []
    while len(starts):
        piece = np.minimum(left, (starts // PAGE_BYTES + 1) * PAGE_BYTES - starts)
        keys.append(order)
        bank_ids.append((starts // PAGE_BYTES) % banks)
        bursts.append(ceil_div(piece, max_bytes))
        cycles.append(ceil_div(piece, BUS_BYTES) + bursts[-1])
        starts, left, order = starts + piece, left - piece, order + 1
        keep = left > 0
        starts, left, order = starts[keep], left[keep], order[keep]
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    sequence = np.argsort(np.concatenate(keys), kind="stable")
    bank_ids = np.concatenate(bank_ids)[sequence]
    first = np.flatnonzero(np.r_[True, bank_ids[1:] != bank_ids[:-1]])
    return (bank_ids[first], np.add.reduceat(np.concatenate(cycles)[sequence].astype(float), first),
            np.add.reduceat(np.concatenate(bursts)[sequence].astype(float), first))
