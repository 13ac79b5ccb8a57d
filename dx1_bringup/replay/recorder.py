"""A :class:`Recorder` on any open device: what a program does to it becomes a capture file.

The recorder observes the device (:meth:`~dx1_driver.Device.observe`): device-memory writes and reads,
and each queue's DMA window, submissions and waits, are written to the capture as they happen (a run
that dies leaves the events before it), whoever makes them through the device.  Register accesses
(PERF counters, the trace FIFO) are not calls the hook hears: the capture holds the effects a replay
checks, completions and bytes.

It opens every tile's queue first, in tile order, as :class:`~dx1_bringup.replay.replay.Session` does,
so the rings sit at the same addresses when the capture is replayed on a fresh device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from dx1_driver import Call, CommandError, Completion, Device, DriverError, Observer

from .capture import CaptureWriter, DmaWindow, Doorbell, Download, Seen, Submit, Upload, Wait

__all__ = ["Recorder"]


def _seen(done: Iterable[Completion]) -> tuple[Seen, ...]:
    return tuple(Seen(c.index, c.tag, c.opcode, c.status) for c in done)


class Recorder(Observer):
    """Records what is done to ``device`` into the capture file ``path``, from now until :meth:`close`.

    Parameters
    ----------
    device:
        An open device, reset, with nothing allocated yet (so its rings go where a replay puts them).
        It stays open: whoever opened it closes it.
    path:
        The capture file, written as events happen; :meth:`close` (or leaving the ``with`` block)
        writes its trailer and stops observing.
    note:
        Free text for the capture's header.

    Raises
    ------
    DriverError
        ``device`` has device memory allocated already.
    """

    def __init__(self, device: Device, path: str | Path, *, note: str = ""):
        if device.allocator.used:
            raise DriverError(f"a recorder needs a device with nothing allocated yet, so that its rings go where a "
                              f"replay puts them; this one has {device.allocator.used} bytes allocated")
        self.device = device
        self.path = Path(path)
        self.writer = CaptureWriter(path, asdict(device.caps), device.ring_log2, note=note)
        for t in range(device.caps.tiles):
            device.queue(t)
        device.observe(self)

    def before(self, call: Call) -> None:
        if call.name == "submit":
            self.writer.write(Submit(call.tile, call.args["commands"]))
            self.writer.write(Doorbell(call.tile))

    def after(self, call: Call) -> None:
        args = call.args
        if call.name == "wait":
            by_tag = args["what"] is not None and not isinstance(args["what"], int)
            if call.error is None:
                self.writer.write(Wait(call.tile, _seen(call.result), by_tag))
            elif isinstance(call.error, CommandError):
                self.writer.write(Wait(call.tile, _seen(call.error.completions), by_tag))
        elif call.error is not None:
            return
        elif call.name == "write_mem":
            self.writer.write(Upload(args["addr"], args["data"]))
        elif call.name == "read_mem":
            self.writer.write(Download(args["addr"], args["n"], call.result))
        elif call.name == "set_dma_window":
            self.writer.write(DmaWindow(call.tile, args["base"], args["limit"]))

    def close(self) -> None:
        """Stop observing and finish the capture (its trailer); closing twice is harmless."""
        self.device.unobserve(self)
        self.writer.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
