"""``dx1 fpga --board B`` (``make fpga``): build dx1-mini for an FPGA board with the flow of :mod:`dx1_bringup.fpga`.

``--board ulx3s`` makes a bitstream, timing and utilisation (the YoWASP toolchain); ``--board arty_a7`` writes the
Vivado build plan only (Vivado is not installed here).  Writes build/fpga/<board>/ with the design, the tools'
logs, nextpnr's report and summary.json.  Exit status: 0 built (or plan written), 1 a tool failed, 2 bad
arguments, 3 built but the system clock misses its target (0 with ``--allow-timing-fail``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from .. import argtypes as types

__all__ = ["add_parser", "cmd_fpga"]

#: Exit status when the design was built but misses its target clock.
EXIT_TIMING_FAILED = 3


def _board(text: str) -> str:
    """An argument type: the name of one of :data:`dx1_bringup.fpga.BOARDS` (imported only when parsed)."""
    from ..fpga import BOARDS

    if text not in BOARDS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(sorted(BOARDS))}, not {text!r}")
    return text


def _router(text: str) -> str:
    """An argument type: one of nextpnr's routers, :data:`dx1_bringup.fpga.ROUTERS` (imported only when parsed)."""
    from ..fpga import ROUTERS

    if text not in ROUTERS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(ROUTERS)}, not {text!r}")
    return text


def cmd_fpga(args: argparse.Namespace) -> int:
    """Build (or plan) the design for ``args.board``; the exit status as the module says."""
    from ..fpga import BOARDS, DEFAULT_ROUTER, BuildError, build, format_summary, with_units

    board = with_units(BOARDS[args.board], vector=args.vector, link=args.link)
    if args.clock is not None:
        board = dataclasses.replace(board, clk_freq=args.clock)
    variant = ("-novector" if not board.config.tile.vector else "") + ("-link" if args.link else "")
    out_dir = args.out or Path("build") / "fpga" / (board.name + variant)
    try:
        summary = build(board, out_dir, baud=args.baud, run_tools=not args.plan_only,
                        router=args.router or DEFAULT_ROUTER,
                        out=lambda line: print(line, flush=True))
    except (BuildError, ValueError) as e:
        print(f"dx1 fpga: build failed: {e}", file=sys.stderr)
        return 1
    print(format_summary(summary))
    print(f"summary: {out_dir / 'summary.json'}")
    if summary["built"] and not summary["timing_met"]:
        failed = {net: c for net, c in summary["clocks"].items() if not c["met"]}
        print(f"dx1 fpga: timing FAILED: {json.dumps(failed)}", file=sys.stderr)
        return 0 if args.allow_timing_fail else EXIT_TIMING_FAILED
    return 0


def add_parser(sub: Any) -> None:
    """Add ``fpga`` to the ``dx1`` subcommands."""
    p = sub.add_parser("fpga", help="an FPGA build: bitstream, Fmax and utilisation (make fpga)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--board", required=True, type=_board, help="the board to build for: ulx3s or arty_a7")
    p.add_argument("--baud", type=types.positive, default=3_000_000,
                   help="UART line rate (default 3000000; the ULX3S FTDI also does 115200 etc.)")
    p.add_argument("--clock", type=types.positive, metavar="HZ",
                   help="system clock in Hz instead of the board's target (the PLL must make it exactly)")
    p.add_argument("--vector", action=argparse.BooleanOptionalAction, default=None,
                   help="build the tile's vector unit or not (default: as the board's configuration has it)")
    p.add_argument("--link", action="store_true",
                   help="add the chip-to-chip link, its two ports looped back inside the FPGA")
    p.add_argument("--out", type=Path,
                   help="build folder (default build/fpga/<board>, with -novector and -link as asked)")
    p.add_argument("--router", type=_router,
                   help="nextpnr's router, router1 or router2 (default: dx1_bringup.fpga.DEFAULT_ROUTER, router1; "
                        "fpga/README.md has what each did)")
    p.add_argument("--plan-only", action="store_true", help="write the design and scripts, run no tool")
    p.add_argument("--allow-timing-fail", action="store_true",
                   help=f"exit 0 even when Fmax is below the target (default: exit {EXIT_TIMING_FAILED})")
    p.set_defaults(func=cmd_fpga)
