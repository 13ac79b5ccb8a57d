"""Memory-aware placement: choose the tensor- and pipeline-parallel degrees of a model over ``chips`` chips.

For every tensor-parallel degree ``tp`` that divides the heads and the MLP width, one layer's rank-0 graph
(:func:`~.tensor.shard_block`) is lowered on a scratch golden model with the chip's tiles and memory banks
but room for anything: that gives its resident weights (constants, biases, kernel tables, padded as the
session lays them out), its activation arena and the performance model's cycles of one forward pass
(:func:`~dx1_bringup.perfmodel.predict` over its command streams).  Every ``pp`` with ``tp x pp <= chips``
and at most one stage a layer is then a candidate: a stage holds ``ceil(layers / pp)`` layers, each with its
own session (weights and arena).

What does not fit a chip's device memory streams from host memory (offload): the chip keeps as many whole
layers (weights and activations) as fit beside one more layer's slot, and every micro-batch writes the other
layers' weights into that slot again, one after another; a shard that does not fit a chip even alone
cannot run there.  Its cost is the bytes streamed per micro-batch, at least
``bytes / BUS_BYTES`` device cycles on the SoC's host memory port (one bus word a cycle), and at the host
link's bandwidth (``host_mbps``) seconds.  Offload counts only where there is no choice: a plan whose
weights fit wins over any that streams, whatever the cycles; among those that fit (or, when none does, among
all), the fewest cycles for ``micro`` micro-batches wins, ``(micro + pp - 1) x`` the stage's cycles, ties to
fewer chips.  A host-staged all-reduce costs no device cycles (host memory accesses only); a chip link's
transfers are not costed yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dx1_driver import Device

from ..perfmodel import predict
from ..runtime.graph import GraphSession
from ..runtime.operands import BUS_BYTES
from ..spec import TileConfig, ceil_div
from ..workloads.encoder import BlockSize
from .pipeline import bubble_formula
from .problems import block
from .tensor import shard_block

__all__ = ["MODELS", "ModelSpec", "Candidate", "Plan", "plan", "plan_table"]


@dataclass(frozen=True)
class ModelSpec:
    """A stack of ``layers`` blocks of ``kind`` at ``size``."""

    name: str
    kind: str
    size: BlockSize
    layers: int

    def __str__(self) -> str:
        return f"{self.name}: {self.layers} x {self.kind} block ({self.size})"


#: The models ``dx1 plan`` knows.
MODELS = {m.name: m for m in (
    ModelSpec("encoder-small", "encoder", BlockSize(64, 128, 4, 512), 4),
    ModelSpec("decoder-large", "decoder", BlockSize(64, 256, 8, 1024), 8),
)}


@dataclass(frozen=True)
class LayerCost:
    """One layer's rank-0 shard at a tensor-parallel degree: device memory and predicted cycles."""

    tp: int
    weight_bytes: int
    arena_bytes: int
    cycles: float


@dataclass(frozen=True)
class Candidate:
    """A placement: degrees, what a chip holds, and what a forward pass costs."""

    tp: int
    pp: int
    layers_per_stage: int
    resident_bytes: int
    offload_bytes: int
    stage_cycles: float
    offload_cycles: float
    micro: int
    #: Whether one layer's shard fits a chip at all (else the placement cannot run).
    feasible: bool = True

    @property
    def chips(self) -> int:
        return self.tp * self.pp

    @property
    def fits(self) -> bool:
        return self.offload_bytes == 0

    @property
    def batch_cycles(self) -> float:
        """Cycles for ``micro`` micro-batches: ``(micro + pp - 1) x`` the slowest stage's (offload included)."""
        return (self.micro + self.pp - 1) * (self.stage_cycles + self.offload_cycles)

    @property
    def bubble(self) -> float:
        return bubble_formula(self.pp, self.micro)


@dataclass
class Plan:
    """The chosen candidate among all, and why."""

    model: ModelSpec
    chips: int
    mem_bytes: int
    host_mbps: float
    candidates: list[Candidate]
    chosen: Candidate
    layer_costs: dict[int, LayerCost]


def _layer_cost(model: ModelSpec, tp: int, caps_device: str, seed: int) -> LayerCost:
    problem = block(model.kind, model.size, seed)
    graph = shard_block(problem.quant, model.size, tp, 0)
    dev = Device.open(caps_device)
    try:
        caps = dev.caps
        tile = TileConfig(caps.array, caps.spm_rows, caps.acc_rows, caps.vector)
        with GraphSession(dev, graph, collective=lambda *_: None) as session:
            cycles = sum(predict(seg.commands, tile, banks=caps.mem_banks).total
                         for seg in session.segments if seg.device)
            return LayerCost(tp, session.weight_bytes, session.arena.size, cycles)
    finally:
        dev.close()


