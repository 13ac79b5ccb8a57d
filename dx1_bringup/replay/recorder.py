"""A :class:`Recorder` around any open device: what a program does through it becomes a capture file.

The recorder stands where the program expects a :class:`~dx1_driver.Device` and passes everything
through; device-memory writes and reads, and each queue's DMA window, submissions and waits, are
written to the capture as they happen (a run that dies leaves the events before it).  Register
accesses are passed through unrecorded (performance counters, trace buffer): the capture holds the
effects a replay checks, completions and bytes.

It opens every tile's queue first, in tile order, as :class:`~dx1_bringup.replay.replay.Session` does,
so the rings sit at the same addresses when the capture is replayed on a fresh device.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from dx1_driver import CommandError, CommandQueue, Completion, Device, DriverError
from numpy.typing import DTypeLike

from .capture import CaptureWriter, DmaWindow, Doorbell, Download, Seen, Submit, Upload, Wait

__all__ = ["Recorder"]


def _seen(done: Iterable[Completion]) -> tuple[Seen, ...]:
    return tuple(Seen(c.index, c.tag, c.opcode, c.status) for c in done)


class _RecordingQueue:
    """A :class:`~dx1_driver.CommandQueue` whose window settings, submissions and waits are recorded."""

    def __init__(self, queue: CommandQueue, writer: CaptureWriter):
        self._queue = queue
        self._writer = writer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)

    def set_dma_window(self, base: int, limit: int) -> None:
        self._queue.set_dma_window(base, limit)
        self._writer.write(DmaWindow(self._queue.tile, base, limit))

    def submit(self, commands: Sequence[bytes], *, timeout: float = 1.0) -> list[int]:
        self._writer.write(Submit(self._queue.tile, tuple(bytes(c) for c in commands)))
        self._writer.write(Doorbell(self._queue.tile))
        return self._queue.submit(commands, timeout=timeout)

    def wait(self, what: int | Iterable[int] | None = None, *, timeout: float = 1.0,
             check: bool = True) -> list[Completion]:
        by_tag = what is not None and not isinstance(what, int)
        try:
            done = self._queue.wait(what, timeout=timeout, check=check)
        except CommandError as e:
            self._writer.write(Wait(self._queue.tile, _seen(e.completions), by_tag))
            raise
        self._writer.write(Wait(self._queue.tile, _seen(done), by_tag))
        return done


class Recorder:
    """Records what is done through it to ``device`` into the capture file ``path``.

    Parameters
    ----------
    device:
        An open device, reset, with nothing allocated yet (so its rings go where a replay puts them).
    path:
        The capture file, written as events happen; :meth:`close` (or leaving the ``with`` block)
        writes its trailer and closes the device.
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
        self.writer = CaptureWriter(path, asdict(device.caps), device.ring_log2, note=note)
        self._queues = {t: _RecordingQueue(device.queue(t), self.writer) for t in range(device.caps.tiles)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.device, name)

    def queue(self, tile: int, *, ring_log2: int | None = None) -> _RecordingQueue:
        if ring_log2 not in (None, self.device.ring_log2):
            raise ValueError(f"a recorder's queues have ring_log2 {self.device.ring_log2}, not {ring_log2!r}")
        self.device.queue(tile)   # checks the tile number
        return self._queues[tile]

    def write_mem(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()
        self.device.write_mem(addr, data)
        self.writer.write(Upload(addr, bytes(data)))

    def read_mem(self, addr: int, n: int) -> bytes:
        data = self.device.read_mem(addr, n)
        self.writer.write(Download(addr, n, data))
        return data

    def read_array(self, addr: int, shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape))
        return np.frombuffer(self.read_mem(addr, count * dt.itemsize), dtype=dt).reshape(shape).copy()

    def close(self) -> None:
        """Finish the capture (its trailer), then close the device."""
        self.writer.close()
        self.device.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
