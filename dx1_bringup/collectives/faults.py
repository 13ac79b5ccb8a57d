"""The collectives' fault table: each fault injected into a fresh group, and what every rank saw, when.

``dx1 collectives --faults`` runs :func:`fault_table` on the ``--device`` group: for each fault a group is opened
afresh, one all-reduce runs clean, the fault is injected, and a second all-reduce is timed on every rank's
thread from its start to the error the rank raised (or to its exact result).  The faults:

* ``shape``: the last rank's buffer one element longer (a fingerprint mismatch, before any data moves);
* ``dead chip``: rank 1 stops executing commands (its link queue disabled; a group without a link: its
  transport closed);
* ``frozen simulator``: rank 1's simulator process stopped (SIGSTOP; on a board of chips that is every chip);
* ``killed simulator``: rank 1's simulator process killed (SIGKILL);
* ``CRC within retries``: rank 0's next frames corrupted as often as the link retries (the result stays exact);
* ``CRC past retries``: one corruption more than the retries;
* ``cut link``: the wire leaving rank 0 towards rank 1 cut (the simulated board's CUT; the golden model's
  stand-in is that port held down).

A fault the group cannot have (a simulator's on ``model`` ranks, the link's on a host-staged group) gives a row
saying so.  Every group is closed before the next opens, within its deadline.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dx1_driver import regs

from ..spec import ChipLinkConfig
from .errors import CollectiveError
from .group import DeviceGroup

__all__ = ["FAULTS", "FaultRow", "fault_table", "format_faults"]

FAULTS = ("shape", "dead chip", "frozen simulator", "killed simulator", "CRC within retries", "CRC past retries",
          "cut link")
#: Elements of each rank's buffer (int32): a few link chunks.
COUNT = 1000


@dataclass
class FaultRow:
    """One rank's outcome of one fault: ``outcome`` the error's type and message (or ``exact``), ``seconds``
    from the start of the collective to it."""

    fault: str
    rank: int
    outcome: str
    seconds: float | None

    def to_json(self) -> dict:
        return {"fault": self.fault, "rank": self.rank, "outcome": self.outcome, "seconds": self.seconds}


def _process(dev) -> object | None:
    transport = dev.transport
    board = getattr(transport, "board", None)
    return getattr(board, "process", None) or getattr(transport, "process", None)


def _inject(fault: str, g: DeviceGroup) -> str | None:
    """Inject ``fault`` into the group; why it cannot be, or ``None``."""
    n = g.size
    if fault == "shape":
        return None
    if fault == "dead chip":
        if n < 2:
            return "needs two ranks"
        if g.has_link:
            g.devs[1].queue(0).set_enabled(False)
        else:
            g.devs[1].close()
        return None
    if fault in ("frozen simulator", "killed simulator"):
        process = _process(g.devs[min(1, n - 1)])
        if process is None:
            return "no simulator process (the golden model runs in this process)"
        os.kill(process.pid, signal.SIGSTOP if fault.startswith("frozen") else signal.SIGKILL)
        return None
    if not g.has_link:
        return "no chip-to-chip link (a host-staged group)"
    dev = g.devs[0]
    if fault.startswith("CRC"):
        retries = ChipLinkConfig().retries + (fault == "CRC past retries")
        dev.write_reg(dev.link_base, regs.Link.CONTROL, retries << regs.Link.CONTROL_CORRUPT[0])
        return None
    cut = getattr(dev.transport, "cut", None)
    if cut is not None:
        cut(0)
    else:
        dev.write_reg(dev.link_base, regs.Link.CONTROL, 1 << regs.Link.CONTROL_FORCE_DOWN[0])
    return None


def _outcome(e: CollectiveError) -> str:
    """``CollectiveTimeout about rank 1 at <step>`` (and the command's error code, when one completed in error)."""
    code = re.search(r"failed with ([A-Z_]+) \(0x", str(e))
    about = "the group" if e.rank is None else f"rank {e.rank}"
    return f"{type(e).__name__} about {about} at {e.step}" + (f": {code.group(1)}" if code else "")


def _one(fault: str, open_group: Callable[[], DeviceGroup]) -> list[FaultRow]:
    g = open_group()
    process = _process(g.devs[min(1, g.size - 1)])
    try:
        n = g.size
        rng = np.random.default_rng(1)
        ins = [rng.integers(-2**31, 2**31, COUNT, dtype=np.int64).astype(np.int32) for _ in range(n)]
        expect = np.sum(np.stack(ins).astype(np.int64), axis=0).astype(np.uint32).astype(np.int32)
        shapes = [COUNT] * n
        if fault == "shape":
            shapes[-1] += 1
        bufs = g.alloc(0, shapes=shapes)
        g.write(bufs, [np.resize(x, s) for x, s in zip(ins, shapes, strict=True)])
        if fault != "shape":
            g.all_reduce(g.alloc(8))  # the link's queues and windows exist before the fault
        why = _inject(fault, g)
        if why is not None:
            return [FaultRow(fault, -1, f"n/a: {why}", None)]
        seen: dict[int, tuple[str, float]] = {}

        def timed(rank) -> None:
            start = time.monotonic()
            try:
                rank.all_reduce(bufs[rank.rank])
            except CollectiveError as e:
                seen[rank.rank] = (_outcome(e), time.monotonic() - start)
                raise
            seen[rank.rank] = ("done", time.monotonic() - start)

        start = time.monotonic()
        try:
            g.run(timed)
        except CollectiveError as e:
            for r, err in e.per_rank.items():  # a rank the group gave up on: the group's error, when it did
                seen.setdefault(r, (_outcome(err), time.monotonic() - start))
        rows = []
        for r in range(n):
            outcome, seconds = seen[r]
            if outcome == "done":
                outcome = "exact" if np.array_equal(g.read([bufs[r]])[0], expect) else "WRONG result"
            rows.append(FaultRow(fault, r, outcome, seconds))
        return rows
    finally:
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
        g.close()


def fault_table(devices: list[str], *, timeout: float, faults: tuple[str, ...] = FAULTS,
                progress: Callable[[str], None] | None = None) -> list[FaultRow]:
    """Every fault of ``faults`` on a fresh group of ``devices`` (with waits of ``timeout`` seconds)."""
    rows: list[FaultRow] = []
    for i, fault in enumerate(faults, 1):
        if progress:
            progress(f"[{i}/{len(faults)}] {fault}")
        rows += _one(fault, lambda: DeviceGroup.open(devices, timeout=timeout))
    return rows


def format_faults(devices: list[str], timeout: float, rows: list[FaultRow], width: int = 110) -> str:
    """The table: fault, rank, seconds to the outcome, the outcome (cut to ``width`` characters)."""
    lines = [f"# dx1 collectives --faults: all_reduce of {COUNT} int32 on {','.join(devices)}, deadline {timeout:g} s",
             f"# {'fault':<20} {'rank':>4} {'seconds':>8}  outcome"]
    for row in rows:
        rank = "-" if row.rank < 0 else str(row.rank)
        seconds = "-" if row.seconds is None else f"{row.seconds:.3f}"
        outcome = row.outcome if len(row.outcome) <= width else row.outcome[:width - 3] + "..."
        lines.append(f"  {row.fault:<20} {rank:>4} {seconds:>8}  {outcome}")
    return "\n".join(lines)
