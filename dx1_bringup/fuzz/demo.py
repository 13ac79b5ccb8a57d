"""``python -m dx1_bringup.fuzz.demo`` (``make diff-demo``): ``dx1 diff`` finds a planted RTL bug in a fuzz stream.

It writes a mutant of the SoC's Verilog (:mod:`dx1_bringup.sim.mutants`, by default ``postop-round``)
to ``build/mutants/`` (built there once, shared with the tests), records segment 0 of a fuzz stream of
``--commands`` random commands on the golden model as a capture (``OUT/stream.capture``), then runs
``dx1 diff`` on it between ``model`` and the mutant (``sim:verilog=PATH``) with ``--shrink
OUT/shrunk.capture``.  Exit status as ``dx1 diff``: 1 when it found the difference (the expected
outcome), 0 when the mutant agreed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dx1_driver import Device

from ..cli import args as types
from ..replay.cli import diff_main
from ..sim.mutants import MUTANTS, write_mutant
from .generate import StreamParams
from .runner import record_stream


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dx1_bringup.fuzz.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=types.positive, default=10_000,
                    help="random commands in the stream (default 10000)")
    ap.add_argument("--seed", type=types.seed, default=1, help="seed of the stream (default 1)")
    ap.add_argument("--batch", type=types.positive, default=StreamParams.length,
                    help=f"commands per queue and batch (default {StreamParams.length})")
    ap.add_argument("--mutant", choices=sorted(MUTANTS), default="postop-round", help="the planted bug")
    ap.add_argument("--out", default="build/diff-demo", help="folder for the captures")
    ap.add_argument("--budget", type=types.positive, default=100, help="most shrink tests (default 100)")
    args = ap.parse_args(argv)
    try:
        params = StreamParams(length=args.batch)
    except ValueError as e:
        ap.error(f"argument --batch: {e}")
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


if __name__ == "__main__":
    sys.exit(main())
