"""The chip-to-chip link on the golden model (``model:chips=N``): SEND's semantics, every error, every fault.

Everything goes through the driver (``dx1_driver.Device`` over the board's transports), as the RTL tests of
``sim:chips=N`` will.
"""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device, check_device, regs

from dx1_bringup.backends import open_model, open_model_board, open_sim_board
from dx1_bringup.spec import (
    HEADER_BYTES,
    PORT_NEXT,
    PORT_PREVIOUS,
    TRAILER_BYTES,
    ChipLinkConfig,
    ErrorCode,
    FrameKind,
    LinkOp,
    pack_link_header,
    peer_rank,
    send_cycles,
    send_frames,
    send_timing,
    unpack_link_header,
)

SRC = 0x10000
DST = 0x20000
LINK = regs.Link


def board(chips: int, extra: str = "") -> list[Device]:
    """The chips of a fresh board, every link window open over the whole of device memory."""
    devs = [Device(t) for t in open_model_board(f"model:chips={chips}{extra}")]
    for d in devs:
        d.write_reg(d.link_base, LINK.WINDOW_LIMIT, d.caps.mem_bytes)
    return devs


def send(dev: Device, *, length: int, port: int = PORT_NEXT, op: int = LinkOp.WRITE, src: int = SRC, dst: int = DST,
         sem: int = 0, count: int = 1, raw: int = 0) -> int:
    """Run one SEND from tile 0 of ``dev``; its completion status."""
    q = dev.queue(0)
    cmd = regs.send(tag=7, op=op, port=port, src_addr=src, dst_addr=dst, length=length, sem=sem, count=count)
    if raw:
        cmd = (int.from_bytes(cmd, "little") | raw).to_bytes(len(cmd), "little")
    q.submit([cmd])
    (done,) = q.wait(check=False)
    return done.status


def counters(dev: Device, port: int) -> dict[str, int]:
    names = ("TX_PACKETS", "RX_PACKETS", "RETRIES", "CRC_ERRORS")
    return {n: dev.read_reg(dev.link_base, getattr(LINK, n) + 4 * port) for n in names}


def ints(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)


# -- the spec's frames and timing ----------------------------------------------------------------------------


def test_frame_headers_round_trip_and_refuse_what_does_not_fit():
    header = pack_link_header(FrameKind.DATA, op=1, first=1, seq=255, sem=3, payload_bytes=256, count=9,
                              dst_addr=0xFFFF_FFF8, transfer_bytes=4096)
    assert len(header) == HEADER_BYTES
    assert unpack_link_header(header) == {"kind": 1, "op": 1, "first": 1, "last": 0, "seq": 255, "sem": 3,
                                          "payload_bytes": 256, "count": 9, "dst_addr": 0xFFFF_FFF8,
                                          "transfer_bytes": 4096}
    assert unpack_link_header(pack_link_header(FrameKind.DONE, seq=4, status=ErrorCode.REMOTE_WINDOW)) == {
        "kind": 4, "seq": 4, "status": int(ErrorCode.REMOTE_WINDOW)}
    with pytest.raises(ValueError, match="DATA frame field 'seq' must fit in 8 bits unsigned, not 256"):
        pack_link_header(FrameKind.DATA, seq=256)
    with pytest.raises(ValueError, match="ACK frame header has no field 'dst_addr'"):
        pack_link_header(FrameKind.ACK, dst_addr=0)
    with pytest.raises(ValueError, match="frame kind must be one of"):
        unpack_link_header(bytes(16))


def test_link_config_is_checked():
    with pytest.raises(ValueError, match="Link width must be a power of two from 8 to 64, not 12"):
        ChipLinkConfig(width=12)
    with pytest.raises(TypeError, match="Link retries must be an integer, not 1.5"):
        ChipLinkConfig(retries=1.5)
    with pytest.raises(ValueError, match="Link credits must be an integer from 1 to 64, not 0"):
        ChipLinkConfig(credits=0)


def test_send_timing_streams_near_the_link_peak_and_costs_a_round_trip_per_crc_fault():
    cfg = ChipLinkConfig()
    assert send_frames(cfg, 600) == [256, 256, 88]
    peak = cfg.max_payload / (HEADER_BYTES + cfg.max_payload + TRAILER_BYTES)
    big = 1 << 18
    assert 0.95 * peak < big / cfg.width / send_cycles(cfg, big) < peak
    t = send_timing(cfg, 4096)
    assert 0 < t.landed < t.done
    one_fault = send_cycles(cfg, 4096, crc_faults=1) - t.done
    assert one_fault == send_cycles(cfg, 4096, crc_faults=2) - send_cycles(cfg, 4096, crc_faults=1) > 2 * cfg.latency
    assert send_cycles(cfg, 4096, LinkOp.ADD) > t.done
    few = ChipLinkConfig(credits=1)
    assert send_timing(few, 4096).credit_stalls > t.credit_stalls > 0 == send_timing(cfg, 1024).credit_stalls


