"""`dx1 plan MODEL --chips N`, and `dx1 run encoder|decoder --tp N` (in one process, or one rank under torchrun)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .. import argtypes as types

__all__ = ["add_parser", "extend_run_parser"]


def block_size(text: str):
    """A ``--block`` value, ``SEQ,D_MODEL,HEADS,FFN``, as a :class:`~dx1_bringup.workloads.encoder.BlockSize`."""
    from ..workloads.encoder import BlockSize

    try:
        seq, model, heads, ffn = (int(v) for v in text.split(","))
        return BlockSize(seq, model, heads, ffn)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"a block is SEQ,D_MODEL,HEADS,FFN (four positive integers, widths "
                                         f"multiples of 8): {e}") from None


def cmd_plan(args: argparse.Namespace) -> int:
    from .plan import MODELS, plan, plan_table

    try:
        result = plan(MODELS[args.model], args.chips, device=args.device, micro=args.micro,
                      host_mbps=args.host_mbps, seed=args.seed)
    except ValueError as e:
        print(f"dx1 plan: {e}", file=sys.stderr)
        return 2
    print(plan_table(result))
    return 0


def add_parser(sub) -> None:
    from .plan import MODELS

    p = sub.add_parser("plan", help="choose a model's TP and PP degrees over N chips",
                       description="cost every TP x PP placement of a model from device memory, the weights' and "
                                   "activations' sizes and the performance model, and choose one")
    p.add_argument("model", choices=sorted(MODELS), help="; ".join(str(m) for m in MODELS.values()))
    p.add_argument("--chips", type=types.positive, required=True, help="how many chips")
    p.add_argument("--device", type=types.device, default="model",
                   help="a chip like the ones to place on (its tiles, banks, device memory; default model)")
    p.add_argument("--micro", type=types.positive, default=8, help="micro-batches a batch (default 8)")
    p.add_argument("--host-mbps", type=float, default=98.0,
                   help="host link bandwidth for offloaded weights, MB/s (default 98: a sim hop, measured)")
    p.add_argument("--seed", type=types.seed, default=1, help="weight and quantisation seed (default 1)")
    p.set_defaults(func=cmd_plan)


def _run_tp(args: argparse.Namespace, plain) -> int:
    if args.tp is None:
        return plain(args)
    if args.workload not in ("encoder", "decoder"):
        print(f"dx1 run: --tp splits the encoder and decoder blocks, not {args.workload}", file=sys.stderr)
        return 2
    from dx1_driver import DriverError

    from ..collectives import CollectiveError
    from .distributed import process_group, under_torchrun
    from .workload import run_block_tp, run_rank

    devices = args.device or ["model"]
    started = time.perf_counter()
    who = f" (rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']})" if under_torchrun() else ""
    try:
        if under_torchrun():
            with process_group(args.dist_timeout) as (rank, world):
                print(f"dx1 run {args.workload} --tp {args.tp}: rank {rank} of {world} (torch.distributed, gloo) "
                      f"on {devices[rank % len(devices)]}, {args.block}", flush=True)
                result = run_rank(args.workload, devices, args.tp, size=args.block, seed=args.seed)
                if rank != 0:
                    return 0 if result.identical else 1
        else:
            print(f"dx1 run {args.workload} --tp {args.tp}: {args.tp} ranks in this process on "
                  f"{', '.join(devices)}, {args.block}", flush=True)
            result = run_block_tp(args.workload, devices, args.tp, size=args.block, seed=args.seed)
    except (ValueError, DriverError, CollectiveError) as exc:
        print(f"dx1 run{who}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2
    print("\n".join(result.lines))
    verdict = "== one chip bit for bit" if result.identical else "DIFFERS from one chip"
    print(f"  output {result.digest} {verdict} (one chip: {result.one_chip_digest})")
    print(f"  device cycles per forward: {result.cycles} at TP {result.tp} (critical path), {result.one_chip_cycles} "
          f"on one chip: {result.one_chip_cycles / result.cycles:.2f}x; {result.collectives} collectives a pass")
    if args.timeline is not None:
        from ..timeline import write
        from .trace import tensor_trace

        write(tensor_trace(result.segments, result.devices), args.timeline, args.timeline_format)
        print(f"  timeline of the {len(result.devices)} ranks (device cycles, aligned at the collectives) written to "
              f"{args.timeline}")
    ok = result.identical
    print(f"dx1 run {args.workload} --tp {args.tp}: {'PASS' if ok else 'FAIL'} in "
          f"{time.perf_counter() - started:.1f} s")
    return 0 if ok else 1


def extend_run_parser(run: argparse.ArgumentParser) -> None:
    """Give ``dx1 run`` the tensor-parallel options; without ``--tp`` it runs as before."""
    from ..workloads.encoder import SIZE

    run.add_argument("--tp", type=types.positive, default=None,
                     help="split the block over this many chips (tensor parallelism; under torchrun: the world "
                          "size, each process one chip, or the world size times N with --device model:chips=N, "
                          "each process a board of N chips). Repeated --device strings are the ranks' chips, "
                          "round robin")
    run.add_argument("--block", type=block_size, default=SIZE,
                     help="with --tp: the block's SEQ,D_MODEL,HEADS,FFN (default the workload's "
                          f"{SIZE.seq},{SIZE.model},{SIZE.heads},{SIZE.ffn})")
    run.add_argument("--dist-timeout", type=float, default=30.0,
                     help="under torchrun: seconds any torch.distributed wait may take (default 30)")
    from ..timeline import add_timeline_arguments

    add_timeline_arguments(run)  # with --tp: a track per rank, in device cycles aligned at the collectives
    plain = run.get_default("func")
    run.set_defaults(func=lambda args: _run_tp(args, plain))
