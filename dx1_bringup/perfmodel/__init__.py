"""The analytical performance model of dx1-mini: unit costs, and per-command start and end cycles.

:mod:`.costs` holds the one definition of every cycle cost (fitted to the RTL); :mod:`.schedule`
predicts the TRACE events and PERF totals of per-tile command streams from them.
"""

from .costs import COSTS, Costs, move_bursts
from .schedule import CommandTime, Prediction, Ring, TilePrediction, predict

__all__ = ["COSTS", "CommandTime", "Costs", "Prediction", "Ring", "TilePrediction", "move_bursts", "predict"]