def test_peer_rank_is_the_ring():
    assert [peer_rank(r, 4, PORT_NEXT) for r in range(4)] == [1, 2, 3, 0]
    assert [peer_rank(r, 4, PORT_PREVIOUS) for r in range(4)] == [3, 0, 1, 2]
    with pytest.raises(ValueError, match="link port must be 0 .next. or 1 .previous., not 2"):
        peer_rank(0, 4, 2)


# -- identity and registers ------------------------------------------------------------------------------------


def test_each_chip_reads_its_rank_and_the_link_parameters():
    devs = board(4)
    cfg = ChipLinkConfig()
    assert [(d.caps.rank, d.caps.chips, d.caps.link_ports) for d in devs] == [(r, 4, 2) for r in range(4)]
    assert {(d.caps.link_width, d.caps.link_latency) for d in devs} == {(cfg.width, cfg.latency)}
    caps = devs[0].read_reg(devs[0].link_base, LINK.CAPS)
    assert regs.get_field(caps, LINK.CAPS_CREDITS) == cfg.credits
    assert 1 << regs.get_field(caps, LINK.CAPS_MAX_PAYLOAD_LOG2) == cfg.max_payload
    assert all(regs.get_field(d.read_reg(d.link_base, LINK.STATUS + 4 * p), LINK.STATUS_UP) for d in devs
               for p in (0, 1))


def test_a_single_chip_has_no_link_and_send_is_bad_opcode():
    dev = Device(open_model("model"))
    assert (dev.caps.rank, dev.caps.chips, dev.caps.link_ports, dev.caps.link_width) == (0, 1, 0, 0)
    assert dev.read_reg(dev.link_base, LINK.CAPS) == 0 and dev.read_reg(dev.link_base, LINK.STATUS) == 0
    assert send(dev, length=64) == ErrorCode.BAD_OPCODE


def test_board_device_strings_are_checked():
    for bad, message in (("model:chips=0", "chips= must be a whole number of chips from 1 to 8, not '0'"),
                         ("model:chips=9", "not '9'"), ("model:chips=x", "not 'x'"),
                         ("model:chips=2,chips=3", "chips= is given twice")):
        with pytest.raises(ValueError, match=message):
            open_model(bad)
    with pytest.raises(ValueError, match="needs chips=N"):
        open_model_board("model:tiles=1")
    assert Device.open("model:chips=3,tiles=1").caps.tiles == 1


def test_simulated_board_device_strings_are_checked_before_anything_starts():
    for bad, message in (("sim:chips=1", "a board of simulated chips has chips=2 to 8"),
                         ("sim:chips=9", "chips= must be a whole number of chips from 1 to 8, not '9'"),
                         ("sim:chips=2,chips=2", "chips= is given twice"),
                         ("sim:chips=2,tiles=9", "tiles"),
                         ("sim:chips=2,stall=core0", "takes tiles=, banks=, mem_mib=, vector= and threads= besides "
                                                     "chips=, not 'stall=core0'"),
                         ("sim:chips=2,server=cocotb", "not 'server=cocotb'"),
                         ("sim:chips=4,threads=5", "threads= takes the number of threads that tick the board's chips, "
                                                   "1 to 4, once; not '5'"),
                         ("sim:chips=4,threads=0", "1 to 4, once; not '0'"),
                         ("sim:chips=4,threads=2,threads=2", "once; not '2,2'")):
        with pytest.raises(ValueError, match=message):
            check_device(bad)
        with pytest.raises(ValueError, match=message):
            open_sim_board(bad)
    with pytest.raises(ValueError, match="is sim:chips=N"):
        open_sim_board("sim:tiles=1")


# -- SEND ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("port", [PORT_NEXT, PORT_PREVIOUS])
def test_send_write_lands_in_the_peer_and_signals_its_semaphore(port: int):
    devs = board(3)
    data = ints(1000, 1)  # 4000 bytes: 16 frames, the last one short
    devs[1].write_mem(SRC, data)
    assert send(devs[1], length=data.nbytes, port=port, sem=5, count=3) == ErrorCode.OK
    peer = devs[peer_rank(1, 3, port)]
    np.testing.assert_array_equal(peer.read_array(DST, 1000, np.int32), data)
    assert peer.semaphore(5) == 3 and devs[1].semaphore(5) == 0
    frames = len(send_frames(ChipLinkConfig(), data.nbytes))
    assert counters(devs[1], port) == {"TX_PACKETS": frames, "RX_PACKETS": 0, "RETRIES": 0, "CRC_ERRORS": 0}
    assert counters(peer, 1 - port) == {"TX_PACKETS": 0, "RX_PACKETS": frames, "RETRIES": 0, "CRC_ERRORS": 0}
    other = devs[peer_rank(1, 3, 1 - port)]
    assert not other.read_mem(DST, 64).strip(b"\0")


