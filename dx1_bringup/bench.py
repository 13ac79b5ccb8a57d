"""`make bench`: the tile's MAC utilisation and the simulators' speed, printed and written to a file.

Utilisation is measured by the RTL's own MAC counter over the cycles from the
first command to the last completion.  Simulation speed is measured on the
same workload in Verilator and in Amaranth's Python simulator, in one run, so
the ratio is meaningful on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .sim import run_cocotb, verilator_missing
from .spec import COMMAND_BITS, TileConfig

#: Stream lengths for the utilisation sweep (rows per GEMM), four chunks each.
SWEEP = [8, 16, 32, 64, 128, 256, 512]
#: The workload both simulators run.
SHARED = {"m": 128, "k_chunks": 4, "count": 8}


def verilator_bench(workloads: list[dict]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        run_cocotb("dx1_tile_core_a8", "dx1_bringup.sim.bench_tile", seed=1, quiet=True, name="bench",
                   env={"DX1_BENCH": json.dumps(workloads), "DX1_RESULT": str(out)})
        return json.loads(out.read_text())


def amaranth_bench(workload: dict) -> dict:
    """The same GEMM stream on the same design in Amaranth's simulator (operands left at zero)."""
    from amaranth.sim import Simulator

    from .gateware import TileCore
    from .sim.bench_tile import gemm_stream

    config = TileConfig()
    dut = TileCore(config)
    commands = gemm_stream(config, workload["m"], workload["k_chunks"], workload["count"])
    measured = {}

    async def bench(ctx):
        ctx.set(dut.done.tready, 1)
        start_wall, cycles = time.perf_counter(), 0
        for c in commands:
            ctx.set(dut.cmd.tdata, int.from_bytes(c, "little"))
            ctx.set(dut.cmd.tvalid, 1)
            while True:
                ready = ctx.get(dut.cmd.tready)
                await ctx.tick()
                cycles += 1
                if ready:
                    break
        ctx.set(dut.cmd.tvalid, 0)
        while ctx.get(dut.busy):
            await ctx.tick()
            cycles += 1
        measured.update(cycles=cycles, wall_s=time.perf_counter() - start_wall, macs=ctx.get(dut.perf_macs))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    measured["cycles_per_s"] = measured["cycles"] / measured["wall_s"]
    assert COMMAND_BITS == len(dut.cmd.tdata)
    return {**workload, **measured}


#: GEMM shapes run through the driver on the simulated SoC (one tile, then both).
SOC_SHAPES = [(64, 64, 64), (128, 128, 128), (256, 256, 256)]


