"""CRC register frames on the simulated board's RTL (SoC + UART bridge): the SoC's real register file answers.

The frames are the driver's (:mod:`dx1_driver.frames`), sent on the board's UART pins by cocotbext-uart.
The register file answers SLVERR for a write to a read-only register and a read of a write-only one, which
the bridge must turn into ``BUS_ERROR``; range and CRC refusals never reach the bus.
"""

from __future__ import annotations

import cocotb
from dx1_driver import frames, regs
from dx1_driver.link import MEM_BASE, REG_BYTES, TIMEOUT_BITS, FrameStatus

from dx1_bringup.sim import run_cocotb
from dx1_bringup.sim.board_server import BAUD

from .test_bridge import UartHostTB

QUIET_NS = 1.2 * TIMEOUT_BITS * 1e9 / BAUD     # past the bridge's inter-byte timeout
GLOBAL = regs.BLOCK_BASES["GLOBAL"]
SCRATCH = GLOBAL + regs.Global.SCRATCH


class BoardTB(UartHostTB):
    def __init__(self, dut):
        super().__init__(dut, dut.uart_rx, dut.uart_tx, BAUD)

    async def reset(self):
        await super().reset(low=10)


@cocotb.test()
async def register_frames_on_the_soc(dut):
    """Identity, SCRATCH, the register file's refusals as bus errors, range and CRC refusals."""
    tb = BoardTB(dut)
    await tb.reset()
    status, words = await tb.reg_read(GLOBAL, 6)
    assert status == FrameStatus.ACK, status
    assert words[regs.Global.ID // 4] == regs.BlockType.GLOBAL and words[regs.Global.MAGIC // 4] == regs.MAGIC, words
    assert await tb.reg_write(SCRATCH, [0x1234_5678]) == FrameStatus.ACK
    assert await tb.reg_read(SCRATCH, 1) == (FrameStatus.ACK, [0x1234_5678])
    # CYCLES_LO follows SCRATCH and is read-only: SLVERR for it, SCRATCH still written
    assert await tb.reg_write(SCRATCH, [0xA5A5_0001, 7]) == FrameStatus.BUS_ERROR
    assert await tb.reg_read(SCRATCH, 1) == (FrameStatus.ACK, [0xA5A5_0001])
    # RESET is write-only: a read of it is a bus error, and no word is answered
    assert await tb.reg_read(GLOBAL + regs.Global.RESET, 1) == (FrameStatus.BUS_ERROR, [])
    # range refusals: nothing reaches the bus, and the next frame is taken at once
    for addr, n in ((SCRATCH + 1, 1), (REG_BYTES - 4, 2), (SCRATCH, 0), (MEM_BASE, 1)):
        assert await tb.reg_write(addr, [0xDEAD_BEEF] * n) == FrameStatus.NAK_RANGE, (addr, n)
        assert await tb.reg_read(addr, n) == (FrameStatus.NAK_RANGE, []), (addr, n)
    assert await tb.reg_read(SCRATCH, 1) == (FrameStatus.ACK, [0xA5A5_0001])
    # a bad CRC: NAK, nothing written, and the frame sent right behind it is dropped with the rest of the line
    frame = bytearray(frames.reg_write_frame(SCRATCH, [1]))
    frame[8] ^= 0x02
    await tb.send(bytes(frame) + frames.reg_write_frame(SCRATCH, [2]))
    assert (await tb.recv(1))[0] == FrameStatus.NAK_CRC
    await tb.quiet(QUIET_NS)
    assert await tb.reg_read(SCRATCH, 1) == (FrameStatus.ACK, [0xA5A5_0001]), "a frame with a bad CRC was written"
    # the driver's window: writes back to back, then a read; statuses first, then the read's answer
    await tb.send(b"".join(frames.reg_write_frame(SCRATCH, [i]) for i in range(5)) + frames.reg_read_frame(SCRATCH, 1))
    assert await tb.recv(5) == bytes(5)
    assert (await tb.recv(1))[0] == FrameStatus.ACK
    body = await tb.recv(8)
    assert body == frames.pack_words([4]) + frames.crc_bytes(frames.pack_words([4]))


def test_register_frames_on_the_board(seed):
    run_cocotb("dx1_board", "bridge.test_board_regs", seed=seed, quiet=True)
