"""`dx1 plan`: placements costed from device memory and the performance model; offload when nothing fits."""

from __future__ import annotations

import pytest

from dx1_bringup.cli import main
from dx1_bringup.parallel.plan import ModelSpec, plan, plan_table
from dx1_bringup.workloads.encoder import BlockSize

SMALL = ModelSpec("small", "encoder", BlockSize(16, 32, 2, 64), 4)
#: One layer's weights and activations take about 300 KiB: four need more than a chip's 1 MiB.
WIDE = ModelSpec("wide", "encoder", BlockSize(64, 128, 4, 512), 4)


def test_small_model_fits_and_uses_the_chips():
    p = plan(SMALL, 2)
    assert {(c.tp, c.pp) for c in p.candidates} == {(1, 1), (1, 2), (2, 1)}
    assert all(c.fits for c in p.candidates)
    assert p.chosen.chips == 2  # two chips beat one
    assert p.layer_costs[2].weight_bytes < p.layer_costs[1].weight_bytes
    assert p.layer_costs[2].cycles < p.layer_costs[1].cycles
    text = plan_table(p)
    assert "<- chosen" in text and "every weight resident" in text


def test_offload_when_nothing_fits():
    p = plan(WIDE, 1)
    (only,) = p.candidates
    assert not only.fits and only.offload_bytes > 0 and only.feasible
    assert only.resident_bytes <= p.mem_bytes
    # Three layers' room: two stay, the third is the slot the other two layers' weights stream through.
    assert only.offload_bytes == 2 * p.layer_costs[1].weight_bytes
    assert only.offload_cycles == only.offload_bytes / 8
    assert "weights stream from host memory" in plan_table(p)


def test_refusals():
    with pytest.raises(ValueError, match="the chips must be a positive integer, not 0"):
        plan(SMALL, 0)


def test_cli(capsys):
    assert main(["plan", "gpt-17", "--chips", "2"]) == 2
    assert "invalid choice: 'gpt-17'" in capsys.readouterr().err
