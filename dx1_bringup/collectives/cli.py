"""``dx1 collectives``: the collectives measured like nccl-tests on a device group (host-staged).

``--device`` takes a group device string (``model*4``, ``sim*2``, ``model,model,sim``: see
:func:`dx1_bringup.argtypes.device_group`).  Per size the table gives, out of place and in place, the time
of one collective in microseconds and in device cycles, algbw and busbw (MB/s, nccl-tests' factors), busbw as a
percentage of the host-staged hop's measured peak, and the wrong elements of a checked run
(:mod:`dx1_bringup.collectives.perf`).  Exit status 0 when every element was right, 1 when one was wrong or a
collective failed (its typed error is printed), 2 for bad arguments or a device that does not open.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Any

from .. import argtypes as types

__all__ = ["add_parser", "cmd_collectives", "DEFAULT_SIZES"]

#: The sizes measured unless ``--bytes`` says otherwise: 4 B to 256 KiB, by 16.
DEFAULT_SIZES = [4, 64, 1024, 16384, 262144]
_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "sendrecv", "all")


def add_parser(sub: Any) -> None:
    """Add ``collectives`` to the ``dx1`` subcommands."""
    p = sub.add_parser("collectives", help="collectives over a device group, measured like nccl-tests",
                       description=__doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=types.device_group, default="model*4", metavar="GROUP",
                   help="the ranks: device strings separated by commas, each optionally *N (default model*4)")
    p.add_argument("--op", choices=_OPS, default="all_reduce",
                   help="the collective, or all of them one after another (default all_reduce)")
    p.add_argument("--bytes", type=types.integers("byte counts of 0 or more", lambda v: v >= 0), metavar="SIZES",
                   default=DEFAULT_SIZES, help="buffer sizes in bytes, comma-separated, rounded down to whole "
                                               "elements (default " + ",".join(map(str, DEFAULT_SIZES)) + ")")
    p.add_argument("--dtype", choices=("int32", "int8"), default="int32", help="element type (default int32)")
    p.add_argument("--redop", choices=("sum", "avg"), default="sum",
                   help="reduction: sum (int8 requantised by --scale, default 1), avg (int8 only) (default sum)")
    p.add_argument("--scale", type=float, default=None, help="int8 sum: the requantisation scale (default 1)")
    p.add_argument("--root", type=types.seed, default=0, help="root rank of broadcast and reduce (default 0)")
    p.add_argument("--algorithm", choices=("default", "link", "ring", "direct", "both"), default="default",
                   help="link (the ring over the chip-to-chip link), ring (chunked, pipelined, host-staged), direct "
                        "(gather, reduce, scatter), both (every one the group can run) or default (link when every "
                        "rank is a chip of one board, else ring; the default)")
    p.add_argument("--chunk-bytes", type=types.positive, default=None,
                   help="the ring's chunk in bytes (default 65536)")
    p.add_argument("--iters", type=types.positive, default=5, help="timed collectives per size (default 5)")
    p.add_argument("--warmup", type=types.seed, default=1, help="untimed collectives first (default 1)")
    p.add_argument("--timeout", type=types.seconds, default=None,
                   help="seconds any one wait may take (default 10)")
    p.add_argument("--no-verify", action="store_true",
                   help="do not read back the results written (quicker; a bad memory cell then goes unnoticed)")
    p.add_argument("--seed", type=types.seed, default=1, help="seed of the inputs (default 1)")
    p.add_argument("--json", type=types.writable_file, default=None, metavar="FILE",
                   help="also write every row to FILE as JSON")
    p.add_argument("--timeline", type=types.writable_file, default=None, metavar="FILE",
                   help="over the chip link: write a timeline of every link command to FILE for ui.perfetto.dev "
                        "(a group per chip, a track per link direction, each collective's span per rank; device "
                        "cycles shown as ns); Chrome JSON for a .json FILE, else Perfetto protobuf")
    p.add_argument("--capture", type=types.writable_file, default=None, metavar="FILE",
                   help="record every rank's session (uploads, commands, completions, register writes, downloads) "
                        "into FILE, a capture of as many chips that `dx1 replay FILE --device GROUP` replays")
    p.add_argument("--faults", action="store_true",
                   help="instead of measuring: inject each fault (mismatched shape, dead chip, frozen and killed "
                        "simulator, CRC errors within and past the retries, a cut link) into a fresh group and print "
                        "every rank's outcome and the seconds it took to see it (deadline --timeout, default 2)")
    p.set_defaults(func=functools.partial(cmd_collectives, p))


def cmd_collectives(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Measure and print; the exit status as the module says."""
    from dx1_driver import DriverError

    from .errors import CollectiveError
    from .group import DEFAULT_TIMEOUT, DeviceGroup
    from .perf import PERF_OPS, format_table, hop_peak, measure

    if args.redop == "avg" and args.dtype != "int8" or args.scale is not None and args.dtype != "int8":
        parser.error("argument --redop/--scale: int32 reduces only by sum, without a scale (its sum wraps)")
    if args.faults:
        return _faults(args)
    ops = PERF_OPS if args.op == "all" else (args.op,)
    if any(name.startswith("sim") and "://" not in name for name in args.device):
        print("dx1 collectives: starting a private simulator per sim rank (the first run builds it: minutes) ...",
              flush=True)
    try:
        group = DeviceGroup.open(args.device, timeout=args.timeout or DEFAULT_TIMEOUT, verify=not args.no_verify)
    except (DriverError, OSError, ValueError) as e:
        print(f"dx1 collectives: cannot open {','.join(args.device)}: {e}", file=sys.stderr)
        return 2
    if args.timeline:
        group.link_log = []
    if args.root >= group.size:
        group.close()
        parser.error(f"argument --root: must be a rank of the group, 0 to {group.size - 1}, not {args.root}")
    recorder = None
    if args.capture:
        from ..replay import Recorder

        recorder = Recorder(group.devs, args.capture, note=f"dx1 collectives --op {args.op} on {','.join(args.device)}")
    if args.algorithm == "both":
        algorithms: tuple[str | None, ...] = ("link", "ring", "direct") if group.has_link else ("ring", "direct")
    else:
        algorithms = (None if args.algorithm == "default" else args.algorithm,)
    path = "link" if group.has_link else "host-staged"
    report: dict[str, Any] = {"devices": args.device, "ranks": group.size, "dtype": args.dtype, "path": path,
                              "verify": not args.no_verify, "iters": args.iters, "tables": []}
    wrong = 0
    try:
        biggest = max(args.bytes, default=4)
        limit = min(dev.caps.mem_bytes for dev in group.devs) // 3
        if biggest > limit:
            print(f"dx1 collectives: --bytes {biggest} does not fit: a rank's input, output and the peak "
                  f"measurement's staging must fit its device memory ({limit} bytes each at most here)",
                  file=sys.stderr)
            return 2
        peak = hop_peak(group, biggest)
        for op in ops:
            for algorithm in algorithms:
                options = {"algorithm": algorithm}
                if op in ("all_reduce", "reduce_scatter", "reduce"):
                    options.update(redop=args.redop, scale=args.scale)
                if args.chunk_bytes:
                    options["chunk_bytes"] = args.chunk_bytes
                rows, used_peak = measure(group, op, args.bytes, dtype=args.dtype, root=args.root, iters=args.iters,
                                  warmup=args.warmup, seed=args.seed, peak=peak, **options)
                shown = rows[0].algorithm if rows else (algorithm or "ring")
                print(format_table(group, op, shown if op != "sendrecv" else "point to point", rows,
                                   used_peak), flush=True)
                print()
                wrong += sum(r.out_of_place.wrong + (r.in_place.wrong if r.in_place else 0) for r in rows)
                link_table = bool(rows) and rows[0].algorithm == "link"
                report["tables"].append({"op": op, "algorithm": shown,
                                         ("peak_bytes_per_cycle" if link_table else "peak_bytes_per_s"): used_peak,
                                         "rows": [r.to_json() for r in rows]})
                if op == "sendrecv":
                    break
    except CollectiveError as e:
        print(f"dx1 collectives: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if recorder is not None:
            recorder.close()
            print(f"capture of {group.size} chip(s) written to {args.capture}")
        group.close()
    if args.timeline:
        from ..timeline import link_timeline, write

        write(link_timeline(group.link_log or []), args.timeline)
        print(f"timeline of {len(group.link_log or [])} link commands written to {args.timeline}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"written to {args.json}")
    if wrong:
        print(f"dx1 collectives: {wrong} wrong elements", file=sys.stderr)
    return 1 if wrong else 0


def _faults(args: argparse.Namespace) -> int:
    """``--faults``: the fault table; 0 when every rank of every fault got a typed error or the exact result."""
    from dx1_driver import DriverError

    from .faults import fault_table, format_faults

    timeout = args.timeout or 2.0
    try:
        rows = fault_table(args.device, timeout=timeout, progress=lambda line: print(line, flush=True))
    except (DriverError, OSError, ValueError) as e:
        print(f"dx1 collectives: cannot open {','.join(args.device)}: {e}", file=sys.stderr)
        return 2
    print(format_faults(args.device, timeout, rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.to_json() for r in rows], f, indent=2)
            f.write("\n")
        print(f"written to {args.json}")
    return 1 if any(r.outcome == "WRONG result" for r in rows) else 0
