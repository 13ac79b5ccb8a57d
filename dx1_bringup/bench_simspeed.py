"""`make bench` section ``simspeed``: simulated SoC cycles per wall second over one whole GEMM, per server setup.

The same ``run_gemm`` (operands, plan and result checked bit for bit) runs on private simulators that
differ only in how they are served, in one run and interleaved, so the ratios hold on a noisy machine:

- ``cocotb clock, bus``: the bare SoC on cocotb's clock, host memory blocks through the AXI4 memory
  port beat by beat (how the server ran before the host-memory backdoor);
- ``cocotb clock, backdoor``: the same with host memory blocks straight into the memory arrays;
- ``Verilator clock, backdoor``: the SoC inside the clocked top (:mod:`.sim.clocked_top`, ``--clock verilator``);
- ``native server``: the socket served in C++ beside the model (:mod:`.sim.native`, the default of ``sim``).

The first three are the cocotb server's (``--server cocotb``).

Then a small GEMM runs on the default setup and on the same SoC in Amaranth's Python simulator
(:class:`.sim.amaranth_transport.AmaranthTransport`, the same memory backdoor, so the same cycles).

Cycles are the simulator's own count (the sim socket's CYCLES request) from before the first upload to
after the last download, so host transfers and the driver's waits are included; wall time is the
same span on the host.  The simulator's CPU seconds over that span (its process and their children, from
``/proc``; Linux only, else not reported) give cycles per server CPU second, the figure that holds on a
machine whose cores other work shares.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from dx1_driver import Device
from dx1_driver.sim_transport import SimTransport

from .runtime.gemm_run import run_gemm
from .runtime.operands import random_operands
from .runtime.reference import reference_gemm
from .sim.amaranth_transport import AmaranthTransport
from .sim.launch import PrivateSimTransport, start_simulator

__all__ = ["SETUPS", "simspeed_bench", "print_simspeed"]

#: (label, clock, host path, server) of each server setup measured.
SETUPS = (("cocotb clock, bus", "cocotb", "bus", "cocotb"), ("cocotb clock, backdoor", "cocotb", "backdoor", "cocotb"),
          ("Verilator clock, backdoor", "verilator", "backdoor", "cocotb"),
          ("native server", "cocotb", "backdoor", "native"))


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` and all its descendants (``None`` without ``/proc``)."""
    proc = Path("/proc")
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = [int(c) for task in (proc / str(pid) / "task").iterdir()
                    for c in (task / "children").read_text().split()]
    except (OSError, ValueError, IndexError):
        return None
    for child in children:
        total += process_cpu_seconds(child) or 0.0
    return total


def _one_gemm(transport: SimTransport, a: np.ndarray, b: np.ndarray, tiles: int) -> dict:
    device = Device(transport)
    process = getattr(transport, "process", None)
    cpu = None if process is None else process_cpu_seconds(process.pid)
    trips, cycles, wall = transport.round_trips, transport.cycles(), time.perf_counter()
    out, stats = run_gemm(device, a, b, tiles=tiles, timeout=3600)
    wall = time.perf_counter() - wall
    sim_cycles = transport.cycles() - cycles
    if cpu is not None:
        after = process_cpu_seconds(process.pid)
        cpu = None if after is None else after - cpu
    return {"wall_s": wall, "sim_cycles": sim_cycles, "cycles_per_s": sim_cycles / wall,
            "server_cpu_s": cpu, "cycles_per_cpu_s": sim_cycles / cpu if cpu else None,
            "round_trips": transport.round_trips - trips, "utilisation": stats.utilisation(),
            "correct": bool(np.array_equal(out, reference_gemm(a, b)))}


def _operands(shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    m, k, n = shape
    rng = np.random.default_rng(1)
    return random_operands(rng, m, k, n)


def simspeed_bench(shape: tuple[int, int, int] = (256, 256, 256), tiles: int = 2, rounds: int = 2,
                   small: tuple[int, int, int] = (32, 32, 32)) -> dict:
    """Run the GEMM ``rounds`` times on each setup of :data:`SETUPS`, the setups taking turns.

    Each setup's simulator is started (and built, the first time) before any GEMM is timed, and kept
    for all its rounds.  Returns the runs per setup and, per setup, the best round (the least disturbed
    by other work on the machine).
    """
    a, b = _operands(shape)
    transports = {}
    try:
        for label, clock, host_path, server in SETUPS:
            print(f"  starting the simulator: {label} (builds it the first time) ...", flush=True)
            process, port = start_simulator(clock=clock, host_path=host_path, server=server)
            transports[label] = PrivateSimTransport(process, port)
        runs = {label: [] for label in transports}
        for r in range(rounds):
            for label, transport in transports.items():
                runs[label].append(_one_gemm(transport, a, b, tiles))
                last = runs[label][-1]
                print(f"  round {r + 1}/{rounds}, {label}: {last['sim_cycles']:,} cycles in {last['wall_s']:.2f} s "
                      f"= {last['cycles_per_s']:,.0f} cycles/s{_per_cpu(last)}, correct {last['correct']}", flush=True)
        sa, sb = _operands(small)
        print(f"  {'x'.join(map(str, small))} on one tile: {SETUPS[-1][0]}, then Amaranth's simulator ...", flush=True)
        versus = {"Verilator": _one_gemm(transports[SETUPS[-1][0]], sa, sb, 1)}
        with AmaranthTransport() as amaranth:
            versus["Amaranth"] = _one_gemm(amaranth, sa, sb, 1)
    finally:
        for transport in transports.values():
            transport.close()
    best = {label: max(rs, key=lambda r: r["cycles_per_s"]) for label, rs in runs.items()}
    return {"shape": list(shape), "tiles": tiles, "runs": runs, "best": best,
            "versus_amaranth": {"shape": list(small), "tiles": 1, "runs": versus}}


def _per_cpu(run: dict) -> str:
    if run.get("cycles_per_cpu_s") is None:
        return ""
    return f" ({run['cycles_per_cpu_s']:,.0f} per server CPU second)"


def print_simspeed(report: dict) -> None:
    """The best round of each setup, and each setup's speed against the first."""
    shape = "x".join(map(str, report["shape"]))
    print(f"\nSimulated SoC cycles per wall second over a whole {shape} GEMM on {report['tiles']} tile(s), host "
          f"transfers and waits included (best of {len(next(iter(report['runs'].values())))} interleaved rounds):")
    base = None
    for label, r in report["best"].items():
        base = base or r["cycles_per_s"]
        print(f"  {label:<26} {r['sim_cycles']:>9,} cycles {r['wall_s']:7.2f} s {r['cycles_per_s']:>10,.0f} cycles/s "
              f"({r['cycles_per_s'] / base:.2f}x){_per_cpu(r)}  {r['round_trips']} round trips  correct {r['correct']}")
    versus = report["versus_amaranth"]
    print(f"\nThe same SoC on a {'x'.join(map(str, versus['shape']))} GEMM on one tile, same cycles on both "
          f"(host transfers and waits included):")
    for label, r in versus["runs"].items():
        print(f"  {label:<10} {r['sim_cycles']:>7,} cycles {r['wall_s']:8.2f} s {r['cycles_per_s']:>10,.0f} cycles/s  "
              f"correct {r['correct']}")
    v, am = versus["runs"]["Verilator"], versus["runs"]["Amaranth"]
    print(f"  Verilator is {v['cycles_per_s'] / am['cycles_per_s']:,.0f}x faster")
