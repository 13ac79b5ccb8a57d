"""`dx1 sim serve`: run the SoC in Verilator behind a loopback TCP socket for the `sim` transport."""

from __future__ import annotations

import argparse
import sys

from . import SimulationFailed, run_cocotb, verilator_missing

__all__ = ["serve", "main", "SOC_MODULE"]

SOC_MODULE = "dx1_soc"


def serve(port: int = 0, port_file: str | None = None, once: bool = False, quiet: bool = True) -> None:
    """Build the SoC (first time only) and serve it until a client stops the server."""
    env = {"DX1_SIM_PORT": str(port), "DX1_SIM_ONCE": "1" if once else "0"}
    if port_file:
        env["DX1_SIM_PORTFILE"] = port_file
    run_cocotb(SOC_MODULE, "dx1_bringup.sim.soc_server", env=env, quiet=quiet,
               name=f"serve-{port}" if port else "serve")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dx1 sim serve", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (default: any free port)")
    parser.add_argument("--port-file", help="write the port here once listening")
    parser.add_argument("--once", action="store_true", help="stop when the first client disconnects")
    args = parser.parse_args(argv)
    reason = verilator_missing()
    if reason:
        print(f"dx1 sim serve: {reason}", file=sys.stderr)
        return 2
    print(f"dx1 sim serve: building {SOC_MODULE} if needed, then serving on 127.0.0.1:"
          f"{args.port or '(see the log line or --port-file)'}", flush=True)
    try:
        serve(args.port, args.port_file, args.once, quiet=False)
    except SimulationFailed as exc:
        print(f"dx1 sim serve: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
