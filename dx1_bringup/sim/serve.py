"""`dx1 sim serve`: the simulated device behind a loopback TCP socket.

Without ``--uart``: the SoC at register level, for ``--device sim://HOST:PORT``, served by the native C++
server (:mod:`.native`, the default) or by the cocotb one (``--server cocotb``: Python on the host side,
for debugging, the bus host path and the clocked top).
With ``--uart``: the whole board (SoC + UART bridge), its UART pins bridged to
the socket bit by bit, for ``--device serial:socket://HOST:PORT``: by the native board server (the default)
or by cocotbext-uart under cocotb (``--server cocotb``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import argtypes as types
from ..spec import SocConfig
from . import SimulationFailed, run_cocotb, verilator_missing
from .backdoor import HOST_PATHS
from .clocked_top import CLOCKED_BUS, CLOCKS
from .native import BOARD_MODULE, CHIP_MODULE, SERVERS, SOC_MODULE

__all__ = ["serve", "choose_server", "server_problem", "add_arguments", "run", "main", "SOC_MODULE", "BOARD_MODULE"]


def serve(port: int = 0, port_file: str | None = None, once: bool = False, quiet: bool = True, *,
          uart: bool = False, fault_rate: float = 0.0, fault_seed: int = 1, host_path: str = "backdoor",
          verilog: str | None = None, tiles: int | None = None, banks: int | None = None,
          mem_mib: int | None = None, vector: int | None = None, clock: str = "cocotb",
          server: str | None = None, chips: int | None = None, threads: int = 1) -> None:
    """Build the simulated device (first time only) and serve it until a client stops the server.

    ``server`` (SoC only): ``"native"``, the C++ server of :mod:`.native`, which this process becomes
    (``exec``), or ``"cocotb"``, :mod:`.soc_server` under cocotb; ``None``: the native one unless
    ``host_path`` or ``clock`` need cocotb's (:func:`choose_server`).

    ``host_path`` (SoC only): how host memory blocks are served, ``"backdoor"`` or ``"bus"`` (see
    :mod:`dx1_bringup.sim.backdoor`).  ``verilog``: serve this Verilog file of the SoC (a mutant, say)
    instead of the generated ``rtl/dx1_soc.v``.  ``tiles``, ``banks``, ``mem_mib`` and ``vector`` (SoC only,
    not with ``verilog``): serve the default SoC with this many tiles, memory banks and MiB of device memory, and
    for ``vector`` 0 tiles without a vector unit (``None``: the default's), generated and built in
    ``build/sim/configs/``
    (:func:`~dx1_bringup.sim.configs.soc_verilog`; minutes, the first time).  ``clock`` (SoC only):
    ``"cocotb"``, the bare SoC on cocotb's clock, or ``"verilator"``, the SoC inside the clocked top
    of :mod:`dx1_bringup.sim.clocked_top` (backdoor host path only).  ``chips`` (2 or more, native server, backdoor
    host path, not with ``uart`` or ``verilog``): a board of that many chips of the SoC (sized as above, with the
    default link) in a ring, one instance of one model of a chip each (:func:`~dx1_bringup.sim.configs.chip_verilog`),
    one socket a chip; ``threads`` (1 to ``chips``) threads tick the board's chips, each its share of every cycle
    (the same cycles on any number).
    """
    if host_path not in HOST_PATHS:
        raise ValueError(f"host_path must be one of {', '.join(HOST_PATHS)}, not {host_path!r}")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    server = choose_server(server, host_path=host_path, clock=clock)
    if server not in SERVERS:
        raise ValueError(f"server must be one of {', '.join(SERVERS)}, not {server!r}")
    if clock == "verilator" and host_path == "bus" and not uart:
        raise ValueError(CLOCKED_BUS)
    if problem := server_problem(server, uart=uart, host_path=host_path, clock=clock):
        raise ValueError(problem)
    sized = (tiles, banks, mem_mib, vector) != (None, None, None, None)
    if sized and (uart or verilog is not None):
        raise ValueError("tiles, banks, mem_mib and vector configure the generated SoC; they cannot be given with "
                         "uart or verilog")
    if threads != 1 and chips is None:
        raise ValueError(f"threads tick the chips of a board: {threads} threads need chips")
    if chips is not None:
        if problem := board_problem(chips, uart=uart, verilog=verilog, server=server, host_path=host_path,
                                    clock=clock, threads=threads):
            raise ValueError(problem)
        from .configs import chip_verilog, soc_config

        verilog = str(chip_verilog(soc_config(tiles, banks, mem_mib, vector)))
    elif sized:
        from .configs import soc_config, soc_verilog

        verilog = str(soc_verilog(soc_config(tiles, banks, mem_mib, vector)))
    env = {"DX1_SIM_PORT": str(port), "DX1_SIM_ONCE": "1" if once else "0", "DX1_SIM_HOST_PATH": host_path,
           "DX1_SIM_CLOCK": clock,
           "DX1_FAULT_RATE": repr(fault_rate), "DX1_FAULT_SEED": str(fault_seed)}
    if port_file:
        env["DX1_SIM_PORTFILE"] = port_file
    if server == "native":
        from .native import build

        module = BOARD_MODULE if uart else CHIP_MODULE if chips is not None else SOC_MODULE
        program = str(build(module, None if verilog is None else Path(verilog)))
        argv = [program, "--port", str(port)] + (["--port-file", port_file] if port_file else []) + (
            ["--once"] if once else []) + (["--chips", str(chips), "--threads", str(threads)] if chips is not None
                                           else [])
        sys.stdout.flush()
        os.execve(program, argv, {**os.environ, **env})
    module, cocotb_server = (BOARD_MODULE, "board_server") if uart else (SOC_MODULE, "soc_server")
    run_cocotb(module, f"dx1_bringup.sim.{cocotb_server}", env=env, quiet=quiet,
               name=f"serve-{port}" if port else "serve", verilog=None if verilog is None else Path(verilog),
               clocked=not uart and clock == "verilator")


def choose_server(server: str | None, *, host_path: str, clock: str) -> str:
    """``server``, or when it is None the native server unless the bus host path or the clocked top need cocotb's."""
    if server is not None:
        return server
    return "native" if (host_path, clock) == ("backdoor", "cocotb") else "cocotb"


def board_problem(chips: int, *, uart: bool, verilog: str | None, server: str, host_path: str,
                  clock: str, threads: int = 1) -> str | None:
    """Why a board of ``chips`` chips cannot be served with these options (``threads`` ticking it), or None."""
    from ..spec import MAX_CHIPS

    if isinstance(chips, bool) or not isinstance(chips, int) or not 2 <= chips <= MAX_CHIPS:
        return f"a board has 2 to {MAX_CHIPS} chips, not {chips!r}"
    if uart or verilog is not None:
        return "a board of chips is generated from the SoC's sources; it cannot be given with uart or verilog"
    if server != "native" or host_path != "backdoor" or clock != "cocotb":
        return "a board of chips is served by the native server only (backdoor host path, its own clock)"
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= chips:
        return f"a board of {chips} chips ticks on 1 to {chips} threads, not {threads!r}"
    return None


def server_problem(server: str, *, uart: bool, host_path: str, clock: str) -> str | None:
    """Why ``server`` cannot serve with these options, or None: the native servers serve the board, and the
    SoC through the backdoor with their own clock."""
    if server != "native" or uart:
        return None
    if host_path != "backdoor":
        return f"the host path {host_path!r} needs the cocotb server; the native one serves memory by the backdoor"
    if clock != "cocotb":
        return f"the {clock!r} clock is the cocotb server's clocked top; the native server drives the clock itself"
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``dx1 sim serve``, defined here only (``dx1`` and ``python -m`` both take them from here)."""
    parser.add_argument("--port", type=types.port, default=0, help="TCP port on 127.0.0.1 (default: any free port)")
    # Checked before building or starting anything, without creating the file: whoever waits for the port
    # (sim.launch) takes the file's existence to mean the port is in it.
    parser.add_argument("--port-file", type=types.writable_file, help="write the port here once listening")
    parser.add_argument("--once", action="store_true", help="stop when the first client disconnects")
    parser.add_argument("--uart", action="store_true",
                        help="serve the board's UART (for --device serial:socket://HOST:PORT) instead of the "
                             "register bus (for --device sim://HOST:PORT)")
    parser.add_argument("--fault-rate", type=types.fraction(0.5), default=0.0,
                        help="with --uart: bit error rate injected on the line (bits flip, bytes drop or repeat)")
    parser.add_argument("--fault-seed", type=types.seed, default=1, help="seed of the injected faults")
    parser.add_argument("--host-path", choices=HOST_PATHS, default="backdoor",
                        help="how host memory blocks reach device memory: straight into the array (backdoor, "
                             "simulation only; the default) or through the AXI4 memory port (bus)")
    parser.add_argument("--server", choices=SERVERS, default=None,
                        help="what serves the socket: the native C++ server built with the model (no Python "
                             "per cycle or per line bit; the default) or the cocotb server (Python, for debugging; "
                             "the default with --host-path bus or --clock verilator)")
    parser.add_argument("--clock", choices=CLOCKS, default="cocotb",
                        help="cocotb server: what drives the SoC's clock: cocotb on the bare SoC (the default), "
                             "or Verilator, inside a simulation top that also registers the reset (faster; with the "
                             "backdoor host path only); the board (--uart) runs on its server's clock")
    parser.add_argument("--verilog",
                        help="serve this Verilog file of the SoC instead of rtl/dx1_soc.v (not with --uart)")
    parser.add_argument("--tiles", type=types.positive, default=None,
                        help=f"serve a SoC with this many tiles, 1 to 8 (default {SocConfig().tiles}), generated into "
                             "build/sim/configs/ (not with --uart or --verilog)")
    parser.add_argument("--banks", type=types.positive, default=None,
                        help=f"serve a SoC with this many device memory banks, a power of two from 1 to 16 "
                             f"(default {SocConfig().mem_banks}; not with --uart or --verilog)")
    parser.add_argument("--mem-mib", type=types.positive, default=None,
                        help=f"serve a SoC with this many MiB of device memory, a power of two (default "
                             f"{SocConfig().mem_bytes >> 20}; not with --uart or --verilog)")
    parser.add_argument("--chips", type=types.positive, default=None,
                        help="serve a board of this many chips (2 to 8) of the SoC in a ring, with the default link, "
                             "one port a chip (the port file lists them in rank order; native server only)")
    parser.add_argument("--threads", type=types.positive, default=1,
                        help="with --chips: tick the board's chips on this many threads, 1 to the chip count "
                             "(each its share of every cycle; the same cycles on any number; default 1)")
    parser.add_argument("--vector", type=int, choices=(0, 1), default=None,
                        help="0: serve a SoC whose tiles have no vector unit (default 1; not with --uart or --verilog)")


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Check the options :func:`add_arguments` defined (``parser.error`` on a bad one) and serve."""
    if args.fault_rate and not args.uart:
        parser.error("--fault-rate needs --uart (faults are injected on the serial line)")
    if args.clock == "verilator" and args.host_path == "bus" and not args.uart:
        parser.error(CLOCKED_BUS)
    server = choose_server(args.server, host_path=args.host_path, clock=args.clock)
    if problem := server_problem(server, uart=args.uart, host_path=args.host_path, clock=args.clock):
        parser.error(f"--server {server}: {problem}")
    if args.verilog and args.uart:
        parser.error("--verilog replaces the SoC's Verilog and cannot be used with --uart (the board)")
    if args.verilog and not Path(args.verilog).is_file():
        parser.error(f"--verilog {args.verilog} is not a file; expected the Verilog of the SoC to serve")
    sized = (args.tiles, args.banks, args.mem_mib, args.vector) != (None, None, None, None)
    if sized and (args.uart or args.verilog):
        parser.error("--tiles, --banks, --mem-mib and --vector configure the generated SoC and cannot be used with "
                     "--uart or --verilog")
    if sized:
        from .configs import soc_config

        try:
            soc_config(args.tiles, args.banks, args.mem_mib, args.vector)
        except (TypeError, ValueError) as e:
            parser.error(f"--tiles/--banks/--mem-mib/--vector: {e}")
    if args.threads != 1 and args.chips is None:
        parser.error("--threads ticks the chips of a board: it needs --chips")
    if args.chips is not None and (problem := board_problem(args.chips, uart=args.uart, verilog=args.verilog,
                                                            server=server, host_path=args.host_path,
                                                            clock=args.clock, threads=args.threads)):
        parser.error(f"--chips: {problem}")
    reason = verilator_missing()
    if reason:
        print(f"dx1 sim serve: {reason}", file=sys.stderr)
        return 2
    what = "the board's UART" if args.uart else "the SoC's register and memory ports"
    print(f"dx1 sim serve: building the model if needed (minutes, the first time), then serving {what} on "
          f"127.0.0.1:{args.port or '(the port is in the log line below and --port-file)'}", flush=True)
    try:
        serve(args.port, args.port_file, args.once, quiet=False, uart=args.uart, fault_rate=args.fault_rate,
              fault_seed=args.fault_seed, host_path=args.host_path, verilog=args.verilog, tiles=args.tiles,
              banks=args.banks, mem_mib=args.mem_mib, vector=args.vector, clock=args.clock, server=server,
              chips=args.chips, threads=args.threads)
    except (SimulationFailed, RuntimeError) as exc:
        print(f"dx1 sim serve: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dx1 sim serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
