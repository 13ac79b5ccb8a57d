"""A :class:`Recorder` on any open device, or on every chip of a board: what a program does becomes a capture file.

The recorder observes each device (:meth:`~dx1_driver.Device.observe`): device-memory writes and reads,
register writes, and each queue's DMA window, submissions and waits, are written to the capture as they
happen (a run that dies leaves the events before it), whoever makes them through the device, from whichever
thread.  On several devices (the chips of a board, the ranks of a group) every event carries its chip, and
submissions and register writes are written as they start, everything else as it ends, so that the one
order of the file is one that replays (see :mod:`.capture`).  Register reads (PERF counters, the trace
FIFO, a cycle count) are not recorded: the capture holds the effects a replay checks, completions and bytes.

It opens every tile's queue of every chip first, in tile order, as :class:`~dx1_bringup.replay.replay.Session`
does, so the rings sit at the same addresses when the capture is replayed on fresh devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from dx1_driver import Call, CommandError, Completion, Device, DriverError, Observer

from .capture import CaptureWriter, DmaWindow, Doorbell, Download, RegWrite, Seen, Submit, Upload, Wait

__all__ = ["Recorder"]


def _seen(done: Iterable[Completion]) -> tuple[Seen, ...]:
    return tuple(Seen(c.index, c.tag, c.opcode, c.status) for c in done)


class _Chip(Observer):
    """The observer of one chip: its calls become events of that chip."""

    def __init__(self, writer: CaptureWriter, chip: int):
        self.writer = writer
        self.chip = chip

    def before(self, call: Call) -> None:
        chip, args = self.chip, call.args
        if call.name == "submit":
            self.writer.write(Submit(call.tile, args["commands"], chip))
            self.writer.write(Doorbell(call.tile, chip))
        elif call.name == "write_reg":
            self.writer.write(RegWrite(args["base"] + args["offset"], args["value"], chip))

    def after(self, call: Call) -> None:
        chip, args = self.chip, call.args
        if call.name == "wait":
            by_tag = args["what"] is not None and not isinstance(args["what"], int)
            if call.error is None:
                self.writer.write(Wait(call.tile, _seen(call.result), by_tag, chip))
            elif isinstance(call.error, CommandError):
                self.writer.write(Wait(call.tile, _seen(call.error.completions), by_tag, chip))
        elif call.error is not None:
            return
        elif call.name == "write_mem":
            self.writer.write(Upload(args["addr"], args["data"], chip))
        elif call.name == "read_mem":
            self.writer.write(Download(args["addr"], args["n"], call.result, chip))
        elif call.name == "set_dma_window":
            self.writer.write(DmaWindow(call.tile, args["base"], args["limit"], chip))


class Recorder:
    """Records what is done to ``devices`` into the capture file ``path``, from now until :meth:`close`.

    Parameters
    ----------
    devices:
        An open device, or several (every chip of a board in rank order, as ``Device.open_board`` gives
        them, or a group's ranks), each reset, with nothing allocated yet (so its rings go where a replay
        puts them).  They stay open: whoever opened them closes them.
    path:
        The capture file, written as events happen; :meth:`close` (or leaving the ``with`` block)
        writes its trailer and stops observing.
    note:
        Free text for the capture's header.

    Raises
    ------
    DriverError
        A device has device memory allocated already.
    ValueError
        No device, or one device given twice.
    """

    def __init__(self, devices: Device | Sequence[Device], path: str | Path, *, note: str = ""):
        self.devices = [devices] if isinstance(devices, Device) else list(devices)
        if not self.devices:
            raise ValueError("a recorder needs at least one device")
        if len({id(d) for d in self.devices}) != len(self.devices):
            raise ValueError("one device cannot be two chips of a capture")
        for chip, device in enumerate(self.devices):
            if device.allocator.used:
                raise DriverError(f"a recorder needs devices with nothing allocated yet, so that their rings go "
                                  f"where a replay puts them; chip {chip} ({device.name}) has "
                                  f"{device.allocator.used} bytes allocated")
        if len({d.ring_log2 for d in self.devices}) != 1:
            raise ValueError(f"the chips of a capture use one ring size, not ring_log2 "
                             f"{[d.ring_log2 for d in self.devices]}")
        self.path = Path(path)
        self.writer = CaptureWriter(path, [asdict(d.caps) for d in self.devices], self.devices[0].ring_log2,
                                    note=note)
        self._observers = [_Chip(self.writer, chip) for chip in range(len(self.devices))]
        for device, observer in zip(self.devices, self._observers, strict=True):
            for t in range(device.caps.tiles):
                device.queue(t)
            device.observe(observer)

    def close(self) -> None:
        """Stop observing and finish the capture (its trailer); closing twice is harmless."""
        for device, observer in zip(self.devices, self._observers, strict=True):
            device.unobserve(observer)
        self.writer.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
