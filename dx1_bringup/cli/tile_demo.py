"""``dx1 demo``: a random quantised linear layer on the tile core's RTL in Verilator, verified bit for bit."""

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

__all__ = ["add_parser", "cmd_demo"]


def cmd_demo(args: argparse.Namespace) -> int:
    from ..sim import SimulationFailed, run_cocotb, verilator_missing

    reason = verilator_missing()
    if reason:
        print(f"dx1 demo: cannot simulate: {reason}", file=sys.stderr)
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
        print(f"dx1 demo: {exc}", file=sys.stderr)
        return 2
    print(f"dx1 demo: int8 linear layer {m}x{k} @ {k}x{n} + bias, ReLU, requantise to int8 "
          f"on {module} in Verilator (seed {args.seed})")
    print("  building the simulator (first run: about a minute) and running ...", flush=True)
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
            print(f"dx1 demo: FAILED: {exc}", file=sys.stderr)
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
    print("dx1 demo: PASS, verified bit for bit")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``demo`` to the ``dx1`` subcommands."""
    demo = sub.add_parser("demo", help="run a random quantised linear layer on the tile RTL and verify it")
    demo.add_argument("-m", type=types.positive, default=128, help="rows of A (default 128)")
    demo.add_argument("-k", type=types.positive, default=128, help="reduction length (default 128)")
    demo.add_argument("-n", type=types.positive, default=48, help="output columns (default 48)")
    demo.add_argument("--seed", type=types.seed, default=1, help="operand seed (default 1)")
    demo.set_defaults(func=cmd_demo)
