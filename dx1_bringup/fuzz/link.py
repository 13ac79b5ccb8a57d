"""Differential fuzzing of the chip link: seeded random SENDs on two boards (``model:chips=N`` against another
board of as many chips, the golden model first), every chip's results compared after each batch.

Each chip sends from its source area (random bytes) into its neighbours' receive areas; a neighbour's
receive area has one half per port it arrives on (from the previous chip: the upper half, from the next:
the lower), so that no two senders write the same bytes and the outcome does not depend on which chip's
frames land first.  A batch is a few SENDs a chip on tile 0's queue (WRITE and ADD, both ports, every
length from 8 bytes to several frames), a share of them refused on purpose (each check of SEND in
``CHECK_ORDER``, a destination outside the peer's link window: REMOTE_WINDOW), and now and then a
fault for the batch: a port held down (LINK_DOWN) or injected CRC errors (``CONTROL.corrupt`` within and
past the retries: LINK_CRC).  The chips' queues are published in a random order.  After each batch both
boards must agree on every completion's status, every receive area, the first semaphores, and the exact
link counters (TX_PACKETS, RX_PACKETS, RETRIES, CRC_ERRORS) and CONTROL of every port.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from dx1_driver import Device, DriverError, regs

from ..replay import Recorder

__all__ = ["LinkFuzzReport", "open_board", "link_fuzz", "SRC", "RX", "AREA"]

#: Each chip's source area, and its receive area (two halves, one a port), ``AREA`` bytes each.
SRC = 0x10000
RX = 0x20000
AREA = 0x4000
_SEMS = 4
_COUNTERS = ("TX_PACKETS", "RX_PACKETS", "RETRIES", "CRC_ERRORS")


def open_board(device: str) -> list[Device]:
    """Every chip of the board ``device`` opens (its transport's ``board_transports``), in rank order."""
    chips = Device.open_board(device)
    first = chips[0]
    if len(chips) != first.caps.chips or first.caps.link_ports < 2:
        for chip in chips:
            chip.close()
        raise ValueError(f"device {device!r} is not a board of chips wired by the link (it opened {len(chips)} "
                         f"chip(s), CHIP_ID says {first.caps.chips}, CAPS.link_ports {first.caps.link_ports})")
    return chips


@dataclass
class LinkFuzzReport:
    """What ran and whether the boards agreed: SENDs by outcome, batches, and the first disagreement."""

    devices: tuple[str, str]
    chips: int
    seed: int
    commands: int = 0
    batches: int = 0
    outcomes: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    mismatch: str | None = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None


def _setup(chips: list[Device], rng: np.random.Generator) -> None:
    for chip in chips:
        chip.write_mem(SRC, rng.integers(0, 256, AREA, dtype=np.uint8).tobytes())
        chip.write_mem(RX, bytes(AREA))
        chip.write_reg(chip.link_base, regs.Link.WINDOW_BASE, RX)
        chip.write_reg(chip.link_base, regs.Link.WINDOW_LIMIT, RX + AREA)
        chip.queue(0).set_dma_window(0, chip.caps.mem_bytes)


def _draw_send(rng: np.random.Generator, tag: int, retries: int) -> tuple[bytes, str]:
    """One SEND and what it is drawn to test."""
    port = int(rng.integers(0, 2))
    half = AREA // 2
    length = 8 * int(rng.choice([1, 2, 31, 32, 33, 64, 100, half // 8 - 1]))
    src = SRC + 8 * int(rng.integers(0, (AREA - length) // 8 + 1))
    base = RX + (half if port == 0 else 0)  # port 0 arrives from the previous chip: the upper half
    dst = base + 8 * int(rng.integers(0, (half - length) // 8 + 1))
    fields = {"op": int(rng.integers(0, 2)), "port": port, "src_addr": src, "dst_addr": dst, "length": length,
              "sem": int(rng.integers(0, _SEMS)), "count": int(rng.integers(0, 3))}
    kind = "good"
    if rng.random() < 0.3:
        kind = str(rng.choice(["reserved", "length0", "op", "port", "sem", "misaligned", "dma_window", "remote"]))
        if kind == "length0":
            fields["length"] = 0
        elif kind == "op":
            fields["op"] = int(rng.integers(2, 16))
        elif kind == "port":
            fields["port"] = int(rng.integers(2, 16))
        elif kind == "sem":
            fields["sem"] = 255
        elif kind == "misaligned":
            fields["dst_addr"] += 4
        elif kind == "dma_window":
            fields["src_addr"] = 0xFFFF_FFF8
        elif kind == "remote":
            fields["dst_addr"] = RX + AREA - 8 if length > 8 else RX - 8
    cmd = regs.send(tag=tag, **fields)
    if kind == "reserved":
        cmd = (int.from_bytes(cmd, "little") | 1 << 48).to_bytes(len(cmd), "little")
    return cmd, kind


def _state(chips: list[Device]) -> list[dict]:
    out = []
    for chip in chips:
        base = chip.link_base
        out.append({
            "rx": chip.read_mem(RX, AREA),
            "sems": [chip.semaphore(i) for i in range(_SEMS)],
            "link": {f"{name}{p}": chip.read_reg(base, getattr(regs.Link, name) + 4 * p)
                     for name in (*_COUNTERS, "CONTROL") for p in (0, 1)},
        })
    return out


def _differ(a: list[dict], b: list[dict]) -> str | None:
    for rank, (x, y) in enumerate(zip(a, b, strict=True)):
        if x["rx"] != y["rx"]:
            at = next(i for i in range(AREA) if x["rx"][i] != y["rx"][i])
            return f"chip {rank}: receive area byte 0x{RX + at:x} reads 0x{x['rx'][at]:02x} and 0x{y['rx'][at]:02x}"
        if x["sems"] != y["sems"]:
            return f"chip {rank}: semaphores 0..{_SEMS - 1} read {x['sems']} and {y['sems']}"
        for name, value in x["link"].items():
            if value != y["link"][name]:
                return f"chip {rank}: LINK.{name} reads {value} and {y['link'][name]}"
    return None


def _fault(chips: list[Device], rng: np.random.Generator, retries: int) -> tuple[str, Device, int] | None:
    """A fault for one batch, or None: a port held down, or CRC errors injected on one."""
    roll = rng.random()
    if roll > 0.3:
        return None
    rank, port = int(rng.integers(0, len(chips))), int(rng.integers(0, 2))
    chip = chips[rank]
    if roll < 0.1:
        chip.write_reg(chip.link_base, regs.Link.CONTROL + 4 * port, 1 << regs.Link.CONTROL_FORCE_DOWN[0])
        return "force_down", chip, port
    n = int(rng.integers(1, retries + 3))
    chip.write_reg(chip.link_base, regs.Link.CONTROL + 4 * port, n << regs.Link.CONTROL_CORRUPT[0])
    return "corrupt" if n <= retries else "corrupt past the retries", chip, port


def link_fuzz(devices: tuple[str, str], *, commands: int = 200, seed: int = 1, per_chip: int = 4,
              timeout: float = 10.0, capture: str | Path | None = None) -> LinkFuzzReport:
    """Run seeded random SEND batches on the boards ``devices`` (the reference first) and compare them.

    ``capture``: record the reference board's whole session (every chip) into this capture file, which
    ``dx1 replay FILE --device B`` replays on the other board (its completions and receive areas; the link
    counters are register reads, which a capture does not hold).

    Raises
    ------
    ValueError
        A device string is not a board, or the two boards differ in chip count or link parameters.
    """
    boards = [open_board(d) for d in devices]
    recorder = None
    try:
        a, b = boards
        if capture is not None:
            recorder = Recorder(a, capture, note=f"dx1 fuzz-link --seed {seed} on {devices[0]}")
        if len(a) != len(b) or (a[0].caps.link_width, a[0].caps.link_latency) != (b[0].caps.link_width,
                                                                                   b[0].caps.link_latency):
            raise ValueError(f"the boards {devices[0]!r} and {devices[1]!r} differ: {len(a)} and {len(b)} chips, "
                             f"links of {a[0].caps.link_width} and {b[0].caps.link_width} bytes a cycle")
        link_caps = a[0].read_reg(a[0].link_base, regs.Link.CAPS)
        retries = regs.get_field(link_caps, regs.Link.CAPS_RETRIES)
        report = LinkFuzzReport(tuple(devices), len(a), seed)
        setup_rng = [np.random.default_rng(seed) for _ in boards]
        for chips, rng in zip(boards, setup_rng, strict=True):
            _setup(chips, rng)
        rng = np.random.default_rng(seed + 1)
        while report.commands < commands and report.ok:
            batch = {rank: [_draw_send(rng, (report.commands + rank * per_chip + i) & 0xFFFF, retries)
                            for i in range(per_chip)] for rank in range(len(a))}
            order = [int(r) for r in rng.permutation(len(a))]
            fault_seed = int(rng.integers(0, 2**32))
            statuses = []
            for name, chips in zip(devices, boards, strict=True):
                fault = _fault(chips, np.random.default_rng(fault_seed), retries)
                try:
                    for rank in order:
                        chips[rank].queue(0).submit([cmd for cmd, _ in batch[rank]], timeout=timeout)
                    done = {rank: [c.status for c in chips[rank].queue(0).wait(per_chip, timeout=timeout,
                                                                               check=False)] for rank in order}
                except DriverError as e:  # a board that fails where the other does not is a disagreement
                    report.mismatch = f"batch {report.batches}: {name} failed: {type(e).__name__}: {e}"
                    return report
                statuses.append(done)
                if fault is not None:
                    kind, chip, port = fault
                    if kind == "force_down":
                        chip.write_reg(chip.link_base, regs.Link.CONTROL + 4 * port, 0)
            if fault is not None:
                report.faults[fault[0]] += 1
            for rank in range(len(a)):
                for i, (x, y) in enumerate(zip(statuses[0][rank], statuses[1][rank], strict=True)):
                    report.outcomes[regs.ErrorCode(x).name] += 1
                    if x != y and report.ok:
                        report.mismatch = (f"batch {report.batches}, chip {rank}, SEND {i} ({batch[rank][i][1]}): "
                                           f"{regs.ErrorCode(x).name} and {regs.ErrorCode(y).name}")
            report.mismatch = report.mismatch or _differ(_state(a), _state(b))
            report.commands += per_chip * len(a)
            report.batches += 1
        return report
    finally:
        if recorder is not None:
            recorder.close()
        for chips in boards:
            for chip in chips:
                chip.close()
