"""The host bridge: a UART speaking LiteX's UARTBone framing, plus CRC-checked bursts and register frames, onto AXI.

The wire format is :mod:`dx1_bringup.spec.link`'s; this package is the gateware that serves it, in parts:
:mod:`.receiver` (UART receiver, FIFO, timeout, discard), :mod:`.dispatch` (the command byte), one frame engine
per protocol (:mod:`.uartbone`, :mod:`.burst`, :mod:`.regframe`), the :mod:`.buffer` the last two share, the
:mod:`.crc` and the :mod:`.bus` masters.
"""

from __future__ import annotations

import operator
from functools import reduce

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import BUS_BYTES, TIMEOUT_BITS
from ..axi import AXI4LiteSignature, AXI4Signature
from ..uart import UartTx, check_baud
from .buffer import PayloadBuffer
from .burst import BurstEngine
from .bus import REG_BITS, BusMasters
from .crc import Crc32, crc32_update
from .dispatch import FrameDispatch
from .receiver import FrameReceiver
from .regframe import RegFrameEngine
from .uartbone import UartBoneEngine

__all__ = ["UartBridge", "crc32_update", "share"]


def share(m: Module, hub, users) -> None:
    """Connect each of ``users`` (each with ``hub``'s signature flipped) to ``hub``.

    What the users drive is ORed: each drives a member only while it is the one using the hub, so the OR is the
    active user's value.  What ``hub`` drives reaches every user.
    """
    for name, member in hub.signature.members.items():
        if member.flow == In:
            m.d.comb += getattr(hub, name).eq(reduce(operator.or_, [getattr(user, name) for user in users]))
        else:
            m.d.comb += [getattr(user, name).eq(getattr(hub, name)) for user in users]


class UartBridge(wiring.Component):
    """A UART host bridge onto the SoC's register port (AXI4-Lite) and device-memory port (AXI4).

    The UART is 8N1 at ``baud``.  The frames, status bytes, header layouts,
    limits and address windows are those of :mod:`dx1_bringup.spec.link`
    (``docs/link.md``); this is how the bridge serves them.

    *UARTBone* (``FrameCommand.UARTBONE_*``, wire-compatible with LiteX's
    ``UARTBone``, so ``litex_server --uart`` can drive it): ``n`` 0 means 256
    (LiteX's own gateware never ends such a frame, and its host never sends
    one).  Consecutive words go to consecutive addresses (the ``_FIXED``
    commands: all to one).  A word's value is stored little-endian on the bus
    (the value's low byte at the lowest byte address), as a CPU would.

    *Burst* (``BURST_WRITE``, ``BURST_READ``; device memory only, byte-exact):
    a write's payload is buffered and only written to memory once its CRC
    checks; ``BUS_ERROR`` after a write means possibly partly written.  The
    range must lie inside the memory window.  Memory is reached with INCR
    bursts of whole bus beats (at most 256 beats, never across a 4 KiB page),
    with byte strobes for unaligned ends.  A NAK for the header (``NAK_CRC``
    or ``NAK_RANGE``, sent right after the header's CRC) makes the bridge
    discard everything until the line has been quiet for the timeout, so a
    host must wait that long before its next frame (a read header with a good
    CRC and a refused range is the exception: nothing follows it).

    *Register frame* (``REG_WRITE``, ``REG_READ``; register space only): the
    words of a write are buffered and only written to the registers once the
    frame's CRC checks; every word is tried, the refused ones are not written.
    A read reads every word, and answers ``BUS_ERROR`` if any got an AXI error.
    ``byte_addr`` is word-aligned and the range inside the register window.
    Since the count is not checked before the CRC, a write frame is received
    whole before any answer.  After a bad CRC (a lost or doubled byte may have
    shifted everything after it) the bridge discards everything until the line
    has been quiet for the timeout, as after a burst header NAK; after
    ``NAK_RANGE`` (good CRC) and ``BUS_ERROR`` it takes the next frame at once.

    Address map: the register window (32-bit accesses on ``regs``) and the
    memory window (``mem`` at the offset from ``MEM_BASE``).  A UARTBone write
    anywhere else is dropped and a read answers ``AXI_ERROR_WORD`` per word; a
    read that gets an AXI error response also answers ``AXI_ERROR_WORD`` for
    that word (write errors are not reported: UARTBone has no write answer;
    register frames report both).

    Robustness: a frame that stops for ``TIMEOUT_BITS`` bit times is dropped
    and the bridge waits for a command byte again; bytes that are not a
    command are ignored; a receive framing error drops the frame.  The bridge
    waits for every AXI response it asks for, so a slave that never answers
    stops it (AXI has no way to abandon a transaction).

    Parameters
    ----------
    clk_freq:
        Clock frequency in Hz.
    baud:
        UART bit rate; at least 8 clock cycles a bit.
    """

    def __init__(self, clk_freq: int, baud: int):
        check_baud("UART bridge", clk_freq, baud)
        self.clk_freq, self.baud = clk_freq, baud
        self.timeout_cycles = TIMEOUT_BITS * clk_freq // baud
        super().__init__({
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "regs": Out(AXI4LiteSignature(addr_width=REG_BITS)),
            "mem": Out(AXI4Signature(data_width=8 * BUS_BYTES, id_width=4)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.receiver = receiver = FrameReceiver(self.clk_freq, self.baud)
        m.submodules.uart_tx = utx = UartTx(self.clk_freq, self.baud)
        m.submodules.dispatch = dispatch = FrameDispatch()
        m.submodules.crc = crc = Crc32()
        m.submodules.buffer = buffer = PayloadBuffer()
        m.submodules.bus = bus = BusMasters()
        m.submodules.uartbone = uartbone = UartBoneEngine()
        m.submodules.burst = burst = BurstEngine()
        m.submodules.reg_frames = reg_frames = RegFrameEngine()
        engines = (uartbone, burst, reg_frames)

        m.d.comb += [
            receiver.rx.eq(self.rx), self.tx.eq(utx.tx),
            dispatch.busy.eq(receiver.discarding | uartbone.busy | burst.busy | reg_frames.busy),
            receiver.idle.eq(dispatch.idle),
            uartbone.start.eq(dispatch.uartbone), burst.start.eq(dispatch.burst),
            reg_frames.start.eq(dispatch.reg_frame),
        ]
        m.d.comb += [engine.cmd.eq(receiver.frames.byte) for engine in engines]
        wiring.connect(m, bus.regs, wiring.flipped(self.regs))
        wiring.connect(m, bus.mem, wiring.flipped(self.mem))
        share(m, receiver.frames, [dispatch.rx, buffer.rx, *(engine.rx for engine in engines)])
        share(m, utx.data, [buffer.tx, *(engine.tx for engine in engines)])
        share(m, crc, [dispatch.crc, buffer.crc, burst.crc, reg_frames.crc])
        share(m, buffer.frames, [burst.buf, reg_frames.buf])
        share(m, bus.requests, [engine.bus for engine in engines])
        return m
