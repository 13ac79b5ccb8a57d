"""The `dx1` command."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .bringup import add_parser as add_bringup_parser
from .replay.cli import add_parser as add_replay_parser
from .serving.cli import add_bench_parser
from .serving.cli import add_parser as add_serving_parser
from .sim import serve
from .timeline import add_trace_arguments
from .workloads.cli import add_parser as add_run_parser

__all__ = ["main"]


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, not {text!r}")
    return value


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seed(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _open_device(device: str, prog: str):
    """Open a device for a command, or print why not and return None."""
    from dx1_driver import Device, DriverError

    if device == "sim":
        print("  starting a private simulator of the SoC RTL (the first run builds it: several minutes) ...",
              flush=True)
    try:
        return Device.open(device)
    except (ValueError, DriverError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None


def _writable(path: str) -> bool:
    """Whether ``path`` names a file that can be created or overwritten in an existing writable folder."""
    folder = Path(path).parent
    return not Path(path).is_dir() and folder.is_dir() and os.access(folder, os.W_OK)


def _traced(device, path: str | None, fmt: str | None, summary: list[str]):
    """``--trace``: a timeline of what runs on ``device`` written to ``path`` (nothing without a path)."""
    if path is None:
        return contextlib.nullcontext(device)
    from .timeline import record

    return record(device, path, fmt, summary=summary)


def cmd_info(args: argparse.Namespace) -> int:
    from .spec import MAGIC, SPEC_VERSION, SocConfig, register_map

    config = SocConfig()
    regs = register_map(config)
    print(f"dx1-mini spec {SPEC_VERSION >> 16}.{SPEC_VERSION & 0xFFFF}, magic {MAGIC:#010x}")
    print(f"tiles {config.tiles}, array {config.tile.array}x{config.tile.array}, scratchpad "
          f"{config.tile.spm_rows} rows x {config.tile.spm_row_bytes} B, accumulators {config.tile.acc_rows} rows x "
          f"{config.tile.acc_row_bytes} B, device memory {config.mem_bytes // 1024} KiB")
    for block in regs.blocks:
        print(f"  {block.base:#06x} {block.name:<8} {len(block.registers):3} registers  next {block.next:#06x}")
    if args.device is None:
        return 0
    device = _open_device(args.device, "dx1 info")
    if device is None:
        return 2
    with device:
        caps = device.caps
        features = [name for name in ("postop", "copy", "trace") if getattr(caps, name)]
        print(f"device {args.device}: hw {caps.hw_version >> 16}.{caps.hw_version & 0xFFFF}, tiles {caps.tiles}, "
              f"array {caps.array}x{caps.array}, scratchpad {caps.spm_rows} rows, accumulators {caps.acc_rows} rows, "
              f"device memory {caps.mem_bytes // 1024} KiB, {caps.semaphores} semaphores, "
              f"features {' '.join(features) or 'none'}")
        for block in device.blocks:
            kind = block.type.name if block.type is not None else f"unknown 0x{block.id:08x}"
            print(f"  {block.base:#06x} {kind:<8} version {block.version >> 16}.{block.version & 0xFFFF}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .sim import SimulationFailed, run_cocotb, verilator_missing

    reason = verilator_missing()
    if reason:
        print(f"dx1 demo: cannot simulate: {reason}", file=sys.stderr)
        return 2
    import numpy as np

    from .model.tile import PostOpParams
    from .runtime.tile_plan import plan_linear
    from .spec import TileConfig

    module = "dx1_tile_core_a8"
    m, k, n = args.m, args.k, args.n
    try:  # refuse a shape that does not fit before starting the simulator
        plan_linear(np.zeros((m, k), np.int8), np.zeros((k, n), np.int8), None, PostOpParams(1, 0),
                    config=TileConfig())
    except ValueError as exc:
        print(f"dx1 demo: {exc}", file=sys.stderr)
        return 2
    print(f"dx1 demo: int8 linear layer {m}x{k} @ {k}x{n} + bias, ReLU, requantise to int8 "
          f"on {module} in Verilator (seed {args.seed})")
    print("  building the simulator (first run: about a minute) and running ...", flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        env = {"DX1_DEMO": json.dumps({"m": m, "k": k, "n": n, "seed": args.seed}), "DX1_RESULT": str(result_file)}
        try:
            run_dir = run_cocotb(module, "dx1_bringup.sim.demo_tile", seed=args.seed, env=env, quiet=True,
                                 name="demo")
        except SimulationFailed as exc:
            if result_file.exists():
                print(json.dumps(json.loads(result_file.read_text()), indent=2))
            print(f"dx1 demo: FAILED: {exc}", file=sys.stderr)
            return 1
        result = json.loads(result_file.read_text())
    peak = result["array"] ** 2
    print(f"  done in {time.perf_counter() - start:.1f} s (logs in {run_dir})")
    print(f"  shape        M={m} K={k} N={n}: {result['commands']} commands (GEMM + POSTOP)")
    print(f"  cycles       {result['cycles']} for {result['useful_macs']} useful MACs "
          f"({result['array_macs']} issued, with padding to {result['array']})")
    print(f"  utilisation  {result['utilisation']:.1%} of peak {peak} MAC/cycle "
          f"(useful work: {result['effective_utilisation']:.1%})")
    print(f"  simulation   {result['sim_cycles_per_s']:,.0f} cycles/s")
    print(f"  result       RTL == numpy reference: {result['matches_numpy']}, "
          f"RTL == golden model: {result['matches_golden']}")
    print("  first rows   " + "; ".join(" ".join(f"{v:4d}" for v in row) for row in result["sample"]["rtl"]))
    print("dx1 demo: PASS, verified bit for bit")
    return 0


def _calibrate(acc: np.ndarray) -> tuple[int, int]:
    """(mult, shift) scaling ``acc`` to a spread of about +-40: the int8 range is used but rarely saturated."""
    spread = max(float(np.abs(acc).std()), 1.0)
    scale = 40.0 / spread
    # The largest shift whose multiplier still fits 16 bits keeps the most precision.
    shift = 47
    while shift and round(scale * (1 << shift)) >= 1 << 16:
        shift -= 1
    return max(1, min(round(scale * (1 << shift)), (1 << 16) - 1)), shift


def gemm_problem(m: int, k: int, n: int, seed: int, post: bool = True):
    """The operands of ``dx1 gemm M K N --seed S``: int8 A and B, int32 bias and the post-op (``None`` if not ``post``).

    Returns
    -------
    (a, b, bias, post)
    """
    from .model.tile import PostOpParams
    from .runtime import reference

    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    # Products of uniform int8 have a standard deviation near 5500; a bias of the same order as the sums shifts
    # the output visibly without swamping it.
    bias_span = int(5500 * np.sqrt(k))
    bias = rng.integers(-bias_span, bias_span + 1, n).astype(np.int32)
    if not post:
        return a, b, bias, None
    mult, shift = _calibrate(reference.reference_gemm(a, b, bias))
    return a, b, bias, PostOpParams(mult, shift, relu=True)


def cmd_gemm(args: argparse.Namespace) -> int:
    from dx1_driver import DriverError

    from .runtime import gemm_run, reference

    m, k, n = args.m, args.k, args.n
    a, b, bias, post = gemm_problem(m, k, n, args.seed, not args.no_post)
    what = "int32 (bias, no post-op)" if post is None else \
        f"int8 (bias, ReLU, requantise x{post.mult} >> {post.shift})"
    for path, kind in ((args.record, "capture"), (args.trace, "timeline")):
        if path is not None and not _writable(path):
            print(f"dx1 gemm: cannot write the {kind} to {path} (it must be a file in a writable folder)",
                  file=sys.stderr)
            return 2
    print(f"dx1 gemm: {m}x{k} @ {k}x{n} int8 -> {what} on {args.device} (seed {args.seed})")
    device = _open_device(args.device, "dx1 gemm")
    if device is None:
        return 2
    if args.record is not None:
        from .replay import Recorder

        device = Recorder(device, args.record, note=f"dx1 gemm {m} {k} {n} --seed {args.seed} on {args.device}")
    timeline: list[str] = []
    with device:
        start = time.perf_counter()
        try:
            with _traced(device, args.trace, args.trace_format, timeline) as traced:
                result, stats = gemm_run.run_gemm(traced, a, b, bias, post, tiles=args.tiles, timeout=args.timeout)
        except ValueError as exc:
            print(f"dx1 gemm: {exc}", file=sys.stderr)
            return 2
        except DriverError as exc:
            print(f"dx1 gemm: FAILED: {exc}", file=sys.stderr)
            return 1
        wall = time.perf_counter() - start
        arr = device.caps.array
        link = getattr(device.transport, "stats", None)
    expected = reference.reference_gemm(a, b, bias, post)
    commands = ", ".join(f"tile {t}: {c}" for t, c in stats.commands.items())
    print(f"  shape        M={m} K={k} N={n}: {m * k * n} useful MACs, {stats.macs} issued (padding to {arr})")
    print(f"  commands     {sum(stats.commands.values())} ({commands})")
    print("  cycles       " + ", ".join(f"tile {t}: {stats.delta(t).cycles}" for t in stats.tiles))
    print(f"  utilisation  {stats.utilisation():.1%} of {len(stats.tiles)} x {arr}x{arr} MAC/cycle "
          f"(MACs / (cycles x {arr}^2 x tiles); per tile "
          + ", ".join(f"{stats.utilisation(t):.1%}" for t in stats.tiles) + ")")
    print(f"  traffic      {stats.dma_bytes} bytes of DMA (the plan: {stats.planned_dma_bytes}), "
          f"{stats.host_bytes_written} written and {stats.host_bytes_read} read by the host")
    print(f"  wall time    {wall:.2f} s")
    if link is not None:
        print(f"  link         {link.summary()} (since the link was opened)")
    for line in timeline:
        print(f"  {line}")
    mismatch = np.argwhere(result != expected)
    if len(mismatch):
        i, j = (int(x) for x in mismatch[0])
        print(f"dx1 gemm: FAILED: {len(mismatch)} of {result.size} elements differ; first at C[{i}, {j}]: "
              f"device {int(result[i, j])}, reference {int(expected[i, j])}", file=sys.stderr)
        return 1
    print("dx1 gemm: PASS, device == reference_gemm bit for bit")
    return 0


def _perf_png(path: str, rows: list[tuple[str, float, float | None]]) -> None:
    """Plot predicted (and measured, where known) total cycles per shape to a PNG file; with measurements, the
    relative error per shape below, against the 3% the sweep is held to."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = all(r[2] is not None for r in rows)
    fig, axes = plt.subplots(2 if measured else 1, 1, figsize=(9, 6 if measured else 4), sharex=True, squeeze=False)
    names = [r[0] for r in rows]
    ax = axes[0][0]
    ax.plot(names, [r[1] for r in rows], "o", label="predicted")
    if measured:
        ax.plot(names, [r[2] for r in rows], "s", mfc="none", label="measured")
    ax.set_yscale("log")
    ax.set_ylabel("cycles (PERF CYCLES)")
    ax.set_title("dx1 perf: predicted against measured cycles per GEMM shape (M x K x N / tiles)")
    ax.legend()
    if measured:
        err = axes[1][0]
        errors = [100 * (r[1] - r[2]) / r[2] for r in rows]
        err.bar(names, errors, color=["tab:red" if abs(e) > 3 else "tab:blue" for e in errors])
        for bound in (-3, 3):
            err.axhline(bound, color="grey", linestyle=":", linewidth=1)
        err.set_ylabel("error of the total (%)")
    axes[-1][0].tick_params(axis="x", rotation=60)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def cmd_perf(args: argparse.Namespace) -> int:
    from dx1_driver import Device, DriverError

    from .model.tile import PostOpParams
    from .runtime import gemm_perf

    m, k, n = args.m, args.k, args.n
    # Timing does not depend on the values: predictions take any requantisation, runs dx1 gemm's operands.
    post = PostOpParams(1, 0, relu=True)
    # A fresh golden model stands in for the device: its caps, and where run_gemm would put the operands.
    fresh = Device.open("model")
    caps = fresh.caps

    def predicted_terms(sm: int, sk: int, sn: int, st: int | None) -> dict[str, float]:
        base, rings = gemm_perf.fresh_layout(fresh, st)
        return gemm_perf.combine(gemm_perf.predict_gemm(sm, sk, sn, caps, post=post, tiles=st, base=base,
                                                        rings=rings).terms)

    if args.tiles is not None and args.tiles > caps.tiles:
        print(f"dx1 perf: --tiles must be at most {caps.tiles}, not {args.tiles}", file=sys.stderr)
        return 2
    folder = None if args.png is None else Path(args.png).parent
    if folder is not None and (Path(args.png).is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK)):
        print(f"dx1 perf: cannot write the plot to {args.png} (it must be a file in a writable folder)",
              file=sys.stderr)
        return 2
    print(f"dx1 perf: {m}x{k} @ {k}x{n} int8 GEMM (bias, ReLU, requantise) on "
          f"{args.tiles or caps.tiles} tile(s), {'predicted only' if args.device is None else 'on ' + args.device}")
    start = time.perf_counter()
    predicted = predicted_terms(m, k, n, args.tiles)
    elapsed = time.perf_counter() - start
    shapes = [(m, k, n, args.tiles or caps.tiles)]
    if args.png is not None:
        shapes += [s for s in gemm_perf.SWEEP if s != shapes[0]]
    device = None if args.device is None else _open_device(args.device, "dx1 perf")
    if args.device is not None and device is None:
        return 2
    rows = []
    try:
        for sm, sk, sn, st in shapes:
            if device is None:
                pred = predicted_terms(sm, sk, sn, st)
                rows.append((f"{sm}x{sk}x{sn}/{st}", pred["total"], None, None))
                continue
            sa, sb, sbias, spost = gemm_problem(sm, sk, sn, args.seed)
            try:
                table = gemm_perf.measure_gemm(device, sm, sk, sn, sa, sb, sbias, spost, st)
            except DriverError as exc:
                print(f"dx1 perf: FAILED: {exc}", file=sys.stderr)
                return 1
            rows.append((f"{sm}x{sk}x{sn}/{st}", table["total"]["predicted"], table["total"]["measured"], table))
    finally:
        if device is not None:
            device.close()
    table = rows[0][3]
    print(f"  {'term':10} {'predicted':>12} {'measured':>12} {'residual':>10} {'error':>8}")
    for name in gemm_perf.UNITS:
        if table is None:
            print(f"  {name:10} {predicted[name]:12.0f}")
        else:
            t = table[name]
            print(f"  {name:10} {t['predicted']:12.0f} {t['measured']:12.0f} {t['residual']:+10.0f} "
                  f"{t['error']:+8.1%}")
    print(f"  predicted in {elapsed * 1000:.1f} ms")
    if table is not None:
        print(f"  total error {table['total']['error']:+.2%} (predicted against measured CYCLES)")
    if args.png is not None:
        _perf_png(args.png, [(name, p, meas) for name, p, meas, _t in rows])
        print(f"  plot of {len(rows)} shapes written to {args.png}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dx1", description="dx1-mini bring-up and co-simulation")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="print the spec's configuration and register blocks")
    info.add_argument("--device", default=None,
                      help="also open this device and print what discovery finds (model, ...)")
    info.set_defaults(func=cmd_info)
    demo = sub.add_parser("demo", help="run a random quantised linear layer on the tile RTL and verify it")
    demo.add_argument("-m", type=_positive, default=128, help="rows of A (default 128)")
    demo.add_argument("-k", type=_positive, default=128, help="reduction length (default 128)")
    demo.add_argument("-n", type=_positive, default=48, help="output columns (default 48)")
    demo.add_argument("--seed", type=_seed, default=1, help="operand seed (default 1)")
    demo.set_defaults(func=cmd_demo)
    gemm = sub.add_parser("gemm", help="run a random int8 GEMM through the driver and verify it bit for bit")
    gemm.add_argument("m", type=_positive, help="rows of A")
    gemm.add_argument("k", type=_positive, help="reduction length")
    gemm.add_argument("n", type=_positive, help="columns of B")
    gemm.add_argument("--seed", type=_seed, default=1, help="operand seed (default 1)")
    gemm.add_argument("--device", default="model",
                      help="model, sim (a private simulator of the RTL), sim://HOST:PORT, "
                           "serial:URL[@BAUD][,timeout=SECONDS][,retries=N] or pcie:BDF (default model)")
    gemm.add_argument("--no-post", action="store_true",
                      help="keep the int32 accumulators (plus bias) instead of requantising to int8")
    gemm.add_argument("--tiles", type=_positive, default=None, help="tiles to use (default: all)")
    gemm.add_argument("--timeout", type=_seconds, default=30.0,
                      help="seconds a wait may go without a completion before the driver recovers the tile "
                           "(default 30: a simulator on a busy machine is slow; the hardware watchdog catches "
                           "a stuck unit sooner)")
    gemm.add_argument("--record", metavar="FILE", default=None,
                      help="write what the run does to the device to this capture file "
                           "(replay it with dx1 replay FILE --device D)")
    add_trace_arguments(gemm)
    gemm.set_defaults(func=cmd_gemm)
    perf = sub.add_parser("perf", help="predict a GEMM's cycles per unit with the performance model (and measure them)")
    perf.add_argument("m", type=_positive, help="rows of A")
    perf.add_argument("k", type=_positive, help="reduction length")
    perf.add_argument("n", type=_positive, help="columns of B")
    perf.add_argument("--tiles", type=_positive, default=None, help="tiles to use (default: all)")
    perf.add_argument("--device", default=None,
                      help="also run it on this device (sim, model, ...) and compare (default: predict only)")
    perf.add_argument("--seed", type=_seed, default=1, help="operand seed (default 1)")
    perf.add_argument("--png", metavar="FILE", default=None,
                      help="plot predicted (and measured) cycles of this shape and the sweep of shapes")
    perf.set_defaults(func=cmd_perf)
    sim = sub.add_parser("sim", help="the simulated device")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    serve_parser = sim_sub.add_parser("serve", help="serve the SoC RTL in Verilator on 127.0.0.1 for --device "
                                                    "sim://HOST:PORT (or the board's UART with --uart)")
    serve.add_arguments(serve_parser)
    serve_parser.set_defaults(func=functools.partial(serve.run, serve_parser))
    add_bringup_parser(sub)
    add_run_parser(sub)
    add_replay_parser(sub)
    add_serving_parser(sub)
    add_bench_parser(sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
