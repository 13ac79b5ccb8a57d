"""The engine's loop in a worker thread, and the asyncio side the HTTP server talks to.

:class:`AsyncEngine` owns one :class:`~.engine.LLMEngine` (one device).  Its worker thread is the only one
that touches the engine: requests and aborts are posted to it and applied between steps, and every step's
:class:`~.engine.TokenEvent` s go back to the event loop, to the queue of the request they belong to.  The
number of requests in the engine is bounded (:class:`Overloaded` past it: the server answers 429), and a
request that is aborted (its client went away) frees its KV blocks before the next step.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .engine import LLMEngine, TokenEvent
from .sequence import SamplingParams

__all__ = ["AsyncEngine", "EngineFailed", "Overloaded", "StepObserver"]


class Overloaded(Exception):
    """The engine already holds as many requests as it may queue."""


class EngineFailed(Exception):
    """A request ended without finishing: its engine's device failed (``device`` true), or it was refused."""

    def __init__(self, message: str, *, device: bool = True):
        super().__init__(message)
        self.device = device


@dataclass
class _Pending:
    request_id: str
    prompt: str
    params: SamplingParams
    n: int
    queue: asyncio.Queue
    loop: asyncio.AbstractEventLoop


#: Called in the worker thread after each step: (engine, events, seconds the step took).
StepObserver = Callable[[LLMEngine, list[TokenEvent], float], None]


class AsyncEngine:
    """One engine behind a worker thread.

    Parameters
    ----------
    engine:
        The engine (its device stays open until :meth:`stop`; ``on_close`` closes it).
    name:
        The device string, for metrics and errors.
    max_requests:
        Requests in the engine (running or waiting) at most; :meth:`submit` raises :class:`Overloaded` past it.
    observer:
        Called after every step in the worker thread (the server's metrics).
    """

    def __init__(self, engine: LLMEngine, name: str, *, max_requests: int = 64, observer: StepObserver | None = None,
                 on_close: Callable[[], None] = lambda: None):
        self.engine, self.name, self.max_requests = engine, name, max_requests
        self._observer, self._on_close = observer, on_close
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._adds: collections.deque[_Pending] = collections.deque()
        self._aborts: collections.deque[str] = collections.deque()
        self._queues: dict[str, tuple[asyncio.Queue, asyncio.AbstractEventLoop]] = {}
        self._stop = False
        self._thread: threading.Thread | None = None
        self.busy_seconds = 0.0
        #: False once a step has failed: the device takes no more requests.
        self.healthy = True

    @property
    def outstanding(self) -> int:
        """Requests submitted and not yet ended."""
        with self._lock:
            return len(self._queues)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"engine-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop: requests still held end with an ``abort``; then the device is closed."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._on_close()

    def submit(self, request_id: str, prompt: str, params: SamplingParams, n: int) -> asyncio.Queue:
        """Queue a request; its events arrive on the returned queue (an :class:`EngineFailed` ends it on a fault).

        Raises
        ------
        ValueError
            The engine cannot take this prompt (checked here, before anything is queued).
        Overloaded
            The engine holds ``max_requests`` already.
        """
        self.engine.check_prompt(prompt, params.max_tokens)
        queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._stop:
                raise Overloaded("the server is shutting down")
            if not self.healthy:
                raise Overloaded(f"the device {self.name} has failed")
            if len(self._queues) >= self.max_requests:
                raise Overloaded(f"the engine on {self.name} holds {len(self._queues)} requests, its limit; retry "
                                 "later")
            self._queues[request_id] = (queue, loop)
            self._adds.append(_Pending(request_id, prompt, params, n, queue, loop))
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> None:
        """End a request (its client went away); its blocks are freed before the next step."""
        with self._lock:
            if self._queues.pop(request_id, None) is None:
                return
            self._aborts.append(request_id)
        self._wake.set()

    def _deliver(self, request_id: str, item: object, last: bool) -> None:
        with self._lock:
            target = self._queues.get(request_id)
            if last:
                self._queues.pop(request_id, None)
        if target is not None:
            queue, loop = target
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def _apply(self) -> None:
        with self._lock:
            adds, self._adds = list(self._adds), collections.deque()
            aborts, self._aborts = list(self._aborts), collections.deque()
        for rid in aborts:
            self.engine.abort(rid)
        if aborts and self._observer is not None:
            self._observer(self.engine, [], 0.0)
        for p in adds:
            if p.request_id in aborts:
                continue
            try:
                self.engine.add_request(p.request_id, p.prompt, p.params, p.n)
            except ValueError as e:
                self._deliver(p.request_id, EngineFailed(str(e), device=False), True)

    def _run(self) -> None:
        while not self._stop:
            self._apply()
            if not self.engine.has_unfinished:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            start = time.perf_counter()
            try:
                events = self.engine.step()
            except Exception as e:  # a device fault: end every request it held; the server moves them elsewhere
                with self._lock:
                    self.healthy = False
                failure = EngineFailed(f"the device {self.name} failed: {e}")
                for rid in list(self.engine.requests):
                    self.engine.abort(rid)
                    self._deliver(rid, failure, True)
                with self._lock:  # anything submitted meanwhile fails too
                    adds, self._adds = list(self._adds), collections.deque()
                for p in adds:
                    self._deliver(p.request_id, failure, True)
                continue
            took = time.perf_counter() - start
            self.busy_seconds += took
            # The engine forgets a request once all its samples have ended: its last event here ends its queue.
            last = {e.request_id: i for i, e in enumerate(events) if e.request_id not in self.engine.requests}
            for i, event in enumerate(events):
                self._deliver(event.request_id, event, last.get(event.request_id) == i)
            if self._observer is not None:
                self._observer(self.engine, events, took)
        for rid in list(self.engine.requests):
            self.engine.abort(rid)
            self._deliver(rid, EngineFailed("the server shut down before the request finished", device=False), True)
