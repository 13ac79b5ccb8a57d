"""`make bench`'s scaling section: aggregate MAC utilisation of the SoC RTL against tiles and memory banks.

Every point is one square int8 GEMM (``dx1 gemm S S S --seed 1``: bias and requantisation included) run with
:func:`~dx1_bringup.runtime.gemm_run.run_gemm` on a SoC generated with that many memory banks
(:mod:`dx1_bringup.sim.configs`, served by Verilator), on its first ``tiles`` tiles, and checked bit for bit
against the numpy reference.  Utilisation is PERF MACs / (PERF cycles x array^2 x tiles), the cycles being
the longest of the tiles used.

By default all tile counts of one bank count run on one 8-tile SoC (``socs="shared"``: one build per bank
count); ``socs="each"`` builds a SoC per tile and bank count instead.  The two need not give the same
cycles (measured: 128^3 on 4 tiles and 2 banks, 15,522 cycles on a 4-tile SoC with 1 MiB, 18,288 on the
8-tile one with 4 MiB; not yet explained: the 8-tile memory arbitrates more ports, and the operands may
fall in other banks).  Every point records the SoC it ran on.

Results are merged point by point into a JSON file (a later run replaces the points it runs again and keeps
the others), written after every point, and plotted from it: points not run are absent from the plot.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["SIZES", "DEFAULT_SIZES", "TILES", "BANKS", "MEM_MIB", "SOCS", "scaling_bench", "merge_points", "plot",
           "print_table"]

#: GEMM sizes S of the S x S x S sweep.
SIZES = (64, 128, 256, 512, 1024)
#: The sizes `make bench` runs by default: 512^3 and 1024^3 on one tile of an 8-tile SoC take an hour or more.
DEFAULT_SIZES = (64, 128, 256)
#: Tile counts used.
TILES = (1, 2, 4, 8)
#: Memory bank counts of the SoCs.
BANKS = (1, 2, 4, 8)
#: Device memory of every scaling SoC: a 1024^3 GEMM's padded operands and int8 result take 3 MiB.
MEM_MIB = 4
#: How SoCs are chosen for the tile counts of one bank count.
SOCS = ("shared", "each")


def _key(point: dict) -> tuple[int, int, int]:
    return point["size"], point["tiles"], point["banks"]


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def merge_points(path: Path, points: Sequence[dict] = (), socs: Sequence[dict] = ()) -> dict:
    """Merge ``points`` (keyed by size, tiles and banks) and ``socs`` (keyed by their folder; a SoC's record
    is replaced only by one of a new build) into the JSON file at ``path`` and return its whole content,
    ``{"points": [...], "socs": [...]}``.

    The file is locked while it is read and written, so two bench runs can add to it at once.
    """
    with _locked(path):
        try:
            data = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            data = {}  # an unreadable earlier file: start afresh
        old = {_key(p): p for p in data.get("points", [])}
        old.update({_key(p): p for p in points})
        builds = {s["soc"]: s for s in data.get("socs", [])}
        # A start of a SoC built before says nothing about its build: the record of its build stays.
        builds.update({s["soc"]: s for s in socs if not (s["built_before"] and s["soc"] in builds)})
        data = {"points": sorted(old.values(), key=_key), "socs": sorted(builds.values(), key=lambda s: s["soc"])}
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(data, indent=2) + "\n")
        partial.replace(path)
    return data


def _open_soc(tiles: int, banks: int, progress: Callable[[str], None]):
    """Generate, build (when needed) and start the SoC; return its transport and what it cost."""
    from dx1_driver.transport import SimTransport

    from .sim.configs import config_folder, soc_config, soc_verilog
    from .sim.launch import start_simulator

    config = soc_config(tiles, banks, MEM_MIB)
    folder = config_folder(config)
    built = (folder / "sim-dx1_soc").is_dir()
    progress(f"  SoC {folder.name}: generating the Verilog if its sources changed ...")
    wall = time.perf_counter()
    soc_verilog(config)
    generate_s = time.perf_counter() - wall
    progress(f"  SoC {folder.name}: {generate_s:.1f} s to generate; building it in Verilator if needed "
             f"({'built before' if built else 'first build: minutes'}) and starting it ...")
    wall = time.perf_counter()
    process, port = start_simulator(tiles=tiles, banks=banks, mem_mib=MEM_MIB, timeout=3600)
    start_s = time.perf_counter() - wall
    progress(f"  SoC {folder.name}: serving after {start_s:.1f} s")
    soc = {"soc": folder.name, "tiles": tiles, "banks": banks, "mem_mib": MEM_MIB, "generate_s": generate_s,
           "build_and_start_s": start_s, "built_before": built}
    return SimTransport("127.0.0.1", port, process=process), soc


def _run_point(device, transport, size: int, tiles: int, banks: int, soc_tiles: int) -> dict:
    from .cli.operands import gemm_problem
    from .runtime.gemm_run import run_gemm
    from .runtime.reference import reference_gemm

    a, b, bias, post = gemm_problem(size, size, size, seed=1)
    cycles0, wall = transport.cycles(), time.perf_counter()
    out, stats = run_gemm(device, a, b, bias, post, tiles=tiles, timeout=3600)
    wall = time.perf_counter() - wall
    sim_cycles = transport.cycles() - cycles0
    return {"size": size, "tiles": tiles, "banks": banks, "soc_tiles": soc_tiles, "mem_mib": MEM_MIB,
            "cycles": max(stats.delta(t).cycles for t in stats.tile_ids), "macs": stats.macs,
            "utilisation": stats.utilisation(), "per_tile": [stats.utilisation(t) for t in stats.tile_ids],
            "dma_bytes": stats.dma_bytes, "correct": bool(np.array_equal(out, reference_gemm(a, b, bias, post))),
            "wall_s": wall, "sim_cycles_per_s": sim_cycles / wall if wall else 0.0}


def scaling_bench(path: Path, sizes: Sequence[int] = SIZES, tiles: Sequence[int] = TILES,
                  banks: Sequence[int] = BANKS, socs: str = "shared",
                  progress: Callable[[str], None] = lambda line: print(line, flush=True)) -> dict:
    """Run the grid ``sizes`` x ``tiles`` x ``banks`` on the SoC RTL, merging each point into ``path`` at once.

    Parameters
    ----------
    path:
        The results' JSON file (see :func:`merge_points`).
    sizes, tiles, banks:
        The GEMM sizes, tile counts and memory bank counts to run.
    socs:
        ``"shared"``: one SoC per bank count, with the most tiles of :data:`TILES` (8), whichever ``tiles``
        are run on it, so runs of some tile counts share the build; ``"each"``: one SoC per tile and bank
        count.
    progress:
        Called with a line of text before and after each build and point.

    Returns
    -------
    dict
        The file's whole content after the run (earlier points included).

    Raises
    ------
    ValueError
        ``socs`` is not one of :data:`SOCS`.
    """
    from dx1_driver import Device

    if socs not in SOCS:
        raise ValueError(f"socs must be one of {', '.join(SOCS)}, not {socs!r}")
    groups = [(b, [max(TILES)], list(tiles)) for b in banks] if socs == "shared" else \
        [(b, [t], [t]) for b in banks for t in tiles]
    total, done = len(sizes) * len(tiles) * len(banks), 0
    data = merge_points(path)
    for bank_count, (soc_tiles,), tile_counts in groups:
        transport, soc = _open_soc(soc_tiles, bank_count, progress)
        data = merge_points(path, socs=[soc])
        try:
            device = Device(transport)
            for size in sizes:
                for t in tile_counts:
                    done += 1
                    progress(f"  [{done}/{total}] {size}^3 on {t} of {soc_tiles} tiles, {bank_count} banks ...")
                    point = _run_point(device, transport, size, t, bank_count, soc_tiles)
                    data = merge_points(path, [point])
                    progress(f"  [{done}/{total}] {size}^3 on {t} tiles, {bank_count} banks: "
                             f"{point['utilisation']:.1%} ({point['cycles']} cycles), correct {point['correct']}, "
                             f"{point['wall_s']:.1f} s wall")
        finally:
            transport.close()
    return data


def print_table(data: dict) -> None:
    """The points as a table: size, tiles, banks, utilisation, cycles, wall time, correct."""
    print("\nScaling: aggregate utilisation = PERF MACs / (PERF cycles x 64 x tiles), square GEMMs with requantisation")
    print(f"  {'size':>5} {'tiles':>5} {'banks':>5} {'util':>7} {'cycles':>10} {'wall s':>8}  soc  correct")
    for p in data["points"]:
        print(f"  {p['size']:>5} {p['tiles']:>5} {p['banks']:>5} {p['utilisation']:>7.1%} {p['cycles']:>10} "
              f"{p['wall_s']:>8.1f}  t{p['soc_tiles']}   {p['correct']}")
    for s in data["socs"]:
        print(f"  SoC {s['soc']}: generated in {s['generate_s']:.1f} s, built (if needed) and started in "
              f"{s['build_and_start_s']:.1f} s{' (built before)' if s['built_before'] else ''}")


def plot(data: dict, png: Path) -> None:
    """Aggregate utilisation against tiles, one line per bank count, one panel per GEMM size, into ``png``.

    Only points that ran and came out right are drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in data["points"] if p["correct"]]
    sizes = sorted({p["size"] for p in points})
    if not sizes:
        raise ValueError("there are no correct points to plot")
    fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes), 3.4), sharey=True, squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        for banks in sorted({p["banks"] for p in points if p["size"] == size}):
            line = sorted((p["tiles"], p["utilisation"]) for p in points if p["size"] == size and p["banks"] == banks)
            ax.plot([t for t, _ in line], [u * 100 for _, u in line], marker="o", label=f"{banks} bank(s)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(TILES, [str(t) for t in TILES])
        ax.set_ylim(0, 100)
        ax.set_title(f"{size}x{size}x{size}")
        ax.set_xlabel("tiles")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("aggregate MAC utilisation (%)")
    axes[0][-1].legend(fontsize="small")
    fig.suptitle("DX-1 SoC RTL (Verilator): int8 GEMM utilisation against tiles and memory banks")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
