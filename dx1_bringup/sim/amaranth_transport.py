"""The SoC in Amaranth's Python simulator behind a driver transport: the same design as the Verilator server.

:class:`AmaranthTransport` elaborates :class:`~dx1_bringup.gateware.soc.Dx1Soc` and runs it in
``amaranth.sim`` on a thread of its own; each transport request is handed to the simulation's one
testbench, which performs it and hands back the answer, so (as with the socket server) the device only
sees time pass inside requests.  Register accesses are AXI4-Lite transactions on the ``regs`` port;
memory blocks go straight into the memory banks' arrays (the same backdoor as ``dx1 sim serve``), so a
GEMM takes the same cycles here as on the Verilator server.  It exists to measure Amaranth's simulator
beside Verilator on the same GEMM (``make bench``, section ``simspeed``); it is slow (Python per cycle).
"""

from __future__ import annotations

import queue
import threading

from dx1_driver import BusErrorResponse, TransportError
from dx1_driver.errors import LinkTimeout
from dx1_driver.transport import Transport

from ..gateware.soc import Dx1Soc
from ..spec import BUS_BYTES, REG_BYTES, SIM_BYTE_ORDER, SIM_IRQ_WAIT_CYCLES, SocConfig
from .backdoor import word_location

__all__ = ["AmaranthTransport", "HostPort"]

#: Simulated clock period; only the cycle count matters.
_PERIOD = 1e-8


class HostPort:
    """One chip's host side in a simulation: AXI4-Lite register accesses on ``regs``, memory blocks through the
    backdoor (``word(i)``: the array row of device-memory word i), ``irq``; ``tick(ctx)`` advances the clock."""

    def __init__(self, regs, irq, word, tick):
        self.regs, self.irq, self.word, self.tick = regs, irq, word, tick

    async def _handshake(self, ctx, valid, ready) -> None:
        """Hold ``valid`` until the clock edge at which ``ready`` is high."""
        ctx.set(valid, 1)
        while True:
            accepted = ctx.get(ready)
            await self.tick(ctx)
            if accepted:
                break
        ctx.set(valid, 0)

    async def _response(self, ctx, valid, ready, *fields):
        """The values of ``fields`` at the clock edge that takes the response (``ready`` held high)."""
        ctx.set(ready, 1)
        while not ctx.get(valid):
            await self.tick(ctx)
        values = [ctx.get(f) for f in fields]
        await self.tick(ctx)
        ctx.set(ready, 0)
        return values

    async def serve(self, ctx, op: str, args: tuple) -> tuple[str, object]:
        """Perform one transport request; ``("ok", value)`` or ``("error", message)``."""
        regs = self.regs
        if op == "read32":
            ctx.set(regs.araddr, args[0])
            await self._handshake(ctx, regs.arvalid, regs.arready)
            data, resp = await self._response(ctx, regs.rvalid, regs.rready, regs.rdata, regs.rresp)
            return ("error", f"read32 at 0x{args[0]:x}: AXI response {resp}") if resp else ("ok", data)
        if op == "write32":
            ctx.set(regs.awaddr, args[0])
            ctx.set(regs.wdata, args[1])
            ctx.set(regs.wstrb, 0xF)
            ctx.set(regs.awvalid, 1)
            ctx.set(regs.wvalid, 1)
            aw = w = False
            while not (aw and w):
                aw_now, w_now = ctx.get(regs.awready), ctx.get(regs.wready)
                await self.tick(ctx)
                if aw_now and not aw:
                    aw = True
                    ctx.set(regs.awvalid, 0)
                if w_now and not w:
                    w = True
                    ctx.set(regs.wvalid, 0)
            (resp,) = await self._response(ctx, regs.bvalid, regs.bready, regs.bresp)
            return ("error", f"write32 at 0x{args[0]:x}: AXI response {resp}") if resp else ("ok", None)
        if op == "read_block":
            addr, n = args
            first, last = addr // BUS_BYTES, (addr + n - 1) // BUS_BYTES
            raw = b"".join(ctx.get(self.word(i)).to_bytes(BUS_BYTES, SIM_BYTE_ORDER) for i in range(first, last + 1))
            return ("ok", raw[addr - first * BUS_BYTES:][:n])
        if op == "write_block":
            addr, data = args
            first, last = addr // BUS_BYTES, (addr + len(data) - 1) // BUS_BYTES
            offset = addr - first * BUS_BYTES
            merged = bytearray(b"".join(ctx.get(self.word(i)).to_bytes(BUS_BYTES, SIM_BYTE_ORDER)
                                        for i in (first, last)))
            image = bytearray((last + 1 - first) * BUS_BYTES)
            image[:BUS_BYTES], image[-BUS_BYTES:] = merged[:BUS_BYTES], merged[BUS_BYTES:]
            image[offset:offset + len(data)] = data
            for k, i in enumerate(range(first, last + 1)):
                ctx.set(self.word(i), int.from_bytes(image[k * BUS_BYTES:(k + 1) * BUS_BYTES], SIM_BYTE_ORDER))
            return ("ok", None)
        # wait_irq: until the interrupt line is high, or SIM_IRQ_WAIT_CYCLES pass
        for _ in range(SIM_IRQ_WAIT_CYCLES):
            if ctx.get(self.irq):
                break
            await self.tick(ctx)
        return ("ok", bool(ctx.get(self.irq)))