def _degrees(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def plan(model: ModelSpec, chips: int, *, device: str = "model", micro: int = 8, host_mbps: float = 98.0,
         seed: int = 1) -> Plan:
    """Every (tp, pp) placement of ``model`` on ``chips`` chips like ``device``, costed, and the chosen one.

    Raises
    ------
    ValueError
        ``chips`` or ``micro`` is not a positive integer.
    """
    for name, value in (("chips", chips), ("micro-batches", micro)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"the {name} must be a positive integer, not {value!r}")
    dev = Device.open(device)
    try:
        caps = dev.caps
    finally:
        dev.close()
    scratch = f"model:tiles={caps.tiles},banks={caps.mem_banks},mem_mib=64"
    costs: dict[int, LayerCost] = {}
    candidates = []
    for tp in _degrees(math.gcd(model.size.heads, model.size.ffn)):
        if tp > chips:
            continue
        costs[tp] = cost = _layer_cost(model, tp, scratch, seed)
        for pp in range(1, min(chips // tp, model.layers) + 1):
            per_stage = ceil_div(model.layers, pp)
            per_layer = cost.weight_bytes + cost.arena_bytes
            io = 4 * model.size.seq * model.size.model  # the stage's activation buffer (float32)
            if per_stage * per_layer + io <= caps.mem_bytes:
                resident, offload, feasible = per_stage * per_layer + io, 0, True
            else:
                slots = (caps.mem_bytes - io) // per_layer
                feasible = slots >= 1
                offload = (per_stage - max(slots - 1, 0)) * cost.weight_bytes
                resident = max(slots, 1) * per_layer + io
            candidates.append(Candidate(tp, pp, per_stage, resident, offload, per_stage * cost.cycles,
                                        offload / BUS_BYTES, micro, feasible))
    runnable = [c for c in candidates if c.feasible]
    if not runnable:
        raise ValueError(f"{model.name}: no layer's shard fits a chip of {caps.mem_bytes} bytes even alone, at any "
                         f"tensor-parallel degree up to {chips}")
    fitting = [c for c in runnable if c.fits]
    chosen = min(fitting or runnable, key=lambda c: (c.batch_cycles, c.chips))
    return Plan(model, chips, caps.mem_bytes, host_mbps, candidates, chosen, costs)


def plan_table(p: Plan) -> str:
    """The plan as text: the model, every candidate, the choice and its reasons."""
    # The speedup is over one chip with memory for everything: every layer's TP = 1 cycles, one micro-batch
    # after another.
    base = p.model.layers * p.layer_costs[1].cycles * p.chosen.micro
    lines = [f"dx1 plan {p.model.name}: {p.model}; {p.chips} chip(s) of {p.mem_bytes // 1024} KiB device memory, "
             f"{p.chosen.micro} micro-batches",
             "  one layer's shard (rank 0), lowered on a scratch golden model:"]
    for tp, c in sorted(p.layer_costs.items()):
        lines.append(f"    tp {tp}: weights {c.weight_bytes / 1024:8.1f} KiB, activations {c.arena_bytes / 1024:6.1f} "
                     f"KiB, {c.cycles:10.0f} predicted cycles")
    lines.append(f"  {'tp':>3} {'pp':>3} {'chips':>5} {'layers/stage':>12} {'resident/chip':>14} {'offload/mb':>11} "
                 f"{'stage cyc':>10} {'offload cyc':>11} {'bubble':>7} {'batch cycles':>13} {'speedup':>8}"
                 "  (over one chip with memory for all)")
    for c in sorted(p.candidates, key=lambda c: (c.chips, c.tp)):
        speed = f"{base / c.batch_cycles:7.2f}x" if c.feasible else "       -"
        mark = "  <- chosen" if c is p.chosen else ("" if c.feasible else "  (a layer's shard does not fit a chip)")
        lines.append(f"  {c.tp:>3} {c.pp:>3} {c.chips:>5} {c.layers_per_stage:>12} "
                     f"{c.resident_bytes / 1024:>10.1f} KiB {c.offload_bytes / 1024:>7.1f} KiB "
                     f"{c.stage_cycles:>10.0f} {c.offload_cycles:>11.0f} {c.bubble:>6.1%} {c.batch_cycles:>13.0f} "
                     f"{speed}{mark}")
    c = p.chosen
    why = (f"  chosen: TP {c.tp} x PP {c.pp} on {c.chips} of {p.chips} chip(s): ")
    if c.fits:
        why += (f"every weight resident ({c.resident_bytes / 1024:.1f} KiB a chip of {p.mem_bytes // 1024}); "
                f"fewest cycles for {c.micro} micro-batches among the placements that fit")
    else:
        seconds = c.offload_bytes / (p.host_mbps * 1e6)
        why += (f"no placement fits {p.chips} chip(s), so weights stream from host memory: "
                f"{c.offload_bytes / 1024:.1f} KiB a chip per micro-batch, at least {c.offload_cycles:.0f} device "
                f"cycles on the host memory port ({BUS_BYTES} B a cycle; "
                f"{c.offload_cycles / max(c.stage_cycles, 1):.0%} of the stage's compute) and "
                f"{seconds * 1e3:.1f} ms at {p.host_mbps:g} MB/s over the host link")
    lines.append(why)
    if c.pp > 1:
        collectives = "none" if c.tp == 1 else "2 reduce-scatters and 4 all-gathers (host-staged: no device cycles)"
        lines.append(f"  pipeline bubble (p-1)/(m+p-1) = {c.bubble:.1%}; tensor-parallel collectives per layer: "
                     f"{collectives}")
    elif c.tp > 1:
        lines.append("  tensor-parallel collectives per layer: 2 reduce-scatters and 4 all-gathers "
                     "(host-staged: no device cycles)")
    return "\n".join(lines)
