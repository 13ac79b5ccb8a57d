"""``python -m dx1_bringup.fuzz``: differential fuzzing of two or more devices (``make fuzz``).

Exit status 0 when every device agreed, 1 at a mismatch (the reproducer capture is written and the
command that replays it printed), 2 for bad arguments or a device that cannot be opened.
"""

from __future__ import annotations

import argparse
import sys

from dx1_driver import Device, DriverError

from ..cli import args as types
from .generate import StreamParams
from .runner import fuzz, write_report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dx1_bringup.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=types.positive, default=10_000, help="command budget (default 10000)")
    ap.add_argument("--seed", type=types.seed, default=1, help="seed of the whole run (default 1)")
    ap.add_argument("--devices", type=types.devices, default=["model", "sim"],
                    help="devices to compare, the reference first (default model,sim)")
    ap.add_argument("--batch", type=types.positive, default=StreamParams.length,
                    help=f"commands per queue and batch, 1 to 62 (default {StreamParams.length}); both tiles run "
                         f"a batch at once")
    ap.add_argument("--segment", type=types.positive, default=5000,
                    help="random commands per segment; each starts from a reset device (default 5000)")
    ap.add_argument("--out", default="build/fuzz.json", help="report file (default build/fuzz.json)")
    ap.add_argument("--repro-dir", default="build", help="where a reproducer capture goes (default build)")
    args = ap.parse_args(argv)
    prog = ap.prog
    try:
        params = StreamParams(length=args.batch)
    except ValueError as e:
        ap.error(f"argument --batch: {e}")
    opened: list[Device] = []
    try:
        for name in args.devices:
            if name == "sim":
                print("fuzz: starting a private simulator of the SoC RTL (the first run builds it) ...", flush=True)
            opened.append(Device.open(name))
        report = fuzz(opened, args.devices, commands=args.commands, seed=args.seed, params=params,
                      segment_commands=args.segment, repro_dir=args.repro_dir,
                      progress=lambda line: print(line, flush=True))
        # Reported before the devices close: closing one that stopped answering can take its link's timeout.
        write_report(report, args.out)
        print(report.summary())
        for d, seconds in sorted(report.device_seconds.items()):
            print(f"  device {d}: {seconds:.1f} s running events")
        if not report.ok:
            print(f"reproducer: {report.repro}\nreplay it: {report.replay_command}", flush=True)
            return 1
        print(f"report: {args.out}")
        return 0
    except (ValueError, DriverError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    finally:
        for dev in opened:
            dev.close()

if __name__ == "__main__":
    sys.exit(main())
