"""The link's RTL against the golden model, byte for byte: the same SEND sequence through the driver on a ring of
two chips in Amaranth's simulator (:class:`~dx1_bringup.sim.amaranth_board.AmaranthBoard`) and on
``ModelBoard`` of the same configuration (the sequence: tests/link_script.py; on Verilator's ``sim:chips=2``:
tests/test_sim_board.py).

Compared: every completion's status (OK, the field checks, REMOTE_WINDOW, LINK_CRC from injected CRC errors,
LINK_DOWN from a port forced down and from a cut wire), the memories the SENDs wrote, every semaphore, the exact
link counters (TX_PACKETS, RX_PACKETS, RETRIES, CRC_ERRORS of both ports of both chips), CONTROL and STATUS.up.
"""

from __future__ import annotations

import pytest
from dx1_driver import Device
from link_script import script

from dx1_bringup.backends import ModelTransport
from dx1_bringup.model.board import ModelBoard
from dx1_bringup.sim.amaranth_board import AmaranthBoard
from dx1_bringup.spec import ChipLinkConfig, SocConfig, TileConfig

pytestmark = pytest.mark.amaranth_sim

LINK = ChipLinkConfig(latency=3, max_payload=64, credits=2, retries=1)
CONFIG = SocConfig(tiles=1, tile=TileConfig(array=8, spm_rows=32, acc_rows=16, vector=False), mem_bytes=65536,
                   mem_banks=1, link=LINK)


def _compare(full: bool) -> None:
    model = ModelBoard(2, CONFIG)
    model_devs = [Device(ModelTransport(model=dev), ring_log2=4) for dev in model.devices]

    def model_cut(dev: Device, port: int) -> None:
        # The model has no wires: its stand-in for a cut one is that end held down (CONTROL is not compared then).
        model.devices[dev.caps.rank].link.force_down[port] = True

    board = AmaranthBoard(CONFIG, 2)
    rtl_devs = [Device(t, ring_log2=4) for t in board.transports]

    def rtl_cut(dev: Device, port: int) -> None:
        board.cut(dev.caps.rank, port)

    try:
        expected = script(model_devs, CONFIG, model_cut, full)
        got = script(rtl_devs, CONFIG, rtl_cut, full)
    finally:
        for d in rtl_devs + model_devs:
            d.close()
    for step, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert g == e, f"step {step}: RTL {g!r} but the model {e!r}"


def test_sends_and_checks_agree_with_the_golden_model() -> None:
    """WRITE and ADD both ways and on both ports, the field checks and REMOTE_WINDOW (the CI-sized part)."""
    _compare(full=False)


@pytest.mark.slow
def test_faults_agree_with_the_golden_model() -> None:
    """All of it: then injected CRC errors recovered and past the retries (the remainder taken by the next SEND),
    a port forced down at the far end, released, and a cut wire."""
    _compare(full=True)
