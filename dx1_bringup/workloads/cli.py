"""`dx1 run WORKLOAD`: a real network on DX-1, with its accuracy beside the references and what it cost."""

from __future__ import annotations

import argparse
import sys
import time

from .. import argtypes as types

__all__ = ["add_parser", "cmd_run"]

WORKLOADS = ("digits", "encoder", "decoder")


def _print_stats(name: str, stats) -> None:
    trips = "not counted by this transport" if stats.round_trips is None else str(stats.round_trips)
    print(f"  {name}: {stats.device_segments} device segment(s), {stats.host_ops} host op(s), {stats.commands} "
          f"commands on {stats.tiles} tile(s)")
    print(f"    cycles {stats.cycles}, utilisation {stats.utilisation:.1%} of {stats.tiles} x {stats.array}x"
          f"{stats.array} MAC/cycle, {stats.macs} MACs")
    print(f"    host transfers {stats.transfers} ({stats.host_bytes_written} B written, {stats.host_bytes_read} B "
          f"read), transport round trips {trips}, wall time {stats.wall_seconds:.2f} s")


def _digits(args: argparse.Namespace, devices: list[str]) -> bool:
    from .digits import run_digits

    result, _model = run_digits(devices, seed=args.seed, tiles=args.tiles,
                                progress=lambda text: print(f"  {text} ...", flush=True))
    print(result.plan)
    print("  accuracy on the held-out digits:")
    print(f"    {'float (PyTorch)':<28} {result.float_accuracy:7.2%}")
    print(f"    {'int8 (PyTorch reference)':<28} {result.int_accuracy:7.2%}")
    for name, acc in result.device_accuracy.items():
        exact = "logits == int reference bit for bit" if result.bit_exact[name] else "LOGITS DIFFER from the reference"
        print(f"    {'DX-1 on ' + name:<28} {acc:7.2%}  ({exact})")
    for name, stats in result.stats.items():
        _print_stats(name, stats)
    print("  torch.compile(nn.Sequential(quantised MLP, nn.LogSoftmax(1)), backend='dx1'):")
    for p in result.compiled_placement:
        where = f"DX-1 ({p.subgraph})" if p.where == "dx1" else "CPU"
        print(f"    {p.node:<24} {p.target:<22} {where}{'' if p.where == 'dx1' else ': ' + p.reason}")
    print(f"    compiled output {'==' if result.compiled_matches_eager else 'DIFFERS from'} eager PyTorch")
    return all(result.bit_exact.values()) and bool(result.compiled_matches_eager)


def _block(args: argparse.Namespace, devices: list[str]) -> bool:
    from .decoder import DECODER
    from .encoder import ENCODER, FFN, HEADS, MODEL, SEQ, run_block

    spec = DECODER if args.workload == "decoder" else ENCODER
    print(f"  block: nn.TransformerEncoderLayer(d_model={MODEL}, nhead={HEADS}, dim_feedforward={FFN}, "
          f"activation={spec.activation!r}, norm_first=True), sequence {SEQ}"
          f"{', causal mask' if spec.causal else ''}", flush=True)
    result = run_block(spec, devices, seed=args.seed, tiles=args.tiles,
                       progress=lambda text: print(f"  {text} ...", flush=True))
    print(result.plan)
    device = [name for name, where in result.placement if where == "device"]
    host = [name for name, where in result.placement if where == "host"]
    print(f"  on DX-1 ({len(device)}): {', '.join(device)}")
    print(f"  on the host ({len(host)}): {', '.join(host)}")
    print(f"  residuals as accumulating GEMM terms, multipliers {result.residual[0]} and {result.residual[1]}")
    for name, wrong in result.mismatches.items():
        verdict = (f"all {len(device)} on-device results == int reference bit for bit" if not wrong
                   else f"DIFFER from the int reference: {', '.join(wrong)}")
        print(f"  {name}: {verdict}")
    print(f"  error against the float block: {result.float_error:.2%} (relative, L2) for the int8 block; "
          f"DX-1 against the int reference {result.int_error:.2%}")
    for name, stats in result.stats.items():
        _print_stats(name, stats)
    return not any(result.mismatches.values())


def cmd_run(args: argparse.Namespace) -> int:
    from dx1_driver import DriverError

    devices = args.device or ["model"]
    started = time.perf_counter()
    print(f"dx1 run {args.workload}: on {', '.join(devices)} (seed {args.seed})", flush=True)
    try:
        ok = (_digits if args.workload == "digits" else _block)(args, devices)
    except (ValueError, DriverError) as exc:
        print(f"dx1 run: {exc}", file=sys.stderr)
        return 2
    print(f"dx1 run {args.workload}: {'PASS' if ok else 'FAIL'} in {time.perf_counter() - started:.1f} s")
    return 0 if ok else 1


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``dx1 run``; its parser, for the tools above to extend (the parallel part's ``--tp``)."""
    run = sub.add_parser("run", help="a real network on DX-1 beside float and int references",
                         description="run a real network on DX-1 and compare it with float and int references")
    run.add_argument("workload", choices=WORKLOADS,
                     help="digits: an MLP classifier of scikit-learn's digits; encoder: a transformer encoder block; "
                          "decoder: a causal transformer block with a GELU MLP")
    run.add_argument("--device", action="append", type=types.device,
                     help="device to run on (repeat to compare several; default model)")
    run.add_argument("--seed", type=types.seed, default=1, help="data, weight and quantisation seed (default 1)")
    run.add_argument("--tiles", type=types.positive, default=None, help="how many tiles to use (default: all)")
    run.set_defaults(func=cmd_run)
    return run
