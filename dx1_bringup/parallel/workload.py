"""`dx1 run encoder|decoder --tp N`: the workload's block split over N chips, in one process or under torchrun.

In one process the N tensor-parallel ranks are a :class:`~..collectives.DeviceGroup` (rank ``r`` opens the
``r`` th of the device strings given, round robin).  Under torchrun each process owns its chip, or with a
board device string (``model:chips=2``) every chip of its own board; the collectives between the processes go
through the torch.distributed process group (:class:`~.distributed.ProcessRank`, gloo), and within a board
over its chip link first (:class:`~.distributed.BoardRank`).  Either way every rank also runs the whole block
on one chip of its own (the first device string) and compares: the output must be the same bit for bit, and
its SHA-256 (printed) must be the same in every run, in one process or across hosts.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass

import numpy as np
from dx1_driver import Device

from ..collectives import DeviceGroup
from ..runtime.graph import Graph, GraphSession
from ..workloads.encoder import BlockSize
from .distributed import BoardRank, ProcessRank
from .problems import BlockProblem, block
from .tensor import shard_block
from .tensor_run import TensorParallel, collective_runner

__all__ = ["TpResult", "digest", "run_block_tp", "run_rank"]


def digest(out: np.ndarray) -> str:
    """The first 16 hex digits of the SHA-256 of an output's bytes."""
    return hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]


@dataclass
class TpResult:
    """One forward pass at TP = ``tp`` beside one chip's: the digests, bit identity and device cycles."""

    tp: int
    digest: str
    one_chip_digest: str
    identical: bool
    cycles: int
    one_chip_cycles: int
    collectives: int
    lines: list[str]
    #: Per rank, its device (string) and the CYCLES of each of its device segments.
    devices: list[str]
    segments: list[list[int]]


def _one_chip(graph: Graph, device: str, x: np.ndarray) -> tuple[np.ndarray, int]:
    dev = Device.open(device)
    try:
        with GraphSession(dev, graph) as session:
            out, stats = session.run({"x": x})
    finally:
        dev.close()
    return out["out"], stats.cycles


def _problem(kind: str, size: BlockSize, seed: int, tp: int) -> BlockProblem:
    problem = block(kind, size, seed)
    shard_block(problem.quant, size, tp, 0)  # a degree that does not divide the block is refused here
    return problem


def _board(devices: list[str]) -> int | None:
    """The chips of a board device string (``model:chips=4``) given alone, else ``None``."""
    found = re.search(r"(?:^|[:,])chips=(\d+)", devices[0]) if len(devices) == 1 else None
    return int(found.group(1)) if found else None


def _one_chip_of(device: str) -> str:
    """The one-chip reference's device string: a board's string with ``chips=1``, any other as it is."""
    return re.sub(r"chips=\d+", "chips=1", device)


def run_block_tp(kind: str, devices: list[str], tp: int, *, size: BlockSize, seed: int = 1) -> TpResult:
    """The block on ``tp`` ranks of one process and on one chip: rank ``r`` on ``devices[r % len(devices)]``,
    or, for one board device string (``model:chips=N``, N = ``tp``), on its chip ``r`` (the collectives over
    its link; one chip is the same string with ``chips=1``).

    Raises
    ------
    ValueError
        A board's chips are not ``tp``.
    """
    problem = _problem(kind, size, seed, tp)
    chips = _board(devices)
    if chips is not None and chips != tp:
        raise ValueError(f"the board {devices[0]!r} has {chips} chips; --tp {tp} needs {tp}")
    one = _one_chip_of(devices[0]) if chips is not None else devices[0]
    want, one_cycles = _one_chip(problem.quant.graph, one, problem.x)
    graphs = [shard_block(problem.quant, size, tp, r) for r in range(tp)]
    ranks = devices[0] if chips is not None else [devices[r % len(devices)] for r in range(tp)]
    with DeviceGroup.open(ranks) as group, TensorParallel(group, graphs) as run:
        names = [d.name for d in group.devs]
        outs, stats = run.run({"x": problem.x})
        over = "over the chip link" if group.has_link else "host-staged: the host's accesses to device memory"
    lines = [f"  rank {r}/{tp}: {names[r]}, {stats.per_rank[r].cycles} cycles, output "
             f"{digest(o['out'])}" for r, o in enumerate(outs)]
    if stats.collective_cycles:
        lines.append(f"  collectives: {stats.collective_cycles} device cycles a pass ({over})")
    same = all(np.array_equal(o["out"], want) for o in outs)
    return TpResult(tp, digest(outs[0]["out"]), digest(want), same, stats.cycles, one_cycles, stats.collectives,
                    lines, names, [s.segment_cycles for s in stats.per_rank])


