"""`dx1 replay`, `dx1 diff` and `dx1 shrink`: a capture replayed, bisected between two devices, shrunk.

Exit status: 0 the capture agrees (replay) or the devices' effects agree (diff, shrink); 1 a mismatch
(diff and shrink: the devices differ, and what was found is printed); 2 a capture that cannot be used
(truncated, corrupted, another spec version or configuration), a device that cannot be opened, or an
output that cannot be written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from dx1_driver import Device, DriverError

from .. import argtypes as types
from .capture import Capture, CaptureError, load_capture
from .diff import TIMEOUT, DiffResult, bisect, prefix_events
from .replay import WAIT_TIMEOUT, describe_command, replay
from .shrink import shrink

__all__ = ["add_parser", "cmd_replay", "cmd_diff", "diff_main"]


def _load(path: str, prog: str) -> Capture | None:
    try:
        return load_capture(path)
    except (OSError, CaptureError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None


def _open(names: list[str], prog: str, *, board: bool = False) -> list[Device] | None:
    """Open each device (``board``: each with every other chip of its board, in rank order)."""
    opened: list[Device] = []
    for name in names:
        if name.startswith("sim") and not name.startswith("sim://"):
            print(f"  starting a private simulator ({name}; the first run builds it: minutes) ...", flush=True)
        try:
            opened.extend(Device.open_board(name) if board else [Device.open(name)])
        except (ValueError, DriverError) as e:
            print(f"{prog}: {e}", file=sys.stderr)
            for dev in opened:
                dev.close()
            return None
    return opened


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a capture on one device; exit 0 if every completion and downloaded byte agrees, 1 if not."""
    prog = "dx1 replay"
    capture = _load(args.capture, prog)
    if capture is None:
        return 2
    devices = _open(args.device, prog, board=True)
    if devices is None:
        return 2
    name = ",".join(args.device)
    start = time.monotonic()
    try:
        result = replay(capture, devices, timeout=args.timeout)
    except CaptureError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    finally:
        for dev in devices:
            dev.close()
    took = time.monotonic() - start
    chips = f" ({capture.chips} chips)" if capture.chips > 1 else ""
    if result.ok:
        print(f"{args.capture}: {result.events} events, {result.commands} commands replayed on {name}{chips} in "
              f"{took:.2f} s: every completion and downloaded byte agrees")
        return 0
    print(f"{args.capture}: mismatch on {name}{chips} at {result.mismatch}")
    return 1


def _report(path: str, names: list[str], result: DiffResult) -> None:
    print(f"dx1 diff {path}: {names[0]} vs {names[1]}, {result.commands} commands")
    if result.difference is None:
        print(f"  the effects of all {result.commands} commands agree (completions, the memory the capture "
              f"touches, every scratchpad and accumulator buffer)")
    elif result.before_commands:
        print("  the effects differ before the first command of the capture: on a cleared device, its uploads and "
              "DMA windows alone (and the clearing and read-back commands) leave different effects")
        print(f"  first difference: {result.difference}")
    else:
        ref = result.first
        print(f"  first command whose effect differs: command {ref.number} (submission order, from 0) of "
              f"{result.commands}: queue {ref.queue} (tile {ref.queue}), its command {ref.index}, in capture "
              f"event {ref.event}")
        print(f"    {describe_command(ref.command)}")
        print(f"    bytes {ref.command.hex(' ')}")
        print(f"  prefix of {ref.number} commands: same effects; prefix of {ref.number + 1}: {result.difference}")
    print(f"  search: {result.replays} prefix replays ({result.replays // 2} prefixes on each device), "
          f"{result.seconds:.2f} s")


