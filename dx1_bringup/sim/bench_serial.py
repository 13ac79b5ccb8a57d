"""cocotb module behind `make bench`: bulk payload throughput of the UART bridge, in simulated time.

The host side is the driver's own framing (:mod:`dx1_driver.frames`' frame
builders, bursts split and windowed as :class:`~dx1_driver.serial_transport.SerialTransport`
does) driving the pins bit by bit with cocotbext-uart.  The host answers at
once (no cable or USB latency), so the figures are what the bridge and the
protocol allow: payload bytes over the time from the first bit sent to the
last bit of the last answer, as a fraction of the line's capacity (baud / 10
bytes a second, 8N1).  Every block is written, then read back in the same
mode and compared.

Modes:

- ``crc``: CRC bursts of up to 4 KiB, sent a window at a time: eight write
  bursts (``MAX_WINDOW``), ending with their status bytes, or two read bursts
  (``READ_WINDOW_BURSTS``: the bridge's receive FIFO holds one more header
  while it answers), ending with their payloads and CRCs.  No read-back
  (``verify_writes=False``).
- ``crc-verified``: as the driver runs by default: every write burst followed
  by a read burst of the same bytes, one burst a window (the bridge takes no
  byte while it sends the read-back), checked.  Reads are ``crc``'s.
- ``uartbone``: LiteX's framing: writes as frames of up to 255 words sent back
  to back and, since a UARTBone write has no answer, ended by a one-word read
  whose answer shows that they were all done; reads as one 255-word frame per
  round trip, as LiteX's host and the driver's ``read_u32s`` do.

Runs on ``dx1_board`` (the simulated board: SoC + bridge at 6.25 Mbaud) or on
``dx1_uart_bridge`` (the bridge alone, its ports on cocotbext-axi RAM models).
DX1_BENCH holds ``{"baud": BAUD, "runs": [{"mode": MODE, "sizes": [...], "ops":
["write", "read"]}, ...]}``; the figures go to the file named by DX1_RESULT.
A round trip is one wait for answers after a batch of requests: on a cable,
each adds the host's and the USB-UART chip's latency to the times here.
"""

from __future__ import annotations

import json
import logging
import os
import random
import struct
import time

import cocotb
from cocotb.triggers import with_timeout
from cocotb.utils import get_sim_time
from cocotbext.uart import UartSink, UartSource
from dx1_driver import frames, link
from dx1_driver.link import FrameStatus
from dx1_driver.serial_transport import MAX_WINDOW, READ_WINDOW_BURSTS

from .harness import Harness

CLOCK_NS = 20
MODES = ("crc", "crc-verified", "uartbone")


