"""Predicted cycles of a whole tiled GEMM, from the plan and the analytical performance model.

:func:`predict_gemm` plans ``M x K x N`` like :func:`~dx1_bringup.runtime.gemm.run_gemm` does (same
operand layout and tiles) and predicts what the PERF counters of the run will show.  A tile's output
blocks repeat one command pattern, so only the first :data:`WINDOW` blocks of every tile are emitted and
scheduled (all tiles together, sharing the memory port); the blocks after them each add the steady-state
period measured between the window's last blocks.  Up to ``WINDOW`` blocks per tile the prediction is the
schedule of the whole stream; a 4096 x 4096 x 4096 GEMM predicts in milliseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from dx1_driver import Capabilities, Device

from ..model.tile import PostOpParams
from ..perf import Prediction, TilePrediction, predict
from ..spec import Opcode, TileConfig
from .gemm import GemmPlan, GemmStats, compile_gemm, run_gemm
from .operands import ACC_LANE_BYTES, padded

__all__ = ["SWEEP", "UNITS", "WINDOW", "GemmPrediction", "combine", "error_table", "measure_gemm", "measured_terms",
           "predict_gemm"]

#: Output blocks per tile scheduled command by command; later ones repeat the last period.
WINDOW = 6
#: The per-tile terms a prediction reports, in the order ``dx1 perf`` prints them.
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


def _layout(m: int, k: int, n: int, array: int, post: bool, bias: bool) -> dict[str, int]:
    """Device-memory addresses as :func:`run_gemm` lays the operands out (one allocation, 64-byte aligned)."""
    kp, np_ = padded(k, array), padded(n, array)
    sizes = {"a": m * kp, "b": kp * np_, "c": m * np_ * (1 if post else ACC_LANE_BYTES)}
    if bias:
        sizes["bias"] = np_ * ACC_LANE_BYTES
    addr, at = {}, 0
    for name, size in sizes.items():
        addr[name] = at
        at += -(-size // 64) * 64
    addr["end"] = at
    return addr


def predict_gemm(m: int, k: int, n: int, caps: Capabilities, *, post: PostOpParams | None,
                 bias: bool = True, tiles: int | None = None) -> GemmPrediction:
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

    Returns
    -------
    GemmPrediction

    Raises
    ------
    ValueError
        A bad shape or tile count (the planner's messages).
    """
    addr = _layout(m, k, n, caps.array, post is not None, bias)
    roomy = dataclasses.replace(caps, mem_bytes=max(caps.mem_bytes, addr["end"]))
    plan = compile_gemm(m, k, n, roomy, a_addr=addr["a"], b_addr=addr["b"], c_addr=addr["c"],
                        bias_addr=addr.get("bias"), post=post, tiles=tiles, emit_blocks=WINDOW)
    tile_cfg = TileConfig(array=caps.array, spm_rows=caps.spm_rows, acc_rows=caps.acc_rows)
    schedule = predict(plan.commands, tile_cfg)
    terms = {}
    for t, tp in schedule.tiles.items():
        blocks = [i for i, b in enumerate(plan.blocks) if b.tile == t]
        window = min(len(blocks), WINDOW)
        # The array streams every block's rows once per reduction chunk: exact for the whole plan.
        compute = sum(plan.blocks[i].rows * (plan.blocks[i].cols // caps.array) for i in blocks) * (
            plan.k_padded // caps.array)
        values = {"load": tp.load, "compute": float(compute), "store": tp.store, "total": tp.end}
        extra = len(blocks) - window
        if extra > 0:
            # Each block after the window adds the period of the window's last two blocks.
            for name, per_block in _last_blocks(tp, window).items():
                values[name] += extra * per_block
        values["total"] += schedule.host
        terms[t] = values
    return GemmPrediction(terms, schedule, plan)


def _last_blocks(tp: TilePrediction, window: int) -> dict[str, float]:
    """Per-block increase of the DMA terms and the span over the last two blocks of the window (STORE to STORE)."""
    stores = [i for i, c in enumerate(tp.commands) if c.opcode == Opcode.STORE]
    first, last = stores[window - 3], stores[window - 1]

    def busy(kind: int) -> float:
        return sum(c.end - c.start for c in tp.commands[first + 1:last + 1] if c.opcode == kind) / 2

    return {"load": busy(Opcode.LOAD), "store": busy(Opcode.STORE),
            "total": (tp.commands[last].end - tp.commands[first].end) / 2}


#: The shapes (M, K, N, tiles) the model is checked on against the RTL: odd shapes, one and two tiles.
#: One-tile runs come first: a device measures a one-tile run slower after a two-tile one (see
#: docs/architecture.md, "Performance model").
SWEEP = ((8, 8, 8, 1), (24, 40, 56, 1), (64, 64, 64, 1), (100, 36, 20, 1), (128, 128, 48, 1),
         (8, 8, 8, 2), (24, 40, 56, 2), (64, 64, 64, 2), (100, 36, 20, 2), (128, 128, 48, 2))


def measured_terms(stats: GemmStats) -> dict[int, dict[str, float]]:
    """The PERF counters of a ``run_gemm`` per tile, as the terms of :data:`UNITS`."""
    out = {}
    for t in stats.tiles:
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
    predicted = predict_gemm(m, k, n, device.caps, post=post, bias=bias is not None, tiles=len(stats.tiles))
    return error_table(combine(predicted.terms), combine(measured_terms(stats)))