def cmd_diff(args: argparse.Namespace) -> int:
    """Bisect a capture between two devices; with ``--shrink`` (or as ``dx1 shrink``) shrink what differs."""
    prog = f"dx1 {args.command}"
    if len(args.device) != 2:
        print(f"{prog}: give exactly two devices (--device A --device B), not {len(args.device)}", file=sys.stderr)
        return 2
    out = getattr(args, "output", None) or getattr(args, "shrink", None)
    capture = _load(args.capture, prog)
    if capture is None:
        return 2
    if capture.chips > 1:
        print(f"{prog}: {args.capture} was recorded on {capture.chips} chips; diff and shrink bisect one chip's "
              f"capture (replay it on a board with dx1 replay)", file=sys.stderr)
        return 2
    devices = _open(args.device, prog)
    if devices is None:
        return 2
    try:
        result = bisect(capture, devices, args.device, timeout=args.timeout,
                        progress=lambda line: print(f"  {line}", flush=True))
        _report(args.capture, args.device, result)
        if result.difference is None:
            return 0
        if out is not None:
            _shrink(args, capture, devices, result, out)
        return 1
    except (CaptureError, ValueError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    finally:
        for dev in devices:
            dev.close()


def _shrink(args: argparse.Namespace, capture: Capture, devices: list[Device], result: DiffResult,
            out: str) -> None:
    """Shrink the prefix that ends at the first differing command (the whole capture if it differs before one)."""
    k = capture.commands if result.first is None else result.first.number + 1
    prefix = Capture(capture.config, capture.ring_log2, prefix_events(capture, k, devices[0].caps.semaphores),
                     note=capture.note)
    start = time.monotonic()
    shrunk = shrink(prefix, devices, args.device, budget=args.budget, timeout=args.timeout,
                    progress=lambda line: print(f"  shrink: {line}", flush=True))
    shrunk.capture.save(out)
    print(f"  shrunk (ddmin over commands and uploads, then the uploads cut to what the commands reach; "
          f"{shrunk.tests} tests, {time.monotonic() - start:.2f} s): "
          f"{capture.commands} commands and {sum(1 for e in capture.events if e.kind == 'upload')} uploads in "
          f"{args.capture} ({Path(args.capture).stat().st_size} bytes); {shrunk.commands_before} commands and "
          f"{shrunk.uploads_before} uploads up to the first differing one; kept {shrunk.commands_after} commands "
          f"and {shrunk.uploads_after} uploads ({shrunk.upload_bytes} bytes)")
    print(f"  wrote {out} ({Path(out).stat().st_size} bytes, {shrunk.capture.commands} commands with the clearing "
          f"and read-back ones; recorded on {args.device[0]}): {shrunk.difference}")
    print(f"  replay it: dx1 replay {out} --device {args.device[1]}")


def _common(p: argparse.ArgumentParser, timeout: float) -> None:
    p.add_argument("capture", help="capture file (dx1-capture JSON lines)")
    p.add_argument("--timeout", type=types.seconds, default=timeout,
                   help=f"seconds a queue may go without a completion (default {timeout:g})")


def _two_devices(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", action="append", type=types.device, default=[], required=True,
                   help="a device string; give it twice, A then B (model, model:FAULTS, sim, sim:tiles=T, "
                        "sim:verilog=PATH, ...)")
    p.add_argument("--budget", type=types.positive, default=400, help="most shrink tests (default 400)")


def add_parser(subparsers: Any) -> None:
    """Add ``replay``, ``diff`` and ``shrink`` to a ``dx1`` sub-command set (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("replay", help="replay a capture on a device; check completions and bytes",
                              description="replay a capture on a device and check its completions and bytes")
    _common(p, WAIT_TIMEOUT)
    p.add_argument("--device", type=types.device_group, default=["model"], metavar="GROUP",
                   help="device string to replay on (default: model); a capture of several chips replays on a "
                        "board (model:chips=2, sim:chips=4) or a group of as many devices (model*2)")
    p.set_defaults(func=cmd_replay)
    p = subparsers.add_parser("diff", help="the first command of a capture two devices disagree on",
                              description="find the first command of a capture whose effect differs between two "
                                          "devices (bisection over prefixes)")
    _common(p, TIMEOUT)
    _two_devices(p)
    p.add_argument("--shrink", metavar="OUT", type=types.writable_file, default=None,
                   help="also shrink the capture up to that command (ddmin) and write it to OUT")
    p.set_defaults(func=cmd_diff)
    p = subparsers.add_parser("shrink", help="shrink a capture while two devices still differ on it",
                              description="shrink a capture (ddmin over commands and uploads) while two devices "
                                          "still differ on it; bisects first")
    _common(p, TIMEOUT)
    _two_devices(p)
    p.add_argument("-o", "--output", type=types.writable_file, required=True, help="the shrunk capture")
    p.set_defaults(func=cmd_diff)


def diff_main(argv: list[str]) -> int:
    """``dx1 diff ARGV...`` (``argv`` without ``diff``), for scripts that run it after preparing a capture."""
    parser = argparse.ArgumentParser(prog="dx1")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["diff", *argv])
    return cmd_diff(args)
