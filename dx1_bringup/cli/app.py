"""The ``dx1`` parser: every tool's subcommand, each added by its own ``add_parser``."""

from __future__ import annotations

import argparse
import functools

from ..bringup import add_parser as add_bringup_parser
from ..replay.cli import add_parser as add_replay_parser
from ..sim import serve
from ..workloads.cli import add_parser as add_run_parser
from . import gemm, info, predict, tile_demo

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``dx1``: each subcommand sets ``func``, called with the parsed arguments for the exit status."""
    parser = argparse.ArgumentParser(prog="dx1", description="dx1-mini bring-up and co-simulation")
    sub = parser.add_subparsers(dest="command", required=True)
    info.add_parser(sub)
    tile_demo.add_parser(sub)
    gemm.add_parser(sub)
    predict.add_parser(sub)
    sim = sub.add_parser("sim", help="the simulated device")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    serve_parser = sim_sub.add_parser("serve", help="serve the SoC RTL in Verilator on 127.0.0.1 for --device "
                                                    "sim://HOST:PORT (or the board's UART with --uart)")
    serve.add_arguments(serve_parser)
    serve_parser.set_defaults(func=functools.partial(serve.run, serve_parser))
    add_bringup_parser(sub)
    add_run_parser(sub)
    add_replay_parser(sub)
    return parser