class Host:
    """The host end of the line: bytes out through a UartSource, answers in through a UartSink."""

    def __init__(self, dut, baud: int):
        board = hasattr(dut, "uart_rx")
        rx, tx = (dut.uart_rx, dut.uart_tx) if board else (dut.rx, dut.tx)
        self.source = UartSource(rx, baud=baud, bits=8)
        self.sink = UartSink(tx, baud=baud, bits=8)
        self.byte_ns = 10e9 / baud
        models = [self.source, self.sink]
        if not board:
            from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteRam, AxiRam

            regs = AxiLiteRam(AxiLiteBus.from_prefix(dut, "regs_"), dut.clk, dut.rst, size=link.REG_BYTES)
            ram = AxiRam(AxiBus.from_prefix(dut, "mem_"), dut.clk, dut.rst, size=1 << 20)
            models += [regs.read_if, regs.write_if, ram.read_if, ram.write_if]
        for model in models:
            model.log.setLevel(logging.WARNING)  # one INFO line per byte otherwise
        self.pending = bytearray()
        self.sent = self.received = self.round_trips = 0

    def send(self, data: bytes) -> None:
        self.sent += len(data)
        self.source.write_nowait(data)

    async def recv(self, n: int) -> bytes:
        """The next ``n`` bytes from the bridge.

        Fails if they take more than twice the wire time of what is still to send and receive, plus 1 ms.
        """
        async def get() -> None:
            while len(self.pending) < n:
                self.pending += await self.sink.read()
        await with_timeout(get(), int(2 * (n + self.source.count()) * self.byte_ns + 1e6), "ns")
        data, self.pending = bytes(self.pending[:n]), self.pending[n:]
        self.received += n
        return data

    # -- the modes --------------------------------------------------------------------------------

    @staticmethod
    def _windows(n: int, bursts: int) -> list[list[tuple[int, int]]]:
        """(offset, length) bursts of at most BURST_MAX_PAYLOAD, grouped in windows as the driver groups them."""
        span = min(MAX_WINDOW, bursts * link.BURST_MAX_PAYLOAD)
        return [[(p, min(link.BURST_MAX_PAYLOAD, n - p)) for p in range(w, min(n, w + span), link.BURST_MAX_PAYLOAD)]
                for w in range(0, n, span)]

    async def _status(self, what: str) -> None:
        status = (await self.recv(1))[0]
        assert status == FrameStatus.ACK, f"{what}: status 0x{status:02x}"

    async def _payload(self, what: str, k: int) -> bytes:
        await self._status(what)
        body = await self.recv(k + link.CRC_BYTES)
        assert frames.crc_ok(body), f"{what}: payload CRC mismatch"
        return body[:k]

    async def write(self, mode: str, addr: int, data: bytes) -> None:
        if mode == "uartbone":
            words = list(struct.unpack(f"<{len(data) // 4}I", data))
            step = link.UARTBONE_MAX_WORDS
            for i in range(0, len(words), step):
                self.send(frames.uartbone_write_frame(link.MEM_BASE + addr + 4 * i, words[i:i + step]))
            self.send(frames.uartbone_read_frame(link.MEM_BASE + addr, 1))
            self.round_trips += 1
            await self.recv(link.WORD_BYTES)
            return
        verify = mode == "crc-verified"
        # As SerialTransport._write_block: one burst a window with its read-back, else MAX_WINDOW bytes.
        for window in self._windows(len(data), 1 if verify else MAX_WINDOW // link.BURST_MAX_PAYLOAD):
            for p, k in window:
                self.send(frames.burst_write_frame(link.MEM_BASE + addr + p, data[p:p + k]))
                if verify:
                    self.send(frames.burst_read_frame(link.MEM_BASE + addr + p, k))
            self.round_trips += 1
            for p, k in window:
                await self._status(f"burst write at 0x{addr + p:x}")
                if verify:
                    back = await self._payload(f"read-back at 0x{addr + p:x}", k)
                    assert back == data[p:p + k], f"read-back at 0x{addr + p:x} differs"

    async def read(self, mode: str, addr: int, n: int) -> bytes:
        out = bytearray()
        if mode == "uartbone":
            for i in range(0, n // 4, link.UARTBONE_MAX_WORDS):
                count = min(link.UARTBONE_MAX_WORDS, n // 4 - i)
                self.send(frames.uartbone_read_frame(link.MEM_BASE + addr + 4 * i, count))
                self.round_trips += 1
                words = frames.unpack_words(await self.recv(link.WORD_BYTES * count))
                out += b"".join(w.to_bytes(link.WORD_BYTES, "little") for w in words)  # as a CPU stores them
            return bytes(out)
        for window in self._windows(n, READ_WINDOW_BURSTS):
            self.send(b"".join(frames.burst_read_frame(link.MEM_BASE + addr + p, k) for p, k in window))
            self.round_trips += 1
            for p, k in window:
                out += await self._payload(f"burst read at 0x{addr + p:x}", k)
        return bytes(out)


def check_runs(runs: list[dict]) -> None:
    """Refuse a malformed DX1_BENCH before the simulation starts."""
    for run in runs:
        if run.get("mode") not in MODES:
            raise ValueError(f"bench mode must be one of {', '.join(MODES)}, not {run.get('mode')!r}")
        if not run.get("ops") or not set(run["ops"]) <= {"write", "read"}:
            raise ValueError(f"bench ops must be a non-empty list of 'write' and 'read', not {run.get('ops')!r}")
        for size in run.get("sizes", []):
            if not (isinstance(size, int) and 0 < size <= (1 << 20) and size % 4 == 0):
                raise ValueError(f"block sizes must be multiples of 4 (UARTBone moves words) from 4 to 1 MiB, "
                                 f"not {size!r}")


@cocotb.test()
async def bulk_throughput(dut):
    spec = json.loads(os.environ["DX1_BENCH"])
    baud, runs = spec["baud"], spec["runs"]
    check_runs(runs)
    harness = Harness(dut, clock_ns=CLOCK_NS)
    host = Host(dut, baud)
    await harness.reset(low=10)
    line = baud / 10  # bytes a second, 8N1
    rng = random.Random(1)
    results = []
    for run in runs:
        mode = run["mode"]
        for size in run["sizes"]:
            data = rng.randbytes(size)
            row = {"mode": mode, "bytes": size}
            wall = time.perf_counter()
            for op in run["ops"]:
                sent, received, trips, t0 = host.sent, host.received, host.round_trips, get_sim_time("ns")
                if op == "write":
                    await host.write(mode, 0, data)
                else:
                    back = await host.read(mode, 0, size)
                elapsed = (get_sim_time("ns") - t0) * 1e-9
                row[op] = {"sim_s": elapsed, "line_fraction": size / (line * elapsed),
                           "round_trips": host.round_trips - trips,
                           "wire_bytes_to_board": host.sent - sent, "wire_bytes_to_host": host.received - received}
            # A verified write compares every burst's read-back itself (and fails the run if one differs).
            row["correct"] = back == data if "read" in run["ops"] else True
            row["wall_s"] = time.perf_counter() - wall
            results.append(row)
            dut._log.info("%s %6d B: %s (%.1f s wall)", mode, size, ", ".join(
                f"{op} {100 * row[op]['line_fraction']:.1f}%" for op in run["ops"]), row["wall_s"])
    with open(os.environ["DX1_RESULT"], "w") as f:
        json.dump({"baud": baud, "clock_hz": 1e9 / CLOCK_NS, "results": results}, f, indent=2)
    assert all(r["correct"] for r in results), "a block read back differs from what was written"
