"""A ring of chips in Amaranth's Python simulator, one driver transport a chip: the link's RTL beside
``model:chips=N``.

:class:`AmaranthBoard` elaborates :class:`~dx1_bringup.gateware.soc.ring.ChipRing` and runs it on a thread
of its own, as :class:`~dx1_bringup.sim.amaranth_transport.AmaranthTransport` runs one SoC; each chip's
:class:`AmaranthChipTransport` hands its requests to the simulation's one testbench, which performs them
on that chip's host ports (:class:`~dx1_bringup.sim.amaranth_transport.HostPort`) one at a time.  Time
passes only inside requests, for every chip at once.  It is slow (Python per cycle): the link's
model-versus-RTL tests use it with small chips and short SENDs.
"""

from __future__ import annotations

import queue
import threading

from dx1_driver import BusErrorResponse, TransportError
from dx1_driver.errors import LinkTimeout
from dx1_driver.transport import Transport

from ..gateware.soc.ring import ChipRing
from ..spec import REG_BYTES, SocConfig
from .amaranth_transport import HostPort
from .backdoor import word_location

__all__ = ["AmaranthBoard", "AmaranthChipTransport"]

_PERIOD = 1e-8


class AmaranthBoard:
    """``chips`` chips of ``config`` (which has a link) in a ring, simulated; ``transports[i]`` is chip i's.

    ``timeout`` bounds each request's wall time.  The simulation stops when every transport is closed.
    """

    def __init__(self, config: SocConfig, chips: int, timeout: float = 600.0):
        from amaranth.sim import Simulator

        self.config = config
        self.timeout = timeout
        self.ring = ChipRing(config, chips)
        self._requests: queue.Queue = queue.Queue()
        self._answers = [queue.Queue() for _ in range(chips)]
        self._open = chips
        self._lock = threading.Lock()
        self.cycles = 0
        self._failure: BaseException | None = None
        sim = Simulator(self.ring)
        sim.add_clock(_PERIOD)
        sim.add_testbench(self._host)
        self._thread = threading.Thread(target=self._run, args=(sim,), name="amaranth-board", daemon=True)
        self._thread.start()
        self.transports = [AmaranthChipTransport(self, i) for i in range(chips)]

    def _run(self, sim) -> None:
        try:
            sim.run()
        except BaseException as exc:  # handed to every waiting request, which raises it
            self._failure = exc
            for answers in self._answers:
                answers.put(None)

    async def _tick(self, ctx, n: int = 1) -> None:
        for _ in range(n):
            await ctx.tick()
        self.cycles += n

    def _word(self, chip: int):
        soc = self.ring.socs[chip]

        def word(i: int):
            bank, row = word_location(i, self.config.mem_banks)
            return soc.memory.bank_modules[bank].array.data[row]
        return word

    async def _host(self, ctx) -> None:
        ports = [HostPort(getattr(self.ring, f"chip{i}_regs"), getattr(self.ring, f"chip{i}_irq"), self._word(i),
                          self._tick) for i in range(self.ring.chips)]
        cut = 0
        while True:
            chip, op, args = self._requests.get()
            if op == "close":
                return
            if op == "cut":
                cut = cut | 1 << (2 * chip + args[0]) if args[1] else cut & ~(1 << (2 * chip + args[0]))
                ctx.set(self.ring.cut, cut)
                self._answers[chip].put(("ok", None))
            else:
                self._answers[chip].put(await ports[chip].serve(ctx, op, args))

    def call(self, chip: int, op: str, args: tuple):
        if self._failure is not None or not self._thread.is_alive():
            raise TransportError(f"the Amaranth board simulation has stopped: {self._failure!r}")
        self._requests.put((chip, op, args))
        try:
            answer = self._answers[chip].get(timeout=self.timeout)
        except queue.Empty:
            raise LinkTimeout(f"the Amaranth board did not answer {op} for chip {chip} within {self.timeout:g} s") \
                from None
        if answer is None:
            raise TransportError(f"the Amaranth board simulation failed during {op}: {self._failure!r}")
        status, value = answer
        if status != "ok":
            raise BusErrorResponse(value)
        return value

    def cut(self, chip: int, port: int, cut: bool = True) -> None:
        """Cut (or mend) the wire leaving ``port`` of chip ``chip``: a cut link, both ends go down."""
        self.call(chip, "cut", (port, cut))

    def closed(self) -> None:
        """A chip's transport was closed; after the last, the simulation stops."""
        with self._lock:
            self._open -= 1
            if self._open == 0:
                self._requests.put((0, "close", ()))
                self._thread.join(timeout=self.timeout)


class AmaranthChipTransport(Transport):
    """Chip ``chip`` of an :class:`AmaranthBoard`, as a driver transport."""

    has_irq_line = True

    def __init__(self, board: AmaranthBoard, chip: int):
        super().__init__(REG_BYTES, board.config.mem_bytes)
        self.board, self.chip = board, chip

    def _read32(self, addr: int) -> int:
        return self.board.call(self.chip, "read32", (addr,))

    def _write32(self, addr: int, value: int) -> None:
        self.board.call(self.chip, "write32", (addr, value))

    def _read_block(self, addr: int, n: int) -> bytes:
        return self.board.call(self.chip, "read_block", (addr, n)) if n else b""

    def _write_block(self, addr: int, data: bytes) -> None:
        if data:
            self.board.call(self.chip, "write_block", (addr, bytes(data)))

    def _wait_irq(self, timeout: float) -> bool:
        return self.board.call(self.chip, "wait_irq", ())

    def cycles(self) -> int:
        """Clock cycles the board has simulated so far."""
        return self.board.cycles

    def _close(self) -> None:
        self.board.closed()
