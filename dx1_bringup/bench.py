"""``dx1 bench`` (``make bench``): the tile's MAC utilisation and the simulators' speed, printed and written to a file.

Utilisation is measured by the RTL's own MAC counter over the cycles from the
first command to the last completion.  Simulation speed is measured on the
same workload in Verilator and in Amaranth's Python simulator, in one run, so
the ratio is meaningful on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from . import argtypes as types
from . import bench_boardspeed, bench_collectives, bench_link, bench_parallel, bench_scaling, bench_vector
from .bench_simspeed import print_simspeed, simspeed_bench
from .parallel.cli import block_size
from .runtime.operands import random_operands
from .serving import cli as serving_cli
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
    return random_operands(rng, m, k, n)


def soc_bench(shapes=SOC_SHAPES) -> dict:
    """int8 GEMMs through the driver: on the SoC RTL (all DMA included, measured by its PERF counters),
    and on the golden model (its speed in MAC/s)."""
    from dx1_driver import Device, open_transport

    from .runtime.gemm_run import run_gemm
    from .runtime.reference import reference_gemm

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
                "per_tile": {t: stats.utilisation(t) for t in stats.tile_ids},
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


def perfmodel_bench() -> dict:
    """The performance model against the SoC RTL over its bench sweep: per shape and term, predicted,
    measured, residual and relative error (:func:`dx1_bringup.runtime.gemm_perf.measure_gemm`); and how long
    a 4096^3 GEMM, far too large to simulate, takes to predict."""
    from dx1_driver import Device, open_transport

    from .runtime.gemm_perf import BENCH_SWEEP, combine, fresh_layout, measure_gemm, predict_gemm
    from .runtime.operands import gemm_problem
    from .spec import PostOpParams

    fresh = Device.open("model")
    base, rings = fresh_layout(fresh, None)
    start = time.perf_counter()
    big = predict_gemm(4096, 4096, 4096, fresh.caps, post=PostOpParams(1, 0, relu=True), base=base, rings=rings)
    large = {"shape": [4096, 4096, 4096], "tiles": fresh.caps.tiles, "seconds": time.perf_counter() - start,
             "terms": combine(big.terms)}
    rows = []
    transport = open_transport("sim")
    try:
        device = Device(transport)
        for i, (m, k, n, tiles) in enumerate(BENCH_SWEEP, 1):
            print(f"  [{i}/{len(BENCH_SWEEP)}] {m}x{k}x{n} on {tiles} tile(s)", flush=True)
            a, b, bias, post = gemm_problem(m, k, n, 1)
            rows.append({"shape": [m, k, n], "tiles": tiles,
                         "terms": measure_gemm(device, m, k, n, a, b, bias, post, tiles)})
    finally:
        transport.close()
    return {"sweep": rows, "large": large}


def print_perfmodel(perf: dict) -> None:
    """The error table of the performance model: relative error per term and shape, and the worst total."""
    from .runtime.gemm_perf import SWEEP

    rows, large = perf["sweep"], perf["large"]
    print("\nPerformance model against the RTL (relative error of the prediction per term; * in CI's sweep)")
    names = list(rows[0]["terms"]) if rows else []
    print(f"  {'shape':>14} {'tiles':>5} " + " ".join(f"{n:>9}" for n in names)
          + "   total cycles predicted / measured")
    for r in rows:
        shape = "x".join(map(str, r["shape"])) + ("*" if (*r["shape"], r["tiles"]) in SWEEP else " ")
        total = r["terms"]["total"]
        print(f"  {shape:>14} {r['tiles']:>5} " + " ".join(f"{r['terms'][n]['error']:+9.1%}" for n in names)
              + f"   {total['predicted']:.0f} / {total['measured']:.0f}")
    for label, rs in (("CI's sweep", [r for r in rows if (*r["shape"], r["tiles"]) in SWEEP]), ("all", rows)):
        if rs:
            worst = max(rs, key=lambda r: abs(r["terms"]["total"]["error"]))
            print(f"  worst total error, {label}: {worst['terms']['total']['error']:+.2%} "
                  f"({'x'.join(map(str, worst['shape']))} on {worst['tiles']} tile(s))")
    print(f"  {'x'.join(map(str, large['shape']))} on {large['tiles']} tiles predicted in {large['seconds']:.2f} s: "
          f"{large['terms']['total']:.4g} cycles")


#: Block sizes of the serial throughput sweep, in bytes.
SERIAL_SIZES = [4, 16, 64, 256, 1024, 4096, 16384, 65536]
#: Largest block of the verified-write sweep: from one 4 KiB burst on, every burst is the same exchange.
SERIAL_VERIFIED_MAX = 16384
#: The `dx1 gemm M K N` problem run over serial beside the sim transport.
SERIAL_GEMM = (64, 64, 64)
#: Line fault rate of the faulty-line GEMM (per bit and per byte: the board server's ``LineFaults.uniform``).
SERIAL_FAULT_RATE = 1e-4
#: The `dx1 gemm` problem run over the faulty line (smaller: every retry costs a resynchronisation in wall time).
SERIAL_FAULT_GEMM = (32, 32, 32)
#: The `dx1 gemm` runs of the serial section: (name, line fault rate or None for the sim transport, register
#: framing).  The clean GEMM runs with CRC register frames (the default) and with UARTBone, side by side.
SERIAL_GEMM_RUNS = (("sim", None, None), ("serial", 0.0, "crc"), ("serial_uartbone", 0.0, "uartbone"),
                    ("serial_faulty", SERIAL_FAULT_RATE, "crc"))
#: Latency a round trip adds on a USB-UART cable (the FTDI/CP210x latency timer, about 1 ms), for the estimate.
CABLE_LATENCY_S = 1e-3


def _serial_line_job(runs: list[dict], name: str) -> dict:
    """One simulation of the board running the bulk throughput bench (a process of its own)."""
    from .sim.board_server import BAUD

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "serial.json"
        run_cocotb("dx1_board", "dx1_bringup.sim.bench_serial", seed=1, quiet=True, name=name,
                   env={"DX1_BENCH": json.dumps({"baud": BAUD, "runs": runs}), "DX1_RESULT": str(out)})
        return json.loads(out.read_text())


def _gemm_over(transport, problem, attempts: int = 1) -> dict:
    """`dx1 gemm`'s work on an open transport: wall time and round trips from the transport's open to the result.

    With ``attempts`` > 1, a GEMM that fails loudly (a :class:`DriverError`: on a faulty line, a residual risk
    of the framing, or any register fault with UARTBone frames, which carry no CRC) is run again after a device
    reset; every failure is kept, and ``first_attempt`` says whether the first GEMM came out right.
    """
    from dx1_driver import Device, DriverError

    from .runtime.gemm_run import run_gemm
    from .runtime.reference import reference_gemm

    a, b, bias, post = problem
    device = Device(transport)
    failures = []
    for _ in range(attempts):
        try:
            out, _ = run_gemm(device, a, b, bias, post, timeout=3600)
            break
        except DriverError as e:
            failures.append(f"{type(e).__name__}: {e}")
            if len(failures) == attempts:
                raise
            device.reset()
    correct = bool(np.array_equal(out, reference_gemm(a, b, bias, post)))
    return {"correct": correct, "round_trips": transport.round_trips, "attempts": len(failures) + 1,
            "first_attempt": correct and not failures, "failures": failures}


def serial_bench(sizes: list[int]) -> dict:
    """The serial link: bulk throughput on the board RTL in simulated time, and `dx1 gemm` over it.

    The throughput sweep runs in two simulator processes beside the GEMMs (one
    per line mode family), so the section takes about as long as its slowest part.
    """
    from concurrent.futures import ProcessPoolExecutor

    from dx1_driver.serial_transport import SerialTransport

    from .runtime.operands import gemm_problem
    from .sim.board_server import BAUD, CLIENT_OPTIONS
    from .sim.launch import PrivateSimTransport, start_simulator

    verified = [s for s in sizes if s <= SERIAL_VERIFIED_MAX]
    jobs = {"crc": [{"mode": "crc", "sizes": sizes, "ops": ["write", "read"]}],
            "uartbone": [{"mode": "uartbone", "sizes": sizes, "ops": ["write", "read"]}]
            + ([{"mode": "crc-verified", "sizes": verified, "ops": ["write"]}] if verified else [])}
    gemms = {}
    with ProcessPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {k: pool.submit(_serial_line_job, runs, f"bench-serial-{k}") for k, runs in jobs.items()}
        for name, fault_rate, framing in SERIAL_GEMM_RUNS:
            shape = SERIAL_FAULT_GEMM if fault_rate else SERIAL_GEMM
            print(f"  dx1 gemm {'x'.join(map(str, shape))} over {name.replace('_', ' ')} ...", flush=True)
            if fault_rate is None:
                process, port = start_simulator()
            else:
                process, port = start_simulator(uart=True, fault_rate=fault_rate, fault_seed=1)
            wall = time.perf_counter()
            if fault_rate is None:
                transport = PrivateSimTransport(process, port)
            else:
                transport = SerialTransport(f"socket://127.0.0.1:{port}", retries=30, regs=framing,
                                            **CLIENT_OPTIONS)
            try:
                run = {"shape": list(shape),
                       **_gemm_over(transport, gemm_problem(*shape, seed=1), attempts=3 if fault_rate else 1)}
                run["wall_s"] = time.perf_counter() - wall
                if fault_rate is not None:
                    run.update(fault_rate=fault_rate, line_baud=BAUD, regs=framing, link=asdict(transport.stats))
            finally:
                transport.close()
                process.wait(timeout=60)
            gemms[name] = run
            print(f"    {run['wall_s']:.1f} s wall, {run['round_trips']} round trips, correct {run['correct']}"
                  + (f", {run['link']['retries']} retries" if "link" in run else "")
                  + ("" if run["first_attempt"] else f", NOT on the first attempt ({run['attempts']} attempts)")
                  + "".join(f"\n    attempt failed loudly: {f}" for f in run["failures"]), flush=True)
        print("  waiting for the throughput simulations ...", flush=True)
        lines = {k: f.result() for k, f in futures.items()}
    rows = [r for k in jobs for r in lines[k]["results"]]
    for r in rows:
        for op in ("write", "read"):
            if op in r:
                t = r[op]["sim_s"] + r[op]["round_trips"] * CABLE_LATENCY_S
                r[op]["line_fraction_with_cable_latency"] = r["bytes"] / (BAUD / 10 * t)
    return {"baud": BAUD, "clock_hz": lines["crc"]["clock_hz"], "cable_latency_s": CABLE_LATENCY_S,
            "throughput": rows, "gemm": gemms}


def print_serial(serial: dict) -> None:
    print(f"\nSerial bulk throughput on the board RTL (dx1_board, {serial['baud'] / 1e6:g} Mbaud, simulated time):")
    print("  payload bytes / (time x baud/10); in brackets with "
          f"{serial['cable_latency_s'] * 1e3:g} ms a round trip added, as on a USB-UART cable")
    print(f"  {'mode':<13} {'bytes':>6} {'write':>16} {'read':>16}  {'round trips w/r':>15}  correct")
    for r in serial["throughput"]:
        cells = []
        for op in ("write", "read"):
            if op in r:
                cells.append(f"{r[op]['line_fraction']:6.1%} ({r[op]['line_fraction_with_cable_latency']:5.1%})")
            else:
                cells.append("same as crc")
        trips = "/".join(str(r[op]["round_trips"]) if op in r else "-" for op in ("write", "read"))
        print(f"  {r['mode']:<13} {r['bytes']:>6} {cells[0]:>16} {cells[1]:>16}  {trips:>15}  {r['correct']}")
    print("\ndx1 gemm M K N --seed 1 (wall clock from the transport's open to the result; a serial round trip is "
          "a wait for answers, register writes are posted: CRC register frames have their statuses read by the "
          "next exchange, UARTBone writes have none):")
    for name in [r[0] for r in SERIAL_GEMM_RUNS if r[0] in serial["gemm"]]:
        run = serial["gemm"][name]
        extra = ""
        if "link" in run:
            link = run["link"]
            extra = (f" ({run['regs']} registers) + {link['posted_writes']} posted writes, "
                     f"{link['write_flushes']} status-only round trips, {link['retries']} retries, "
                     f"{link['bytes_sent']} bytes sent, {link['bytes_received']} received"
                     + (f" (fault rate {run['fault_rate']:g}, GEMM attempts {run['attempts']}, first attempt "
                        f"{'right' if run['first_attempt'] else 'FAILED'})" if run["fault_rate"] else ""))
        print(f"  {'x'.join(map(str, run['shape'])):<9} over {name.replace('_', ' '):<14} {run['wall_s']:7.1f} s  "
              f"{run['round_trips']:>5} round trips{extra}  correct {run['correct']}")


#: Sections of the bench, in the order they run.
SECTIONS = ("tile", "soc", "simspeed", "boardspeed", "serial", "perfmodel", "vector", "scaling", "serving",
            "collectives", "parallel", "link")


def _some_of(allowed: tuple[int, ...]):
    """An argument type: a comma-separated list of some of ``allowed``, sorted, without repeats."""
    return types.integers("some of " + ", ".join(map(str, allowed)), allowed.__contains__, ordered=True)


def _board_or_device(text: str) -> str:
    """A device string, or one with ``{n}`` for a board of N chips (``model:chips={n}``), checked at ``n = 2``."""
    types.device(text.replace("{n}", "2"))
    return text


def add_parser(sub: Any) -> None:
    """Add ``bench`` to the ``dx1`` subcommands."""
    parser = sub.add_parser("bench", help="the benchmarks: utilisation, sim speed, link, models, serving",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("sections", nargs="*", type=types.names(SECTIONS), metavar="SECTION",
                        help="the sections to run, as --only does (dx1 bench serving)")
    parser.add_argument("--out", type=Path, default=Path("build/bench.json"),
                        help="where to write the figures (sections not run keep their earlier figures)")
    parser.add_argument("--only", type=types.names(SECTIONS), default=list(SECTIONS), metavar="SECTIONS",
                        help=f"run only these sections, comma-separated: {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--serial-sizes", type=types.integers("block sizes, multiples of 4 from 4 to 1048576",
                                                              lambda v: 0 < v <= 1 << 20 and v % 4 == 0),
                        default=SERIAL_SIZES, metavar="BYTES",
                        help="block sizes of the serial throughput sweep, comma-separated (default: "
                             + ",".join(map(str, SERIAL_SIZES)) + ")")
    parser.add_argument("--link-sizes", type=types.integers("SEND sizes, multiples of 8 from 8 to 65536",
                                                            lambda v: 0 < v <= 1 << 16 and v % 8 == 0, ordered=True),
                        default=list(bench_link.SIZES), metavar="BYTES",
                        help="SEND sizes of the link section, comma-separated; its steady rate is the slope between "
                             "the last two (default: " + ",".join(map(str, bench_link.SIZES)) + ")")
    parser.add_argument("--boardspeed-also", nargs=2, action="append", default=[], metavar=("LABEL", "COMMAND"),
                        help="the boardspeed section also measures this native server (another checkout's build, "
                             "its command line split as a shell does), started as COMMAND --once --port-file FILE; "
                             "may be repeated")
    serving_cli.add_bench_arguments(parser)
    scaling = parser.add_argument_group("scaling section (SoCs generated with more tiles and banks)")
    scaling.add_argument("--scaling-sizes", type=_some_of(bench_scaling.SIZES), metavar="S,...",
                         default=list(bench_scaling.DEFAULT_SIZES),
                         help="square GEMM sizes, some of " + ",".join(map(str, bench_scaling.SIZES)) + " (default "
                              + ",".join(map(str, bench_scaling.DEFAULT_SIZES)) + ": the larger take hours)")
    scaling.add_argument("--scaling-tiles", type=_some_of(bench_scaling.TILES), metavar="T,...",
                         default=list(bench_scaling.TILES), help="tile counts (default: all of "
                                                                 + ",".join(map(str, bench_scaling.TILES)) + ")")
    scaling.add_argument("--scaling-banks", type=_some_of(bench_scaling.BANKS), metavar="B,...",
                         default=list(bench_scaling.BANKS), help="memory bank counts (default: all of "
                                                                 + ",".join(map(str, bench_scaling.BANKS)) + ")")
    scaling.add_argument("--scaling-socs", choices=bench_scaling.SOCS, default="shared",
                         help="shared: every tile count on the 8-tile SoC of its bank count (one build per bank "
                              "count, the default); each: a SoC per tile and bank count")
    scaling.add_argument("--scaling-json", type=Path, default=Path("build/bench_scaling.json"),
                         help="the scaling points, merged point by point (default build/bench_scaling.json)")
    scaling.add_argument("--scaling-png", type=Path, default=Path("build/scaling.png"),
                         help="the plot of every correct point in --scaling-json (default build/scaling.png)")
    parser.add_argument("--parallel-device", type=_board_or_device, default="model",
                        help="the parallel section's chip: each group is N of it (default model); with {n} in it, "
                             "a board of N chips (model:chips={n}: collectives over the chip link)")
    parser.add_argument("--parallel-modes", type=types.names(tuple(bench_parallel.MODES)),
                        default=list(bench_parallel.MODES), metavar="MODES",
                        help="the parallel section's parts, comma-separated: tp, pp, tp-pp, dp (default all)")
    parser.add_argument("--parallel-tp-block", type=block_size, default=bench_parallel.TP_SIZE,
                        metavar="SEQ,D_MODEL,HEADS,FFN",
                        help="the encoder block of the parallel section's TP and DP parts (default "
                             f"{bench_parallel.TP_SIZE.seq},{bench_parallel.TP_SIZE.model},{bench_parallel.TP_SIZE.heads},"
                             f"{bench_parallel.TP_SIZE.ffn})")
    parser.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the sections in ``args.only``, print their tables and merge their figures into ``args.out``."""
    if args.sections:
        args.only = [s for listed in args.sections for s in listed]
    reason = verilator_missing() if set(args.only) - {"serving", "collectives", "parallel", "link"} else None
    if reason:
        print(f"dx1 bench: cannot run: {reason}", file=sys.stderr)
        return 2
    if "serving" in args.only:
        from .serving.cli import bench_arguments_error

        why = bench_arguments_error(args)
        if why:
            print(f"dx1 bench: error: {why}", file=sys.stderr)
            return 2
    try:
        report = json.loads(args.out.read_text()) if args.out.exists() else {}
    except ValueError:
        report = {}  # an unreadable earlier file: start afresh
    report["machine"] = {"python": platform.python_version(), "platform": platform.platform()}
    ok = True
    steps = [s for s in SECTIONS if s in args.only]
    for step, section in enumerate(steps, 1):
        if section == "tile":
            print(f"[{step}/{len(steps)}] Verilator: utilisation sweep of back-to-back GEMMs on dx1_tile_core_a8, "
                  "then the Amaranth simulator on the shared workload ...", flush=True)
            report.update(tile_section())
            ok &= all(r["correct"] for r in report["utilisation_sweep"]) and \
                report["sim_speed"]["amaranth"]["macs"] == report["sim_speed"]["verilator"]["macs"]
        elif section == "soc":
            print(f"[{step}/{len(steps)}] The SoC RTL through the driver (sim transport), GEMMs with all DMA; "
                  "then the golden model ...", flush=True)
            report["soc"] = soc_bench()
            ok &= all(r["correct"] for r in report["soc"]["runs"])
        elif section == "simspeed":
            print(f"[{step}/{len(steps)}] Simulated SoC cycles per second over a whole GEMM, per way of serving "
                  "the SoC (clock, host memory path), interleaved ...", flush=True)
            report["simspeed"] = simspeed_bench()
            ok &= all(r["correct"] for runs in report["simspeed"]["runs"].values() for r in runs) and \
                all(r["correct"] for r in report["simspeed"]["versus_amaranth"]["runs"].values())
        elif section == "boardspeed":
            boards = ", ".join(f"{n}" + (f" on {t} threads" if t > 1 else "") for n, t in bench_boardspeed.BOARDS[1:])
            print(f"[{step}/{len(steps)}] The native server idle: one SoC and boards of {boards} chips, cycles per "
                  "server CPU second and per wall second, interleaved ...", flush=True)
            report["boardspeed"] = bench_boardspeed.boardspeed_bench(
                {label: shlex.split(command) for label, command in args.boardspeed_also})
        elif section == "scaling":
            print(f"[{step}/{len(steps)}] Scaling: GEMMs of {','.join(map(str, args.scaling_sizes))} cubed on "
                  f"{','.join(map(str, args.scaling_tiles))} tiles of SoCs with "
                  f"{','.join(map(str, args.scaling_banks))} memory banks ({args.scaling_socs} SoCs) ...", flush=True)
            report["scaling"] = bench_scaling.scaling_bench(args.scaling_json, args.scaling_sizes, args.scaling_tiles,
                                                            args.scaling_banks, args.scaling_socs)
            bench_scaling.plot(report["scaling"], args.scaling_png)
            ok &= all(p["correct"] for p in report["scaling"]["points"])
        elif section == "perfmodel":
            print(f"[{step}/{len(steps)}] The performance model against the SoC RTL over a sweep of GEMM shapes ...",
                  flush=True)
            report["perf_model"] = perfmodel_bench()
        elif section == "vector":
            print(f"[{step}/{len(steps)}] The vector unit on long rows, on the SoC RTL and the golden model, with the "
                  "performance model's prediction ...", flush=True)
            report["vector"] = bench_vector.vector_bench()
            report["vector"]["blocks"] = bench_vector.block_bench()
            ok &= all(r["same_bytes"] for r in report["vector"]["runs"]) and all(
                d["exact"] for b in report["vector"]["blocks"]["blocks"].values() for d in b["devices"].values())
        elif section == "collectives":
            print(f"[{step}/{len(steps)}] Collectives, host-staged: every op on four golden models, all-reduce on "
                  "two simulators, ring and direct, like nccl-tests ...", flush=True)
            report["collectives"] = bench_collectives.collectives_bench()
            ok &= bench_collectives.correct(report["collectives"])
        elif section == "parallel":
            print(f"[{step}/{len(steps)}] Parallel: tensor, pipeline and data parallelism on groups of "
                  f"{args.parallel_device} against one chip ...", flush=True)
            report["parallel"] = bench_parallel.parallel_bench(args.parallel_device, tuple(args.parallel_modes),
                                                                 tp_block=args.parallel_tp_block)
            ok &= bench_parallel.correct(report["parallel"])
        elif section == "link":
            print(f"[{step}/{len(steps)}] The chip-to-chip link on its RTL (Amaranth's simulator): SENDs of "
                  f"{', '.join(map(str, args.link_sizes))} bytes between two endpoints, WRITE and ADD ...", flush=True)
            report["link"] = bench_link.link_bench(tuple(args.link_sizes))
            ok &= all(r["ok"] for r in report["link"]["runs"])
        elif section == "serving":
            where = ", ".join(w for w, skip in (("over HTTP on loopback", args.serving_no_http),
                                                 ("on the device's clock", args.serving_no_clock)) if not skip)
            print(f"[{step}/{len(steps)}] Serving: {' against '.join(args.serving_modes)} batching under one Poisson "
                  f"load, {where} ...", flush=True)
            report["serving"] = serving_cli.bench_section(args)
        else:
            print(f"[{step}/{len(steps)}] The serial link: bulk throughput on the board RTL in simulated time, "
                  "and dx1 gemm over sim, serial (CRC and UARTBone register frames) and a faulty serial line ...",
                  flush=True)
            report["serial"] = serial_bench(args.serial_sizes)
            ok &= all(r["correct"] for r in report["serial"]["throughput"]) and \
                all(run["correct"] for run in report["serial"]["gemm"].values()) and \
                report["serial"]["gemm"]["serial_faulty"]["first_attempt"]
    if "tile" in args.only:
        print_tile(report)
    if "soc" in args.only:
        print_soc(report["soc"])
    if "simspeed" in args.only:
        print_simspeed(report["simspeed"])
    if "boardspeed" in args.only:
        bench_boardspeed.print_boardspeed(report["boardspeed"])
    if "serial" in args.only:
        print_serial(report["serial"])
    if "perfmodel" in args.only:
        print_perfmodel(report["perf_model"])
    if "vector" in args.only:
        bench_vector.print_vector(report["vector"])
        bench_vector.print_blocks(report["vector"]["blocks"])
    if "scaling" in args.only:
        bench_scaling.print_table(report["scaling"])
        print(f"\nscaling plot written to {args.scaling_png}, points to {args.scaling_json}")
    if "serving" in args.only:
        print("\n" + report["serving"]["table"])
    if "collectives" in args.only:
        bench_collectives.print_collectives(report["collectives"])
    if "parallel" in args.only:
        bench_parallel.print_parallel(report["parallel"])
    if "link" in args.only:
        bench_link.print_link(report["link"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {args.out}")
    if not ok:
        print("dx1 bench: a run gave a wrong result or the simulators disagree on the MAC count", file=sys.stderr)
    return 0 if ok else 1


def tile_section() -> dict:
    """The utilisation sweep in Verilator and the Verilator-vs-Amaranth speed comparison."""
    sweep = [{"m": m, "k_chunks": 4, "count": 8} for m in SWEEP]
    verilator = verilator_bench(sweep + [SHARED])
    amaranth = amaranth_bench(SHARED)
    shared_v = verilator[-1]
    ratio = shared_v["cycles_per_s"] / amaranth["cycles_per_s"]
    return {"utilisation_sweep": verilator[:-1],
            "sim_speed": {"workload": SHARED, "verilator": shared_v, "amaranth": amaranth, "ratio": ratio}}


def print_tile(report: dict) -> None:
    print("\nMAC utilisation, back-to-back GEMMs (8x8 array, peak 64 MAC/cycle, 4 chunks x 8 commands):")
    print(f"  {'rows/GEMM':>9} {'cycles':>8} {'MACs':>10} {'utilisation':>11}  correct")
    for r in report["utilisation_sweep"]:
        print(f"  {r['m']:>9} {r['cycles']:>8} {r['macs']:>10} {r['utilisation']:>10.1%}  {r['correct']}")
    speed = report["sim_speed"]
    shared_v, amaranth, ratio = speed["verilator"], speed["amaranth"], speed["ratio"]
    print(f"\nSimulation speed, same workload ({SHARED['count']} GEMMs x {SHARED['m']} rows x "
          f"{SHARED['k_chunks']} chunks, {shared_v['cycles']} cycles):")
    print(f"  Verilator (cocotb, Python off the per-cycle path): {shared_v['cycles_per_s']:>10,.0f} cycles/s")
    print(f"  Amaranth Python simulator:                         {amaranth['cycles_per_s']:>10,.0f} cycles/s")
    print(f"  ratio: Verilator is {ratio:,.0f}x faster")
    long_run = report["utilisation_sweep"][-1]
    print(f"  Verilator on the longest stream ({long_run['cycles']} cycles): {long_run['cycles_per_s']:,.0f} cycles/s")


def print_soc(soc: dict) -> None:
    print("\nint8 GEMM through the driver on the SoC RTL (utilisation = PERF MACs / (PERF cycles x 64 x tiles)):")
    for r in soc["runs"]:
        m, k, n = r["shape"]
        print(f"  {m:>3}x{k}x{n} on {r['tiles']} tile(s): {r['utilisation']:6.1%}  {r['cycles']:>8} cycles  "
              f"{r['dma_bytes']:>8} DMA bytes  {r['round_trips']:>6} round trips  "
              f"{r['sim_cycles_per_s']:>8,.0f} sim cycles/s  correct {r['correct']}")
    g = soc["golden_model"]
    print(f"  golden model, {'x'.join(map(str, g['shape']))}: {g['macs_per_s']:,.0f} MAC/s ({g['wall_s']:.2f} s)")
