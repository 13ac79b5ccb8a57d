"""``dx1 bringup``: the command line of :func:`~.run.run_bringup`."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dx1_driver import Transport, TransportError, open_transport

from ..cli import args as types
from ..spec import BUS_BYTES
from ..timeline import add_timeline_arguments, record_link
from .report import REGION_CHECK
from .run import run_bringup

__all__ = ["add_parser", "cmd_bringup"]


@contextlib.contextmanager
def _traced_link(device: str, path: str | None, fmt: str | None, summary: list[str]) -> Iterator[str | Transport]:
    """``--timeline``: open ``device`` here and record its transport requests to ``path``; else pass the string on.

    A link that does not open is left to :func:`run_bringup` to diagnose (no timeline then).
    """
    if path is None:
        yield device
        return
    try:
        transport = open_transport(device)
    except TransportError:
        yield device
        return
    try:
        with record_link(transport, path, fmt, summary=summary) as traced:
            yield traced
    finally:
        transport.close()


def cmd_bringup(args: argparse.Namespace) -> int:
    """Run :func:`run_bringup` for ``dx1 bringup``; exit 0 on a pass, 1 on a failure, 2 on a bad argument."""
    path = Path(args.report)
    try:  # refuse a report path that cannot be written before bringing anything up
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("a").close()
    except OSError as e:
        print(f"dx1 bringup: cannot write the report to {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    if args.device == "sim":
        print("  starting a private simulator of the SoC RTL (the first run builds it: minutes) ...",
              flush=True)
    timeline: list[str] = []
    try:
        with _traced_link(args.device, args.timeline, args.timeline_format, timeline) as link:
            report = run_bringup(link, seed=args.seed, mem_bytes=args.mem_bytes, timeout=args.timeout,
                                  capture=args.capture)
    except ValueError as e:
        print(f"dx1 bringup: {e}", file=sys.stderr)
        return 2
    for line in timeline:
        print(f"  {line}")
    path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    print(f"  report: {path}")
    if args.capture is not None and Path(args.capture).exists():
        print(f"  capture: {args.capture} (replay it with dx1 replay {args.capture} --device D)")
    if any(c.what == REGION_CHECK and not c.ok for step in report.steps for c in step.checks):
        print(f"dx1 bringup: --mem-bytes {args.mem_bytes} is more than the device memory", file=sys.stderr)
        return 2
    return 0 if report.passed else 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bringup`` to a ``dx1`` sub-command set (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("bringup", help="bring a device up step by step; stop at the first failure",
                              description="bring a device up step by step: link, identity, registers, memory, DMA, "
                                          "GEMM, counters, interrupts; stop at the first failure")
    p.add_argument("--device", type=types.device, default="model",
                   help="model, model:FAULTS (e.g. model:stuck-bit=5, model:alias-bit=12), sim, sim://HOST:PORT, "
                        "serial:URL[@BAUD], pcie:BDF (default model)")
    p.add_argument("--report", default="build/bringup.json", help="JSON report path (default build/bringup.json)")
    p.add_argument("--seed", type=types.seed, default=None,
                   help="seed of the random patterns (default: random, printed)")
    p.add_argument("--mem-bytes", type=types.byte_count(BUS_BYTES), default=None,
                   help="bytes of device memory from 0 for the address-in-address and random tests "
                        "(default: all of it)")
    p.add_argument("--timeout", type=types.seconds, default=10.0,
                   help="seconds a queue may make no progress (default 10)")
    add_timeline_arguments(p)
    p.add_argument("--capture", metavar="FILE", type=types.writable_file, default=None,
                   help="write what the steps from the DMA loopback on do to the device to this capture file")
    p.set_defaults(func=cmd_bringup)
    return p
