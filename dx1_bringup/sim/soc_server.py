"""cocotb module behind the `sim` transport: the SoC in Verilator, served on a loopback TCP socket.

Whole transactions cross the socket: a register read or write, a block of
device memory, or "run until the interrupt line rises (or N cycles pass)".
While the server waits for the next request the simulation does not advance,
so the device only sees time pass inside transactions; that is what a host
sees too, only faster.  cocotbext-axi's AXI4-Lite and AXI4 masters make the
bus transactions, so the ports are also checked against an independent model.

The protocol is the simulator socket of :mod:`dx1_bringup.spec.link` (``docs/link.md``):
one request at a time, its op codes, status codes and layouts all from there.

Environment: DX1_SIM_PORT (0 picks a free port), DX1_SIM_PORTFILE (where the
chosen port is written once the server listens), DX1_SIM_ONCE (1: stop after
the first client disconnects), DX1_SIM_HOST_PATH (``backdoor``, the default:
memory blocks go straight into the memory array, :mod:`.backdoor`; ``bus``: through
the AXI4 memory port).
"""

from __future__ import annotations

import os
import socket
import struct

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, RisingEdge, Timer
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster

from ..spec import SIM_BYTE_ORDER, SIM_REQUEST, SIM_RESPONSE, SimOp, SimStatus, struct_format
from .backdoor import HOST_PATHS, MemoryBackdoor

__all__ = ["REQUEST", "RESPONSE", "host_masters", "open_listener"]

REQUEST = struct.Struct(struct_format(SIM_BYTE_ORDER, SIM_REQUEST))
RESPONSE = struct.Struct(struct_format(SIM_BYTE_ORDER, SIM_RESPONSE))
CLOCK_NS = 10
#: Bytes of the cycle count a CYCLES request answers.
CYCLE_COUNT_BYTES = 8


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
    def __init__(self, dut, host_path: str = "backdoor"):
        self.dut = dut
        self.regs, self.mem = host_masters(dut)
        self.backdoor = MemoryBackdoor(dut) if host_path == "backdoor" else None

    async def handle(self, op: int, addr: int, n: int, payload: bytes) -> tuple[int, bytes]:
        if op == SimOp.READ32:
            resp = await self.regs.read(addr, 4)
            return (SimStatus.OK, resp.data) if resp.resp == 0 else (SimStatus.BUS_ERROR, b"")
        if op == SimOp.WRITE32:
            resp = await self.regs.write(addr, n.to_bytes(4, SIM_BYTE_ORDER))
            return SimStatus.OK if resp.resp == 0 else SimStatus.BUS_ERROR, b""
        if op == SimOp.READ_BLOCK and self.backdoor is not None:
            data = self.backdoor.read(addr, n)
            return (SimStatus.OK, data) if data is not None else (SimStatus.BUS_ERROR, b"")
        if op == SimOp.WRITE_BLOCK and self.backdoor is not None:
            return SimStatus.OK if await self.backdoor.write(addr, payload) else SimStatus.BUS_ERROR, b""
        if op == SimOp.READ_BLOCK:
            resp = await self.mem.read(addr, n)
            return (SimStatus.OK, bytes(resp.data)) if resp.resp == 0 else (SimStatus.BUS_ERROR, b"")
        if op == SimOp.WRITE_BLOCK:
            resp = await self.mem.write(addr, payload)
            return SimStatus.OK if resp.resp == 0 else SimStatus.BUS_ERROR, b""
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
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    host_path = os.environ.get("DX1_SIM_HOST_PATH", "backdoor")
    if host_path not in HOST_PATHS:
        raise ValueError(f"DX1_SIM_HOST_PATH must be one of {', '.join(HOST_PATHS)}, not {host_path!r}")
    server = SocServer(dut, host_path)
    dut.rst.value = 1
    dut.stall_units.value = 0
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)

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