def run_rank(kind: str, devices: list[str], tp: int, *, size: BlockSize, seed: int = 1) -> TpResult:
    """This torchrun process's ranks of the block at TP = ``tp``, beside one chip's result.

    A process owns one chip (``devices[rank % len(devices)]``), or, given one board device string
    (``model:chips=2``), every chip of its board: ranks ``rank * chips ..`` of the world's, their collectives
    over the board's link and between the processes on gloo (:class:`~.distributed.BoardRank`).

    Raises
    ------
    ValueError
        ``tp`` is not the world size times the chips a process owns.
    """
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    chips = _board(devices) or 1
    if tp != world * chips:
        owns = "one chip" if chips == 1 else f"the {chips} chips of its board"
        raise ValueError(f"under torchrun each process owns {owns}: --tp must be the world size {world} times "
                         f"{chips}, {world * chips}, not {tp}")
    problem = _problem(kind, size, seed, tp)
    one = _one_chip_of(devices[0])
    want, one_cycles = _one_chip(problem.quant.graph, one, problem.x)
    name = devices[rank % len(devices)]
    if chips == 1:
        dev = Device.open(name)
        try:
            me = ProcessRank(dev)
            with GraphSession(dev, shard_block(problem.quant, size, tp, rank),
                              collective=collective_runner(me, world)) as session:
                out, stats = session.run({"x": problem.x})
        finally:
            dev.close()
        outs, segments, names, count, linked = [out], [stats.segment_cycles], [name], me.seq, 0
    else:
        with DeviceGroup.open(name) as group:
            me = ProcessRank(group.devs[0])
            graphs = [shard_block(problem.quant, size, tp, rank * chips + c) for c in range(chips)]
            with TensorParallel(group, graphs, collective_rank=lambda r: BoardRank(
                    r, rank, world, me if r.rank == 0 else None)) as run:
                outs, stats = run.run({"x": problem.x})
            segments = [s.segment_cycles for s in stats.per_rank]
            names = [f"{d.name} (chip {c} of its board)" for c, d in enumerate(group.devs)]
            count, linked = me.seq, stats.collective_cycles
    mine = [(rank * chips + c, socket.gethostname(), os.getpid(), names[c], segments[c], digest(o["out"]),
             bool(np.array_equal(o["out"], want)), linked) for c, o in enumerate(outs)]
    gathered: list[list[tuple] | None] = [None] * world
    dist.all_gather_object(gathered, mine)
    everyone = [entry for entries in gathered for entry in entries]
    # Per device segment the slowest rank's cycles, and the board's link collectives' (the gloo hops take none).
    critical = sum(max(e[4][i] for e in everyone) for i in range(len(segments[0]))) + max(e[7] for e in everyone)
    lines = [f"  rank {r}/{tp} on {host} (pid {pid}): {dev_name}, {sum(seg)} cycles, output {d}"
             f"{'' if ok else ' DIFFERS from one chip'}"
             for r, host, pid, dev_name, seg, d, ok, _ in everyone]
    return TpResult(tp, digest(outs[0]["out"]), digest(want), all(e[6] for e in everyone), critical, one_cycles,
                    count, lines, [f"{e[3]} on {e[1]} (pid {e[2]})" for e in everyone], [list(e[4]) for e in everyone])
