"""cocotb module behind the `sim` transport: the SoC in Verilator, served on a loopback TCP socket.

Whole transactions cross the socket: a register read or write, a block of
device memory, or "run until the interrupt line rises (or N cycles pass)".
While the server waits for the next request the simulation does not advance,
so the device only sees time pass inside transactions; that is what a host
sees too, only faster.  cocotbext-axi's AXI4-Lite and AXI4 masters make the
bus transactions, so the ports are also checked against an independent model.

The protocol is the simulator socket of :mod:`dx1_bringup.spec.link` (``docs/link.md``):
one request at a time, its op codes, status codes and layouts all from there.

No request blocks forever: each bus transaction races a timer of its cycle
budget (``SIM_REQUEST_CYCLES`` plus ``SIM_CYCLES_PER_BYTE`` a byte moved; the
BUDGET request fixes it, for tests).  One that loses is abandoned and answered
``STUCK`` with what the server saw: the host-port AXI channels with valid
but no ready, and each queue's STATUS, HEAD and TAIL (read through the
register port with a budget of their own, or "unreadable").

Environment: DX1_SIM_PORT (0 picks a free port), DX1_SIM_PORTFILE (where the
chosen port is written once the server listens), DX1_SIM_ONCE (1: stop after
the first client disconnects), DX1_SIM_HOST_PATH (``backdoor``, the default:
memory blocks go straight into the memory array, :mod:`.backdoor`; ``bus``: through
the AXI4 memory port), DX1_SIM_CLOCK (``cocotb``, the default: the bare SoC with cocotb's clock; ``verilator``: the
SoC inside the clocked top of :mod:`.clocked_top`, its clock in Verilator).
"""

from __future__ import annotations

import os
import socket
import struct

import cocotb
from cocotb.triggers import First, RisingEdge, Timer
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster

from ..spec import (
    SIM_BYTE_ORDER,
    SIM_CYCLES_PER_BYTE,
    SIM_REQUEST,
    SIM_REQUEST_CYCLES,
    SIM_RESPONSE,
    SimOp,
    SimStatus,
    register_map,
    struct_format,
)
from .backdoor import HOST_PATHS, MemoryBackdoor
from .clocked_top import CLOCKS
from .harness import Harness

__all__ = ["REQUEST", "RESPONSE", "host_masters", "open_listener"]

REQUEST = struct.Struct(struct_format(SIM_BYTE_ORDER, SIM_REQUEST))
RESPONSE = struct.Struct(struct_format(SIM_BYTE_ORDER, SIM_RESPONSE))
CLOCK_NS = 10
#: Bytes of the cycle count a CYCLES request answers.
CYCLE_COUNT_BYTES = 8
#: Cycle budget of each register read the STUCK report makes.
REPORT_READ_CYCLES = 2_000
#: The host ports' AXI channels: (port prefix, channel); each has ``valid`` and ``ready``.
HOST_CHANNELS = tuple(("mem", ch) for ch in ("aw", "w", "b", "ar", "r")) + tuple(
    ("regs", ch) for ch in ("aw", "w", "b", "ar", "r"))


class Stuck(Exception):
    """A bus transaction did not finish within its cycle budget."""


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def open_listener() -> tuple[socket.socket, int]:
    """Listen on 127.0.0.1:DX1_SIM_PORT (0: any free port) and publish the port in DX1_SIM_PORTFILE."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(os.environ.get("DX1_SIM_PORT", "0"))))
    listener.listen(1)
    port = listener.getsockname()[1]
    portfile = os.environ.get("DX1_SIM_PORTFILE")
    if portfile:
        # Written whole, then renamed, so a reader never sees a partial number.
        with open(portfile + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(portfile + ".tmp", portfile)
    return listener, port


def host_masters(dut) -> tuple[AxiLiteMaster, AxiMaster]:
    """cocotbext-axi masters on the SoC's host ports: AXI4-Lite registers (``regs_``), AXI4 memory (``mem_``)."""
    regs = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "regs_"), dut.clk, dut.rst)
    mem = AxiMaster(AxiBus.from_prefix(dut, "mem_"), dut.clk, dut.rst)
    for master in (regs, mem):
        master.write_if.log.setLevel("WARNING")
        master.read_if.log.setLevel("WARNING")
    return regs, mem


