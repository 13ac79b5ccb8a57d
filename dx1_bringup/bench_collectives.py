"""The ``collectives`` section of ``dx1 bench``: every collective on ``model*4``, all-reduce on two ``sim`` ranks,
and every collective over the chip-to-chip link of ``model:chips=4``.

Host-staged (every chunk through host memory), ring and direct, out of place and in place, measured as
``dx1 collectives`` measures them (:mod:`dx1_bringup.collectives.perf`); the sim part is left out, with the
reason, when Verilator is missing.  The link part is in device cycles, against the link's peak, beside the
alpha-beta model's prediction.
"""

from __future__ import annotations

from .collectives import DeviceGroup
from .collectives.perf import PERF_OPS, format_table, hop_peak, measure
from .sim import verilator_missing

__all__ = ["MODEL_SIZES", "SIM_SIZES", "LINK_SIZES", "LINK_BOARD", "collectives_bench", "print_collectives"]

#: Buffer sizes (bytes) on the four golden models, and on the two simulators.
MODEL_SIZES = [4, 1024, 65536, 262144]
SIM_SIZES = [4, 1024, 65536]
#: Buffer sizes (bytes) over the link of a four-chip model board (4 MiB of device memory a chip).
LINK_SIZES = [4, 1024, 65536, 262144, 1048576]
LINK_BOARD = "model:chips=4,mem_mib=4"


def _tables(devices: str, ops: tuple[str, ...], sizes: list[int], iters: int) -> dict:
    with DeviceGroup.open(devices) as group:
        peak = hop_peak(group, max(sizes))
        tables = []
        for op in ops:
            for algorithm in ("ring",) if op == "sendrecv" else ("ring", "direct"):
                rows, _ = measure(group, op, sizes, iters=iters, peak=peak, algorithm=algorithm)
                tables.append({"op": op, "algorithm": algorithm, "rows": [r.to_json() for r in rows],
                               "text": format_table(group, op, algorithm, rows, peak)})
        return {"devices": devices, "ranks": group.size, "peak_bytes_per_s": peak, "tables": tables}


def collectives_bench() -> dict:
    """The section's figures: ``model`` (every op) and ``sim`` (all-reduce, or why not)."""
    report = {"model": _tables("model*4", PERF_OPS, MODEL_SIZES, 5)}
    reason = verilator_missing()
    report["sim"] = {"skipped": reason} if reason else _tables("sim*2", ("all_reduce",), SIM_SIZES, 3)
    report["link"] = _link_tables(LINK_BOARD, tuple(op for op in PERF_OPS if op != "sendrecv"), LINK_SIZES, 2)
    return report


def _link_tables(devices: str, ops: tuple[str, ...], sizes: list[int], iters: int) -> dict:
    with DeviceGroup.open(devices) as group:
        tables = []
        for op in ops:
            rows, peak = measure(group, op, sizes, iters=iters, algorithm="link")
            tables.append({"op": op, "algorithm": "link", "rows": [r.to_json() for r in rows],
                           "text": format_table(group, op, "link", rows, peak)})
        return {"devices": devices, "ranks": group.size, "peak_bytes_per_cycle": peak, "tables": tables}


def correct(report: dict) -> bool:
    """Whether every element of every checked run was right."""
    return all(row[place]["wrong"] == 0 for part in report.values() for table in part.get("tables", ())
               for row in table["rows"] for place in ("out_of_place", "in_place") if row[place] is not None)


def print_collectives(report: dict) -> None:
    for part in ("model", "sim", "link"):
        if "skipped" in report[part]:
            print(f"\ncollectives on sim skipped: {report[part]['skipped']}")
            continue
        for table in report[part]["tables"]:
            print("\n" + table["text"])