def test_send_add_adds_int32_lanes_wrapping():
    devs = board(2)
    mine, theirs = ints(64, 2), ints(64, 3)
    mine[:2], theirs[:2] = 2**31 - 1, 1  # wraps
    devs[0].write_mem(SRC, mine)
    devs[1].write_mem(DST, theirs)
    assert send(devs[0], length=mine.nbytes, op=LinkOp.ADD, count=0) == ErrorCode.OK
    expect = (mine.astype(np.int64) + theirs).astype(np.uint32).astype(np.int32)
    np.testing.assert_array_equal(devs[1].read_array(DST, 64, np.int32), expect)
    assert expect[0] == -2**31 and devs[1].semaphore(0) == 0  # count 0: no signal


def test_one_chip_ring_sends_to_itself():
    (dev,) = board(1)
    dev.write_mem(SRC, ints(8, 4))
    assert send(dev, length=32, port=PORT_PREVIOUS) == ErrorCode.OK
    assert dev.read_mem(DST, 32) == dev.read_mem(SRC, 32) and dev.semaphore(0) == 1


def test_a_wait_on_the_peer_is_released_by_the_send_and_ends_after_the_data_landed():
    devs = board(2)
    q1 = devs[1].queue(0)
    q1.submit([regs.wait(tag=1, sem=2, count=1)])
    assert devs[1].queue(0).outstanding == 1
    before = devs[1].cycles()
    devs[0].write_mem(SRC, ints(512, 5))
    assert send(devs[0], length=2048, sem=2) == ErrorCode.OK
    (done,) = q1.wait()
    assert done.ok
    assert devs[1].cycles() - before >= send_timing(ChipLinkConfig(), 2048).landed


# -- errors in check order, and outcomes -------------------------------------------------------------------------


def test_send_field_errors_follow_the_check_order():
    devs = board(2)
    dev = devs[0]
    assert send(dev, length=64, raw=1 << 36) == ErrorCode.RESERVED_BITS
    assert send(dev, length=0) == ErrorCode.BAD_DIMENSION
    assert send(dev, length=64, op=2) == ErrorCode.BAD_FIELD
    assert send(dev, length=64, port=2) == ErrorCode.BAD_FIELD
    assert send(dev, length=64, sem=dev.caps.semaphores) == ErrorCode.SEM_RANGE
    assert send(dev, length=60) == ErrorCode.MISALIGNED
    assert send(dev, length=64, dst=DST + 4) == ErrorCode.MISALIGNED
    assert send(dev, length=64, src=dev.caps.mem_bytes - 32) == ErrorCode.DMA_WINDOW
    dev.queue(0).set_dma_window(0, SRC + 32)
    assert send(dev, length=64) == ErrorCode.DMA_WINDOW
    assert send(dev, length=0, port=2, sem=255) == ErrorCode.BAD_DIMENSION  # the first failing check wins
    assert counters(dev, 0)["TX_PACKETS"] == 0 and devs[1].semaphore(0) == 0


@pytest.mark.parametrize("end", ["sender", "peer"])
def test_a_cut_link_is_link_down_on_both_ends(end: str):
    devs = board(2)
    devs[0].write_mem(SRC, ints(16, 6))
    cut, port = (devs[0], PORT_NEXT) if end == "sender" else (devs[1], PORT_PREVIOUS)
    cut.write_reg(cut.link_base, LINK.CONTROL + 4 * port, 1 << LINK.CONTROL_FORCE_DOWN[0])
    assert regs.get_field(devs[0].read_reg(devs[0].link_base, LINK.STATUS), LINK.STATUS_UP) == 0
    assert regs.get_field(devs[1].read_reg(devs[1].link_base, LINK.STATUS + 4), LINK.STATUS_UP) == 0
    assert send(devs[0], length=64) == ErrorCode.LINK_DOWN
    assert devs[1].semaphore(0) == 0 and not devs[1].read_mem(DST, 64).strip(b"\0")
    assert send(devs[0], length=64, port=PORT_PREVIOUS) == ErrorCode.OK  # the other way round the ring is up
    cut.write_reg(cut.link_base, LINK.CONTROL + 4 * port, 0)
    assert send(devs[0], length=64) == ErrorCode.OK


