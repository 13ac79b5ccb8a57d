"""``dx1 predict M K N``: a GEMM's cycles per unit as the performance model predicts them, and measured on a device."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .. import argtypes as types
from ..runtime.operands import gemm_problem
from .devices import open_device

__all__ = ["add_parser", "cmd_predict"]


def _plot_png(path: str, rows: list[tuple[str, float, float | None]]) -> None:
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
    ax.set_title("dx1 predict: predicted against measured cycles per GEMM shape (M x K x N / tiles)")
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


def cmd_predict(args: argparse.Namespace) -> int:
    from dx1_driver import Device, DriverError

    from ..runtime import gemm_perf, gemm_run
    from ..spec import PostOpParams

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
        print(f"dx1 predict: --tiles must be at most {caps.tiles}, not {args.tiles}", file=sys.stderr)
        return 2
    dev = None if args.device is None else open_device(args.device, "dx1 predict")
    if args.device is not None and dev is None:
        return 2
    start = time.perf_counter()
    try:  # a shape no device can hold is refused before anything is printed or run
        predicted = predicted_terms(m, k, n, args.tiles)
        if dev is not None:
            gemm_run.check_fits(m, k, n, dev.caps, post=True, bias=True, align=dev.allocator.alignment)
    except ValueError as exc:
        print(f"dx1 predict: {exc}", file=sys.stderr)
        if dev is not None:
            dev.close()
        return 2
    elapsed = time.perf_counter() - start
    tiles = args.tiles or caps.tiles
    print(f"dx1 predict: {m}x{k} @ {k}x{n} int8 GEMM (bias, ReLU, requantise) on {tiles} tile(s), "
          f"{'predicted only' if args.device is None else 'on ' + args.device}")
    shapes = [(m, k, n, tiles)]
    if args.png is not None:
        shapes += [s for s in gemm_perf.SWEEP if s != shapes[0]]
    rows = []
    try:
        for sm, sk, sn, st in shapes:
            if dev is None:
                pred = predicted_terms(sm, sk, sn, st)
                rows.append((f"{sm}x{sk}x{sn}/{st}", pred["total"], None, None))
                continue
            sa, sb, sbias, spost = gemm_problem(sm, sk, sn, args.seed)
            try:
                table = gemm_perf.measure_gemm(dev, sm, sk, sn, sa, sb, sbias, spost, st)
            except DriverError as exc:
                print(f"dx1 predict: FAILED: {exc}", file=sys.stderr)
                return 1
            rows.append((f"{sm}x{sk}x{sn}/{st}", table["total"]["predicted"], table["total"]["measured"], table))
    finally:
        if dev is not None:
            dev.close()
    table = rows[0][3]
    # Every row is cycles of one tile (gemm_perf.combine), and says which.
    print(f"  {'term':10} {'predicted':>12}" + ("" if table is None else
                                                f" {'measured':>12} {'residual':>10} {'error':>8}") + "  (per tile)")
    for name in gemm_perf.UNITS:
        what = gemm_perf.TERM_MEANING[name].replace("the tiles", f"the {tiles} tiles" if tiles > 1 else "1 tile")
        if table is None:
            print(f"  {name:10} {predicted[name]:12.0f}  {what}")
        else:
            t = table[name]
            print(f"  {name:10} {t['predicted']:12.0f} {t['measured']:12.0f} {t['residual']:+10.0f} "
                  f"{t['error']:+8.1%}  {what}")
    print(f"  predicted in {elapsed * 1000:.1f} ms")
    if table is not None:
        print(f"  total error {table['total']['error']:+.2%} (predicted against measured CYCLES)")
    if args.png is not None:
        _plot_png(args.png, [(name, p, meas) for name, p, meas, _t in rows])
        print(f"  plot of {len(rows)} shapes written to {args.png}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``predict`` to the ``dx1`` subcommands."""
    p = sub.add_parser("predict", help="a GEMM's predicted cycles (with --device: measured too)",
                       description="predict a GEMM's cycles per unit with the performance model (and measure them "
                                   "on a device)")
    types.add_shape(p)
    p.add_argument("--tiles", type=types.positive, default=None, help="how many tiles to use (default: all)")
    p.add_argument("--device", type=types.device, default=None,
                   help="also run it on this device (sim, model, ...) and compare (default: predict only)")
    p.add_argument("--seed", type=types.seed, default=1, help="operand seed (default 1)")
    p.add_argument("--png", metavar="FILE", type=types.writable_file, default=None,
                   help="plot predicted (and measured) cycles of this shape and the sweep of shapes")
    p.set_defaults(func=cmd_predict)
