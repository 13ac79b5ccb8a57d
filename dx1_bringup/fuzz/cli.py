"""``dx1 fuzz`` (``make fuzz``) and ``dx1 diff-demo`` (``make diff-demo``): the fuzzer's commands.

``dx1 fuzz`` compares two or more devices on seeded random command streams.  Exit status 0 when every
device agreed, 1 at a mismatch (the reproducer capture is written and the command that replays it
printed), 2 for bad arguments or a device that cannot be opened.

``dx1 diff-demo`` shows ``dx1 diff`` finding a planted RTL bug in a fuzz stream.  It writes a mutant of the
SoC's Verilog (:mod:`dx1_bringup.sim.mutants`, by default ``postop-round``) to ``build/mutants/`` (built
there once, shared with the tests), records segment 0 of a fuzz stream of ``--commands`` random commands on
the golden model as a capture (``OUT/stream.capture``), then runs ``dx1 diff`` on it between ``model`` and
the mutant (``sim:verilog=PATH``) with ``--shrink OUT/shrunk.capture``.  Exit status as ``dx1 diff``: 1 when
it found the difference (the expected outcome), 0 when the mutant agreed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Any

from .. import argtypes as types
from .generate import StreamParams

__all__ = ["add_parser", "cmd_diff_demo", "cmd_fuzz"]

#: The mutant ``dx1 diff-demo`` plants unless told otherwise (one of :data:`dx1_bringup.sim.mutants.MUTANTS`).
DEFAULT_MUTANT = "postop-round"


def _stream_params(parser: argparse.ArgumentParser, batch: int) -> StreamParams:
    try:
        return StreamParams(length=batch)
    except ValueError as e:
        parser.error(f"argument --batch: {e}")


def cmd_fuzz(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the fuzzer on ``args.devices`` and write its report; the exit status as the module says."""
    from dx1_driver import Device, DriverError

    from .runner import fuzz, write_report

    params = _stream_params(parser, args.batch)
    opened: list[Device] = []
    try:
        for name in args.devices:
            if name == "sim":
                print("dx1 fuzz: starting a private simulator of the SoC RTL (the first run builds it: minutes) ...",
                      flush=True)
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
        print(f"dx1 fuzz: {e}", file=sys.stderr)
        return 2
    finally:
        for dev in opened:
            dev.close()