class SocServer:
    """The requests of one SoC simulation, each bus transaction within its cycle budget."""

    def __init__(self, dut, host_path: str = "backdoor", soc=None):
        self.dut = dut
        self.regs, self.mem = host_masters(dut)
        self.backdoor = MemoryBackdoor(dut if soc is None else soc) if host_path == "backdoor" else None
        self.fixed_budget = 0  # BUDGET's n; 0: by the request's size
        self.regmap = register_map()

    async def _bounded(self, transaction, cycles: int):
        """Await the cocotbext-axi ``transaction``, or raise :class:`Stuck` once ``cycles`` cycles pass."""
        task = cocotb.start_soon(transaction)
        await First(task.complete, Timer(cycles * CLOCK_NS, "ns"))
        if not task.done():
            task.cancel()
            raise Stuck(cycles)
        return task.result()

    def _waiting_channels(self) -> list[str]:
        """Host-port AXI channels whose valid is high and ready low, as ``mem.ar`` etc."""
        out = []
        for port, ch in HOST_CHANNELS:
            valid = getattr(self.dut, f"{port}__{ch}valid").value
            ready = getattr(self.dut, f"{port}__{ch}ready").value
            if valid and not ready:
                out.append(f"{port}.{ch}")
        return out

    async def _queue_state(self) -> str:
        """Each queue's STATUS, HEAD and TAIL through the register port, each read with a small budget."""
        parts = []
        for block in self.regmap.blocks:
            if not block.name.startswith("QUEUE"):
                continue
            values = []
            for name in ("STATUS", "HEAD", "TAIL"):
                try:
                    resp = await self._bounded(self.regs.read(block.base + block.reg(name).offset, 4),
                                               REPORT_READ_CYCLES)
                    values.append(f"{name}=0x{int.from_bytes(resp.data, SIM_BYTE_ORDER):x}")
                except Stuck:
                    values.append(f"{name} unreadable")
            parts.append(f"{block.name} " + " ".join(values))
        return "; ".join(parts)

    async def _stuck_report(self, what: str, cycles: int) -> bytes:
        channels = self._waiting_channels()
        waiting = (", ".join(channels) + " valid without ready") if channels else (
            "no host-port channel has valid without ready (the device owes a response)")
        queues = await self._queue_state()
        return f"{what} did not finish within {cycles} cycles: {waiting}; {queues}".encode()

    async def _transaction(self, what: str, transaction, nbytes: int) -> tuple[int, bytes]:
        cycles = self.fixed_budget or SIM_REQUEST_CYCLES + SIM_CYCLES_PER_BYTE * nbytes
        try:
            resp = await self._bounded(transaction, cycles)
        except Stuck:
            return SimStatus.STUCK, await self._stuck_report(what, cycles)
        if resp.resp != 0:
            return SimStatus.BUS_ERROR, b""
        # Write responses carry no data.
        return SimStatus.OK, bytes(getattr(resp, "data", b""))

    async def handle(self, op: int, addr: int, n: int, payload: bytes) -> tuple[int, bytes]:
        if op == SimOp.READ32:
            return await self._transaction(f"read32 at 0x{addr:x}", self.regs.read(addr, 4), 4)
        if op == SimOp.WRITE32:
            return await self._transaction(f"write32 at 0x{addr:x}",
                                           self.regs.write(addr, n.to_bytes(4, SIM_BYTE_ORDER)), 4)
        if op == SimOp.READ_BLOCK and self.backdoor is not None:
            data = self.backdoor.read(addr, n)
            return (SimStatus.OK, data) if data is not None else (SimStatus.BUS_ERROR, b"")
        if op == SimOp.WRITE_BLOCK and self.backdoor is not None:
            return SimStatus.OK if self.backdoor.write(addr, payload) else SimStatus.BUS_ERROR, b""
        if op == SimOp.READ_BLOCK:
            return await self._transaction(f"read_block of {n} bytes at 0x{addr:x}", self.mem.read(addr, n), n)
        if op == SimOp.WRITE_BLOCK:
            return await self._transaction(f"write_block of {len(payload)} bytes at 0x{addr:x}",
                                           self.mem.write(addr, payload), len(payload))
        if op == SimOp.BUDGET:
            self.fixed_budget = n
            return SimStatus.OK, b""
        if op == SimOp.WAIT_IRQ:
            if not self.dut.irq.value:
                # One timer, not a per-cycle count: Python stays off the clock while the device runs.
                await First(RisingEdge(self.dut.irq), Timer(max(1, n) * CLOCK_NS, "ns"))
            return SimStatus.OK, bytes([int(self.dut.irq.value)])
        if op == SimOp.CYCLES:
            from cocotb.utils import get_sim_time

            return SimStatus.OK, (int(get_sim_time(unit="ns")) // CLOCK_NS).to_bytes(CYCLE_COUNT_BYTES, SIM_BYTE_ORDER)
        if op == SimOp.STALL:
            self.dut.stall_units.value = n
            return SimStatus.OK, b""
        return SimStatus.BAD_REQUEST, f"unknown op {op}".encode()

    async def serve(self, conn: socket.socket) -> bool:
        """Serve one client; False when it asked the server to stop."""
        while True:
            header = _recv_exact(conn, REQUEST.size)
            if header is None:
                return True
            op, addr, n = REQUEST.unpack(header)
            if op == SimOp.CLOSE:
                conn.sendall(RESPONSE.pack(SimStatus.OK, 0))
                return n == 0  # CLOSE with n=1 stops the server
            payload = b""
            if op == SimOp.WRITE_BLOCK:
                payload = _recv_exact(conn, n)
                if payload is None:
                    return True
            status, data = await self.handle(op, addr, n, payload)
            conn.sendall(RESPONSE.pack(status, len(data)) + data)


@cocotb.test()
async def serve(dut):
    host_path = os.environ.get("DX1_SIM_HOST_PATH", "backdoor")
    if host_path not in HOST_PATHS:
        raise ValueError(f"DX1_SIM_HOST_PATH must be one of {', '.join(HOST_PATHS)}, not {host_path!r}")
    clock = os.environ.get("DX1_SIM_CLOCK", "cocotb")
    if clock not in CLOCKS:
        raise ValueError(f"DX1_SIM_CLOCK must be one of {', '.join(CLOCKS)}, not {clock!r}")
    # The bare SoC: cocotb's clock drives its clk input.  Else the clocked top
    # (dx1_bringup.sim.clocked_top): its clock runs in Verilator, the SoC is dut.soc.
    harness = Harness(dut, clock_ns=CLOCK_NS, start_clock=clock == "cocotb")
    server = SocServer(dut, host_path, soc=None if clock == "cocotb" else dut.soc)
    dut.stall_units.value = 0
    await harness.reset()

    listener, port = open_listener()
    dut._log.info("dx1 sim serving on 127.0.0.1:%d", port)
    once = os.environ.get("DX1_SIM_ONCE") == "1"
    try:
        while True:
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with conn:
                keep_going = await server.serve(conn)
            if once or not keep_going:
                break
    finally:
        listener.close()
