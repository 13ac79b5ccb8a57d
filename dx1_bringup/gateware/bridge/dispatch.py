"""Between frames: the command byte that picks a frame engine."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import FrameCommand
from .crc import CRC_PORT
from .receiver import RX_PORT

__all__ = ["FrameDispatch"]

UARTBONE_COMMANDS = (FrameCommand.UARTBONE_WRITE, FrameCommand.UARTBONE_READ,
                     FrameCommand.UARTBONE_WRITE_FIXED, FrameCommand.UARTBONE_READ_FIXED)


class FrameDispatch(wiring.Component):
    """While no frame is in progress (``busy`` low, so ``idle``), takes every byte and starts the engine it names.

    A UARTBone command byte pulses ``uartbone``, a burst command ``burst``, a
    register-frame command ``reg_frame``, in the cycle the byte is taken (the
    engine reads the command from ``rx.byte`` then); any other byte is dropped.
    Every idle cycle starts the frame's CRC with the byte at hand, so an
    engine's CRC already covers its command byte.
    """

    def __init__(self):
        super().__init__({
            "busy": In(1),
            "idle": Out(1),
            "rx": In(RX_PORT),
            "crc": In(CRC_PORT),
            "uartbone": Out(1),
            "burst": Out(1),
            "reg_frame": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rx = self.rx
        m.d.comb += self.idle.eq(~self.busy)
        with m.If(self.idle):
            m.d.comb += [self.crc.start.eq(1), self.crc.data.eq(rx.byte)]
            with m.If(rx.valid):
                with m.Switch(rx.byte):
                    with m.Case(*UARTBONE_COMMANDS):
                        m.d.comb += self.uartbone.eq(1)
                    with m.Case(FrameCommand.BURST_WRITE, FrameCommand.BURST_READ):
                        m.d.comb += self.burst.eq(1)
                    with m.Case(FrameCommand.REG_WRITE, FrameCommand.REG_READ):
                        m.d.comb += self.reg_frame.eq(1)
        return m