def cmd_diff_demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Plant the mutant, record the stream on the model and bisect it; the exit status of ``dx1 diff``."""
    from dx1_driver import Device

    from ..replay.cli import diff_main
    from ..sim.mutants import MUTANTS, write_mutant
    from .runner import record_stream

    if args.mutant not in MUTANTS:
        parser.error(f"argument --mutant: must be one of {', '.join(sorted(MUTANTS))}, not {args.mutant!r}")
    params = _stream_params(parser, args.batch)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    verilog = write_mutant(args.mutant)
    print(f"mutant {args.mutant}: {MUTANTS[args.mutant].description}\n  written to {verilog}")
    start = time.monotonic()
    with Device.open("model") as model:
        capture = record_stream(model, args.commands, seed=args.seed, params=params)
    path = out / "stream.capture"
    capture.save(path)
    print(f"stream: {capture.commands} commands ({args.commands} random, seed {args.seed}) recorded on model in "
          f"{time.monotonic() - start:.1f} s: {path}")
    return diff_main([str(path), "--device", "model", "--device", f"sim:verilog={verilog}",
                      "--shrink", str(out / "shrunk.capture"), "--budget", str(args.budget)])


def _batch(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=types.positive, default=StreamParams.length,
                        help=f"commands per queue and batch, 1 to 62 (default {StreamParams.length}); both tiles "
                             f"run a batch at once")


def add_parser(sub: Any) -> None:
    """Add ``fuzz`` and ``diff-demo`` to the ``dx1`` subcommands."""
    p = sub.add_parser("fuzz", help="random command streams compared on devices (make fuzz)",
                       description="differential fuzzing: random command streams on two or more devices, compared "
                                   "completion by completion and byte by byte")
    p.add_argument("--commands", type=types.positive, default=10_000, help="command budget (default 10000)")
    p.add_argument("--seed", type=types.seed, default=1, help="seed of the whole run (default 1)")
    p.add_argument("--devices", type=types.devices, default=["model", "sim"],
                   help="devices to compare, the reference first (default model,sim)")
    _batch(p)
    p.add_argument("--segment", type=types.positive, default=5000,
                   help="random commands per segment; each starts from a reset device (default 5000)")
    p.add_argument("--out", default="build/fuzz.json", help="report file (default build/fuzz.json)")
    p.add_argument("--repro-dir", default="build", help="where a reproducer capture goes (default build)")
    p.set_defaults(func=functools.partial(cmd_fuzz, p))
    p = sub.add_parser("diff-demo", help="dx1 diff finds and shrinks a planted RTL bug (make diff-demo)",
                       description="dx1 diff finds a planted RTL bug in a fuzz stream recorded on the model, then "
                                   "shrinks the capture")
    p.add_argument("--commands", type=types.positive, default=10_000,
                   help="random commands in the stream (default 10000)")
    p.add_argument("--seed", type=types.seed, default=1, help="seed of the stream (default 1)")
    _batch(p)
    p.add_argument("--mutant", default=DEFAULT_MUTANT,
                   help=f"the planted bug, a mutant of dx1_bringup.sim.mutants (default {DEFAULT_MUTANT})")
    p.add_argument("--out", default="build/diff-demo", help="folder for the captures (default build/diff-demo)")
    p.add_argument("--budget", type=types.positive, default=100, help="most shrink tests (default 100)")
    p.set_defaults(func=functools.partial(cmd_diff_demo, p))
    p = sub.add_parser("fuzz-link", help="random SENDs compared on two boards (chip link)",
                       description="differential fuzzing of the chip link: seeded random SEND batches (every "
                                   "outcome, cut links, injected CRC errors) on two boards, compared after each batch")
    p.add_argument("--commands", type=types.positive, default=1000, help="SEND budget (default 1000)")
    p.add_argument("--seed", type=types.seed, default=1, help="seed of the whole run (default 1)")
    p.add_argument("--boards", default="model:chips=4;model:chips=4", metavar="A;B",
                   help="the two boards' device strings, the reference first, separated by ';' (default "
                        "model:chips=4;model:chips=4)")
    p.add_argument("--capture", type=types.writable_file, default=None, metavar="FILE",
                   help="record the reference board's session (every chip) into FILE, for dx1 replay on the other")
    p.set_defaults(func=cmd_fuzz_link)


def cmd_fuzz_link(args: argparse.Namespace) -> int:
    """Run :func:`~dx1_bringup.fuzz.link.link_fuzz` and print what ran; exit 0 when the boards agreed, 1 when not,
    2 when a board did not open."""
    from .link import link_fuzz

    boards = args.boards.split(";")
    if len(boards) != 2:
        print(f"dx1 fuzz-link: --boards must be two device strings separated by ';', not {args.boards!r}",
              file=sys.stderr)
        return 2
    try:
        report = link_fuzz((boards[0], boards[1]), commands=args.commands, seed=args.seed, capture=args.capture)
    except ValueError as e:
        print(f"dx1 fuzz-link: {e}", file=sys.stderr)
        return 2
    outcomes = ", ".join(f"{name} {n}" for name, n in sorted(report.outcomes.items()))
    faults = ", ".join(f"{name} {n}" for name, n in sorted(report.faults.items())) or "none"
    print(f"dx1 fuzz-link: {report.commands} SENDs in {report.batches} batches on {report.chips} chips, seed "
          f"{report.seed}: {outcomes}; faults: {faults}")
    print(f"dx1 fuzz-link: {'the boards agree' if report.ok else 'MISMATCH: ' + report.mismatch}")
    if args.capture:
        print(f"dx1 fuzz-link: {boards[0]}'s session written to {args.capture}; replay it on the other board: "
              f"dx1 replay {args.capture} --device {boards[1]}")
    return 0 if report.ok else 1