class AmaranthTransport(Transport):
    """A :class:`~dx1_driver.transport.Transport` to the SoC simulated by Amaranth (see the module).

    ``timeout`` bounds each request's wall time; a request that takes longer raises
    :class:`~dx1_driver.errors.LinkTimeout`.
    """

    has_irq_line = True  # wait_irq simulates until the SoC's irq output is high

    def __init__(self, config: SocConfig | None = None, timeout: float = 600.0):
        from amaranth.sim import Simulator

        self.config = config or SocConfig()
        super().__init__(REG_BYTES, self.config.mem_bytes)
        self.timeout = timeout
        self.soc = Dx1Soc(self.config)
        self._requests: queue.Queue = queue.Queue()
        self._answers: queue.Queue = queue.Queue()
        self._cycles = 0
        self.round_trips = 0  # requests answered, as SimTransport counts them
        sim = Simulator(self.soc)
        sim.add_clock(_PERIOD)
        sim.add_testbench(self._host)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(sim,), name="amaranth-soc", daemon=True)
        self._thread.start()

    # -- the simulation thread -----------------------------------------------------------------

    def _run(self, sim) -> None:
        try:
            sim.run()
        except BaseException as exc:  # handed to the waiting request, which raises it
            self._failure = exc
            self._answers.put(None)

    async def _tick(self, ctx, n: int = 1) -> None:
        for _ in range(n):
            await ctx.tick()
        self._cycles += n

    async def _host(self, ctx) -> None:
        port = HostPort(self.soc.regs, self.soc.irq, self._word, self._tick)
        while True:
            op, args = self._requests.get()
            if op == "close":
                return
            self._answers.put(await port.serve(ctx, op, args))

    def _word(self, i: int):
        bank, row = word_location(i, self.config.mem_banks)
        return self.soc.memory.bank_modules[bank].array.data[row]

    # -- the driver side -----------------------------------------------------------------------

    def _call(self, op: str, *args):
        if self._failure is not None or not self._thread.is_alive():
            raise TransportError(f"the Amaranth simulation has stopped: {self._failure!r}")
        self._requests.put((op, args))
        self.round_trips += 1
        try:
            answer = self._answers.get(timeout=self.timeout)
        except queue.Empty:
            raise LinkTimeout(f"the Amaranth simulation did not answer {op} within {self.timeout:g} s") from None
        if answer is None:
            raise TransportError(f"the Amaranth simulation failed during {op}: {self._failure!r}")
        status, value = answer
        if status != "ok":
            raise BusErrorResponse(value)
        return value

    def _read32(self, addr: int) -> int:
        return self._call("read32", addr)

    def _write32(self, addr: int, value: int) -> None:
        self._call("write32", addr, value)

    def _read_block(self, addr: int, n: int) -> bytes:
        return self._call("read_block", addr, n) if n else b""

    def _write_block(self, addr: int, data: bytes) -> None:
        if data:
            self._call("write_block", addr, bytes(data))

    def _wait_irq(self, timeout: float) -> bool:
        return self._call("wait_irq")

    def cycles(self) -> int:
        """Clock cycles simulated so far."""
        return self._cycles

    def _close(self) -> None:
        self._requests.put(("close", ()))
        self._thread.join(timeout=self.timeout)
