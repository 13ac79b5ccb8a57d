"""``dx1 gemm M K N``: a random int8 GEMM through the driver on a device, verified bit for bit; ``dx1 demo``."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

import numpy as np

from ..timeline import add_timeline_arguments
from . import args as types
from .devices import open_device
from .operands import gemm_problem

__all__ = ["DEMO_DEVICE", "DEMO_SHAPE", "add_parser", "cmd_gemm"]

#: The device strings ``--device`` takes, for the help texts.
DEVICE_HELP = ("model, sim (a private simulator of the RTL), sim://HOST:PORT, "
               "serial:URL[@BAUD][,timeout=SECONDS][,retries=N] or pcie:BDF")


def _traced(dev, path: str | None, fmt: str | None, summary: list[str]):
    """``--timeline``: a timeline of what runs on ``dev`` written to ``path`` (nothing without a path)."""
    if path is None:
        return contextlib.nullcontext(dev)
    from ..timeline import record

    return record(dev, path, fmt, summary=summary)


def cmd_gemm(args: argparse.Namespace) -> int:
    from dx1_driver import DriverError

    from ..runtime import gemm_run, reference

    prog = f"dx1 {args.command}"
    m, k, n = args.m, args.k, args.n
    a, b, bias, post = gemm_problem(m, k, n, args.seed, not args.no_post)
    what = "int32 (bias, no post-op)" if post is None else \
        f"int8 (bias, ReLU, requantise x{post.mult} >> {post.shift})"
    print(f"{prog}: {m}x{k} @ {k}x{n} int8 -> {what} on {args.device} (seed {args.seed})")
    dev = open_device(args.device, prog)
    if dev is None:
        return 2
    if args.capture is not None:
        from ..replay import Recorder

        dev = Recorder(dev, args.capture, note=f"{prog} {m} {k} {n} --seed {args.seed} on {args.device}")
    timeline: list[str] = []
    with dev:
        start = time.perf_counter()
        try:
            with _traced(dev, args.timeline, args.timeline_format, timeline) as traced:
                result, stats = gemm_run.run_gemm(traced, a, b, bias, post, tiles=args.tiles, timeout=args.timeout)
        except ValueError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        except DriverError as exc:
            print(f"{prog}: FAILED: {exc}", file=sys.stderr)
            return 1
        wall = time.perf_counter() - start
        arr = dev.caps.array
        link = getattr(dev.transport, "stats", None)
    expected = reference.reference_gemm(a, b, bias, post)
    commands = ", ".join(f"tile {t}: {c}" for t, c in stats.commands.items())
    print(f"  shape        M={m} K={k} N={n}: {m * k * n} useful MACs, {stats.macs} issued (padding to {arr})")
    print(f"  commands     {sum(stats.commands.values())} ({commands})")
    print("  cycles       " + ", ".join(f"tile {t}: {stats.delta(t).cycles}" for t in stats.tile_ids))
    print(f"  utilisation  {stats.utilisation():.1%} of {len(stats.tile_ids)} x {arr}x{arr} MAC/cycle "
          f"(MACs / (cycles x {arr}^2 x tiles); per tile "
          + ", ".join(f"{stats.utilisation(t):.1%}" for t in stats.tile_ids) + ")")
    print(f"  traffic      {stats.dma_bytes} bytes of DMA (the plan: {stats.planned_dma_bytes}), "
          f"{stats.host_bytes_written} written and {stats.host_bytes_read} read by the host")
    print(f"  wall time    {wall:.2f} s")
    if link is not None:
        print(f"  link         {link.summary()} (since the link was opened)")
    for line in timeline:
        print(f"  {line}")
    mismatch = np.argwhere(result != expected)
    if len(mismatch):
        i, j = (int(x) for x in mismatch[0])
        print(f"{prog}: FAILED: {len(mismatch)} of {result.size} elements differ; first at C[{i}, {j}]: "
              f"device {int(result[i, j])}, reference {int(expected[i, j])}", file=sys.stderr)
        return 1
    print(f"{prog}: PASS, device == reference_gemm bit for bit")
    return 0


#: What ``dx1 demo`` runs unless told otherwise: ``dx1 gemm 128 128 128 --device sim``.
DEMO_SHAPE = (128, 128, 128)
DEMO_DEVICE = "sim"


def _add(sub: Any, name: str, help: str, description: str, shape: tuple[int, int, int] | None, device: str) -> None:
    gemm = sub.add_parser(name, help=help, description=description)
    types.add_shape(gemm, shape)
    gemm.add_argument("--seed", type=types.seed, default=1, help="operand seed (default 1)")
    gemm.add_argument("--device", type=types.device, default=device, help=f"{DEVICE_HELP} (default {device})")
    gemm.add_argument("--no-post", action="store_true",
                      help="keep the int32 accumulators (plus bias) instead of requantising to int8")
    gemm.add_argument("--tiles", type=types.positive, default=None, help="how many tiles to use (default: all)")
    gemm.add_argument("--timeout", type=types.seconds, default=30.0,
                      help="seconds a wait may go without a completion before the driver recovers the tile "
                           "(default 30: a simulator on a busy machine is slow; the hardware watchdog catches "
                           "a stuck unit sooner)")
    gemm.add_argument("--capture", metavar="FILE", type=types.writable_file, default=None,
                      help="write what the run does to the device to this capture file "
                           "(replay it with dx1 replay FILE --device D)")
    add_timeline_arguments(gemm)
    gemm.set_defaults(func=cmd_gemm)


def add_parser(sub: Any) -> None:
    """Add ``gemm`` and ``demo`` (the same GEMM, by default 128^3 on a private simulator of the RTL) to ``dx1``."""
    _add(sub, "demo", "the main job (make demo): dx1 gemm 128 128 128 --device sim",
         "the main job, what make demo runs: dx1 gemm with a 128x128x128 GEMM on a private simulator of the SoC "
         "RTL, through the driver, verified bit for bit", DEMO_SHAPE, DEMO_DEVICE)
    _add(sub, "gemm", "a random int8 GEMM M K N on a device, verified bit for bit",
         "run a random int8 GEMM through the driver and verify it bit for bit", None, "model")
