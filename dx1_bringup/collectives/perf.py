"""Collectives measured the way nccl-tests measures them (its doc/PERFORMANCE.md), on the host-staged path.

Per size: the time of one collective (the mean over ``iters`` after ``warmup``), in seconds and in device
cycles (the most any rank's GLOBAL cycle counter advanced, per collective: the golden model's clock moves
only with commands, so it reads 0 there), ``algbw = size / time`` and ``busbw = algbw * factor``, with
nccl-tests' factors (all-reduce ``2 (n - 1) / n``; reduce-scatter and all-gather ``(n - 1) / n``; broadcast,
reduce and send/recv 1), so that busbw compares with the hardware's peak whatever the rank count.  ``size`` is
the whole buffer's bytes (all-gather's output, reduce-scatter's input), as in nccl-tests.

Over the chip-to-chip link (the ``link`` algorithm) the bandwidths are in bytes per device cycle, the peak is
the link's (LINK.CAPS.width bytes a cycle), and each row also gives the cycles the alpha-beta model predicts
(:func:`dx1_bringup.perfmodel.predict_collective_cycles`) and its error against the cycles seen.

The peak of the host-staged path is that of one hop measured on the same group: ``read_mem`` of a whole
buffer on one rank and ``write_mem`` of it (with the read-back when the group verifies writes) on the next,
one after the other, for every pair of neighbours, the slowest pair counting.  ``#wrong`` counts the elements
of one checked run, on any rank, that differ from the result numpy computes from the inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from ..perfmodel import predict_collective_cycles
from . import link
from .buffer import DTYPES, segment
from .group import DeviceGroup
from .reduction import reduction

__all__ = ["PERF_OPS", "BUS_FACTORS", "Result", "Row", "measure", "hop_peak", "format_table"]

#: The measured operations, by their command-line name.
PERF_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "sendrecv")


def _factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather"):
        return (n - 1) / n
    return 1.0


#: nccl-tests' bus-bandwidth factors, as functions of the rank count.
BUS_FACTORS: dict[str, Callable[[int], float]] = {op: (lambda n, op=op: _factor(op, n)) for op in PERF_OPS}


@dataclass(frozen=True)
class Result:
    """One placement's figures at one size: seconds and cycles per collective, bandwidths in bytes/s, wrong elements."""

    seconds: float
    cycles: int
    algbw: float
    busbw: float
    peak_percent: float
    wrong: int
    #: The alpha-beta model's cycles and its error against ``cycles`` in percent (the link algorithm; else 0).
    predicted: float = 0.0
    error_percent: float = 0.0


@dataclass(frozen=True)
class Row:
    """One size: its bytes and elements, type, reduction, root, then out of place and in place."""

    op: str
    algorithm: str
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    out_of_place: Result
    in_place: Result | None

    def to_json(self) -> dict:
        return asdict(self)


def hop_peak(group: DeviceGroup, nbytes: int) -> float:
    """Bytes per second of the slowest neighbour-to-neighbour hop of ``nbytes`` staged through the host."""
    nbytes = max(nbytes, 4)
    n = group.size
    if n == 1:
        pairs = [(0, 0)]
    else:
        pairs = [(r, (r + 1) % n) for r in range(n)] if n > 2 else [(0, 1), (1, 0)]
    addrs = [dev.alloc(nbytes) for dev in group.devs]
    payload = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    try:
        group.devs[0].write_mem(addrs[0], payload)
        worst = 0.0
        for src, dst in pairs:
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                data = group.devs[src].read_mem(addrs[src], nbytes)
                group.devs[dst].write_mem(addrs[dst], data)
                if group.verify:
                    group.devs[dst].read_mem(addrs[dst], nbytes)
                best = min(best, time.perf_counter() - start)
            worst = max(worst, best)
    finally:
        for dev, addr in zip(group.devs, addrs, strict=True):
            dev.free(addr)
    return nbytes / worst


def _expected(op: str, inputs: list[np.ndarray], n: int, root: int, red) -> list[np.ndarray | None]:
    if op == "all_gather":
        whole = np.concatenate(inputs)
        return [whole] * n
    if op == "broadcast":
        return [inputs[root]] * n
    if op == "sendrecv":
        return [inputs[(r - 1) % n] for r in range(n)]
    partial = red.widen(inputs[0])
    for part in inputs[1:]:
        partial = red.add(partial, part)
    total = red.finish(partial)
    if op == "all_reduce":
        return [total] * n
    if op == "reduce":
        return [total if r == root else None for r in range(n)]
    return [total[slice(*segment(total.size, n, r))] for r in range(n)]


