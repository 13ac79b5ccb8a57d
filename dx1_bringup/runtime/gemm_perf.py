"""Predicted cycles of a whole tiled GEMM, from the plan and the analytical performance model.

:func:`predict_gemm` plans ``M x K x N`` like :func:`~dx1_bringup.runtime.gemm_run.run_gemm` does (same
operand layout and tiles) and predicts what the PERF counters of the run will show.  A tile's output
blocks repeat one command pattern, so only the first :data:`WINDOW` blocks of every tile are emitted and
scheduled (all tiles together, sharing the memory banks); the blocks after them each add the steady-state
period measured between the window's last blocks.  Up to ``WINDOW`` blocks per tile the prediction is the
schedule of the whole stream; a 4096 x 4096 x 4096 GEMM predicts in about a second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from dx1_driver import Capabilities, Device
from dx1_driver.allocator import DEFAULT_ALIGNMENT

from ..model.tile import PostOpParams
from ..perfmodel import Prediction, Ring, TilePrediction, predict
from ..spec import Opcode, TileConfig
from .gemm import GemmBlock, GemmPlan, compile_gemm
from .gemm_run import GemmStats, operand_layout, run_gemm

__all__ = ["BENCH_SWEEP", "SWEEP", "UNITS", "WINDOW", "GemmPrediction", "combine", "error_table", "fresh_layout",
           "measure_gemm", "measured_terms", "predict_gemm"]

#: Output blocks per tile scheduled command by command; later ones repeat the last period.
WINDOW = 6
#: The per-tile terms a prediction reports, in the order ``dx1 predict`` prints them.
UNITS = ("load", "compute", "store", "total")


@dataclass
class GemmPrediction:
    """Predicted PERF counters of one GEMM run: per used tile, BUSY_LOAD/COMPUTE/STORE and CYCLES.

    ``terms[t]`` maps each of :data:`UNITS` to cycles; ``schedule`` is the scheduled window (every
    command of it, per tile); ``plan`` the plan (commands of the window only when it was cut).
    """

    terms: dict[int, dict[str, float]]
    schedule: Prediction
    plan: GemmPlan

    @property
    def total(self) -> float:
        """The run's cycles: the slowest tile's CYCLES."""
        return max(t["total"] for t in self.terms.values())


def predict_gemm(m: int, k: int, n: int, caps: Capabilities, *, post: PostOpParams | None,
                 bias: bool = True, tiles: int | None = None, base: int = 0,
                 rings: dict[int, Ring] | None = None) -> GemmPrediction:
    """Predict the PERF counters of ``run_gemm`` of an ``m x k x n`` GEMM on ``caps``'s device.

    Parameters
    ----------
    m, k, n:
        The GEMM's shape.
    caps:
        The device's capabilities; its memory size is not checked (a GEMM too large for the device can
        be predicted).
    post:
        The requantisation (``None``: an int32 result), as ``run_gemm`` gets it.
    bias:
        Whether the GEMM adds a bias.
    tiles:
        Tiles to use (the first ones; default all).
    base:
        The device address of the operands' allocation (``GemmStats.base`` of a run): it decides which
        memory banks each burst goes to.
    rings:
        Where each tile's commands are fetched from (``GemmStats.rings`` of a run; default: fetches are
        not counted).

    Returns
    -------
    GemmPrediction

    Raises
    ------
    ValueError
        A bad shape or tile count (the planner's messages).
    """
    offsets, size = operand_layout(m, k, n, caps.array, post is not None, bias, DEFAULT_ALIGNMENT)
    addr = {name: base + offset for name, offset in offsets.items()}
    roomy = dataclasses.replace(caps, mem_bytes=max(caps.mem_bytes, base + size))
    plan = compile_gemm(m, k, n, roomy, a_addr=addr["a"], b_addr=addr["b"], c_addr=addr["c"],
                        bias_addr=addr.get("bias"), post=post, tiles=tiles, emit_blocks=WINDOW)
    tile_cfg = TileConfig(array=caps.array, spm_rows=caps.spm_rows, acc_rows=caps.acc_rows)
    schedule = predict(plan.commands, tile_cfg, banks=caps.mem_banks, rings=rings)
    terms = {}
    for t, tp in schedule.per_tile.items():
        blocks = [i for i, b in enumerate(plan.blocks) if b.tile == t]
        window = min(len(blocks), WINDOW)
        # The array streams every block's rows once per reduction chunk: exact for the whole plan.
        compute = sum(plan.blocks[i].rows * (plan.blocks[i].cols // caps.array) for i in blocks) * (
            plan.k_padded // caps.array)
        values = {"load": tp.load, "compute": float(compute), "store": tp.store, "total": tp.end}
        if len(blocks) > window:
            # Each block after the window adds the period of a block of its size in the window.
            periods = _block_periods(tp, [plan.blocks[i] for i in blocks[:window]])
            for i in blocks[window:]:
                for name, cycles in _period_of(periods, plan.blocks[i]).items():
                    values[name] += cycles
        values["total"] += schedule.host
        terms[t] = values
    return GemmPrediction(terms, schedule, plan)


def fresh_layout(device: Device, tiles: int | None) -> tuple[int, dict[int, Ring]]:
    """Where ``run_gemm`` on ``tiles`` tiles of a fresh ``device`` would put its operands, and its tiles' rings.

    The queues of the tiles it uses are set up first, as the run would (their rings are allocated once and
    stay); the operands then go to the first free address, since a fresh device's allocator has no holes.
    A GEMM too large for the device gets the address it would have on a larger one.
    """
    rings = {t: Ring.of(device.queue(t)) for t in device.usable_tiles[:tiles]}
    base = device.alloc(device.allocator.alignment)
    device.free(base)
    return base, rings


def _block_periods(tp: TilePrediction, window: list[GemmBlock]) -> dict[tuple[int, int], dict[str, float]]:
    """The steady-state period of the window's blocks per size (rows, cols): cycles, LOAD and STORE busy.

    A block's period runs from the previous block's STORE completion to its own; the window's first block
    (which fills the pipeline) and last (which drains it) are left out.
    """
    stores = [i for i, c in enumerate(tp.commands) if c.opcode == Opcode.STORE]
    seen: dict[tuple[int, int], list[dict[str, float]]] = {}
    for b in range(1, len(window) - 1):
        between = tp.commands[stores[b - 1] + 1:stores[b] + 1]
        seen.setdefault((window[b].rows, window[b].cols), []).append({
            "load": sum(c.busy for c in between if c.opcode == Opcode.LOAD),
            "store": sum(c.busy for c in between if c.opcode == Opcode.STORE),
            "total": tp.commands[stores[b]].end - tp.commands[stores[b - 1]].end})
    return {size: {name: sum(p[name] for p in ps) / len(ps) for name in ps[0]} for size, ps in seen.items()}


def _period_of(periods: dict[tuple[int, int], dict[str, float]], block: GemmBlock) -> dict[str, float]:
    """A block's period: that of its size in the window, else of the nearest size scaled to it.

    Scaled, the cycles and the STORE follow the block's area (rows x cols), the LOADs its rows + cols
    (A and B of every step).
    """
    size = (block.rows, block.cols)
    if size in periods:
        return periods[size]
    rows, cols = min(periods, key=lambda s: abs(s[0] - block.rows) + abs(s[1] - block.cols))
    p = periods[(rows, cols)]
    area = block.rows * block.cols / (rows * cols)
    return {"load": p["load"] * (block.rows + block.cols) / (rows + cols), "store": p["store"] * area,
            "total": p["total"] * area}


#: The shapes (M, K, N, tiles) the model is checked on against the RTL in CI: odd shapes, one and two tiles.
SWEEP = ((8, 8, 8, 1), (24, 40, 56, 1), (64, 64, 64, 1), (100, 36, 20, 1), (128, 128, 48, 1), (40, 72, 24, 1),
         (56, 200, 16, 1), (8, 8, 8, 2), (24, 40, 56, 2), (64, 64, 64, 2), (100, 36, 20, 2), (128, 128, 48, 2),
         (40, 72, 24, 2), (32, 32, 32, 2), (96, 48, 80, 2), (200, 64, 40, 2))
#: ``make bench``'s sweep: :data:`SWEEP`, then larger shapes and lopsided ones (seconds to a minute each).
BENCH_SWEEP = SWEEP + ((72, 136, 40, 1), (256, 256, 256, 1), (16, 8, 200, 2), (256, 64, 64, 2), (160, 96, 104, 2),
                       (128, 128, 128, 2), (256, 256, 256, 2))


def measured_terms(stats: GemmStats) -> dict[int, dict[str, float]]:
    """The PERF counters of a ``run_gemm`` per tile, as the terms of :data:`UNITS`."""
    out = {}
    for t in stats.tile_ids:
        d = stats.delta(t)
        out[t] = {"load": float(d.busy_load), "compute": float(d.busy_compute), "store": float(d.busy_store),
                  "total": float(d.cycles)}
    return out


def combine(terms: dict[int, dict[str, float]]) -> dict[str, float]:
    """One value per term over the tiles: unit cycles summed, the total the slowest tile's."""
    out = {name: sum(t[name] for t in terms.values()) for name in UNITS if name != "total"}
    out["total"] = max(t["total"] for t in terms.values())
    return out


def error_table(predicted: dict[str, float], measured: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per term: predicted, measured, residual (predicted - measured) and relative error (a fraction)."""
    return {name: {"predicted": predicted[name], "measured": measured[name],
                   "residual": predicted[name] - measured[name],
                   "error": (predicted[name] - measured[name]) / measured[name] if measured[name] else 0.0}
            for name in UNITS}


def measure_gemm(device: Device, m: int, k: int, n: int, a, b, bias, post: PostOpParams | None,
                 tiles: int | None) -> dict[str, dict[str, float]]:
    """Run the GEMM on ``device`` after a warm-up GEMM on the same tiles, and compare with the prediction.

    The warm-up sets up the queues, so the measured run counts no queue set-up (which the model leaves
    out).  Returns :func:`error_table` of the combined terms.
    """
    count = device.caps.tiles if tiles is None else tiles
    warm = np.zeros((8 * count, 8), dtype=np.int8)
    run_gemm(device, warm, np.zeros((8, 8 * count), dtype=np.int8), None, post, tiles=tiles)
    _result, stats = run_gemm(device, a, b, bias, post, tiles=tiles, timeout=30.0)
    predicted = predict_gemm(m, k, n, device.caps, post=post, bias=bias is not None, tiles=len(stats.tile_ids),
                             base=stats.base, rings=stats.rings)
    return error_table(combine(predicted.terms), combine(measured_terms(stats)))
