"""cocotb module behind `dx1 sim serve --uart --server cocotb`: the simulated board, its UART pins bridged to TCP.

The board (SoC + UART bridge) runs in Verilator; cocotbext-uart drives and
samples its ``uart_rx``/``uart_tx`` pins bit by bit, and only bytes cross the
loopback socket, so the serial transport cannot tell the simulator from a
cable (``--device serial:socket://127.0.0.1:PORT``).

Unlike the register-level sim server, the board runs freely while a client is
connected, as hardware does: Python looks at the socket once per
``CHUNK_CYCLES`` and otherwise stays off the clock.  After a long quiet spell it
waits on the socket in wall-clock time instead, so an idle server does not spin.

Environment: DX1_SIM_PORT (0 picks a free port), DX1_SIM_PORTFILE, DX1_SIM_ONCE
(1: stop after the first client), DX1_FAULT_RATE (line faults on both
directions, :meth:`dx1_bringup.faults.LineFaults.uniform`: bits flip, and bytes
are dropped or duplicated, each with that probability) and DX1_FAULT_SEED.
"""

from __future__ import annotations

import os
import select
import socket

import cocotb
from cocotb.triggers import Timer
from cocotbext.uart import UartSink, UartSource

from ..faults import LineFaults
from .harness import Harness
from .soc_server import open_listener

CLOCK_NS = 20  # the board's 50 MHz clock
#: Eight clocks a bit: the fastest line the bridge samples reliably, so simulated transfers are quick.
BAUD = 6_250_000
#: Simulated cycles between looks at the socket: about one byte time on the line.
CHUNK_CYCLES = 200
#: Quiet chunks after which the server waits on the socket instead of simulating.
IDLE_CHUNKS = 2000
#: SerialTransport options for a client of the simulated board.  Its timeouts run in wall-clock time, where
#: the simulated line moves about a kilobyte a second, and a few hundred bytes on a busy machine: an answer
#: is given as long as on a 1000-baud line, plus 5 s, and the line counts as quiet after a second (the
#: bridge's idle timeout, 1000 bit times, is 8000 cycles: a third of a second when the simulator crawls).
CLIENT_OPTIONS = {"baud": 1000, "timeout": 5.0, "quiet": 1.0}


@cocotb.test()
async def serve(dut):
    harness = Harness(dut, clock_ns=CLOCK_NS)
    source = UartSource(dut.uart_rx, baud=BAUD, bits=8)
    sink = UartSink(dut.uart_tx, baud=BAUD, bits=8)
    for model in (source, sink):
        model.log.setLevel("WARNING")  # one INFO line per byte otherwise
    await harness.reset()

    rate = float(os.environ.get("DX1_FAULT_RATE", "0"))
    seed = int(os.environ.get("DX1_FAULT_SEED", "1"))
    to_board, to_host = LineFaults.uniform(rate, seed=seed), LineFaults.uniform(rate, seed=seed + 1)
    listener, port = open_listener()
    dut._log.info("dx1 simulated board: UART at %d baud on 127.0.0.1:%d (fault rate %g); reach it with "
                  "--device serial:socket://127.0.0.1:%d@%d,timeout=60 (the simulated line is slow in wall-clock "
                  "time)", BAUD, port, rate, port, BAUD)
    once = os.environ.get("DX1_SIM_ONCE") == "1"
    try:
        while True:
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setblocking(False)
            quiet = 0
            with conn:
                while True:
                    try:
                        data = conn.recv(1 << 16)
                    except BlockingIOError:
                        data = None
                    if data == b"":
                        break  # the client closed the connection
                    if data:
                        source.write_nowait(to_board.apply(data))
                    out = bytes(sink.read_nowait())
                    if out:
                        conn.setblocking(True)
                        conn.sendall(to_host.apply(out))
                        conn.setblocking(False)
                    quiet = 0 if (data or out or not source.empty()) else quiet + 1
                    if quiet > IDLE_CHUNKS:
                        select.select([conn], [], [], 0.05)
                    await Timer(CHUNK_CYCLES * CLOCK_NS, "ns")
            dut._log.info("client gone; faults injected: %d bits flipped, %d bytes dropped, %d duplicated",
                          to_board.flipped + to_host.flipped, to_board.dropped + to_host.dropped,
                          to_board.duplicated + to_host.duplicated)
            if once:
                break
    finally:
        listener.close()
