"""``dx1 sim tile M K N``: a random quantised linear layer on the tile core's RTL in Verilator, verified bit for bit."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import args as types

__all__ = ["add_parser", "cmd_tile"]


def cmd_tile(args: argparse.Namespace) -> int:
    from ..sim import SimulationFailed, run_cocotb, verilator_missing

    reason = verilator_missing()
    if reason:
        print(f"dx1 sim tile: cannot simulate: {reason}", file=sys.stderr)
        return 2

    from ..model.tile import PostOpParams
    from ..runtime.tile_plan import plan_linear
    from ..spec import TileConfig

    module = "dx1_tile_core_a8"
    m, k, n = args.m, args.k, args.n
    try:  # refuse a shape that does not fit before starting the simulator
        plan_linear(np.zeros((m, k), np.int8), np.zeros((k, n), np.int8), None, PostOpParams(1, 0),
                    config=TileConfig())
    except ValueError as exc:
        print(f"dx1 sim tile: {exc}", file=sys.stderr)
        return 2
    print(f"dx1 sim tile: int8 linear layer {m}x{k} @ {k}x{n} + bias, ReLU, requantise to int8 "
          f"on {module} in Verilator (seed {args.seed})")
    print("  building the simulator (the first run builds it: under a minute) and running ...", flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        env = {"DX1_DEMO": json.dumps({"m": m, "k": k, "n": n, "seed": args.seed}), "DX1_RESULT": str(result_file)}
        try:
            run_dir = run_cocotb(module, "dx1_bringup.sim.demo_tile", seed=args.seed, env=env, quiet=True,
                                 name="demo")
        except SimulationFailed as exc:
            if result_file.exists():
                print(json.dumps(json.loads(result_file.read_text()), indent=2))
            print(f"dx1 sim tile: FAILED: {exc}", file=sys.stderr)
            return 1
        result = json.loads(result_file.read_text())
    peak = result["array"] ** 2
    print(f"  done in {time.perf_counter() - start:.1f} s (logs in {run_dir})")
    print(f"  shape        M={m} K={k} N={n}: {result['commands']} commands (GEMM + POSTOP)")
    print(f"  cycles       {result['cycles']} for {result['useful_macs']} useful MACs "
          f"({result['array_macs']} issued, with padding to {result['array']})")
    print(f"  utilisation  {result['utilisation']:.1%} of peak {peak} MAC/cycle "
          f"(useful work: {result['effective_utilisation']:.1%})")
    print(f"  simulation   {result['sim_cycles_per_s']:,.0f} cycles/s")
    print(f"  result       RTL == numpy reference: {result['matches_numpy']}, "
          f"RTL == golden model: {result['matches_golden']}")
    print("  first rows   " + "; ".join(" ".join(f"{v:4d}" for v in row) for row in result["sample"]["rtl"]))
    print("dx1 sim tile: PASS, verified bit for bit")
    return 0


def add_parser(sim_sub: Any) -> None:
    """Add ``tile`` to the ``dx1 sim`` subcommands."""
    tile = sim_sub.add_parser("tile", help="a quantised linear layer on one tile core's RTL, verified",
                              description="run a random quantised linear layer (bias, ReLU, requantise) on one tile "
                                          "core's RTL in Verilator, without the SoC, and verify it bit for bit")
    types.add_shape(tile, (128, 128, 48))
    tile.add_argument("--seed", type=types.seed, default=1, help="operand seed (default 1)")
    tile.set_defaults(func=cmd_tile)
