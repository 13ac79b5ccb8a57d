"""cocotb module behind `dx1 demo`: a quantised linear layer on the tile core in Verilator.

Parameters come in the DX1_DEMO environment variable (JSON: m, k, n, seed) and
the result goes to the file named by DX1_RESULT, for the command to print.
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np

from ..runtime.operands import random_operands
from ..runtime.reference import reference_gemm
from ..runtime.tile_plan import plan_linear
from ..spec import PostOpParams
from .tile_tb import TileTB


def _operands(params: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, PostOpParams]:
    rng = np.random.default_rng(params["seed"])
    m, k, n = params["m"], params["k"], params["n"]
    a, b = random_operands(rng, m, k, n)
    bias = rng.integers(-(1 << 15), 1 << 15, size=n, dtype=np.int32)
    # A sum of k int8 products has a spread of about sqrt(k) * 5461: scale that to about 40.
    post = PostOpParams(mult=181, shift=15 + round(0.5 * np.log2(k)), relu=True)
    return a, b, bias, post


@cocotb.test()
async def linear_layer(dut):
    params = json.loads(os.environ["DX1_DEMO"])
    a, b, bias, post = _operands(params)
    tb = TileTB(dut)
    await tb.reset()
    plan = plan_linear(a, b, bias, post, config=tb.config)
    for row, values in plan.spm_writes:
        await tb.write_spm(row, values)
    for row, values in plan.acc_writes:
        await tb.write_acc(row, values)

    macs_before = int(dut.perf_macs.value)
    start, wall = tb.cycle, time.perf_counter()
    completions = await tb.run(plan.commands)
    cycles, wall = tb.cycle - start, time.perf_counter() - wall
    array_macs = int(dut.perf_macs.value) - macs_before
    got = plan.gather(await tb.read_spm(plan.out_base, plan.out_rows))

    reference = reference_gemm(a, b, bias, post)
    golden, statuses = plan.run_on_model()
    peak = tb.config.array ** 2
    result = {
        "shape": [plan.m, plan.k, plan.n], "array": tb.config.array, "seed": params["seed"],
        "commands": len(plan.commands), "cycles": cycles, "array_macs": array_macs,
        "useful_macs": plan.useful_macs, "utilisation": array_macs / (cycles * peak),
        "effective_utilisation": plan.useful_macs / (cycles * peak), "sim_cycles_per_s": cycles / wall,
        "statuses_ok": all(c["status"] == 0 for c in completions) and statuses == [0] * len(statuses),
        "matches_numpy": bool(np.array_equal(got, reference)),
        "matches_golden": bool(np.array_equal(got, golden)),
        "mismatches": int(np.count_nonzero(got != reference)),
        "sample": {"rtl": got[:2, :8].tolist(), "numpy": reference[:2, :8].tolist()},
    }
    with open(os.environ["DX1_RESULT"], "w") as f:
        json.dump(result, f, indent=2)
    assert result["matches_numpy"] and result["matches_golden"] and result["statuses_ok"], result
