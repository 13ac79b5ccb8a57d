"""The bridge's receive side: the UART receiver, its byte FIFO, and the rules that end a frame early."""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec import BRIDGE_RX_FIFO, TIMEOUT_BITS
from ..uart import UartRx

__all__ = ["RX_PORT", "FrameReceiver", "receive"]

#: The received bytes as the frame engines see them (flipped); what they drive is ORed, since one listens at a time.
RX_PORT = wiring.Signature({
    "byte": Out(8),     # the oldest byte not yet taken
    "valid": Out(1),    # ``byte`` is taken this cycle
    "field": Out(32),   # ``byte`` and the three bytes taken before it, as a big-endian word
    "abort": Out(1),    # the frame ends here (timeout or framing error); the listener drops it
    "listen": In(1),    # a frame engine waits for the next byte of its frame
    "discard": In(1),   # drop bytes until the line has been quiet for the timeout
})


class FrameReceiver(wiring.Component):
    """The UART receiver with a ``BRIDGE_RX_FIFO``-byte FIFO, the inter-byte timeout and the discard rule.

    While ``idle`` (no frame in progress) every byte is taken, for the
    dispatcher to read as a command byte, and a framing error is forgotten.
    While a frame engine ``listen``\\ s, a byte is taken unless the frame has
    been quiet for ``TIMEOUT_BITS`` bit times or a framing error came since
    it began; either one raises ``abort`` instead, and a framing error also
    starts discarding.  While discarding (after ``discard``, or that framing
    error) every byte is taken and dropped until the line has been quiet for
    the timeout; ``discarding`` is high meanwhile.

    Parameters
    ----------
    clk_freq, baud:
        Clock frequency in Hz and bit rate, as for :class:`~..uart.UartRx`.
    """

    def __init__(self, clk_freq: int, baud: int):
        self.clk_freq, self.baud = clk_freq, baud
        self.timeout_cycles = TIMEOUT_BITS * clk_freq // baud
        super().__init__({
            "rx": In(1, init=1),
            "idle": In(1),
            "discarding": Out(1),
            "frames": Out(RX_PORT),
        })

    def elaborate(self, platform):
        m = Module()
        port = self.frames
        m.submodules.uart_rx = urx = UartRx(self.clk_freq, self.baud)
        m.submodules.rx_fifo = fifo = SyncFIFOBuffered(width=8, depth=BRIDGE_RX_FIFO)
        m.d.comb += [
            urx.rx.eq(self.rx), urx.data.tready.eq(1),
            fifo.w_en.eq(urx.data.tvalid), fifo.w_data.eq(urx.data.tdata),
        ]

        rx_err = Signal()           # a framing error since the frame began
        with m.If(self.idle):
            m.d.sync += rx_err.eq(0)
        with m.Elif(urx.frame_error):
            m.d.sync += rx_err.eq(1)

        quiet = Signal(range(self.timeout_cycles + 1))
        timed_out = Signal()
        waiting = Signal()          # in the middle of a frame, waiting for a byte
        take = Signal()
        m.d.comb += [
            timed_out.eq(quiet == self.timeout_cycles),
            waiting.eq(port.listen | self.discarding),
            take.eq(self.idle | self.discarding | (port.listen & ~timed_out & ~rx_err)),
            fifo.r_en.eq(take),
            port.byte.eq(fifo.r_data),
            port.valid.eq(fifo.r_rdy & take),
            port.abort.eq(port.listen & (timed_out | rx_err)),
        ]
        with m.If(~waiting | port.valid):
            m.d.sync += quiet.eq(0)
        with m.Elif(~timed_out):
            m.d.sync += quiet.eq(quiet + 1)

        shreg = Signal(24)          # the three bytes taken before ``byte``
        m.d.comb += port.field.eq(Cat(port.byte, shreg))
        with m.If(port.valid):
            m.d.sync += shreg.eq(port.field[:24])

        with m.If(port.discard | (port.listen & ~timed_out & rx_err)):
            m.d.sync += self.discarding.eq(1)
        with m.Elif(timed_out):
            m.d.sync += self.discarding.eq(0)
        return m


def receive(m: Module, rx, on_byte) -> None:
    """In a frame engine's FSM state: listen on ``rx``, call ``on_byte()`` for the byte taken, and go to IDLE
    if the frame aborts."""
    m.d.comb += rx.listen.eq(1)
    with m.If(rx.abort):
        m.next = "IDLE"
    with m.Elif(rx.valid):
        on_byte()
