"""An 8N1 UART: a receiver and a transmitter, with the bit rate set by the clock frequency and the baud rate."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from .stream import AXIStreamSignature

__all__ = ["UartRx", "UartTx", "check_baud"]


def check_baud(owner: str, clk_freq: int, baud: int) -> None:
    """Raise unless ``clk_freq`` and ``baud`` are integers with at least 8 clock cycles a bit."""
    for name, value in (("clock frequency", clk_freq), ("baud rate", baud)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{owner} {name} must be a positive integer, not {value!r}")
    if clk_freq < 8 * baud:
        raise ValueError(f"{owner} clock frequency must be at least 8 times the baud rate, "
                         f"not {clk_freq} for {baud} baud")


def _bit_timer(m: Module, name: str, clk_freq: int, baud: int, restart, restart_value: int):
    """A tick every ``clk_freq / baud`` cycles on average (a phase accumulator, so exact over a frame).

    ``restart`` loads the phase with ``restart_value`` (in units of 1/(clk_freq*baud) s):
    ``clk_freq // 2`` puts the first tick half a bit after the restart.
    """
    phase = Signal(range(clk_freq + baud), name=f"{name}_phase")
    tick = Signal(name=f"{name}_tick")
    m.d.comb += tick.eq(phase + baud >= clk_freq)
    with m.If(restart):
        m.d.sync += phase.eq(restart_value)
    with m.Elif(tick):
        m.d.sync += phase.eq(phase + baud - clk_freq)
    with m.Else():
        m.d.sync += phase.eq(phase + baud)
    return tick


class UartRx(wiring.Component):
    """8N1 receiver.

    ``rx`` goes through a two-flip-flop synchroniser.  A falling edge starts a
    character; the start bit is checked half a bit later (a glitch shorter than
    that is ignored) and every data bit and the stop bit are sampled in the
    middle of their bit time, from a phase accumulator that keeps the average
    bit time exact.  A good character appears on ``data`` (one cycle of
    ``tvalid``, no back-pressure: the consumer must take it at once).  A stop
    bit read as 0 is a framing error: the character is dropped, ``frame_error``
    pulses for a cycle, and the receiver waits for the line to go back to 1
    before it looks for the next start bit (so a break does not read as a
    stream of zeros).

    Parameters
    ----------
    clk_freq, baud:
        Clock frequency in Hz and bit rate; at least 8 clock cycles a bit.
    """

    def __init__(self, clk_freq: int, baud: int):
        check_baud("UART receiver", clk_freq, baud)
        self.clk_freq, self.baud = clk_freq, baud
        super().__init__({
            "rx": In(1, init=1),
            "data": Out(AXIStreamSignature(8)),
            "frame_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, rx, init=1, stages=2)
        restart = Signal()
        tick = _bit_timer(m, "rx", self.clk_freq, self.baud, restart, self.clk_freq // 2)
        shift = Signal(8)
        count = Signal(range(9))
        m.d.sync += [self.data.tvalid.eq(0), self.frame_error.eq(0)]
        m.d.comb += self.data.tdata.eq(shift)
        with m.FSM(name="rx_fsm"):
            with m.State("IDLE"):
                m.d.comb += restart.eq(1)
                with m.If(~rx):
                    m.next = "START"
            with m.State("START"):
                with m.If(tick):
                    with m.If(rx):
                        m.next = "IDLE"          # a glitch, not a start bit
                    with m.Else():
                        m.d.sync += count.eq(0)
                        m.next = "DATA"
            with m.State("DATA"):
                with m.If(tick):
                    m.d.sync += [shift.eq((shift >> 1) | (rx << 7)), count.eq(count + 1)]
                    with m.If(count == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(tick):
                    with m.If(rx):
                        m.d.sync += self.data.tvalid.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += self.frame_error.eq(1)
                        m.next = "BREAK"
            with m.State("BREAK"):
                with m.If(rx):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """8N1 transmitter: takes a byte from ``data`` when idle and sends start bit, 8 data bits (LSB first), stop bit.

    ``tx`` is a register, 1 while idle.  ``data.tready`` is high only between
    characters, so a byte offered while one is going out waits.

    Parameters
    ----------
    clk_freq, baud:
        Clock frequency in Hz and bit rate; at least 8 clock cycles a bit.
    """

    def __init__(self, clk_freq: int, baud: int):
        check_baud("UART transmitter", clk_freq, baud)
        self.clk_freq, self.baud = clk_freq, baud
        super().__init__({
            "data": In(AXIStreamSignature(8)),
            "tx": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        restart = Signal()
        tick = _bit_timer(m, "tx", self.clk_freq, self.baud, restart, 0)
        shift = Signal(9)
        count = Signal(range(10))
        busy = Signal()
        m.d.comb += [self.data.tready.eq(~busy), restart.eq(~busy)]
        with m.If(~busy & self.data.tvalid):
            m.d.sync += [busy.eq(1), self.tx.eq(0), shift.eq(self.data.tdata | 0x100), count.eq(0)]
        with m.Elif(busy & tick):
            with m.If(count == 9):
                m.d.sync += busy.eq(0)      # the stop bit has had its full time
            with m.Else():
                m.d.sync += [self.tx.eq(shift[0]), shift.eq(shift >> 1), count.eq(count + 1)]
        return m
