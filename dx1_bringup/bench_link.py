"""`make bench` section ``link``: the chip-to-chip link's bandwidth on its RTL, SEND by SEND.

Two link endpoints (:class:`~dx1_bringup.gateware.link.LinkEndpoint`: port, sender, lander) with the spec's
default :class:`~dx1_bringup.spec.ChipLinkConfig`, each on a device memory of its own, wired back to back
through wires of the link's latency, run in Amaranth's simulator.  Each SEND's cycles are counted from its
request to its status (the peer's DONE): bytes per cycle per SEND, and in the steady state (the slope between
two sizes, which the fixed costs cancel out of), each as a share of the link's peak (``width`` bytes a cycle).
The golden model's :func:`~dx1_bringup.spec.send_timing` for the same SEND is beside it.
"""

from __future__ import annotations

import time

from amaranth import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from .gateware.link import LinkEndpoint, LinkWire
from .gateware.memory import AxiMemory
from .spec import ChipLinkConfig, ErrorCode, LinkOp, send_timing

__all__ = ["SIZES", "link_bench", "print_link"]

#: SEND sizes measured, in bytes.
SIZES = (4096, 16384, 65536)
_MEM = 65536


class _Pair(Elaboratable):
    def __init__(self, config: ChipLinkConfig):
        self.ends = [LinkEndpoint(config, semaphores=16, mem_bytes=_MEM) for _ in range(2)]
        self.mems = [AxiMemory(size=_MEM, ports=2, banks=4) for _ in range(2)]
        self.wires = [LinkWire(config.latency) for _ in range(2)]

    def elaborate(self, platform):
        m = Module()
        for i in range(2):
            end, mem, wire = self.ends[i], self.mems[i], self.wires[i]
            m.submodules[f"end{i}"], m.submodules[f"mem{i}"], m.submodules[f"wire{i}"] = end, mem, wire
            wiring.connect(m, end.send_bus, mem.s0)
            wiring.connect(m, end.land_bus, mem.s1)
            wiring.connect(m, end.tx, wire.tx)
            wiring.connect(m, wire.rx, self.ends[1 - i].rx)
            m.d.comb += [end.sem_grant.eq(end.sem_valid), end.window_limit.eq(_MEM)]
        return m


def link_bench(sizes=SIZES, config: ChipLinkConfig | None = None) -> dict:
    """SENDs of each size, WRITE and ADD, chip 0 to chip 1: cycles, bytes per cycle and the model's cycles."""
    config = config or ChipLinkConfig()
    pair = _Pair(config)
    runs: list[dict] = []

    async def bench(ctx) -> None:
        for _ in range(2 * config.latency + 2):
            await ctx.tick()
        end = pair.ends[0]
        for op in (LinkOp.WRITE, LinkOp.ADD):
            for size in sizes:
                req = end.request
                for name, value in (("src_addr", 0), ("dst_addr", 0), ("length", size), ("op", op), ("sem", 0),
                                    ("count", 1)):
                    ctx.set(getattr(req, name), value)
                ctx.set(req.valid, 1)
                await ctx.tick()
                ctx.set(req.valid, 0)
                ctx.set(end.done.tready, 1)
                cycles = 1
                while not ctx.get(end.done.tvalid):
                    await ctx.tick()
                    cycles += 1
                status = ctx.get(end.done.tdata)
                await ctx.tick()
                ctx.set(end.done.tready, 0)
                runs.append({"op": op.name, "bytes": size, "cycles": cycles, "ok": status == ErrorCode.OK,
                             "bytes_per_cycle": size / cycles, "model_cycles": send_timing(config, size, op).done})

    sim = Simulator(pair)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    start = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - start
    for op in ("WRITE", "ADD"):
        mine = [r for r in runs if r["op"] == op]
        lo, hi = mine[-2], mine[-1]
        steady = (hi["bytes"] - lo["bytes"]) / (hi["cycles"] - lo["cycles"])
        for r in mine:
            r["steady_bytes_per_cycle"] = steady
            r["steady_share_of_peak"] = steady / config.width
    return {"config": {"width": config.width, "latency": config.latency, "max_payload": config.max_payload,
                       "credits": config.credits, "retries": config.retries},
            "runs": runs, "wall_seconds": wall}


def print_link(report: dict) -> None:
    cfg = report["config"]
    print(f"\nThe link on its RTL (Amaranth simulator), width {cfg['width']} B/cycle, latency {cfg['latency']}, "
          f"frames of {cfg['max_payload']} B, {cfg['credits']} credits:")
    print(f"{'op':>6} {'bytes':>8} {'cycles':>8} {'B/cycle':>8} {'% peak':>7} {'steady % peak':>14} "
          f"{'model cycles':>13}")
    for r in report["runs"]:
        print(f"{r['op']:>6} {r['bytes']:>8} {r['cycles']:>8} {r['bytes_per_cycle']:>8.2f} "
              f"{100 * r['bytes_per_cycle'] / cfg['width']:>6.1f}% {100 * r['steady_share_of_peak']:>13.1f}% "
              f"{r['model_cycles']:>13}" + ("" if r["ok"] else "  (not OK)"))
