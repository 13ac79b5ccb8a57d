"""cocotb testbench for the tile compute core (runs inside the simulator).

The core's ports are AXI4-Stream shaped, so cocotbext-axi's stream source and
sink drive them; random idle cycles on every source and random back-pressure
on every sink come from pause generators fed by a seeded numpy generator.
Whole rows and whole commands cross the Python/simulator boundary.
"""

from __future__ import annotations

import logging

import cocotb
import numpy as np
from cocotb.triggers import Event, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamSink, AxiStreamSource

from ..spec import COMMAND_BYTES, Opcode, TileConfig
from ..spec.commands import COMPLETION
from .harness import CLOCK_NS, Harness, set_pauses

__all__ = ["TileTB", "config_of"]

ADDR_BITS = 16


def config_of(dut) -> TileConfig:
    """Recover the tile's configuration from the generated module's name."""
    from ..gateware import RTL_MODULES

    name = dut._name
    for mod in RTL_MODULES:
        if mod.name == name:
            return mod.build().config
    raise ValueError(f"{name} is not a generated tile core")


def _done_fields(word: int) -> dict[str, int]:
    return {f.name: f.extract(word) for f in COMPLETION if f.name in ("tag", "status", "opcode")}


class TileTB(Harness):
    """Clock, reset and stream models around a ``dx1_tile_core_*`` module.

    Parameters
    ----------
    dut:
        The cocotb handle of the tile core.
    rng:
        With a generator, every stream gets random pauses (idle cycles on the
        inputs, back-pressure on the outputs); without, they run flat out.
    pause:
        Probability of a pause in any cycle.
    """

    def __init__(self, dut, rng: np.random.Generator | None = None, pause: float = 0.3):
        super().__init__(dut)
        self.config = config_of(dut)
        self.n = self.config.array

        def stream(kind, prefix):
            return kind(AxiStreamBus.from_prefix(dut, prefix + "_"), dut.clk, dut.rst)

        self.cmd = stream(AxiStreamSource, "cmd")
        self.done = stream(AxiStreamSink, "done")
        self.spm_wr = stream(AxiStreamSource, "spm_wr")
        self.spm_rreq = stream(AxiStreamSource, "spm_rreq")
        self.spm_rresp = stream(AxiStreamSink, "spm_rresp")
        self.acc_wr = stream(AxiStreamSource, "acc_wr")
        self.acc_rreq = stream(AxiStreamSource, "acc_rreq")
        self.acc_rresp = stream(AxiStreamSink, "acc_rresp")
        if rng is not None:
            set_pauses((self.cmd, self.done, self.spm_wr, self.spm_rreq, self.spm_rresp, self.acc_wr,
                        self.acc_rreq, self.acc_rresp), rng, pause)
        for s in (self.cmd, self.done, self.spm_wr, self.spm_rreq, self.spm_rresp, self.acc_wr, self.acc_rreq,
                  self.acc_rresp):
            s.log.setLevel(logging.WARNING)  # one INFO line per beat otherwise

    # ---- memories ---------------------------------------------------------------------------
    async def _write_rows(self, source, row: int, values: np.ndarray, lane_bytes: int) -> None:
        data_bytes = self.n * lane_bytes
        for i, lanes in enumerate(values):
            word = int.from_bytes(np.ascontiguousarray(lanes).tobytes(), "little") | (row + i) << (8 * data_bytes)
            await source.send(word.to_bytes(data_bytes + ADDR_BITS // 8, "little"))
        await source.wait()

    async def _read_rows(self, req, resp, row: int, count: int, dtype) -> np.ndarray:
        async def requests():
            for i in range(count):
                await req.send((row + i).to_bytes(ADDR_BITS // 8, "little"))

        task = cocotb.start_soon(requests())
        raw = bytearray()
        for _ in range(count):
            frame = await resp.recv()
            raw += bytes(frame.tdata)
        await task
        return np.frombuffer(bytes(raw), dtype=dtype).reshape(count, self.n)

    async def write_spm(self, row: int, values: np.ndarray) -> None:
        await self._write_rows(self.spm_wr, row, np.asarray(values, dtype=np.int8), 1)

    async def write_acc(self, row: int, values: np.ndarray) -> None:
        await self._write_rows(self.acc_wr, row, np.asarray(values, dtype=np.int32), 4)

    async def read_spm(self, row: int, count: int) -> np.ndarray:
        return await self._read_rows(self.spm_rreq, self.spm_rresp, row, count, np.int8)

    async def read_acc(self, row: int, count: int) -> np.ndarray:
        return await self._read_rows(self.acc_rreq, self.acc_rresp, row, count, np.int32)

    # ---- commands ---------------------------------------------------------------------------
    async def run(self, commands: list[bytes], timeout_cycles: int | None = None,
                  window: int | None = None) -> list[dict[str, int]]:
        """Send ``commands`` and return their completions, in arrival order.

        With ``window``, at most that many commands are outstanding, so the
        command source is never left waiting on a full queue (which would wake
        Python every cycle).  Fails (instead of hanging) when the completions
        have not all arrived within ``timeout_cycles``, by default a generous
        bound from the work queued.
        """
        if timeout_cycles is None:
            timeout_cycles = 10_000 + 8 * sum(self.work_cycles(c) for c in commands)
        received = 0
        progress = Event()

        async def send_all():
            for i, c in enumerate(commands):
                assert len(c) == COMMAND_BYTES
                while window is not None and i - received >= window:
                    progress.clear()
                    await progress.wait()
                await self.cmd.send(c)

        async def collect():
            nonlocal received
            out = []
            for _ in commands:
                frame = await self.done.recv()
                out.append(_done_fields(int.from_bytes(bytes(frame.tdata), "little")))
                received += 1
                progress.set()
            return out

        sender = cocotb.start_soon(send_all())
        completions = await with_timeout(collect(), timeout_cycles * CLOCK_NS, "ns")
        await sender
        await RisingEdge(self.dut.clk)
        assert self.done.empty(), "the tile produced more completions than commands"
        return completions

    def work_cycles(self, cmd: bytes) -> int:
        """Rough cycles a command keeps the core busy (for timeouts and reports)."""
        from ..spec import unpack_command

        opcode, f = unpack_command(cmd)
        if opcode == Opcode.GEMM:
            return f["m"] * max(f["k_chunks"], 1) + 4 * self.n
        if opcode == Opcode.POSTOP:
            return f["rows"] + 8
        if opcode in (Opcode.VECTOR, Opcode.TABLE, Opcode.TRANSPOSE) and f.get("rows", 1) and f.get("cols", 1):
            from ..perfmodel.costs import COSTS

            return COSTS.vector_command_cycles(f, self.n)
        return 2