def _run_one(group: DeviceGroup, op: str, count: int, dtype: np.dtype, root: int, in_place: bool,
             options: dict, iters: int, warmup: int, rng: np.random.Generator) -> tuple[float, int, int]:
    """(seconds and cycles per collective, wrong elements) of ``op`` over ``count`` elements."""
    n = group.size
    parts = [segment(count, n, r) for r in range(n)]
    info = np.iinfo(dtype)
    if op == "all_gather":
        inputs = [rng.integers(info.min, info.max, hi - lo, endpoint=True).astype(dtype) for lo, hi in parts]
    else:
        inputs = [rng.integers(info.min, info.max, count, endpoint=True).astype(dtype) for _ in range(n)]
    red = reduction(options.get("redop", "sum"), dtype, n, options.get("scale")) \
        if op in ("all_reduce", "reduce_scatter", "reduce") else None
    expected = _expected(op, inputs, n, root, red)
    if op == "all_gather":
        bufs = group.alloc(count, dtype) if in_place else group.alloc(0, dtype, shapes=[hi - lo for lo, hi in parts])
        outs = None if in_place else group.alloc(count, dtype)
        staged = [np.where((np.arange(count) >= lo) & (np.arange(count) < hi), np.concatenate(inputs), 0)
                  .astype(dtype) for lo, hi in parts] if in_place else inputs
    else:
        bufs = group.alloc(count, dtype)
        sizes = [hi - lo for lo, hi in parts] if op == "reduce_scatter" else [count] * n
        outs = None if in_place else group.alloc(0, dtype, shapes=sizes)
        staged = inputs
    kwargs = {k: v for k, v in options.items() if not (op not in ("all_reduce", "reduce_scatter", "reduce")
                                                        and k in ("redop", "scale"))}
    if op in ("broadcast", "reduce"):
        kwargs["root"] = root

    def once() -> None:
        if op == "sendrecv":
            targets = bufs if outs is None else outs
            group.run(lambda rank: _shift(rank, bufs, targets, n, kwargs))
        else:
            getattr(group, op)(bufs, outs, **kwargs)

    try:
        group.write(bufs, staged)
        once()
        got = group.read(outs if outs is not None else bufs)
        if op == "reduce_scatter" and in_place:
            got = [g[slice(*parts[r])] for r, g in enumerate(got)]
        wrong = sum(int(np.count_nonzero(g.reshape(-1) != e)) if e.size == g.size else max(e.size, g.size)
                    for g, e in zip(got, expected, strict=True) if e is not None)
        for _ in range(warmup):
            once()
        before = [_cycles(dev) for dev in group.devs]
        start = time.perf_counter()
        for _ in range(iters):
            once()
        seconds = (time.perf_counter() - start) / iters
        cycles = max(_cycles(dev) - b for dev, b in zip(group.devs, before, strict=True)) // iters
    finally:
        group.free(bufs)
        if outs is not None:
            group.free(outs)
    return seconds, cycles, wrong


def _shift(rank, bufs, targets, n: int, kwargs: dict) -> None:
    """sendrecv: every rank sends to the next and receives from the previous (even ranks send first: a send waits
    for its receiver to check the fingerprint).  Out of place only: an odd rank receives before it sends."""
    r = rank.rank
    options = {k: kwargs[k] for k in ("timeout", "chunk_bytes") if k in kwargs}
    if n == 1:
        return
    if r % 2 == 0:
        rank.send(bufs[r], (r + 1) % n, **options)
        rank.recv(targets[r], (r - 1) % n, **options)
    else:
        rank.recv(targets[r], (r - 1) % n, **options)
        rank.send(bufs[r], (r + 1) % n, **options)


def _cycles(dev) -> int:
    return dev.cycles()


def measure(group: DeviceGroup, op: str, sizes: list[int], *, dtype: str = "int32", root: int = 0,
            iters: int = 5, warmup: int = 1, seed: int = 1, peak: float | None = None,
            progress: Callable[[Row], None] | None = None, **options) -> tuple[list[Row], float]:
    """Measure ``op`` at each of ``sizes`` bytes (rounded down to whole elements); the rows and the hop peak.

    ``options`` go to each collective (``algorithm``, ``chunk_bytes``, ``timeout``, ``redop``, ``scale``).
    """
    if op not in PERF_OPS:
        raise ValueError(f"the operation must be one of {', '.join(PERF_OPS)}, not {op!r}")
    dt = DTYPES[dtype]
    if peak is None:
        peak = hop_peak(group, max(sizes, default=4))
    rng = np.random.default_rng(seed)
    algorithm = options.get("algorithm") or group.algorithm or ("link" if group.has_link else "ring")
    redop = options.get("redop", "sum") if op in ("all_reduce", "reduce_scatter", "reduce") else "-"
    red = reduction(redop, dt, group.size, options.get("scale")) if redop != "-" else None
    on_link = algorithm == "link" and op != "sendrecv" and group.has_link and not link.supports(op, dt, red)
    if not on_link and algorithm == "link":
        algorithm = "ring"  # what the group's default gives an op the link cannot run
    if on_link:
        peak = float(group.devs[0].caps.link_width)
    rows = []
    for size in sizes:
        count = size // dt.itemsize
        nbytes = count * dt.itemsize
        results = []
        for in_place in (False, True) if op != "sendrecv" else (False,):
            seconds, cycles, wrong = _run_one(group, op, count, dt, root, in_place, options, iters, warmup, rng)
            predicted = error = 0.0
            if on_link:
                algbw = nbytes / cycles if cycles > 0 else 0.0
                predicted = predict_collective_cycles(op, group.size, count, dt.itemsize,
                                                      options.get("chunk_bytes") or group.chunk_bytes)
                error = 100.0 * (predicted - cycles) / cycles if cycles else 0.0
            else:
                algbw = nbytes / seconds if seconds > 0 else 0.0
            busbw = algbw * BUS_FACTORS[op](group.size)
            results.append(Result(seconds, cycles, algbw, busbw, 100.0 * busbw / peak, wrong, predicted, error))
        row = Row(op, algorithm, nbytes, count, dtype, redop, root if op in ("broadcast", "reduce") else -1,
                  results[0], results[1] if len(results) > 1 else None)
        rows.append(row)
        if progress:
            progress(row)
    return rows, peak


