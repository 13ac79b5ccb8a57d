"""The native simulator server (dx1_bringup.sim.native) against the cocotb one (dx1_bringup.sim.soc_server).

The two serve the same simulator socket for the same SoC; the native one runs the host side in C++. Every
request must answer the same bytes after the same simulated cycles on both, STUCK reports included, and a
whole GEMM must leave the same PERF counters and results. The backend-parametrised tests run on the native
server (the default of ``sim``); these compare the two side by side.
"""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device, regs
from dx1_driver.errors import DeviceStuck

from dx1_bringup.backends import _parse_sim, open_sim
from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.operands import random_operands
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.launch import PrivateSimTransport, start_simulator
from dx1_bringup.sim.native import build, executable
from dx1_bringup.spec import SimOp

pytestmark = [pytest.mark.verilator, pytest.mark.xdist_group("native_vs_cocotb")]


@pytest.fixture(scope="module")
def servers():
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    opened = {}
    try:
        for server in ("native", "cocotb"):
            opened[server] = PrivateSimTransport(*start_simulator(server=server))
        yield opened
    finally:
        for transport in opened.values():
            transport.close()


def _requests(t) -> list:
    """A run of every request kind; each answer with the cycles it took."""
    out = []
    steps = [
        ("read32", lambda: t._read32(regs.Global.MEM_BYTES)),
        ("write32", lambda: t._write32(regs.Global.SCRATCH, 0xA5A5_0001)),
        ("read back", lambda: t._read32(regs.Global.SCRATCH)),
        ("write_block", lambda: t._write_block(0x1003, bytes(range(200)))),
        ("read_block", lambda: t._read_block(0x1000, 210)),
        ("wait_irq 50", lambda: t._request(SimOp.WAIT_IRQ, 0, 50)),
        ("wait_irq 0", lambda: t._request(SimOp.WAIT_IRQ, 0, 0)),
        ("stall", lambda: t._request(SimOp.STALL, 0, 0)),
        ("cycles", lambda: t._request(SimOp.CYCLES)),
    ]
    for name, step in steps:
        before = t.cycles()
        answer = step()
        out.append((name, t.cycles() - before, answer))
    return out


def test_every_request_answers_alike_after_the_same_cycles(servers):
    native, cocotb = (_requests(servers[s]) for s in ("native", "cocotb"))
    cycles = {name: c for name, c, _ in native}
    assert cycles["read32"] == cycles["write32"] == 4, "an AXI4-Lite access takes cocotbext-axi's 4 cycles"
    assert cycles["write_block"] == cycles["read_block"] == 0, "backdoor blocks take no cycles"
    assert native == cocotb


def test_an_unknown_op_and_an_over_budget_request_answer_alike(servers):
    answers = {}
    for server, t in servers.items():
        status, length = t.RESPONSE.unpack(_raw(t, 99))
        message = t.sock.recv(length)
        t._request(SimOp.BUDGET, 0, 1)  # one cycle: any register access is stuck
        with pytest.raises(DeviceStuck) as stuck:
            t._read32(regs.Global.ID)
        t._request(SimOp.BUDGET, 0, 0)
        answers[server] = (status, message, str(stuck.value), t._read32(regs.Global.SCRATCH))
    assert answers["native"][1] == b"unknown op 99"
    assert "QUEUE0 STATUS=" in answers["native"][2]
    assert answers["native"] == answers["cocotb"]


def test_posted_writes_ride_on_the_next_request_and_report_their_failure_there(servers):
    for server, t in servers.items():
        trips, posted = t.round_trips, t.posted_writes
        for value in (1, 2, 3):
            t.write32(regs.Global.SCRATCH, 0x5CA7_0000 + value)
        assert t.round_trips == trips and t.posted_writes == posted + 3, server
        assert t.read32(regs.Global.SCRATCH) == 0x5CA7_0003, server
        assert t.round_trips == trips + 1, f"{server}: the read collects the three writes' answers"
        t._request(SimOp.BUDGET, 0, 1)  # one cycle: the next register access is stuck
        t.write32(regs.Global.SCRATCH, 0)
        with pytest.raises(DeviceStuck, match=f"write32 at 0x{regs.Global.SCRATCH:x} did not finish within 1 cycles"):
            t._request(SimOp.BUDGET, 0, 0)  # runs, then raises the posted write's failure
        # An abandoned write may or may not have landed (the cocotb server's master had presented it); the link
        # must be intact and the budget back.
        t.write32(regs.Global.SCRATCH, 0x5CA7_0004)
        assert t.read32(regs.Global.SCRATCH) == 0x5CA7_0004, f"{server}: the link is intact, the budget back"


def _raw(t, op: int) -> bytes:
    t.sock.sendall(t.REQUEST.pack(op, 0, 0))
    return t.sock.recv(t.RESPONSE.size)


def test_a_gemm_leaves_the_same_counters_and_result(servers):
    a, b = random_operands(np.random.default_rng(5), 72, 48, 40)
    seen = {}
    for server, t in servers.items():
        device = Device(t)
        before = [device.perf(tile).read() for tile in range(2)]
        out, _ = run_gemm(device, a, b, tiles=2, timeout=60)
        after = [device.perf(tile).read() for tile in range(2)]
        seen[server] = (out.tobytes(), [a.since(b) for a, b in zip(after, before, strict=True)])
    assert seen["native"][0] == reference_gemm(a, b).tobytes()
    assert seen["native"] == seen["cocotb"]


def test_the_server_is_rebuilt_only_when_an_input_changes():
    if verilator_missing():
        pytest.skip(verilator_missing())
    program = build("dx1_soc")
    assert program == executable("dx1_soc")
    stamp = program.stat().st_mtime_ns
    assert build("dx1_soc").stat().st_mtime_ns == stamp


def test_the_device_string_names_the_server():
    assert _parse_sim("sim:server=cocotb")[3] == "cocotb"
    assert _parse_sim("sim:tiles=1,server=native")[3] == "native"
    assert _parse_sim("sim")[3] is None
    with pytest.raises(ValueError, match="server= takes one of native, cocotb"):
        open_sim("sim:server=python")
