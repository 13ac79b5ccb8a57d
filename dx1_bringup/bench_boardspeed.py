"""`dx1 bench` section ``boardspeed``: simulated cycles per server CPU second and per wall second of the native
server, idle, for one SoC and for boards of chips (``sim:chips=2``, ``sim:chips=4``, and ``sim:chips=4,threads=2``,
its chips ticked on two threads), the servers taking turns.

Each server is started once and every chip's socket connected; then, each round, chip 0 runs
:data:`IDLE_CYCLES` cycles in interrupt waits of :data:`WAIT_CYCLES` (no interrupt comes: the chips are idle
after reset).  A board's waits run every chip on its one clock, so each chip advances that many cycles.  The
server's CPU seconds over the waits (``/proc``) give cycles per server CPU second, the figure that holds on a
machine whose cores other work shares; all of it is the model's clocked logic.  Threads spend CPU seconds to save
wall seconds: for them the wall figure is the one that counts, on a machine with a core free for each.

``--boardspeed-also LABEL COMMAND`` adds another native server to the rounds (another checkout's build, to
compare against), started as ``COMMAND --once --port-file FILE``.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from dx1_driver.sim_transport import SimTransport

from .bench_simspeed import process_cpu_seconds
from .sim.launch import BROKEN_EXIT, CLEAN_EXIT, _wait_ports, stop_process
from .spec import SimOp

__all__ = ["IDLE_CYCLES", "WAIT_CYCLES", "BOARDS", "server_commands", "boardspeed_bench", "print_boardspeed"]

#: Cycles each server runs a round, and the cycles of each interrupt wait that runs them.
IDLE_CYCLES = 200_000
WAIT_CYCLES = 10_000
#: Each setup measured, (chips, threads): one SoC, boards of two and four chips, and four on two threads.
BOARDS = ((1, 1), (2, 1), (4, 1), (4, 2))


def server_commands() -> dict[str, list[str]]:
    """This checkout's native servers of :data:`BOARDS` (built when their sources changed), by label."""
    from .sim.configs import chip_verilog
    from .sim.native import CHIP_MODULE, SOC_MODULE, build
    from .spec import SocConfig

    soc, chip = str(build(SOC_MODULE)), str(build(CHIP_MODULE, chip_verilog(SocConfig())))
    commands = {}
    for n, threads in BOARDS:
        label = "sim" if n == 1 else f"sim:chips={n}" + (f",threads={threads}" if threads > 1 else "")
        commands[label] = [soc] if n == 1 else [chip, "--chips", str(n), "--threads", str(threads)]
    return commands


class _Server:
    """A native server started as ``command --once --port-file FILE``, a transport to each of its chips."""

    def __init__(self, command: list[str]):
        with tempfile.TemporaryDirectory() as tmp:
            port_file = Path(tmp) / "port"
            self.process = subprocess.Popen([*command, "--once", "--port-file", str(port_file)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            ports = _wait_ports(self.process, port_file, 60.0)
        self.chips = [SimTransport("127.0.0.1", port, stop_server=True) for port in ports]

    def idle(self, cycles: int) -> dict:
        """``cycles`` cycles of interrupt waits on chip 0: the cycles run and the server's CPU seconds."""
        first = self.chips[0]
        start, cpu, wall = first.cycles(), process_cpu_seconds(self.process.pid), time.perf_counter()
        for _ in range(cycles // WAIT_CYCLES):
            first._request(SimOp.WAIT_IRQ, 0, WAIT_CYCLES)
        after, wall = process_cpu_seconds(self.process.pid), time.perf_counter() - wall
        ran = first.cycles() - start
        seconds = None if cpu is None or after is None else after - cpu
        return {"cycles": ran, "server_cpu_s": seconds, "cycles_per_cpu_s": ran / seconds if seconds else None,
                "wall_s": wall, "cycles_per_wall_s": ran / wall}

    def close(self) -> None:
        broken = False
        for chip in self.chips:
            chip.close()
            broken = broken or bool(chip.broken)
        stop_process(self.process, BROKEN_EXIT if broken else CLEAN_EXIT)


def boardspeed_bench(also: dict[str, list[str]] | None = None, rounds: int = 3,
                     cycles: int = IDLE_CYCLES) -> dict:
    """``rounds`` rounds of ``cycles`` idle cycles on each server of :func:`server_commands` and of ``also``
    (label: command), the servers taking turns; every round of each, and its best (least disturbed) round."""
    commands = {**server_commands(), **(also or {})}
    servers: dict[str, _Server] = {}
    try:
        for label, command in commands.items():
            servers[label] = _Server(command)
        runs: dict[str, list[dict]] = {label: [] for label in servers}
        for r in range(rounds):
            for label, server in servers.items():
                run = server.idle(cycles)
                run["chips"] = len(server.chips)
                runs[label].append(run)
                print(f"  round {r + 1}/{rounds}, {label}: {run['cycles']:,} cycles{_per_cpu(run)}", flush=True)
    finally:
        for server in servers.values():
            server.close()
    best = {label: max(rs, key=lambda r: r["cycles_per_cpu_s"] or 0.0) for label, rs in runs.items()}
    best_wall = {label: max(rs, key=lambda r: r["cycles_per_wall_s"]) for label, rs in runs.items()}
    return {"cycles": cycles, "wait_cycles": WAIT_CYCLES, "commands": {k: shlex.join(v) for k, v in commands.items()},
            "runs": runs, "best": best,
            "best_wall": best_wall}


def _per_cpu(run: dict) -> str:
    cpu = "" if run["cycles_per_cpu_s"] is None else f", {run['cycles_per_cpu_s']:,.0f} per server CPU second"
    return f"{cpu}, {run['cycles_per_wall_s']:,.0f} per wall second"


def print_boardspeed(report: dict) -> None:
    """The best round of each server: cycles per server CPU second (every chip runs them) and the chip-cycles, and
    the best round's cycles per wall second."""
    rounds = len(next(iter(report["runs"].values())))
    print(f"\nIdle native servers, {report['cycles']:,} cycles of interrupt waits on chip 0 (best of {rounds} "
          f"interleaved rounds; every chip runs the cycles):")
    for label, run in report["best"].items():
        rate = run["cycles_per_cpu_s"]
        text = "no /proc: CPU seconds not measured" if rate is None else (
            f"{rate:>10,.0f} cycles per server CPU second ({rate * run['chips']:,.0f} chip-cycles)")
        print(f"  {label:<24} {run['chips']} chip{'s' if run['chips'] > 1 else ' '}  {text}, "
              f"{report['best_wall'][label]['cycles_per_wall_s']:>10,.0f} per wall second")
