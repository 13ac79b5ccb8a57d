"""Observing a device: the calls a program makes to a :class:`~dx1_driver.Device` and its queues, as they happen.

One hook serves every tool that follows a program's use of the device (the capture recorder, the
timeline).  An :class:`Observer` attached with :meth:`Device.observe <dx1_driver.Device.observe>` hears
each call of :data:`CALLS` twice: :meth:`Observer.before` as it starts and :meth:`Observer.after` as it
ends, returned or raised.

Each call a program makes is heard once: calls the driver makes inside another (the tile reset and
resubmission inside ``Device.recover``, the ``read_mem`` inside ``read_array``) and calls an observer
makes from its own hooks are not heard.  A program's register writes (``Device.write_reg``: a link window, a
semaphore) are heard; register reads (PERF counters, the trace FIFO) and the queues' own register accesses
are no calls here; the transport's ``observer`` sees every request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["CALLS", "Call", "Observer", "Observers"]

#: The observed calls by name, with the arguments each carries in :attr:`Call.args`.
CALLS: dict[str, tuple[str, ...]] = {
    "write_mem": ("addr", "data"),  # Device.write_mem; data as the bytes written
    "read_mem": ("addr", "n"),  # Device.read_mem and read_array; the result is the bytes read
    "reset": (),  # Device.reset
    "write_reg": ("base", "offset", "value"),  # Device.write_reg (set_semaphore too); not the driver's own writes
    "wait_any": ("queues", "at_least"),  # Device.wait_any
    "recover": (),  # Device.recover; the result is the Recovery
    "set_dma_window": ("base", "limit"),  # CommandQueue.set_dma_window
    "submit": ("commands",),  # CommandQueue.submit; commands as a tuple of bytes
    "wait": ("what", "check"),  # CommandQueue.wait; the result is the list of completions
    "reset_tile": (),  # CommandQueue.reset_tile
}

T = TypeVar("T")


@dataclass
class Call:
    """One observed call.

    Attributes
    ----------
    name:
        A key of :data:`CALLS`.
    tile:
        The tile of the queue called (``recover`` too), ``None`` for a device-wide call.
    args:
        The call's arguments, named as in :data:`CALLS`.
    start_ns, end_ns:
        ``time.monotonic_ns()`` as the call started and ended (``end_ns`` is 0 in :meth:`Observer.before`).
    result, error:
        What the call returned, or raised (set in :meth:`Observer.after`).
    """

    name: str
    tile: int | None
    args: dict[str, Any]
    start_ns: int
    end_ns: int = 0
    result: Any = field(default=None, repr=False)
    error: BaseException | None = None


class Observer:
    """Base class of observers: both hooks do nothing; override those you need."""

    def before(self, call: Call) -> None:
        """``call`` is about to run."""

    def after(self, call: Call) -> None:
        """``call`` has returned (:attr:`Call.result`) or raised (:attr:`Call.error`, raised on after every observer).

        Called also when the call raised, so an observer can note what an error left behind.
        """


class Observers:
    """The observers of one device and its queues, and whether a heard call is running."""

    def __init__(self) -> None:
        self._observers: list[Observer] = []
        self._depth = 0

    def add(self, observer: Observer) -> None:
        """Let ``observer`` hear every call from now on (adding it twice is refused)."""
        if not isinstance(observer, Observer):
            raise TypeError(f"an observer must be a dx1_driver.Observer, not {observer!r}")
        if observer in self._observers:
            raise ValueError(f"{observer!r} observes this device already")
        self._observers.append(observer)

    def remove(self, observer: Observer) -> None:
        """Stop ``observer`` hearing calls; removing one that is not there is harmless."""
        if observer in self._observers:
            self._observers.remove(observer)

    def __iter__(self) -> Iterator[Observer]:
        return iter(tuple(self._observers))

    def run(self, name: str, tile: int | None, args: dict[str, Any], body: Callable[[], T]) -> T:
        """Run ``body()`` as the call ``name``: heard by every observer unless it runs inside another call."""
        if self._depth or not self._observers:
            self._depth += 1
            try:
                return body()
            finally:
                self._depth -= 1
        call = Call(name, tile, args, time.monotonic_ns())
        listeners = list(self._observers)
        self._depth += 1
        try:
            for observer in listeners:
                observer.before(call)
            try:
                call.result = body()
                return call.result
            except BaseException as e:
                call.error = e
                raise
            finally:
                call.end_ns = time.monotonic_ns()
                for observer in listeners:
                    observer.after(call)
        finally:
            self._depth -= 1
