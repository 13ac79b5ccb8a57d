"""The link's SEND sequence that the RTL-versus-model tests run through the driver on a board of two chips
(tests/test_link_rtl_vs_model.py on Amaranth's simulator, tests/test_sim_board.py on Verilator's): it returns
what it saw along the way, to be compared between the golden model and the RTL."""

from __future__ import annotations

import numpy as np
from dx1_driver import Device, regs

from dx1_bringup.spec import PORT_NEXT, PORT_PREVIOUS, LinkOp, SocConfig

SRC, DST = 0x8000, 0xC000
COUNTERS = ("TX_PACKETS", "RX_PACKETS", "RETRIES", "CRC_ERRORS")


def _send(dev: Device, port: int = PORT_NEXT, wait: float = 120.0, **fields) -> int:
    values = {"op": LinkOp.WRITE, "src_addr": SRC, "dst_addr": DST, "length": 200, "sem": 1, "count": 1}
    values.update(fields)
    q = dev.queue(0)
    q.submit([regs.send(tag=9, port=port, **values)], timeout=wait)
    (done,) = q.wait(check=False, timeout=wait)
    return int(done.status)


def state(devs: list[Device], config: SocConfig) -> dict:
    link = regs.Link
    return {
        "mem": [d.read_mem(DST - 0x1000, 0x2000) for d in devs],
        "sems": [[d.semaphore(i) for i in range(config.semaphores)] for d in devs],
        "counters": [{f"{n}{p}": d.read_reg(d.link_base, getattr(link, n) + 4 * p) for n in COUNTERS for p in (0, 1)}
                     for d in devs],
        "control": [[d.read_reg(d.link_base, link.CONTROL + 4 * p) for p in (0, 1)] for d in devs],
        "up": [[d.read_reg(d.link_base, link.STATUS + 4 * p) & 1 for p in (0, 1)] for d in devs],
    }


def script(devs: list[Device], config: SocConfig, cut, full: bool) -> list:
    """The SEND sequence on the two chips ``devs`` of ``config`` (``full``: with the faults: CRC errors recovered
    and past the retries, a port forced down at the far end, then ``cut(dev, port)`` cuts a wire); returns what it
    saw along the way (statuses and states)."""
    link = regs.Link
    a, b = devs
    rng = np.random.default_rng(11)
    for d in devs:
        d.write_reg(d.link_base, link.WINDOW_LIMIT, config.mem_bytes)
        d.write_mem(SRC, rng.integers(0, 256, 1024, dtype=np.uint8).tobytes())
        d.write_mem(DST - 0x1000, rng.integers(0, 256, 0x2000, dtype=np.uint8).tobytes())
    seen = [state(devs, config)]
    seen.append(_send(a, sem=1, count=2))                                         # WRITE a -> b
    seen.append(_send(b, op=LinkOp.ADD, length=512, dst_addr=DST + 256, sem=2))  # ADD b -> a
    seen.append(_send(a, port=PORT_PREVIOUS, op=LinkOp.ADD, length=64, sem=0, count=0))
    seen.append([_send(a, port=2), _send(a, length=0), _send(a, sem=16), _send(a, dst_addr=DST + 4)])
    b.write_reg(b.link_base, link.WINDOW_LIMIT, DST + 100)
    seen.append(_send(a))                                                         # REMOTE_WINDOW
    b.write_reg(b.link_base, link.WINDOW_LIMIT, config.mem_bytes)
    seen.append(state(devs, config))
    if not full:
        return seen
    a.write_reg(a.link_base, link.CONTROL, 1 << 8)                                # one CRC error: recovered
    seen.append(_send(a, dst_addr=DST + 512, length=320))
    # Past the retries: LINK_CRC, and the one corruption left is taken by the next SEND.
    a.write_reg(a.link_base, link.CONTROL, (config.link.retries + 2) << 8)
    seen.append(_send(a, dst_addr=DST + 1024))
    seen.append(state(devs, config))
    seen.append(_send(a, dst_addr=DST + 1536, length=136, sem=3, count=5))        # takes the last corruption
    b.write_reg(b.link_base, link.CONTROL + 4 * PORT_PREVIOUS, 1)                 # b forces its end down
    seen.append(_send(a))
    seen.append(state(devs, config))
    b.write_reg(b.link_base, link.CONTROL + 4 * PORT_PREVIOUS, 0)
    seen.append(_send(a, dst_addr=DST + 1800, length=64))
    cut(a, PORT_PREVIOUS)                                                         # a's port 1 wire is cut
    seen.append(_send(a, port=PORT_PREVIOUS))
    last = state(devs, config)
    del last["control"]
    seen.append(last)
    return seen


