"""The ``dx1`` parser: every tool's subcommand, each added by its own ``add_parser``.

Building the parser imports each tool's command-line module only; what a command runs is imported when it
runs, so ``dx1 --help`` and a refused argument stay quick.
"""

from __future__ import annotations

import argparse
import functools

from .. import bench, generate
from ..bringup import add_parser as add_bringup_parser
from ..collectives.cli import add_parser as add_collectives_parser
from ..fuzz.cli import add_parser as add_fuzz_parser
from ..parallel.cli import add_parser as add_plan_parser
from ..parallel.cli import extend_run_parser
from ..replay.cli import add_parser as add_replay_parser
from ..serving.cli import add_parser as add_serving_parser
from ..sim import report, serve
from ..workloads.cli import add_parser as add_run_parser
from . import fpga, gemm, info, predict, sim_tile

__all__ = ["build_parser"]


class _CommandList(argparse.HelpFormatter):
    """argparse's help with room for the longest subcommand name beside its one-line help.

    Python 3.11 measures subcommand names without the indent they are printed with, so a name as long as
    ``diff-demo`` would push its help onto the next line.
    """

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if action.help is not argparse.SUPPRESS:
            # The subactions are indented while iterated: _current_indent is theirs.
            for sub in self._iter_indented_subactions(action):
                self._action_max_length = max(self._action_max_length,
                                              len(self._format_action_invocation(sub)) + self._current_indent)


def _add_sim(sub) -> None:
    """``dx1 sim serve|tile|report``: the simulated device, one tile core alone, and the regression's summary."""
    sim = sub.add_parser("sim", help="the simulated SoC: sim serve, sim tile, sim report", formatter_class=_CommandList,
                         description="the simulated device: serve the SoC RTL, run a layer on one tile core's RTL, "
                                     "summarise a make sim regression")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True, metavar="COMMAND")
    serve_parser = sim_sub.add_parser("serve", help="serve the SoC RTL on 127.0.0.1 for --device sim://HOST:PORT",
                                      description=serve.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_arguments(serve_parser)
    serve_parser.set_defaults(func=functools.partial(serve.run, serve_parser))
    sim_tile.add_parser(sim_sub)
    report_parser = sim_sub.add_parser("report", help="the one-page summary of a make sim regression",
                                       description="the one-page summary of a make sim regression: results, "
                                                   "functional and code coverage (build/sim/summary.md)")
    report.add_arguments(report_parser)
    report_parser.set_defaults(func=report.run)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``dx1``: each subcommand sets ``func``, called with the parsed arguments for the exit status."""
    parser = argparse.ArgumentParser(prog="dx1", formatter_class=_CommandList,
                                     description="dx1-mini bring-up and co-simulation: every tool is a subcommand; "
                                                 "dx1 COMMAND --help says more")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    gemm.add_parser(sub)  # demo, gemm
    info.add_parser(sub)
    add_bringup_parser(sub)
    extend_run_parser(add_run_parser(sub))
    predict.add_parser(sub)
    add_replay_parser(sub)  # replay, diff, shrink
    add_fuzz_parser(sub)  # fuzz, diff-demo
    _add_sim(sub)
    add_collectives_parser(sub)
    add_plan_parser(sub)
    bench.add_parser(sub)
    add_serving_parser(sub)  # serve, lm
    generate.add_parser(sub)
    fpga.add_parser(sub)
    return parser
