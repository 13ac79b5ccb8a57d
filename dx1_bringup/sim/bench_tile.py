"""cocotb module behind `make bench`: back-to-back GEMMs on the tile core, measured by its counters.

The workloads come in DX1_BENCH (JSON list of {m, k_chunks, count}); the
figures go to the file named by DX1_RESULT.  Commands are fed through a window
of outstanding commands so that no Python coroutine runs on every cycle while
the array works; the result of every run is checked against the golden model.
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np

from ..model.tile import TileModel
from ..spec import Opcode, pack_command
from .stimulus import random_int8
from .tile_tb import TileTB

WINDOW = 3


def gemm_stream(config, m: int, k_chunks: int, count: int) -> list[bytes]:
    """``count`` GEMMs of ``m`` rows and ``k_chunks`` chunks, accumulating into one result."""
    n = config.array
    return [pack_command(Opcode.GEMM, tag=i, flags={"accumulate": i > 0}, a_addr=0,
                         b_addr=config.spm_rows // 2 + (i % 4) * k_chunks * n, c_addr=0, m=m, k_chunks=k_chunks)
            for i in range(count)]


@cocotb.test()
async def back_to_back_gemms(dut):
    workloads = json.loads(os.environ["DX1_BENCH"])
    tb = TileTB(dut)
    await tb.reset()
    rng = np.random.default_rng(1)
    model = TileModel(tb.config)
    model.spm[:] = random_int8(rng, model.spm.shape)
    await tb.write_spm(0, model.spm)
    peak = tb.config.array ** 2
    results = []
    for w in workloads:
        commands = gemm_stream(tb.config, w["m"], w["k_chunks"], w["count"])
        macs0 = int(dut.perf_macs.value)
        start, wall = tb.cycle, time.perf_counter()
        completions = await tb.run(commands, window=WINDOW)
        cycles, wall = tb.cycle - start, time.perf_counter() - wall
        macs = int(dut.perf_macs.value) - macs0
        for c in commands:
            model.execute(c)
        got = await tb.read_acc(0, w["m"])
        results.append({
            **w, "cycles": cycles, "macs": macs, "utilisation": macs / (cycles * peak),
            "cycles_per_s": cycles / wall, "wall_s": wall,
            "correct": bool(np.array_equal(got, model.acc[:w["m"]])) and all(c["status"] == 0 for c in completions),
        })
    with open(os.environ["DX1_RESULT"], "w") as f:
        json.dump(results, f, indent=2)
    assert all(r["correct"] for r in results), results