def test_outside_the_peer_window_is_remote_window_and_moves_nothing():
    devs = board(2)
    devs[0].write_mem(SRC, ints(32, 7))
    devs[1].write_reg(devs[1].link_base, LINK.WINDOW_BASE, DST + 64)
    assert send(devs[0], length=128) == ErrorCode.REMOTE_WINDOW
    devs[1].write_reg(devs[1].link_base, LINK.WINDOW_BASE, 0)
    devs[1].write_reg(devs[1].link_base, LINK.WINDOW_LIMIT, DST + 64)
    assert send(devs[0], length=128) == ErrorCode.REMOTE_WINDOW
    assert devs[1].semaphore(0) == 0 and not devs[1].read_mem(DST, 128).strip(b"\0")
    fresh = board(2)
    fresh[1].write_reg(fresh[1].link_base, LINK.WINDOW_LIMIT, 0)  # the reset window: closed
    assert send(fresh[0], length=8) == ErrorCode.REMOTE_WINDOW


def test_a_bus_error_on_the_source_is_bus_error():
    devs = board(2, f",bus-error=0x{SRC + 64:x}+0x8")
    assert send(devs[0], length=256) == ErrorCode.BUS_ERROR
    assert devs[1].semaphore(0) == 0


# -- injected CRC faults ------------------------------------------------------------------------------------------


def corrupt(dev: Device, port: int, n: int) -> None:
    dev.write_reg(dev.link_base, LINK.CONTROL + 4 * port, n << LINK.CONTROL_CORRUPT[0])


def test_crc_faults_within_the_retries_are_retried_and_the_send_completes():
    devs = board(2)
    retries = ChipLinkConfig().retries
    data = ints(300, 8)
    devs[0].write_mem(SRC, data)
    corrupt(devs[0], PORT_NEXT, retries)
    assert send(devs[0], length=data.nbytes) == ErrorCode.OK
    np.testing.assert_array_equal(devs[1].read_array(DST, 300, np.int32), data)
    frames = len(send_frames(ChipLinkConfig(), data.nbytes))
    assert counters(devs[0], 0) == {"TX_PACKETS": frames, "RX_PACKETS": 0, "RETRIES": retries, "CRC_ERRORS": 0}
    assert counters(devs[1], 1) == {"TX_PACKETS": 0, "RX_PACKETS": frames, "RETRIES": 0, "CRC_ERRORS": retries}
    assert regs.get_field(devs[0].read_reg(devs[0].link_base, LINK.CONTROL), LINK.CONTROL_CORRUPT) == 0
    slow = devs[0].cycles()
    assert send(devs[0], length=data.nbytes) == ErrorCode.OK
    assert devs[0].cycles() - slow == send_cycles(ChipLinkConfig(), data.nbytes)


def test_crc_faults_past_the_retries_are_link_crc_and_the_rest_carries_to_the_next_send():
    devs = board(2)
    retries = ChipLinkConfig().retries
    devs[0].write_mem(SRC, ints(64, 9))
    corrupt(devs[0], PORT_NEXT, retries + 2)
    assert send(devs[0], length=256, sem=1) == ErrorCode.LINK_CRC
    assert devs[1].semaphore(1) == 0 and not devs[1].read_mem(DST, 256).strip(b"\0")
    assert counters(devs[0], 0) == {"TX_PACKETS": 1, "RX_PACKETS": 0, "RETRIES": retries, "CRC_ERRORS": 0}
    assert counters(devs[1], 1)["CRC_ERRORS"] == retries + 1
    assert regs.get_field(devs[0].read_reg(devs[0].link_base, LINK.CONTROL), LINK.CONTROL_CORRUPT) == 1
    assert send(devs[0], length=256, sem=1) == ErrorCode.OK  # one bad transmission left: retried
    assert counters(devs[0], 0)["RETRIES"] == retries + 1 and devs[1].semaphore(1) == 1


def test_clear_and_global_reset_clear_the_counters_but_keep_the_controls():
    devs = board(2)
    send(devs[0], length=64)
    assert counters(devs[0], 0)["TX_PACKETS"] == 1
    devs[0].write_reg(devs[0].link_base, LINK.CLEAR, 1)
    assert counters(devs[0], 0)["TX_PACKETS"] == 0
    send(devs[0], length=64)
    corrupt(devs[0], PORT_PREVIOUS, 5)
    devs[0].reset()
    assert counters(devs[0], 0)["TX_PACKETS"] == 0 and counters(devs[1], 1)["RX_PACKETS"] == 2
    assert regs.get_field(devs[0].read_reg(devs[0].link_base, LINK.CONTROL + 4), LINK.CONTROL_CORRUPT) == 5