def _operands(m: int, k: int, n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return (rng.integers(-128, 128, (m, k), dtype=np.int8), rng.integers(-128, 128, (k, n), dtype=np.int8))


def soc_bench(shapes=SOC_SHAPES) -> dict:
    """int8 GEMMs through the driver: on the SoC RTL (all DMA included, measured by its PERF counters),
    and on the golden model (its speed in MAC/s)."""
    from dx1_driver import Device, open_transport

    from .runtime.gemm import reference_gemm, run_gemm

    runs = []
    transport = open_transport("sim")
    try:
        device = Device(transport)
        for (m, k, n), tiles in [(s, 1) for s in shapes] + [(shapes[-1], 2)]:
            a, b = _operands(m, k, n)
            cycles0, wall = transport.cycles(), time.perf_counter()
            out, stats = run_gemm(device, a, b, tiles=tiles, timeout=3600)
            wall = time.perf_counter() - wall
            sim_cycles = transport.cycles() - cycles0
            runs.append({
                "shape": [m, k, n], "tiles": tiles, "cycles": stats.cycles, "macs": stats.macs,
                "utilisation": stats.utilisation(), "dma_bytes": stats.dma_bytes,
                "per_tile": {t: stats.utilisation(t) for t in stats.tiles},
                "correct": bool(np.array_equal(out, reference_gemm(a, b))),
                "round_trips": transport.round_trips, "wall_s": wall, "sim_cycles_per_s": sim_cycles / wall,
            })
            print(f"  {m}x{k}x{n} on {tiles} tile(s): {runs[-1]['utilisation']:.1%} ({stats.cycles} cycles), "
                  f"correct {runs[-1]['correct']}, {wall:.1f} s wall", flush=True)
    finally:
        transport.close()
    m, k, n = shapes[-1]
    a, b = _operands(m, k, n)
    with Device.open("model") as model:
        wall = time.perf_counter()
        run_gemm(model, a, b)
        wall = time.perf_counter() - wall
    return {"runs": runs, "golden_model": {"shape": [m, k, n], "wall_s": wall, "macs_per_s": m * k * n / wall}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dx1_bringup.bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("build/bench.json"), help="where to write the figures")
    args = parser.parse_args(argv)
    reason = verilator_missing()
    if reason:
        print(f"bench: cannot run: {reason}", file=sys.stderr)
        return 2
    print("[1/3] Verilator: utilisation sweep of back-to-back GEMMs on dx1_tile_core_a8 ...", flush=True)
    sweep = [{"m": m, "k_chunks": 4, "count": 8} for m in SWEEP]
    verilator = verilator_bench(sweep + [SHARED])
    print("[2/3] Amaranth simulator: the same design, shared workload ...", flush=True)
    amaranth = amaranth_bench(SHARED)
    shared_v = verilator[-1]
    print("[3/3] The SoC RTL through the driver (sim transport), GEMMs with all DMA; then the golden model ...",
          flush=True)
    soc = soc_bench()

    print("\nMAC utilisation, back-to-back GEMMs (8x8 array, peak 64 MAC/cycle, 4 chunks x 8 commands):")
    print(f"  {'rows/GEMM':>9} {'cycles':>8} {'MACs':>10} {'utilisation':>11}  correct")
    for r in verilator[:-1]:
        print(f"  {r['m']:>9} {r['cycles']:>8} {r['macs']:>10} {r['utilisation']:>10.1%}  {r['correct']}")
    ratio = shared_v["cycles_per_s"] / amaranth["cycles_per_s"]
    print(f"\nSimulation speed, same workload ({SHARED['count']} GEMMs x {SHARED['m']} rows x "
          f"{SHARED['k_chunks']} chunks, {shared_v['cycles']} cycles):")
    print(f"  Verilator (cocotb, Python off the per-cycle path): {shared_v['cycles_per_s']:>10,.0f} cycles/s")
    print(f"  Amaranth Python simulator:                         {amaranth['cycles_per_s']:>10,.0f} cycles/s")
    print(f"  ratio: Verilator is {ratio:,.0f}x faster")
    long_run = verilator[len(SWEEP) - 1]
    print(f"  Verilator on the longest stream ({long_run['cycles']} cycles): {long_run['cycles_per_s']:,.0f} cycles/s")

    print("\nint8 GEMM through the driver on the SoC RTL (utilisation = PERF MACs / (PERF cycles x 64 x tiles)):")
    for r in soc["runs"]:
        m, k, n = r["shape"]
        print(f"  {m:>3}x{k}x{n} on {r['tiles']} tile(s): {r['utilisation']:6.1%}  {r['cycles']:>8} cycles  "
              f"{r['dma_bytes']:>8} DMA bytes  {r['round_trips']:>6} round trips  "
              f"{r['sim_cycles_per_s']:>8,.0f} sim cycles/s  correct {r['correct']}")
    g = soc["golden_model"]
    print(f"  golden model, {'x'.join(map(str, g['shape']))}: {g['macs_per_s']:,.0f} MAC/s ({g['wall_s']:.2f} s)")

    report = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "soc": soc,
        "utilisation_sweep": verilator[:-1],
        "sim_speed": {"workload": SHARED, "verilator": shared_v, "amaranth": amaranth, "ratio": ratio},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {args.out}")
    ok = (all(r["correct"] for r in verilator + soc["runs"]) and amaranth["macs"] == shared_v["macs"])
    if not ok:
        print("bench: a run gave a wrong result or the simulators disagree on the MAC count", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