HEADER = ("#                                                   out-of-place                                "
          "      in-place\n"
          "#    size     count   type  redop  root       time     cycles   algbw   busbw  %peak #wrong"
          "       time     cycles   algbw   busbw  %peak #wrong\n"
          "#     (B) (elements)                            (us)             (MB/s)  (MB/s)"
          "                    (us)             (MB/s)  (MB/s)")


LINK_HEADER = ("#                                                   out-of-place                                "
               "                    in-place\n"
               "#    size     count   type  redop  root       time     cycles  predicted  err%   algbw   busbw  "
               "%peak #wrong       time     cycles  predicted  err%   algbw   busbw  %peak #wrong\n"
               "#     (B) (elements)                            (us)                             (B/cyc) (B/cyc)"
               "                     (us)                             (B/cyc) (B/cyc)")


def format_row(row: Row) -> str:
    link_row = row.algorithm == "link"

    def half(r: Result | None) -> str:
        if r is None:
            return f" {'n/a':>10} {'':10}" + (f" {'':10} {'':5}" if link_row else "") + f" {'':7} {'':7} {'':6} {'':6}"
        if link_row:
            return (f" {r.seconds * 1e6:10.1f} {r.cycles:10d} {r.predicted:10.0f} {r.error_percent:5.1f} "
                    f"{r.algbw:7.3f} {r.busbw:7.3f} {r.peak_percent:6.1f} {r.wrong:6d}")
        return (f" {r.seconds * 1e6:10.1f} {r.cycles:10d} {r.algbw / 1e6:7.2f} {r.busbw / 1e6:7.2f} "
                f"{r.peak_percent:6.1f} {r.wrong:6d}")

    return (f" {row.size:8d} {row.count:9d} {row.dtype:>6} {row.redop:>6} {row.root:5d}"
            + half(row.out_of_place) + half(row.in_place))


def format_table(group: DeviceGroup, op: str, algorithm: str, rows: list[Row], peak: float) -> str:
    """The nccl-tests style table of ``rows``, with a header saying what was measured."""
    if rows and rows[0].algorithm == "link":
        lines = [f"# dx1 collectives: {op} over the chip-to-chip link, {group.size} ranks: "
                 f"{', '.join(d.name for d in group.devs)}",
                 f"# link peak (LINK.CAPS.width): {peak:.0f} B/cycle; bandwidths in bytes per device cycle; busbw "
                 f"factor {BUS_FACTORS[op](group.size):.3f}; predicted: the alpha-beta model", LINK_HEADER]
    else:
        lines = [f"# dx1 collectives: {op}, host-staged, algorithm {algorithm}, {group.size} ranks: "
                 f"{', '.join(d.name for d in group.devs)}",
                 f"# link peak (host-staged hop, measured): {peak / 1e6:.2f} MB/s; busbw factor "
                 f"{BUS_FACTORS[op](group.size):.3f}", HEADER]
    lines += [format_row(r) for r in rows]
    results = [res for r in rows for res in (r.out_of_place, r.in_place) if res is not None]
    wrong = sum(res.wrong for res in results)
    lines.append(f"# Out of bounds values : {wrong} {'OK' if not wrong else 'FAILED'}")
    if results and rows[0].algorithm == "link":
        lines.append(f"# Avg bus bandwidth    : {sum(res.busbw for res in results) / len(results):.3f} B/cycle")
    elif results:
        lines.append(f"# Avg bus bandwidth    : {sum(res.busbw for res in results) / len(results) / 1e6:.3f} MB/s")
    return "\n".join(lines)
