"""The pyuvm environment's transaction items, the register map they address, and an analysis export that calls a
function: what the agents, the scoreboard, the coverage and the sequences all speak."""

from __future__ import annotations

from dataclasses import dataclass

from pyuvm import uvm_analysis_export, uvm_sequence_item

from dx1_bringup.fuzz.layout import LAYOUT
from dx1_bringup.spec import register_map

REGMAP = register_map(LAYOUT.config)
#: address -> (block, placed register)
DECODE = {b.base + r.offset: (b, r) for b in REGMAP.blocks for r in b.registers}


class RegItem(uvm_sequence_item):
    """One register access.  ``nbytes`` < 4 or a misaligned ``addr`` gives partial strobes / a misaligned address."""

    def __init__(self, name="reg", addr=0, write=False, data=0, nbytes=4, expect_err=None, error_kind=None):
        super().__init__(name)
        self.addr, self.write, self.data, self.nbytes = addr, write, data, nbytes
        self.expect_err = expect_err   # None: only the scoreboard's prediction counts
        self.error_kind = error_kind   # bus-error coverage label
        self.err = None                # response: True for SLVERR
        self.rdata = None

    def __str__(self):
        what = f"W {self.data:#010x}" if self.write else "R"
        got = "" if self.err is None else (" -> SLVERR" if self.err else
                                           ("" if self.write else f" -> {self.rdata:#010x}"))
        return f"reg {what} @{self.addr:#06x}/{self.nbytes}{got}"


class CmdItem(uvm_sequence_item):
    """kind "cmd": ``data`` is a packed command for ``queue``; "doorbell": publish the queue's new commands;
    "mem": write ``data`` to device memory at ``addr``.  ``meta`` carries coverage labels."""

    def __init__(self, name="cmd", kind="cmd", queue=0, data=b"", addr=0, meta=None):
        super().__init__(name)
        self.kind, self.queue, self.data, self.addr = kind, queue, data, addr
        self.meta = meta or {}
        self.index = None   # ring index, set by the driver
        self.phase = None   # expected completion phase

    def __str__(self):
        if self.kind == "cmd":
            return f"q{self.queue}[{self.index}] {self.meta.get('opcode', '?')} {self.meta}"
        return f"{self.kind} q{self.queue} @{self.addr:#x} ({len(self.data)} bytes)"


@dataclass
class Completion:
    queue: int
    index: int
    fields: dict


class AnalysisExport(uvm_analysis_export):
    """An analysis export that hands every item to ``fn``."""

    def __init__(self, name, parent, fn):
        super().__init__(name, parent)
        self.fn = fn

    def write(self, t):
        self.fn(t)


__all__ = ["RegItem", "CmdItem", "Completion", "AnalysisExport", "REGMAP", "DECODE"]
