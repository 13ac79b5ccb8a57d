"""The analytical performance model of dx1-mini: unit costs, and per-command start and end cycles.

:mod:`.costs` holds the one definition of every cycle cost (fitted to the RTL); :mod:`.schedule`
predicts the TRACE events and PERF totals of per-tile command streams from them; :mod:`.collectives`
is the alpha-beta cost of the collectives over the chip-to-chip link.
"""

from .collectives import LinkCost, link_cost, predict_collective_cycles
from .costs import COSTS, Costs, move_bursts
from .schedule import CommandTime, Prediction, Ring, TilePrediction, predict

__all__ = ["COSTS", "CommandTime", "Costs", "LinkCost", "Prediction", "Ring", "TilePrediction", "link_cost",
           "move_bursts", "predict", "predict_collective_cycles"]
